//! The runner: a study run's trials in randomized interleaved rounds, racing after each round
//! ([`crate::race`]), the winner's confirmation against the baseline, the summary, and
//! `--resume`. Rounds run here or, with `--hosts`, a batch of them at once, one per host
//! (`crate::rounds`, [`crate::hosts`]); the racing rules see them in order either way. One
//! trial is [`crate::trial`]; the load sweep is [`crate::scale`].

mod conclude;
mod start;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use perfpilot_lab::schedule::shuffled;
use perfpilot_observe::Topology;
use perfpilot_store::{RunState, Store, TrialPhase, TrialRecord, TrialStatus};
use perfpilot_sys::Fs;

use crate::deploy;
use crate::error::{Result, StudyError};
use crate::hosts::{self, Host, LocalHost, Pool};
use crate::plan::{infeasible_reason, plan_study};
use crate::progress::Progress;
use crate::race::{Elimination, Left, chance_of_best, race_round, race_step};
use crate::rounds::{Round, Session, batch_rounds};
use crate::scores::{best_mean, blocks, race_trial};
use crate::spec::{Budget, Config, Method, Study};
use crate::summary::{Summary, indistinguishable};
use crate::trial::{TrialContext, TrialOutcome};

/// How a run is carried out.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// The store holding the run's records.
    pub store: PathBuf,
    /// Continue this run instead of starting a new one.
    pub resume: Option<i64>,
    /// Show progress on stderr.
    pub progress: bool,
    /// Set (by a Ctrl-C handler) to stop after restoring everything.
    pub stop: Arc<AtomicBool>,
    /// Where knob paths are rooted (the live system, or a temporary tree in tests).
    pub knob_fs: Fs,
    /// Override the study file's racing setting.
    pub racing: Option<bool>,
    /// Override the study file's `run.budget`.
    pub budget: Option<Budget>,
    /// Hosts that run the trials, whole rounds at a time (`local`, `ssh://HOST`, or
    /// `HOST:PORT` of a `perfpilot study worker`); empty: this process, one trial after another.
    pub hosts: Vec<String>,
    /// How the hosts are reached (SSH command, TLS certificate).
    pub dialer: hosts::Dialer,
    /// Trials computed instead of run, without `--hosts` (the known-answer bed,
    /// `crate::surface`): everything else — rounds, racing, the store, the confirmation —
    /// is the run's own.
    pub simulated: Option<Arc<dyn TrialSource>>,
}

/// A source of trials that are computed rather than run: a configuration's outcome in a phase
/// and round (a planted response surface with noise, for benchmarks of the search).
pub trait TrialSource: Send + Sync + std::fmt::Debug {
    /// The outcome of `config`'s trial in `phase`, round `round`.
    fn trial(&self, config: &Config, phase: TrialPhase, round: usize) -> TrialOutcome;
}

impl RunOptions {
    /// Options for the live system.
    pub fn new(store: PathBuf) -> RunOptions {
        RunOptions {
            store,
            resume: None,
            progress: false,
            stop: Arc::new(AtomicBool::new(false)),
            knob_fs: Fs::live(),
            racing: None,
            budget: None,
            hosts: Vec::new(),
            dialer: hosts::Dialer::default(),
            simulated: None,
        }
    }
}

/// The outcome of `run_study`.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    /// The study run's id in the store.
    pub run: i64,
    /// What it concluded (as stored).
    pub summary: Summary,
    /// Race trials of the whole run (a resumed run's earlier ones too).
    pub race_trials: usize,
    /// Race trials an exhaustive run takes: every runnable configuration in every round.
    pub exhaustive_race_trials: usize,
}

/// The study stored with run `run` in the store at `store`: what `--resume` continues when no
/// study file is given.
pub fn stored_study(store: &Path, run: i64) -> Result<Study> {
    let s = Store::open(store)?;
    let rec = s.study(run)?.ok_or_else(|| StudyError::NoRun {
        store: store.to_path_buf(),
        run,
    })?;
    Study::parse(&rec.spec, Path::new(&rec.file))
}

/// Machine facts `facts` (as [`MachineFacts::to_json`] gives them) with the hosts that ran the trials.
fn with_hosts(facts: &str, hosts: &[String]) -> String {
    let mut v: serde_json::Value =
        serde_json::from_str(facts).unwrap_or_else(|_| serde_json::json!({}));
    if let Some(m) = v.as_object_mut() {
        m.insert("trial_hosts".into(), hosts.join(", ").into());
    }
    v.to_string()
}

/// The knob journal next to the store (`<store>.knobs-journal.json`): knobs a killed run left
/// changed are restored from it first.
pub(crate) fn knob_journal(opts: &RunOptions) -> Result<PathBuf, StudyError> {
    let journal = opts.store.with_extension("knobs-journal.json");
    for line in deploy::recover_knobs(&opts.knob_fs, &journal)? {
        eprintln!("perfpilot study: {line}");
    }
    Ok(journal)
}

/// Where a race stopped.
pub(crate) struct RaceEnd {
    /// Configurations still in the race.
    pub alive: Vec<Config>,
    /// Those that left it, in order (rounds counted from the race's first).
    pub eliminated: Vec<Elimination>,
    /// Rounds run (from the race's first).
    pub rounds_done: usize,
    /// The last round before the budget ended the race, if it did.
    pub budget_end: Option<usize>,
}

/// One race: the rules it runs under and where it stops. A run on a grid is one race; an
/// iterated search runs one per iteration, each on rounds of its own.
pub(crate) struct RaceSpec<'s> {
    /// The study, whose `run` holds the rules and the race's rounds at most (`repetitions`).
    pub study: &'s Study,
    /// Rounds the store holds before this race's first: its round r is stored as
    /// `offset + r`, and its rules read its own rounds only, renumbered from 1.
    pub offset: usize,
    /// Whether the racing rules act (else only configurations failing twice leave).
    pub racing: bool,
    /// The trials the race may take and those it must leave of them (the confirmation's),
    /// counted from its first round.
    pub budget: Option<(usize, usize)>,
    /// The race ends once this many configurations or fewer are left.
    pub keep: usize,
    /// The progress label of its rounds, before the round's number.
    pub label: String,
    /// Whether a configuration leaving shrinks the progress bar's total (its rounds left are
    /// not run); an iterated search's total is its budget, which later iterations spend.
    pub shrink: bool,
}

impl Session<'_> {
    /// A race: rounds of every configuration left in a seeded random order, those failing
    /// twice leaving, and with `racing` the racing rules after each round; it stops at
    /// `run.repetitions` rounds, with `keep` configurations left or fewer, or before a round
    /// that would pass its budget.
    pub(crate) fn race(&mut self, configs: &[Config], spec: &RaceSpec) -> Result<RaceEnd> {
        let study = spec.study;
        let mut alive: Vec<Config> = configs.to_vec();
        let mut eliminated: Vec<Elimination> = Vec::new();
        let mut failures: BTreeMap<String, usize> = BTreeMap::new();
        let mut rounds_done = 0;
        let mut budget_end = None;
        let reps = study.run.repetitions;
        let offset = spec.offset;
        let mut next = 1;
        // Batches of rounds: one round per host at the same time (one round without
        // `--hosts`), every round of a batch with the configurations left before it; the
        // racing rules then see the rounds one by one, in order, as a sequential run would.
        while next <= reps && budget_end.is_none() && (next == 1 || alive.len() > spec.keep) {
            // Rounds before this one count against the budget, so a resumed run whose store
            // holds later rounds is judged as it was when it ran.
            let used = self
                .trials
                .iter()
                .filter(|t| {
                    t.phase == TrialPhase::Race
                        && t.round > offset as i64
                        && t.round < (offset + next) as i64
                })
                .count();
            let (rounds, end) = batch_rounds(
                next,
                self.width(),
                reps,
                spec.budget,
                used,
                alive.len(),
                |r| self.round_size(offset + r, &alive),
            );
            budget_end = end;
            let batch: Vec<Round> = rounds
                .into_iter()
                .map(|round| Round {
                    phase: TrialPhase::Race,
                    round: offset + round,
                    order: race_order(study.run.seed, offset + round, &alive),
                    label: format!("{} {round} of at most {reps}", spec.label),
                })
                .collect();
            let Some(last) = batch.last().map(|r| r.round - offset) else {
                break;
            };
            self.run_rounds(batch)?;
            for round in next..=last {
                // Every configuration left has a trial in each round of the batch.
                rounds_done = last;
                let mut left = Leaving {
                    alive: &mut alive,
                    failures: &mut failures,
                    eliminated: &mut eliminated,
                };
                self.leave(spec, round, last, &mut left);
                if alive.len() <= spec.keep {
                    break;
                }
            }
            next = last + 1;
        }
        Ok(RaceEnd {
            alive,
            eliminated,
            rounds_done,
            budget_end,
        })
    }

    /// The race trials of rounds `offset + 1 ..= offset + upto`, renumbered from 1: what the
    /// racing rules of a race starting after `offset` read (the store's trials as they are
    /// for a race starting at round 1).
    pub(crate) fn race_view(&self, offset: usize, upto: usize) -> Cow<'_, [TrialRecord]> {
        if offset == 0 {
            return Cow::Borrowed(&self.trials);
        }
        Cow::Owned(
            self.trials
                .iter()
                .filter(|t| {
                    t.phase == TrialPhase::Race
                        && t.round > offset as i64
                        && t.round <= (offset + upto) as i64
                })
                .map(|t| {
                    let mut t = t.clone();
                    t.round -= offset as i64;
                    t
                })
                .collect(),
        )
    }

    /// After the race's round `round` (of a batch ending at `last`): configurations that
    /// failed twice leave, and with `racing` those the racing rules rule out.
    fn leave(&mut self, spec: &RaceSpec, round: usize, last: usize, left: &mut Leaving) {
        let study = spec.study;
        // Trials of the rounds after `last` that a configuration leaving will not run.
        let spared = if spec.shrink {
            study.run.repetitions - last
        } else {
            0
        };
        let keys: Vec<String> = left.alive.iter().map(Config::key).collect();
        for k in &keys {
            if let Some(t) = race_trial(&self.trials, k, (spec.offset + round) as i64)
                && t.status == TrialStatus::Failed
            {
                let f = left.failures.entry(k.clone()).or_default();
                *f += 1;
                if *f >= 2 && k != &study.run.baseline.key() {
                    left.eliminated.push(Elimination {
                        config: k.clone(),
                        round,
                        reason: format!("failed twice, last: {}", t.reason),
                        p_value: None,
                        kind: Left::Failed,
                    });
                    left.alive.retain(|c| &c.key() != k);
                    self.progress.shrink(spared);
                }
            }
        }
        if spec.racing && left.alive.len() > 1 {
            let keys: Vec<String> = left.alive.iter().map(Config::key).collect();
            let out = race_round(study, &self.race_view(spec.offset, round), &keys, round);
            for e in out {
                self.progress.println(format!(
                    "round {}: {} left the race: {}",
                    spec.offset + round,
                    e.config,
                    e.reason
                ));
                left.alive.retain(|c| c.key() != e.config);
                self.progress.shrink(spared);
                left.eliminated.push(e);
            }
        }
    }

    /// The confirmation: `run.confirm_rounds` pairs of `winner` and the baseline, each pair
    /// in a seeded random order.
    fn confirm(&mut self, winner: &Config) -> Result<()> {
        let study = self.ctx.study;
        let n = study.run.confirm_rounds;
        let rounds = (1..=n)
            .map(|round| {
                let pair = [winner.clone(), study.run.baseline.clone()];
                Round {
                    phase: TrialPhase::Confirm,
                    round,
                    order: shuffled(&pair, study.run.seed ^ 0xC0FF_EE00 ^ round as u64),
                    label: format!("confirmation round {round} of {n}"),
                }
            })
            .collect();
        self.run_rounds(rounds)
    }
}

/// What a race's rounds change: the configurations left, their failures, those that left.
struct Leaving<'a> {
    alive: &'a mut Vec<Config>,
    failures: &'a mut BTreeMap<String, usize>,
    eliminated: &'a mut Vec<Elimination>,
}

/// Race round `round`'s order of `alive`: a shuffle seeded by the run's seed and the round.
fn race_order(seed: u64, round: usize, alive: &[Config]) -> Vec<Config> {
    shuffled(
        alive,
        seed.wrapping_mul(1_000_003).wrapping_add(round as u64),
    )
}

/// Runs (or resumes) a study and stores every trial and the summary.
pub fn run_study(study: &Study, topo: &Topology, opts: &RunOptions) -> Result<RunOutcome> {
    let started = Instant::now();
    // The hosts first: one that cannot be used is refused before anything is stored.
    let fleet = start::Fleet::connect(study, topo, opts)?;
    let mut warnings = fleet.warnings;
    let plan_topo = fleet.plan_topo;
    let mut store = Store::open(&opts.store)?;
    let (run_id, existing) = start::open_run(&mut store, study, opts, &fleet.facts)?;
    let plan_ = plan_study(study, &plan_topo);
    let racing = opts.racing.unwrap_or(study.run.racing);
    let infeasible = plan_.infeasible.clone();
    let feasible: Vec<Config> = study
        .configurations()
        .into_iter()
        .filter(|c| !infeasible.iter().any(|i| i.config == c.key()))
        .collect();
    if let Some(why) = start::unrunnable(study, &plan_topo, racing) {
        store.study_set_state(run_id, RunState::Failed, None)?;
        return Err(StudyError::Failed(why));
    }
    let sizing = start::Sizing::of(study, opts, &plan_, feasible.len(), racing);
    let progress = match (&opts.simulated, opts.progress) {
        (Some(_), false) => Progress::silent(),
        _ => Progress::new(opts.progress, sizing.total),
    };
    let journal = knob_journal(opts)?;
    let ctx = || TrialContext {
        study,
        topo,
        knob_fs: &opts.knob_fs,
        knob_journal: Some(&journal),
        stop: &opts.stop,
    };
    let pool = (!fleet.remotes.is_empty()).then(|| {
        let hosts: Vec<Box<dyn Host + '_>> = fleet
            .remotes
            .into_iter()
            .map(|r| match r {
                Some(r) => Box::new(r) as Box<dyn Host>,
                None => Box::new(LocalHost { ctx: ctx() }),
            })
            .collect();
        Pool::new(hosts, study.run.cooldown)
    });
    let mut session = Session {
        ctx: ctx(),
        store,
        store_path: opts.store.clone(),
        run_id,
        progress,
        trials: existing,
        trials_run: 0,
        driver_warned: false,
        pool,
        host_warnings: Vec::new(),
        simulated: opts.simulated.clone(),
    };
    let searched = match study.search.method {
        Method::Grid => {
            warnings.extend(
                infeasible
                    .iter()
                    .map(|i| format!("skipped {}: {}", i.config, i.reason)),
            );
            let spec = RaceSpec {
                study,
                offset: 0,
                racing,
                budget: sizing.cap.map(|c| (c, sizing.reserve)),
                keep: 1,
                label: "race round".into(),
                shrink: true,
            };
            grid(&mut session, &feasible, &spec, sizing.budget)
        }
        Method::Iterated => {
            let cap = sizing.cap.unwrap_or(plan_.max_trials);
            let runnable = |c: &Config| infeasible_reason(study, &plan_topo, c);
            crate::iterate::search(&mut session, cap, sizing.reserve, &runnable)
        }
    };
    let searched = match searched {
        Ok(s) => s,
        Err(e) => return Err(session.end(e)),
    };
    warnings.extend(searched.warnings.iter().cloned());
    let confirmed = match conclude::confirm(&mut session, study, searched.winner.as_ref()) {
        Ok(c) => c,
        Err(e) => return Err(session.end(e)),
    };
    session.progress.finish();
    warnings.append(&mut session.host_warnings);
    let ran = conclude::Ran {
        searched,
        confirmed,
        infeasible,
        warnings,
        racing,
        trials_run: session.trials_run,
        elapsed_s: started.elapsed().as_secs_f64(),
    };
    let summary = conclude::summarise(study, &session.trials, ran);
    let race_trials = session
        .trials
        .iter()
        .filter(|t| t.phase == TrialPhase::Race)
        .count();
    conclude::store_summary(&mut session, &opts.store, &summary)?;
    Ok(RunOutcome {
        run: run_id,
        summary,
        race_trials,
        exhaustive_race_trials: plan_.feasible.saturating_mul(study.run.repetitions),
    })
}

/// What a search concluded before the confirmation.
pub(crate) struct Searched {
    /// The winner: the best mean among the configurations left (an iterated search's best
    /// elite of its last race).
    pub winner: Option<Config>,
    /// Every configuration raced, in order, for the per-configuration figures.
    pub keys: Vec<String>,
    /// The configurations that left a race, in order (rounds as stored).
    pub eliminated: Vec<Elimination>,
    /// Those the winner cannot be told from (see [`indistinguishable`]).
    pub indistinguishable: Vec<String>,
    /// The finalists' chance of being the best.
    pub chance_best: Vec<(String, f64)>,
    /// Race rounds run (all iterations' together).
    pub rounds: usize,
    /// What to doubt: the budget's end, draws that could not run here.
    pub warnings: Vec<String>,
    /// An iterated search's iterations (`None`: a grid).
    pub search: Option<crate::iterate::SearchSummary>,
}

/// A grid's search: one race over every runnable configuration (`feasible`), and what it
/// concluded; `budget` names the budget in the warning when it ended the race.
fn grid(
    session: &mut Session<'_>,
    feasible: &[Config],
    spec: &RaceSpec,
    budget: Option<Budget>,
) -> Result<Searched> {
    let study = spec.study;
    let goal = &study.objective.goal;
    let RaceEnd {
        alive,
        eliminated,
        rounds_done,
        budget_end,
    } = session.race(feasible, spec)?;
    let mut warnings = Vec::new();
    if let (Some(r), Some(b), Some((c, _))) = (budget_end, budget, spec.budget) {
        let m = format!(
            "the race ended at its budget (run.budget {b}: {c} trials with the confirmation) after round {r}, {} configurations not separated; the winner is the best mean among them",
            alive.len()
        );
        session.progress.println(m.clone());
        warnings.push(m);
    }
    // Without racing, the same tests over every round say which configurations are
    // significantly worse than the best (for the summary only; nothing was dropped).
    let alive_keys: Vec<String> = alive.iter().map(Config::key).collect();
    let mut worse: Vec<String> = Vec::new();
    if !spec.racing && alive.len() > 1 {
        let b = blocks(goal, &session.trials, &alive_keys, rounds_done);
        if let Some(step) = race_step(&b, study.run.alpha) {
            worse = step
                .losers
                .iter()
                .map(|(j, _)| alive_keys[*j].clone())
                .collect();
        }
    }
    // The winner: the best mean score among the survivors.
    let winner = best_mean(goal, &session.trials, &alive_keys, rounds_done)
        .and_then(|k| alive.iter().find(|c| c.key() == k).cloned());
    let (chance_best, indistinguishable) = finalists(
        study,
        &session.trials,
        &alive_keys,
        winner.as_ref(),
        &worse,
        &eliminated,
        rounds_done,
    );
    Ok(Searched {
        winner,
        keys: feasible.iter().map(Config::key).collect(),
        eliminated,
        indistinguishable,
        chance_best,
        rounds: rounds_done,
        warnings,
        search: None,
    })
}

/// Over a race's finalists (those left, `alive`, and those its end settled), read on its own
/// trials (`trials`, rounds from 1 to `rounds`): each one's chance of being the best, and
/// those the winner cannot be told from (none but significantly `worse` ones left out).
pub(crate) fn finalists(
    study: &Study,
    trials: &[TrialRecord],
    alive: &[String],
    winner: Option<&Config>,
    worse: &[String],
    eliminated: &[Elimination],
    rounds: usize,
) -> (Vec<(String, f64)>, Vec<String>) {
    let goal = &study.objective.goal;
    let finalists: Vec<String> = alive
        .iter()
        .cloned()
        .chain(
            eliminated
                .iter()
                .filter(|e| e.kind == Left::Settled)
                .map(|e| e.config.clone()),
        )
        .collect();
    let chance = chance_of_best(goal, trials, &finalists, rounds, study.run.seed);
    let w = winner.map(Config::key);
    let same = indistinguishable(trials, alive, w.as_deref(), worse, eliminated);
    (chance, same)
}
