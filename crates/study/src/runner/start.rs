//! Before a run's first trial: its hosts connected, the run opened (or resumed) in the store,
//! refused when it cannot run, and its trials counted.

use perfpilot_lab::MachineFacts;
use perfpilot_observe::Topology;
use perfpilot_store::{RunState, Store, TrialRecord};
use perfpilot_sys::Fs;

use super::{RunOptions, with_hosts};
use crate::error::{Result, StudyError};
use crate::hosts;
use crate::plan::{Plan, confirm_trials, infeasible_reason};
use crate::spec::{Budget, Method, Study};

/// The hosts of `--hosts`, connected, and what they mean for the run.
pub(super) struct Fleet {
    /// Each host: a worker, or `None` for this process (`local`); empty without `--hosts`.
    pub remotes: Vec<Option<hosts::RemoteHost>>,
    /// The machine layouts are planned on: the first host's (this one without `--hosts`).
    pub plan_topo: Topology,
    /// The machine facts stored with the run (JSON), naming the hosts.
    pub facts: String,
    /// Hosts whose shapes differ.
    pub warnings: Vec<String>,
}

impl Fleet {
    pub(super) fn connect(study: &Study, topo: &Topology, opts: &RunOptions) -> Result<Fleet> {
        let remotes = match opts.hosts.is_empty() {
            true => Vec::new(),
            false => hosts::connect(&opts.hosts, &opts.dialer, study)?,
        };
        let (plan_topo, facts) = match remotes.first() {
            Some(Some(r)) => (r.topology.clone(), r.facts.clone()),
            _ => (
                topo.clone(),
                MachineFacts::with_topology(&Fs::live(), topo).to_json(),
            ),
        };
        let names: Vec<String> = opts.hosts.iter().map(|h| h.trim().to_string()).collect();
        let facts = match remotes.is_empty() {
            true => facts,
            false => with_hosts(&facts, &names),
        };
        let shapes: Vec<(&str, &Topology)> = names
            .iter()
            .zip(&remotes)
            .map(|(n, r)| (n.as_str(), r.as_ref().map_or(topo, |r| &r.topology)))
            .collect();
        let warnings = hosts::shape_warnings(&shapes);
        Ok(Fleet {
            remotes,
            plan_topo,
            facts,
            warnings,
        })
    }
}

/// The run `opts` resumes (with its stored trials), or a new one stored with `facts`.
pub(super) fn open_run(
    store: &mut Store,
    study: &Study,
    opts: &RunOptions,
    facts: &str,
) -> Result<(i64, Vec<TrialRecord>)> {
    match opts.resume {
        Some(id) => {
            if store.study(id)?.is_none() {
                return Err(StudyError::NoRun {
                    store: opts.store.clone(),
                    run: id,
                });
            }
            store.study_set_state(id, RunState::Running, None)?;
            Ok((id, store.trials(id)?))
        }
        None => Ok((
            store.study_begin(
                &study.name,
                &study.path.display().to_string(),
                &study.source,
                facts,
            )?,
            Vec::new(),
        )),
    }
}

/// Why the study cannot run at all on `plan_topo` (its baseline does not fit), or not as
/// asked (an iterated search without racing).
pub(super) fn unrunnable(study: &Study, plan_topo: &Topology, racing: bool) -> Option<String> {
    let baseline = &study.run.baseline;
    if let Some(reason) = infeasible_reason(study, plan_topo, baseline) {
        return Some(format!(
            "the baseline {} cannot run on this machine: {reason}",
            baseline.key()
        ));
    }
    (study.search.method == Method::Iterated && !racing).then(|| {
        "--exhaustive (or run.racing = false) runs every configuration of a grid; this study searches iteratively (search.method = \"iterated\"), which races by its nature: drop it, or make the space a grid".to_string()
    })
}

/// How many trials a run may take.
pub(super) struct Sizing {
    /// The budget, when it binds (a race only; an exhaustive run takes every trial).
    pub budget: Option<Budget>,
    /// The budget in trials.
    pub cap: Option<usize>,
    /// The trials kept for the confirmation.
    pub reserve: usize,
    /// The most trials the run takes (the progress bar's length).
    pub total: usize,
}

impl Sizing {
    pub(super) fn of(
        study: &Study,
        opts: &RunOptions,
        plan_: &Plan,
        feasible: usize,
        racing: bool,
    ) -> Sizing {
        let iterated = study.search.method == Method::Iterated;
        let budget = opts.budget.or(study.run.budget).filter(|_| racing);
        let cap = budget.map(|b| b.trials(plan_.exhaustive_trials));
        let reserve = match iterated {
            true => plan_.confirm_trials,
            false => confirm_trials(study, feasible),
        };
        let total = match iterated {
            true => cap.unwrap_or(plan_.max_trials),
            false => cap.map_or(plan_.max_trials, |c| c.min(plan_.max_trials)),
        };
        Sizing {
            budget,
            cap,
            reserve,
            total,
        }
    }
}
