//! Racing replayed on an exhaustive run: what the race would have decided, and how many
//! trials it would have spent, on the very measurements an exhaustive run (`--exhaustive`)
//! stored. Rounds are exchangeable (each holds every configuration once, in a random order),
//! so the replay also reruns the race over shuffled round orders: the share of orders whose
//! race picks the exhaustive run's winner says how much to trust a race on this machine.

use std::path::Path;

use perfpilot_store::{Store, TrialPhase, TrialRecord, TrialStatus};
use serde::{Deserialize, Serialize};

use crate::error::{Result, StudyError};

use crate::plan::{confirm_trials, within_budget};
use crate::race::{Elimination, chance_of_best, race_round, race_step};
use crate::scores::{best_mean, blocks};
use crate::spec::{Budget, Config, MIN_EFFECT_BELOW, Study, share_below};
use crate::stats::Rng;

/// One replayed race.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ReplayRace {
    /// The race rounds in this order (original round numbers).
    pub order: Vec<i64>,
    /// Race trials the race would have run.
    pub trials: usize,
    /// Rounds it would have run.
    pub rounds: usize,
    /// Its winner: the best mean score among the configurations left.
    pub winner: Option<String>,
    /// The configurations that left it, in order.
    pub left: Vec<Elimination>,
    /// Whether `run.budget` ended it.
    #[serde(default)]
    pub budget_ended: bool,
}

/// The replay of an exhaustive run.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Replay {
    /// Race trials of the exhaustive run (every configuration, every round).
    pub exhaustive_trials: usize,
    /// Race rounds of the exhaustive run.
    pub rounds: usize,
    /// The exhaustive run's winner: the best mean score over every round.
    pub exhaustive_winner: Option<String>,
    /// Configurations the exhaustive run cannot tell from its winner (Friedman and Conover
    /// over every round at the study's α; empty when the test does not reject).
    pub exhaustive_not_worse: Vec<String>,
    /// The exhaustive run's configurations' chance of being best (bootstrap of its rounds,
    /// best first): how reproducible its own winner is, the ceiling for a race's agreement.
    #[serde(default)]
    pub exhaustive_chance_best: Vec<(String, f64)>,
    /// The race in the stored round order.
    pub stored_order: ReplayRace,
    /// Races over shuffled orders (the stored order first).
    pub orders: usize,
    /// Orders whose race picked the exhaustive winner.
    pub same_winner: usize,
    /// Orders whose race picked a configuration the exhaustive run cannot tell from its winner.
    pub acceptable_winner: usize,
    /// What the races' winners give up: each winner's mean over every exhaustive round as a
    /// share of the exhaustive winner's (in the goal's direction, 1 = as good), averaged over
    /// the orders, and the worst. The same measurements choose and judge, so within a group
    /// of ties "same winner" flatters a race; this says what its pick costs.
    #[serde(default)]
    pub winner_share_mean: f64,
    /// The worst of those shares.
    #[serde(default)]
    pub winner_share_min: f64,
    /// Race trials over the orders: the mean.
    pub trials_mean: f64,
    /// The fewest.
    pub trials_min: usize,
    /// The most.
    pub trials_max: usize,
    /// Orders whose race ran more than half the exhaustive run's race trials.
    #[serde(default)]
    pub over_half: usize,
    /// Orders whose race `run.budget` ended.
    #[serde(default)]
    pub budget_ended: usize,
}

/// Replays racing (the study's `min_rounds`, `alpha` and `objective.min_effect`) on the race
/// trials of an exhaustive run, in the stored round order and in `orders − 1` shuffled ones
/// (seeded by `seed`). Configurations are `keys` (the run's, in the study's order).
pub fn replay(
    study: &Study,
    trials: &[TrialRecord],
    keys: &[String],
    orders: usize,
    seed: u64,
) -> Replay {
    let race: Vec<TrialRecord> = trials
        .iter()
        .filter(|t| t.phase == TrialPhase::Race && keys.contains(&t.config))
        .cloned()
        .collect();
    let mut rounds: Vec<i64> = race.iter().map(|t| t.round).collect();
    rounds.sort_unstable();
    rounds.dedup();
    let goal = &study.objective.goal;
    let renumbered = renumber(&race, &rounds);
    let exhaustive_winner = best_mean(goal, &renumbered, keys, rounds.len());
    let mut exhaustive_not_worse = Vec::new();
    if let Some(w) = &exhaustive_winner {
        let all = blocks(goal, &renumbered, keys, rounds.len());
        let worse: Vec<usize> = race_step(&all, study.run.alpha)
            .map(|s| s.losers.iter().map(|(j, _)| *j).collect())
            .unwrap_or_default();
        exhaustive_not_worse = keys
            .iter()
            .enumerate()
            .filter(|(j, k)| *k != w && !worse.contains(j))
            .map(|(_, k)| k.clone())
            .collect();
    }
    let exhaustive_chance_best = chance_of_best(goal, &renumbered, keys, rounds.len(), seed);
    let mut rng = Rng::new(seed);
    let mut races = Vec::new();
    for i in 0..orders.max(1) {
        let mut order = rounds.clone();
        if i > 0 {
            rng.shuffle(&mut order);
        }
        races.push(race_in_order(study, &race, keys, &order));
    }
    let counts: Vec<usize> = races.iter().map(|r| r.trials).collect();
    let same_winner = races
        .iter()
        .filter(|r| r.winner.is_some() && r.winner == exhaustive_winner)
        .count();
    let mean_of = |k: &str| {
        let v: Vec<f64> = renumbered
            .iter()
            .filter(|t| t.config == k && t.status == TrialStatus::Ok)
            .filter_map(|t| t.value)
            .collect();
        (!v.is_empty()).then(|| crate::stats::mean(&v))
    };
    let shares: Vec<f64> = races
        .iter()
        .filter_map(|r| {
            let (w, best) = (
                mean_of(r.winner.as_ref()?)?,
                mean_of(exhaustive_winner.as_ref()?)?,
            );
            Some(if goal.higher_is_better() {
                w / best
            } else {
                best / w
            })
        })
        .collect();
    let acceptable_winner = races
        .iter()
        .filter(|r| {
            r.winner.as_ref().is_some_and(|w| {
                Some(w) == exhaustive_winner.as_ref() || exhaustive_not_worse.contains(w)
            })
        })
        .count();
    Replay {
        exhaustive_trials: race.len(),
        rounds: rounds.len(),
        exhaustive_winner,
        exhaustive_not_worse,
        exhaustive_chance_best,
        orders: races.len(),
        same_winner,
        acceptable_winner,
        winner_share_mean: if shares.is_empty() {
            f64::NAN
        } else {
            crate::stats::mean(&shares)
        },
        winner_share_min: shares.iter().copied().fold(f64::NAN, f64::min),
        trials_mean: counts.iter().sum::<usize>() as f64 / counts.len() as f64,
        trials_min: counts.iter().copied().min().unwrap_or(0),
        trials_max: counts.iter().copied().max().unwrap_or(0),
        over_half: counts.iter().filter(|c| 2 * **c > race.len()).count(),
        budget_ended: races.iter().filter(|r| r.budget_ended).count(),
        stored_order: races.swap_remove(0),
    }
}

/// The trials with their rounds renumbered 1.. in `order`.
fn renumber(race: &[TrialRecord], order: &[i64]) -> Vec<TrialRecord> {
    race.iter()
        .filter_map(|t| {
            let pos = order.iter().position(|r| *r == t.round)?;
            let mut t = t.clone();
            t.round = pos as i64 + 1;
            Some(t)
        })
        .collect()
}

/// The race over the rounds in `order`, as the runner runs it (failures aside: a replay has
/// every trial already).
fn race_in_order(
    study: &Study,
    race: &[TrialRecord],
    keys: &[String],
    order: &[i64],
) -> ReplayRace {
    let renumbered = renumber(race, order);
    let mut alive: Vec<String> = keys.to_vec();
    let mut left = Vec::new();
    let mut trials = 0;
    let mut rounds = 0;
    let mut budget_ended = false;
    // The budget as the runner applies it: the exhaustive run's trials include the
    // confirmation, which the race must leave room for.
    let reserve = confirm_trials(study, keys.len());
    let cap = study
        .run
        .budget
        .map(|b| b.trials(keys.len() * order.len() + reserve));
    for round in 1..=order.len() {
        if let Some(cap) = cap
            && !within_budget(cap, trials, round, alive.len(), reserve)
        {
            budget_ended = true;
            break;
        }
        rounds = round;
        trials += renumbered
            .iter()
            .filter(|t| t.round == round as i64 && alive.contains(&t.config))
            .count();
        if study.run.racing && alive.len() > 1 {
            let so_far: Vec<TrialRecord> = renumbered
                .iter()
                .filter(|t| t.round <= round as i64)
                .cloned()
                .collect();
            for e in race_round(study, &so_far, &alive, round) {
                alive.retain(|k| k != &e.config);
                left.push(e);
            }
        }
        if alive.len() <= 1 {
            break;
        }
    }
    let winner = best_mean(&study.objective.goal, &renumbered, &alive, rounds);
    ReplayRace {
        order: order.to_vec(),
        trials,
        rounds,
        winner,
        left,
        budget_ended,
    }
}

/// What to replay.
#[derive(Clone, Debug)]
pub struct ReplayOptions {
    /// Round orders to race over (the stored one first).
    pub orders: usize,
    /// Seeds the shuffled orders.
    pub seed: u64,
    /// Override the study's `run.min_rounds`.
    pub min_rounds: Option<usize>,
    /// Override the study's `objective.min_effect` (the equivalence rule's zone).
    pub min_effect: Option<f64>,
    /// Override the study's `run.drop_equivalent` (the equivalence rule).
    pub drop_equivalent: Option<bool>,
    /// Override the study's `run.futility` (0 turns the tie rule off).
    pub futility: Option<f64>,
    /// Override the study's `run.min_chance` (0 turns the chance-of-best rule off).
    pub min_chance: Option<f64>,
    /// Override the study's `run.far_behind` (0 turns the far-behind rule off).
    pub far_behind: Option<f64>,
    /// Override the study's `run.stop_loss` (0 turns the expected-loss stop off).
    pub stop_loss: Option<f64>,
    /// Override the study's `run.budget` (`Some(None)`: no budget).
    pub budget: Option<Option<Budget>>,
}

impl Default for ReplayOptions {
    /// 200 round orders from seed 1, the study's own rules.
    fn default() -> ReplayOptions {
        ReplayOptions {
            orders: 200,
            seed: 1,
            min_rounds: None,
            min_effect: None,
            futility: None,
            min_chance: None,
            far_behind: None,
            stop_loss: None,
            budget: None,
            drop_equivalent: None,
        }
    }
}

/// Replays racing on stored run `run`, which must have run with racing off
/// (`--exhaustive`): a race would have left configurations out of later rounds.
pub fn replay_run(store: &Store, run: i64, opts: &ReplayOptions) -> Result<Replay> {
    let rec = store.study(run)?.ok_or_else(|| StudyError::NoRun {
        store: store.path().to_path_buf(),
        run,
    })?;
    let mut study = Study::parse(&rec.spec, Path::new(&rec.file))?;
    let trials = store.trials(run)?;
    let keys: Vec<String> = study
        .configurations()
        .iter()
        .map(Config::key)
        .filter(|k| {
            trials
                .iter()
                .any(|t| t.phase == TrialPhase::Race && &t.config == k)
        })
        .collect();
    let rounds_of = |k: &String| {
        trials
            .iter()
            .filter(|t| t.phase == TrialPhase::Race && &t.config == k)
            .count()
    };
    let most = keys.iter().map(rounds_of).max().unwrap_or(0);
    if let Some(short) = keys.iter().find(|k| rounds_of(k) + 1 < most) {
        return Err(StudyError::Failed(format!(
            "run {run} in {} raced: {short} has {} race trials, others {most}; replay needs a run made with --exhaustive",
            store.path().display(),
            rounds_of(short)
        )));
    }
    if keys.len() < 2 {
        return Err(StudyError::Failed(format!(
            "run {run} in {} has fewer than two configurations with race trials: nothing to race",
            store.path().display()
        )));
    }
    // The study file's ranges (min_effect may be 0 here: the equivalence rule off).
    for (field, v, below) in [
        ("run.futility", opts.futility, share_below("futility")),
        ("run.min_chance", opts.min_chance, share_below("min_chance")),
        ("run.far_behind", opts.far_behind, share_below("far_behind")),
        ("run.stop_loss", opts.stop_loss, share_below("stop_loss")),
        ("objective.min_effect", opts.min_effect, MIN_EFFECT_BELOW),
    ] {
        if let Some(x) = v
            && !(0.0..below).contains(&x)
        {
            return Err(StudyError::Failed(format!(
                "the replay's {field} {x}: must be at least 0 (off) and below {below}"
            )));
        }
    }
    if let Some(m) = opts.min_rounds {
        study.run.min_rounds = m.max(2);
    }
    if let Some(e) = opts.min_effect {
        study.objective.min_effect = e;
    }
    if let Some(f) = opts.futility {
        study.run.futility = f;
    }
    if let Some(d) = opts.drop_equivalent {
        study.run.drop_equivalent = d;
    }
    if let Some(c) = opts.min_chance {
        study.run.min_chance = c;
    }
    if let Some(f) = opts.far_behind {
        study.run.far_behind = f;
    }
    if let Some(l) = opts.stop_loss {
        study.run.stop_loss = l;
    }
    if let Some(b) = opts.budget {
        study.run.budget = b;
    }
    study.run.racing = true;
    Ok(replay(&study, &trials, &keys, opts.orders, opts.seed))
}
