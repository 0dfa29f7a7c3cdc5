//! A study's plan on this machine: which configurations can run and where, the trials and time
//! a run takes at most, the trials `run.budget` allows, and the budget rule the runner and the
//! replay share. [`Validation`] is what `study validate` prints.

use std::time::Duration;

use perfpilot_observe::Topology;
use serde::{Deserialize, Serialize};

use crate::layout::{Layout, LayoutError, plan};
use crate::spec::{Budget, Config, LoadKind, Study};

/// A configuration that cannot run on this machine.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Infeasible {
    /// The configuration's key.
    pub config: String,
    /// Why its layout does not fit the machine.
    pub reason: String,
}

/// Seconds one trial takes besides warm-up and measurement (deploy, readiness, stop).
const TRIAL_OVERHEAD_S: f64 = 1.0;

/// The trials a study takes at most and the time they take.
#[derive(Clone, Debug, Serialize)]
pub struct Plan {
    /// Configurations the study's factors make.
    pub configurations: usize,
    /// Configurations this machine can run.
    pub feasible: usize,
    /// Those it cannot, with the reason.
    pub infeasible: Vec<Infeasible>,
    /// Trials with every repetition (no configuration raced out) plus confirmation.
    pub max_trials: usize,
    /// The confirmation's trials among `max_trials`.
    pub confirm_trials: usize,
    /// Seconds per trial: warm-up, measurement, cooldown and deployment.
    pub seconds_per_trial: f64,
    /// The time `max_trials` take.
    pub max_duration: Duration,
    /// The trials `run.budget` allows a race (`None`: no budget).
    pub budget_trials: Option<usize>,
}

/// The confirmation's trials in a run of `feasible` configurations: a pair per
/// `run.confirm_rounds` (none with a single configuration).
pub(crate) fn confirm_trials(study: &Study, feasible: usize) -> usize {
    if feasible > 1 {
        2 * study.run.confirm_rounds
    } else {
        0
    }
}

/// Whether a race that has run `used` race trials stays within a budget of `cap` trials by
/// running `round` with `alive` configurations and keeping `reserve` for the confirmation.
/// The first round always runs.
pub(crate) fn within_budget(
    cap: usize,
    used: usize,
    round: usize,
    alive: usize,
    reserve: usize,
) -> bool {
    round <= 1 || used + alive + reserve <= cap
}

/// Plans a study on `topo`: layouts of every configuration, trials, the time it takes at most.
pub fn plan_study(study: &Study, topo: &Topology) -> Plan {
    let configs = study.configurations();
    let mut infeasible = Vec::new();
    for c in &configs {
        if let Err(e) = plan(topo, c.instances(), c.cores_per_instance(), c.binding()) {
            infeasible.push(Infeasible {
                config: c.key(),
                reason: e.to_string(),
            });
        } else if let Some(why) = study.storage.as_ref().and_then(|s| s.unavailable(c)) {
            // A file system this machine cannot make is reported, never silently dropped.
            infeasible.push(Infeasible {
                config: c.key(),
                reason: why,
            });
        }
    }
    let feasible = configs.len() - infeasible.len();
    let confirm = confirm_trials(study, feasible);
    let max_trials = feasible * study.run.repetitions + confirm;
    // A batch trial takes as long as the batch: at most its timeout.
    let running = match &study.load.kind {
        LoadKind::Batch { timeout, .. } => timeout.as_secs_f64(),
        _ => study.run.warmup.as_secs_f64() + study.run.measure.as_secs_f64(),
    };
    let per = running + study.run.cooldown.as_secs_f64() + TRIAL_OVERHEAD_S;
    Plan {
        configurations: configs.len(),
        feasible,
        infeasible,
        max_trials,
        confirm_trials: confirm,
        seconds_per_trial: per,
        max_duration: Duration::try_from_secs_f64(per * max_trials as f64).unwrap_or(Duration::MAX),
        budget_trials: study.run.budget.map(|b| b.trials(max_trials)),
    }
}

/// What `run.budget` allows, against what the race needs to reach its first rank test.
#[derive(Clone, Debug)]
pub struct BudgetPlan {
    /// The budget as the study file gives it.
    pub budget: Budget,
    /// The trials it allows, race and confirmation together.
    pub trials: usize,
    /// The time those trials take.
    pub duration: Duration,
    /// The trials of `run.min_rounds` rounds of every runnable configuration plus the
    /// confirmation: what the race needs before its first rank test can act.
    pub first_test_trials: usize,
}

impl BudgetPlan {
    /// Whether the budget holds `run.min_rounds` rounds of every runnable configuration and
    /// the confirmation (if not, the race may end before its first rank test).
    pub fn reaches_first_test(&self) -> bool {
        self.trials >= self.first_test_trials
    }
}

/// A study checked against this machine without running it: `study validate`.
#[derive(Clone, Debug)]
pub struct Validation {
    /// The study (its file is `study.path`).
    pub study: Study,
    /// Its trials and time at most.
    pub plan: Plan,
    /// Each configuration with its layout here, or why it cannot run here.
    pub layouts: Vec<(Config, Result<Layout, LayoutError>)>,
    /// What `run.budget` allows (`None`: no budget).
    pub budget: Option<BudgetPlan>,
}

impl Validation {
    /// Plans `study` on `topo`: the layout of every configuration, the trials, the time and
    /// the budget.
    pub fn new(study: Study, topo: &Topology) -> Validation {
        let plan_ = plan_study(&study, topo);
        let layouts = study
            .configurations()
            .into_iter()
            .map(|c| {
                let l = plan(topo, c.instances(), c.cores_per_instance(), c.binding());
                (c, l)
            })
            .collect();
        let budget = study
            .run
            .budget
            .zip(plan_.budget_trials)
            .map(|(budget, trials)| BudgetPlan {
                budget,
                trials,
                duration: Duration::try_from_secs_f64(trials as f64 * plan_.seconds_per_trial)
                    .unwrap_or(Duration::MAX),
                first_test_trials: plan_.feasible * study.run.min_rounds + plan_.confirm_trials,
            });
        Validation {
            study,
            plan: plan_,
            layouts,
            budget,
        }
    }
}
