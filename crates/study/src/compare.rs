//! Two runs of a study side by side: do they pick the same winner, and when they do not, could
//! either run tell the two winners apart? Each run is asked directly: over its rounds where
//! both winners ran, does the two-sided 95 % interval of their paired ratio exclude 1? A race
//! may have dropped the other's winner on a one-sided test repeated round after round, which is
//! a decision to stop spending on it, not this comparison; it is shown, not counted. When
//! neither run separates the two, the runs agree within what they resolve; when one does, they
//! disagree: the machine changed between the runs, or the study needs more rounds.

use perfpilot_store::{Store, TrialRecord};
use serde::{Deserialize, Serialize};

use crate::error::{Result, StudyError};
use crate::runner::{Elimination, Summary, race_trial};
use crate::stats::{self, RatioCi};

/// How two runs' conclusions relate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Agreement {
    /// Both pick the same configuration.
    SameWinner,
    /// Different winners, and neither run's rounds separate them.
    NotSignificantlyDifferent,
    /// At least one run's rounds separate its winner from the other's.
    Disagree,
    /// A run has no winner.
    NoWinner,
}

/// One run's view of the other's winner.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Side {
    pub run: i64,
    pub winner: Option<String>,
    /// Whether this run counts the other run's winner as its own or among those it cannot
    /// tell from its own.
    pub holds_other: bool,
    /// How the other run's winner left this run's race, if it did.
    pub other_left: Option<Elimination>,
    /// This run's winner over the other run's winner, in the goal's direction (> 1: this
    /// winner better), paired over this run's race rounds where both succeeded.
    pub ratio: Option<RatioCi>,
    /// Whether this run separates the two winners: the ratio's 95 % interval lies above 1, or,
    /// with fewer than two common rounds, the other's winner left the race (worse, unlikely
    /// to be the best, failed) without being counted among those it cannot tell apart.
    pub separates: bool,
}

/// The comparison of two runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    pub a: Side,
    pub b: Side,
    pub agreement: Agreement,
    /// Whether the two runs ran the same study file text.
    pub same_study: bool,
}

/// Compares two runs from their summaries and trials (`a` and `b`: run id, summary, trials).
pub fn compare(
    a: (i64, &Summary, &[TrialRecord]),
    b: (i64, &Summary, &[TrialRecord]),
    same_study: bool,
) -> Comparison {
    let side = |me: (i64, &Summary, &[TrialRecord]), other: &Summary| {
        let (run, s, trials) = me;
        let holds_other = match (&s.winner, &other.winner) {
            (Some(w), Some(o)) => w == o || s.indistinguishable.contains(o),
            _ => false,
        };
        let other_left = other
            .winner
            .as_ref()
            .and_then(|o| s.eliminated.iter().find(|e| &e.config == o).cloned());
        let ratio = match (&s.winner, &other.winner) {
            (Some(w), Some(o)) if w != o => paired(trials, w, o, s.higher_is_better),
            _ => None,
        };
        let separates = match (&ratio, &other_left) {
            (Some(r), _) => r.low > 1.0,
            (None, Some(_)) => !holds_other,
            (None, None) => false,
        };
        Side {
            run,
            winner: s.winner.clone(),
            holds_other,
            other_left,
            ratio,
            separates,
        }
    };
    let sa = side(a, b.1);
    let sb = side(b, a.1);
    let agreement = match (&sa.winner, &sb.winner) {
        (None, _) | (_, None) => Agreement::NoWinner,
        (Some(x), Some(y)) if x == y => Agreement::SameWinner,
        _ if sa.separates || sb.separates => Agreement::Disagree,
        _ => Agreement::NotSignificantlyDifferent,
    };
    Comparison {
        a: sa,
        b: sb,
        agreement,
        same_study,
    }
}

/// `winner / other` (inverted when lower is better) over the race rounds where both succeeded,
/// with its 95 % interval.
fn paired(trials: &[TrialRecord], winner: &str, other: &str, higher: bool) -> Option<RatioCi> {
    let value = |k: &str, round: i64| {
        race_trial(trials, k, round)
            .filter(|t| t.status == "ok")
            .and_then(|t| t.value)
            .filter(|v| *v > 0.0)
    };
    let mut rounds: Vec<i64> = trials
        .iter()
        .filter(|t| t.phase == "race")
        .map(|t| t.round)
        .collect();
    rounds.sort_unstable();
    rounds.dedup();
    let (w, o): (Vec<f64>, Vec<f64>) = rounds
        .into_iter()
        .filter_map(|r| Some((value(winner, r)?, value(other, r)?)))
        .unzip();
    if higher {
        stats::paired_ratio_ci(&w, &o, 0.95)
    } else {
        stats::paired_ratio_ci(&o, &w, 0.95)
    }
}

/// Loads runs `a` and `b` from `store` and compares them; a run that has not finished has no
/// summary and is an error that says how to finish it.
pub fn compare_runs(store: &Store, a: i64, b: i64) -> Result<Comparison> {
    let load = |run: i64| -> Result<(String, Summary, Vec<TrialRecord>)> {
        let rec = store.study(run)?.ok_or_else(|| StudyError::NoRun {
            store: store.path().to_path_buf(),
            run,
        })?;
        let summary = rec
            .summary
            .as_deref()
            .and_then(|s| serde_json::from_str::<Summary>(s).ok())
            .ok_or_else(|| {
                StudyError::Failed(format!(
                    "run {run} in {} is {} and has no summary of a finished race (a load sweep, or unfinished: `perfpilot study run --resume {run}` finishes it)",
                    store.path().display(),
                    rec.state
                ))
            })?;
        Ok((rec.spec, summary, store.trials(run)?))
    };
    let (spec_a, sa, ta) = load(a)?;
    let (spec_b, sb, tb) = load(b)?;
    Ok(compare((a, &sa, &ta), (b, &sb, &tb), spec_a == spec_b))
}
