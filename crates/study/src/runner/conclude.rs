//! After a run's search: the winner confirmed against the baseline, and the run's summary.

use std::path::Path;

use perfpilot_store::{RunState, TrialRecord};

use super::Searched;
use crate::error::{Result, StudyError};
use crate::plan::Infeasible;
use crate::rounds::{Session, hosts_note};
use crate::spec::{Config, Study};
use crate::stats::RatioCi;
use crate::summary::{
    Summary, against_baseline, measurement_notes, measurement_warnings, no_trial_completed,
    paired_gain, phase_figures, verdict,
};

/// The confirmation's verdict, and the winner's gain over the baseline with its p-value.
pub(super) struct Confirmed {
    pub verdict: String,
    pub gain: Option<RatioCi>,
    pub gain_p: Option<f64>,
}

/// Confirms `winner` against the baseline in paired rounds (none when the baseline won or
/// nothing did).
pub(super) fn confirm(
    session: &mut Session<'_>,
    study: &Study,
    winner: Option<&Config>,
) -> Result<Confirmed> {
    let baseline = study.run.baseline.key();
    let (verdict, gain, gain_p) = match winner {
        None => (no_trial_completed(&session.trials).0, None, None),
        Some(w) if w.key() == baseline => (
            "the baseline is the best configuration".to_string(),
            None,
            None,
        ),
        Some(w) => {
            session.confirm(w)?;
            let (gain, gain_p) =
                paired_gain(&study.objective.goal, &session.trials, &w.key(), &baseline);
            (verdict(gain), gain, gain_p)
        }
    };
    Ok(Confirmed {
        verdict,
        gain,
        gain_p,
    })
}

/// What a run did, for its summary.
pub(super) struct Ran {
    pub searched: Searched,
    pub confirmed: Confirmed,
    pub infeasible: Vec<Infeasible>,
    pub warnings: Vec<String>,
    pub racing: bool,
    pub trials_run: usize,
    pub elapsed_s: f64,
}

/// The summary of a run of `study` that stored `trials`.
pub(super) fn summarise(study: &Study, trials: &[TrialRecord], ran: Ran) -> Summary {
    let goal = &study.objective.goal;
    let baseline = study.run.baseline.key();
    let Ran {
        searched,
        confirmed,
        infeasible,
        mut warnings,
        racing,
        trials_run,
        elapsed_s,
    } = ran;
    warnings.extend(measurement_warnings(study, trials, &baseline));
    let winner_key = searched.winner.as_ref().map(Config::key);
    let (configurations, confirmation) = phase_figures(
        trials,
        &searched.keys,
        winner_key.as_deref(),
        &baseline,
        &searched.eliminated,
    );
    Summary {
        goal: goal.describe(),
        unit: goal.unit().into(),
        rate_unit: crate::summary::rate_unit(study),
        higher_is_better: goal.higher_is_better(),
        baseline: baseline.clone(),
        // Without a winner nothing is "not significantly different from it".
        indistinguishable: match &winner_key {
            Some(_) => searched.indistinguishable,
            None => Vec::new(),
        },
        against_baseline: winner_key
            .as_deref()
            .and_then(|w| against_baseline(trials, w, &baseline)),
        winner: winner_key,
        chance_best: searched.chance_best,
        gain: confirmed.gain,
        gain_p_value: confirmed.gain_p,
        verdict: confirmed.verdict,
        configurations,
        confirmation,
        eliminated: searched.eliminated,
        infeasible,
        warnings,
        notes: measurement_notes(study, trials)
            .into_iter()
            .chain(hosts_note(trials))
            .collect(),
        rounds: searched.rounds,
        trials_run,
        elapsed_s,
        racing,
        search: searched.search,
    }
}

/// Stores `summary` with the run's end: done, or, without a winner, failed (with what it saw)
/// and an error naming the first failure, so that neither the store (`store`) nor the exit
/// status calls it done.
pub(super) fn store_summary(
    session: &mut Session<'_>,
    store: &Path,
    summary: &Summary,
) -> Result<()> {
    let run = session.run_id;
    let json = serde_json::to_string(summary).unwrap_or_default();
    if summary.winner.is_none() {
        session
            .store
            .study_set_state(run, RunState::Failed, Some(&json))?;
        return Err(StudyError::NoTrialCompleted {
            run,
            store: store.to_path_buf(),
            why: no_trial_completed(&session.trials).1,
        });
    }
    session
        .store
        .study_set_state(run, RunState::Done, Some(&json))?;
    Ok(())
}
