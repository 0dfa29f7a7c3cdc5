//! A study's plan on this machine: which configurations can run and where, the trials and time
//! a run takes at most, the trials `run.budget` allows, and the budget rule the runner and the
//! replay share. [`Validation`] is what `study validate` prints.

use std::time::Duration;

use perfpilot_observe::Topology;
use serde::{Deserialize, Serialize};

use crate::layout::{Layout, LayoutError, plan};
use crate::spec::{Budget, Config, LoadKind, Method, Study, space::SHARE_DRAWS};
use crate::stats::Rng;

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
    /// Grid or iterated racing.
    pub method: Method,
    /// The space's size as `study validate` says it (`12,288 configurations`, `about …`,
    /// `unbounded: …`).
    pub size: String,
    /// Configurations the study's factors make (an iterated search's space: as estimated,
    /// 0 when unbounded).
    pub configurations: usize,
    /// Configurations this machine can run (an iterated search's: estimated from uniform
    /// draws where the space cannot be listed).
    pub feasible: usize,
    /// Those it cannot, with the reason.
    pub infeasible: Vec<Infeasible>,
    /// Trials with every repetition (no configuration raced out) plus confirmation; an
    /// iterated search's: its budget's.
    pub max_trials: usize,
    /// An exhaustive run's trials (every runnable configuration in every round, and the
    /// confirmation): what a share budget is a share of.
    pub exhaustive_trials: usize,
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

/// Why configuration `c` cannot run on `topo` (its layout, or a file system this machine
/// cannot make), if it cannot.
pub(crate) fn infeasible_reason(study: &Study, topo: &Topology, c: &Config) -> Option<String> {
    if let Err(e) = plan(topo, c.instances(), c.cores_per_instance(), c.binding()) {
        return Some(e.to_string());
    }
    // A file system this machine cannot make is reported, never silently dropped.
    study.storage.as_ref().and_then(|s| s.unavailable(c))
}

/// Plans a study on `topo`: layouts of every configuration, trials, the time it takes at most.
/// For an iterated search: the space's size, the configurations that cannot run here among
/// those listed (or among its representatives), and its budget as its trials.
pub fn plan_study(study: &Study, topo: &Topology) -> Plan {
    let space = study.space();
    let listed = study.configurations();
    let size = space.size();
    let iterated = study.search.method == Method::Iterated;
    let (configs, mut infeasible) = if !listed.is_empty() || !iterated {
        let bad = listed
            .iter()
            .filter_map(|c| {
                infeasible_reason(study, topo, c).map(|reason| Infeasible {
                    config: c.key(),
                    reason,
                })
            })
            .collect();
        (listed.len(), bad)
    } else {
        (0, Vec::new())
    };
    let (configurations, feasible) = if iterated && listed.is_empty() {
        // Estimated: the share of uniform draws that are allowed and runnable here.
        let mut rng = Rng::new(0xFEA5);
        let ok = (0..SHARE_DRAWS)
            .filter(|_| {
                let c = space.draw_uniform(&mut rng);
                space.forbidding(&c).is_none() && infeasible_reason(study, topo, &c).is_none()
            })
            .count();
        let n = size.estimate().unwrap_or(0.0);
        let feasible = n * ok as f64 / SHARE_DRAWS.max(1) as f64;
        for c in study.representatives() {
            if let Some(reason) = infeasible_reason(study, topo, &c) {
                infeasible.push(Infeasible {
                    config: c.key(),
                    reason,
                });
            }
        }
        (clamp_usize(n), clamp_usize(feasible))
    } else {
        (configs, configs - infeasible.len())
    };
    // An iterated search always confirms its winner (it races many configurations).
    let confirm = confirm_trials(study, if iterated { 2 } else { feasible });
    let exhaustive_trials = feasible
        .saturating_mul(study.run.repetitions)
        .saturating_add(confirm);
    let budget_trials = study.run.budget.map(|b| b.trials(exhaustive_trials));
    let max_trials = match (iterated, budget_trials) {
        (true, Some(b)) => b,
        _ => exhaustive_trials,
    };
    // A batch trial takes as long as the batch: at most its timeout.
    let running = match &study.load.kind {
        LoadKind::Batch { timeout, .. } => timeout.as_secs_f64(),
        _ => study.run.warmup.as_secs_f64() + study.run.measure.as_secs_f64(),
    };
    let per = running + study.run.cooldown.as_secs_f64() + TRIAL_OVERHEAD_S;
    Plan {
        method: study.search.method,
        size: size.to_string(),
        configurations,
        feasible,
        infeasible,
        max_trials,
        exhaustive_trials,
        confirm_trials: confirm,
        seconds_per_trial: per,
        max_duration: Duration::try_from_secs_f64(per * max_trials as f64).unwrap_or(Duration::MAX),
        budget_trials,
    }
}

/// A count as a `usize`, saturating (an estimate of a huge space).
fn clamp_usize(x: f64) -> usize {
    if x >= usize::MAX as f64 {
        usize::MAX
    } else {
        x.round().max(0.0) as usize
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
    /// Each configuration with its layout here, or why it cannot run here (an iterated
    /// search: one configuration of each layout its representatives take).
    pub layouts: Vec<(Config, Result<Layout, LayoutError>)>,
    /// What `run.budget` allows (`None`: no budget).
    pub budget: Option<BudgetPlan>,
    /// An iterated search's iterations, as planned when each spends its share of the budget
    /// (`None`: a grid).
    pub iterations: Option<crate::iterate::IterationPlan>,
}

impl Validation {
    /// Plans `study` on `topo`: the layout of every configuration, the trials, the time and
    /// the budget.
    pub fn new(study: Study, topo: &Topology) -> Validation {
        let plan_ = plan_study(&study, topo);
        let iterated = study.search.method == Method::Iterated;
        let mut seen = Vec::new();
        let layouts = match iterated {
            false => study.configurations(),
            true => study.representatives(),
        }
        .into_iter()
        .filter(|c| {
            // One configuration per layout for an iterated search (its space is large).
            let shape = (c.instances(), c.cores_per_instance(), c.binding());
            !iterated
                || (!seen.contains(&shape) && {
                    seen.push(shape);
                    true
                })
        })
        .map(|c| {
            let l = plan(topo, c.instances(), c.cores_per_instance(), c.binding());
            (c, l)
        })
        .collect();
        let iterations = plan_
            .budget_trials
            .filter(|_| iterated)
            .map(|b| crate::iterate::IterationPlan::new(&study, b));
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
            iterations,
        }
    }
}
