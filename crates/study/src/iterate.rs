//! Iterated racing over a study's parameter space (`search.method = "iterated"`), after irace
//! (López-Ibáñez, Dubois-Lacoste, Pérez Cáceres, Birattari & Stützle 2016, "The irace
//! package: Iterated racing for automatic algorithm configuration", Operations Research
//! Perspectives 3: 43–58, §3):
//!
//! - the race budget (`run.budget` less the confirmation's trials) is split into N_iter + 1
//!   shares, N_iter = ⌊2 + log2 N_param⌋: the last share (and whatever the iterations leave)
//!   is the final selection's, and iteration j gets B_j = B_left / (N_iter − j + 1) of the rest,
//!   and races N_j = ⌊B_j / (μ + min(5, j))⌋ configurations, μ = `run.min_rounds`; the first
//!   iteration races the baseline, `search.initial` and uniform draws, each later one its
//!   elites and N_j − elites new configurations, half proposed by a model of the surface
//!   fitted to every trial so far and half drawn around the elites ([`crate::sample`]); while
//!   budget is left for more than the elites, iterations go on after N_iter;
//! - each iteration's race is the study's own race (`Session::race`: rounds in a seeded
//!   order, the far-behind, F-Race, chance-of-best and stop-loss rules, the budget B_j), ending
//!   once N_min = ⌊2 + log2 N_param⌋ configurations or fewer are left; its survivors (and the
//!   configurations its stop settled) with the best means are the next elites, at most N_min;
//! - the final selection chooses among every configuration that was ever an elite by
//!   sequential halving (phases of equal rounds, the better half by effect over every round
//!   going on), spending all of its share; its last survivor is the winner, confirmed against
//!   the baseline as a grid's winner is.
//!
//! One departure, for measurements on a machine rather than runs of an algorithm on problem
//! instances: irace's elitist race keeps the elites' results on earlier instances and runs
//! new configurations on those instances first. Here a round is a stretch of time and the
//! machine drifts between rounds (`docs/study-file.md`), so results of different times are
//! not paired: every race runs its elites again, in its own rounds, beside the new
//! configurations. That costs the elites' trials again each iteration, and keeps every
//! comparison within a round.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use perfpilot_store::{TrialPhase, TrialRecord, TrialStatus};

use crate::error::Result;
use crate::race::{Elimination, Left};
use crate::rounds::Session;
use crate::runner::{RaceEnd, RaceSpec, Searched, finalists};
use crate::sample::{Draws, ParamSpread, Redrawn, Sampler};
use crate::scores::{block_effects, ranked_means};
use crate::spec::{Config, Schedule, Study, varying};
use crate::stats::Rng;

/// Seeds the draws of an iterated search (with `run.seed`).
const SAMPLING_SEED: u64 = 0x17E4_A7ED;

/// An iterated search's iterations as planned, each spending its share of the budget.
#[derive(Clone, Debug)]
pub struct IterationPlan {
    /// Iterations, elites, rounds before the first test.
    pub schedule: Schedule,
    /// The trials the races may take (the budget less the confirmation's).
    pub race_trials: usize,
    /// Each iteration's budget of trials and configurations raced.
    pub steps: Vec<(usize, usize)>,
    /// The final selection's share of the race trials (it also gets what the iterations
    /// leave).
    pub final_trials: usize,
}

impl IterationPlan {
    /// The plan of `study` with a budget of `budget` trials.
    pub fn new(study: &Study, budget: usize) -> IterationPlan {
        let schedule = study.schedule();
        let race_trials = budget.saturating_sub(2 * study.run.confirm_rounds);
        let final_trials = race_trials / (schedule.iterations + 1);
        let mut left = race_trials - final_trials;
        let steps = (1..=schedule.iterations)
            .map(|j| {
                let b = left / (schedule.iterations - j + 1);
                left -= b;
                (b, b / schedule.rounds_per_configuration(j))
            })
            .collect();
        IterationPlan {
            schedule,
            race_trials,
            steps,
            final_trials,
        }
    }
}

/// An iterated search, as stored with the run's summary.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SearchSummary {
    /// The space's size (`study validate`'s words).
    pub space: String,
    /// Iterations planned (N_iter).
    pub planned: usize,
    /// Elites each race keeps at most (N_min).
    pub elites: usize,
    /// The trials the races could take.
    pub race_budget: usize,
    /// The iterations run.
    pub iterations: Vec<IterationSummary>,
}

/// One iteration of an iterated search.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IterationSummary {
    /// Its number, from 1.
    pub iteration: usize,
    /// The first and last rounds of its race, as stored.
    pub rounds: (usize, usize),
    /// The trials it was given (B_j) and those its race ran.
    pub budget: usize,
    /// Race trials run.
    pub trials: usize,
    /// Configurations raced: the elites carried in and the new ones.
    pub raced: usize,
    /// New configurations among them (drawn, or given).
    pub new: usize,
    /// Those of the new ones the model of the surface proposed (the others were drawn around
    /// the elites).
    #[serde(default)]
    pub proposed: usize,
    /// The sampling distributions the new configurations were drawn from (empty for the
    /// first iteration's uniform draws).
    pub sampling: Vec<ParamSpread>,
    /// Whether collapsed models were soft-restarted before drawing.
    pub soft_restart: bool,
    /// Draws made again, and why.
    pub redrawn: Redrawn,
    /// The elites it kept, best first, with their mean over its rounds.
    pub elites: Vec<(String, f64)>,
    /// Why its race ended.
    pub ended: String,
}

/// The configurations the first iteration is given: the baseline, then `search.initial`.
fn given(study: &Study) -> Vec<Config> {
    let mut out = vec![study.run.baseline.clone()];
    for c in &study.search.initial {
        if !out.contains(c) {
            out.push(c.clone());
        }
    }
    out
}

/// An iterated search under way.
struct Search<'a> {
    sampler: Sampler<'a>,
    rng: Rng,
    /// The current elites, best first.
    elites: Vec<Config>,
    /// Every configuration that was an elite after some iteration, in the order it first was:
    /// the final race's candidates.
    ever_elite: Vec<Config>,
    /// Every configuration drawn or given (never raced twice).
    seen: BTreeSet<String>,
    /// Every configuration raced, in order.
    keys: Vec<String>,
    /// Every configuration raced (the model's observations).
    raced: Vec<Config>,
    eliminated: Vec<Elimination>,
    iterations: Vec<IterationSummary>,
    /// Race rounds stored so far.
    offset: usize,
    /// Race trials left.
    left: usize,
    warnings: Vec<String>,
}

/// Runs an iterated search of `session`'s study within `cap` trials, `reserve` of them kept
/// for the confirmation; `runnable` says why a configuration cannot run here (it is drawn
/// again).
pub(crate) fn search(
    session: &mut Session<'_>,
    cap: usize,
    reserve: usize,
    runnable: &dyn Fn(&Config) -> Option<String>,
) -> Result<Searched> {
    let study = session.ctx.study;
    let space = study.space();
    let schedule = study.schedule();
    let race_budget = cap.saturating_sub(reserve);
    // The final race's share: one iteration's, as if choosing among the elites were one more
    // iteration (N_iter + 1 shares); the iterations spend the rest.
    let final_share = race_budget / (schedule.iterations + 1);
    let mut s = Search {
        sampler: Sampler::new(&space, varying(&study.factors)),
        rng: Rng::new(study.run.seed ^ SAMPLING_SEED),
        elites: Vec::new(),
        ever_elite: Vec::new(),
        seen: BTreeSet::new(),
        keys: given(study).iter().map(Config::key).collect(),
        raced: Vec::new(),
        eliminated: Vec::new(),
        iterations: Vec::new(),
        offset: 0,
        left: race_budget - final_share,
        warnings: Vec::new(),
    };
    let mut last: Option<RaceEnd> = None;
    let mut j = 1;
    while let Some(end) = s.iteration(session, &schedule, j, runnable)? {
        last = Some(end);
        if s.elites.is_empty() {
            // Nothing completed a trial: drawing around nothing would be drawing blind.
            break;
        }
        j += 1;
    }
    s.left += final_share;
    if let Some(end) = s.final_selection(session, j)? {
        last = Some(end);
    }
    let winner = s.elites.first().cloned();
    let (chance_best, indistinguishable) = match (&last, s.iterations.last()) {
        (Some(end), Some(it)) => {
            let view = session
                .race_view(it.rounds.0 - 1, end.rounds_done)
                .into_owned();
            let alive: Vec<String> = end.alive.iter().map(Config::key).collect();
            let rounds = end.rounds_done;
            finalists(
                study,
                &view,
                &alive,
                winner.as_ref(),
                &[],
                &end.eliminated,
                rounds,
            )
        }
        _ => (Vec::new(), Vec::new()),
    };
    let mut all: Vec<String> = Vec::new();
    for k in s.keys {
        if !all.contains(&k) {
            all.push(k);
        }
    }
    Ok(Searched {
        winner,
        keys: all,
        eliminated: s.eliminated,
        indistinguishable,
        chance_best,
        rounds: s.offset,
        warnings: s.warnings,
        search: Some(SearchSummary {
            space: space.size().to_string(),
            planned: schedule.iterations,
            elites: schedule.elites,
            race_budget,
            iterations: s.iterations,
        }),
    })
}

impl Search<'_> {
    /// Iteration `j`: its budget and configurations, its draws, its race, its elites. `None`
    /// when the budget left holds no more than the elites, or no new configuration is left
    /// to draw.
    fn iteration(
        &mut self,
        session: &mut Session<'_>,
        schedule: &Schedule,
        j: usize,
        runnable: &dyn Fn(&Config) -> Option<String>,
    ) -> Result<Option<RaceEnd>> {
        let study = session.ctx.study;
        // After N_iter, iterations go on with all the budget left while it holds more than
        // the elites.
        let share = schedule.iterations.saturating_sub(j) + 1;
        let budget = self.left / share;
        let n = budget / schedule.rounds_per_configuration(j);
        if j > 1 && n <= self.elites.len() {
            return Ok(None);
        }
        let wanted = n.saturating_sub(self.elites.len());
        let mut proposed = 0;
        let Draws {
            configs: new,
            redrawn,
            restarted,
        } = if j == 1 {
            let given = given(study);
            (self.sampler).first(&given, n, runnable, &mut self.seen, &mut self.rng)
        } else {
            let n_iter = schedule.iterations.max(j);
            self.sampler.update(&self.elites, j, n_iter, wanted.max(1));
            let observed = observations(study, &session.trials, self.offset, &self.raced);
            let (seen, rng) = (&mut self.seen, &mut self.rng);
            let k = model_share(wanted);
            let mut picks =
                (self.sampler).proposed(&observed, &self.elites, k, runnable, seen, rng);
            proposed = picks.len();
            let mut d =
                (self.sampler).around(&self.elites, wanted - proposed, n, runnable, seen, rng);
            picks.append(&mut d.configs);
            d.configs = picks;
            d
        };
        if let Some(why) = redrawn
            .example
            .as_ref()
            .filter(|_| self.warnings.is_empty())
        {
            self.warnings.push(format!(
                "configurations this machine cannot run were drawn and drawn again (e.g. {why})"
            ));
        }
        if j > 1 && new.is_empty() {
            self.warnings.push(format!(
                "iteration {j} found no configuration left to race around the elites: the search ended with budget left ({} race trials)",
                self.left
            ));
            return Ok(None);
        }
        let sampling = match j {
            1 => Vec::new(),
            _ => self.sampler.describe(&self.elites),
        };
        let configs: Vec<Config> = self.elites.iter().chain(&new).cloned().collect();
        self.keys.extend(new.iter().map(Config::key));
        self.raced.extend(new.iter().cloned());
        // Each race stops at the elites it keeps; the final race chooses among them.
        let spec = RaceSpec {
            study,
            offset: self.offset,
            racing: true,
            budget: Some((budget, 0)),
            keep: schedule.elites,
            label: format!("iteration {j}: race round"),
            shrink: false,
        };
        let end = session.race(&configs, &spec)?;
        let (used, kept) = self.after_race(session, &end, &configs, j, schedule.elites);
        self.sampler.keep(&self.elites);
        self.iterations.push(IterationSummary {
            iteration: j,
            rounds: (self.offset + 1, self.offset + end.rounds_done),
            budget,
            trials: used,
            raced: configs.len(),
            new: new.len(),
            proposed,
            sampling,
            soft_restart: restarted,
            redrawn,
            elites: kept,
            ended: race_ended(&end, schedule.elites, study.run.repetitions),
        });
        let line = crate::report::iteration_line(&self.iterations[self.iterations.len() - 1]);
        session.progress.println(line);
        self.offset += end.rounds_done;
        Ok(Some(end))
    }

    /// After race `end` of `configs` (iteration `j`): the race trials it ran leave the budget,
    /// and its best `keep` (ranked by [`rank`] over every race round so far) become the elites;
    /// returns the trials and the elites with their means.
    fn after_race(
        &mut self,
        session: &Session<'_>,
        end: &RaceEnd,
        configs: &[Config],
        j: usize,
        keep: usize,
    ) -> (usize, Vec<(String, f64)>) {
        let study = session.ctx.study;
        let view = session.race_view(self.offset, end.rounds_done).into_owned();
        // This race's trials (a resumed run's store may hold later rounds too).
        let (first, upto) = (self.offset as i64, (self.offset + end.rounds_done) as i64);
        let used = (session.trials.iter())
            .filter(|t| t.phase == TrialPhase::Race && t.round > first && t.round <= upto)
            .count();
        self.left = self.left.saturating_sub(used);
        // The rounds run so far: a resumed run's store may hold later ones, which this
        // iteration must not see, or it would not choose what the stopped run chose.
        let so_far: Vec<TrialRecord> = (session.trials.iter())
            .filter(|t| t.phase == TrialPhase::Race && t.round <= upto)
            .cloned()
            .collect();
        let race = (end, self.offset, j);
        let (elites, kept, out) = next_elites(study, &so_far, &view, race, configs, keep);
        self.eliminated.extend(out);
        self.elites = elites;
        for e in &self.elites {
            if !self.ever_elite.contains(e) {
                self.ever_elite.push(e.clone());
            }
        }
        (used, kept)
    }

    /// The final selection (after the iterations, numbered from `j`): every configuration that
    /// was ever an elite, ranked by its effect over every race round so far, chosen among by
    /// sequential halving (Karnin, Koren & Somekh 2013, "Almost optimal exploration in
    /// multi-armed bandits", ICML): the budget left is split evenly over ⌈log2 K⌉ phases of K,
    /// K/2, … candidates; each phase runs every candidate left in the same number of rounds
    /// (blocks, as a race's) and keeps the better half by their effects over every race round
    /// so far. No rank test ends it early and no stop leaves budget unspent: a difference of a
    /// few percent under noise of a few percent a trial needs the most rounds the budget can
    /// give the last few, and a test at `alpha` between two near-ties drops the better one in
    /// one race in twenty. `None` when fewer than two candidates are left.
    fn final_selection(&mut self, session: &mut Session<'_>, j: usize) -> Result<Option<RaceEnd>> {
        let study = session.ctx.study;
        let so_far: Vec<TrialRecord> = (session.trials.iter())
            .filter(|t| t.phase == TrialPhase::Race && t.round <= self.offset as i64)
            .cloned()
            .collect();
        let keys: Vec<String> = self.ever_elite.iter().map(Config::key).collect();
        let mut effects = block_effects(&study.objective.goal, &so_far, &keys);
        effects.sort_by(|a, b| b.1.total_cmp(&a.1));
        let mut alive: Vec<Config> = (effects.iter())
            .filter_map(|(k, _, _)| self.ever_elite.iter().find(|c| &c.key() == k).cloned())
            .collect();
        let phases = halving_phases(alive.len());
        let mut last = None;
        for phase in 1..=phases {
            let budget = self.left / (phases - phase + 1);
            let rounds = budget / alive.len();
            if rounds == 0 {
                break;
            }
            let keep = alive.len().div_ceil(2);
            let mut rules = study.clone();
            rules.run.repetitions = rounds;
            let spec = RaceSpec {
                study: &rules,
                offset: self.offset,
                racing: false,
                budget: Some((budget, 0)),
                keep: 1,
                label: format!("final selection {phase} of {phases}: round"),
                shrink: false,
            };
            let end = session.race(&alive, &spec)?;
            let (used, kept) = self.after_race(session, &end, &alive, j + phase - 1, keep);
            self.iterations.push(IterationSummary {
                iteration: j + phase - 1,
                rounds: (self.offset + 1, self.offset + end.rounds_done),
                budget,
                trials: used,
                raced: alive.len(),
                new: 0,
                proposed: 0,
                sampling: Vec::new(),
                soft_restart: false,
                redrawn: Redrawn::default(),
                elites: kept,
                ended: format!(
                    "final selection, phase {phase} of {phases}: the best {keep} of {} elites so far by their effects over every round go on, after {} rounds each",
                    alive.len(),
                    end.rounds_done
                ),
            });
            let line = crate::report::iteration_line(&self.iterations[self.iterations.len() - 1]);
            session.progress.println(line);
            self.offset += end.rounds_done;
            alive = self.elites.clone();
            last = Some(end);
            if alive.len() < 2 {
                break;
            }
        }
        // The best by effect over every round stays first among the elites: the winner.
        Ok(last)
    }
}

/// The model's share of an iteration's `wanted` new configurations: half, the rest drawn
/// around the elites; the model alone collapses onto its own guess and explores less than
/// either (figures in `docs/study-file.md`).
fn model_share(wanted: usize) -> usize {
    wanted.div_ceil(2)
}

/// Every configuration of `raced` with race trials up to round `upto` (a resumed run's store
/// may hold later ones, which the stopped run's model had not seen), as the model observes
/// it: its effect over those race rounds ([`block_effects`], the log of the objective in the goal's direction, the
/// rounds' drift taken out), with the variance of a mean of its trials (the trials' variance
/// about their configurations' means, pooled over every configuration, over its trials).
fn observations(
    study: &Study,
    trials: &[TrialRecord],
    upto: usize,
    raced: &[Config],
) -> Vec<(Config, f64, f64)> {
    let race: Vec<TrialRecord> = (trials.iter())
        .filter(|t| t.phase == TrialPhase::Race && t.round <= upto as i64)
        .cloned()
        .collect();
    let keys: Vec<String> = raced.iter().map(Config::key).collect();
    let effects = block_effects(&study.objective.goal, &race, &keys);
    let mut by_config: std::collections::BTreeMap<&str, Vec<f64>> = Default::default();
    for t in &race {
        if let Some(v) = t.value.filter(|v| *v > 0.0 && t.status == TrialStatus::Ok) {
            by_config.entry(t.config.as_str()).or_default().push(v.ln());
        }
    }
    let (mut ss, mut df) = (0.0, 0usize);
    for ys in by_config.values().filter(|ys| ys.len() > 1) {
        let m = ys.iter().sum::<f64>() / ys.len() as f64;
        ss += ys.iter().map(|y| (y - m).powi(2)).sum::<f64>();
        df += ys.len() - 1;
    }
    let noise = if df > 0 { ss / df as f64 } else { 0.01 };
    effects
        .into_iter()
        .filter_map(|(k, y, n)| {
            let c = raced.iter().find(|c| c.key() == k)?.clone();
            Some((c, y, noise / n.max(1) as f64))
        })
        .collect()
}

/// The phases of sequential halving over `k` candidates: ⌈log2 k⌉ (none for fewer than two).
fn halving_phases(k: usize) -> usize {
    match k {
        0 | 1 => 0,
        _ => (usize::BITS - (k - 1).leading_zeros()) as usize,
    }
}

/// After iteration `j`'s race (`end`, stored after `offset` rounds, of `configs`): the next
/// elites — those left and those its end settled, ranked by [`rank`], at most `keep` — with
/// their means over the race, and every configuration that left it (rounds as stored), those
/// left but not kept among them.
fn next_elites(
    study: &Study,
    trials: &[TrialRecord],
    view: &[TrialRecord],
    race: (&RaceEnd, usize, usize),
    configs: &[Config],
    keep: usize,
) -> (Vec<Config>, Vec<(String, f64)>, Vec<Elimination>) {
    let (end, offset, j) = race;
    let candidates: Vec<String> = end
        .alive
        .iter()
        .map(Config::key)
        .chain(
            end.eliminated
                .iter()
                .filter(|e| e.kind == Left::Settled)
                .map(|e| e.config.clone()),
        )
        .collect();
    let ranked = rank(study, trials, view, &candidates, end.rounds_done);
    let mut out: Vec<Elimination> = end
        .eliminated
        .iter()
        .cloned()
        .map(|mut e| {
            e.round += offset;
            e
        })
        .collect();
    for (k, m) in ranked.iter().skip(keep) {
        out.push(Elimination {
            config: k.clone(),
            round: offset + end.rounds_done,
            reason: format!(
                "not among the {keep} elites of iteration {j} (mean {} over its {} rounds)",
                crate::report::figure(*m),
                end.rounds_done
            ),
            p_value: None,
            kind: Left::NotElite,
        });
    }
    let kept: Vec<(String, f64)> = ranked.into_iter().take(keep).collect();
    let elites = kept
        .iter()
        .filter_map(|(k, _)| configs.iter().find(|c| &c.key() == k).cloned())
        .collect();
    (elites, kept, out)
}

/// `candidates` best first, with their means over the race just run (`view`, rounds 1 to
/// `rounds`): ranked by their effects over every race round so far (`trials`,
/// [`block_effects`]), so that an elite's earlier rounds count too.
fn rank(
    study: &Study,
    trials: &[TrialRecord],
    view: &[TrialRecord],
    candidates: &[String],
    rounds: usize,
) -> Vec<(String, f64)> {
    let goal = &study.objective.goal;
    let means = ranked_means(goal, view, candidates, rounds);
    let mut effects = block_effects(goal, trials, candidates);
    effects.sort_by(|a, b| b.1.total_cmp(&a.1));
    effects
        .into_iter()
        .filter_map(|(k, _, _)| means.iter().find(|(m, _)| *m == k).cloned())
        .collect()
}

/// Why race `end` ended, in words.
fn race_ended(end: &RaceEnd, keep: usize, rounds: usize) -> String {
    if end.budget_end.is_some() {
        format!(
            "its budget, after round {} with {} left",
            end.rounds_done,
            end.alive.len()
        )
    } else if end.eliminated.iter().any(|e| e.kind == Left::Settled) {
        format!(
            "settled (expected loss below run.stop_loss) after round {}",
            end.rounds_done
        )
    } else if end.alive.len() <= keep {
        format!("{} left (at most {keep} elites)", end.alive.len())
    } else if end.rounds_done >= rounds {
        format!("run.repetitions ({rounds} rounds)")
    } else {
        format!("after round {}", end.rounds_done)
    }
}

#[cfg(test)]
mod tests {
    use super::halving_phases;

    #[test]
    fn sequential_halving_takes_as_many_phases_as_halvings_to_one() {
        // 1 → none; 2 → 1; 3 → 2 → 1; 4 → 2 → 1; 5 → 3 → 2 → 1; 16 → 8 → 4 → 2 → 1.
        let phases: Vec<usize> = [0, 1, 2, 3, 4, 5, 8, 9, 16, 17]
            .iter()
            .map(|k| halving_phases(*k))
            .collect();
        assert_eq!(phases, [0, 0, 1, 2, 2, 3, 3, 4, 4, 5]);
        // Halving by ⌈k/2⌉ that many times leaves one.
        for k in 2..100usize {
            let mut left = k;
            for _ in 0..halving_phases(k) {
                left = left.div_ceil(2);
            }
            assert_eq!(left, 1, "{k}");
        }
    }
}
