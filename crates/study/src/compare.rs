//! Two runs of a study side by side: do they pick the same winner, and when they do not, is
//! one winner really better than the other? Every round of either run where both winners ran
//! is a paired block; the verdict is the two-sided 95 % interval of their ratio over the
//! rounds of both runs together. When it includes 1, the two are not significantly different
//! and either pick is sound; when it excludes 1, the runs disagree and the interval says whose
//! winner is better.
//!
//! Each run's own interval is shown too. Asking each run separately and calling the runs in
//! disagreement when either separates the two winners gives a difference two chances to show
//! and ignores the other run's evidence against it: on a shared VM whose speed drifts by the
//! hour, two exhaustive runs of the same file disagreed by that rule while their rounds
//! together did not separate the winners (figures: `docs/study-file.md`, "Racing"). When each
//! run separates its own winner from the other's the runs *contradict* each other: the order of
//! the two changed with the machine's conditions between the runs, which is reported with the
//! verdict.
//!
//! A race may have dropped the other's winner on a one-sided test repeated round after round,
//! which is a decision to stop spending on it, not this comparison; it is shown, not counted.

use std::path::Path;

use perfpilot_store::{Store, TrialPhase, TrialRecord};
use serde::{Deserialize, Serialize};

use crate::cross::{CrossSystem, cross_system};
use crate::error::{Result, StudyError};
use crate::race::Elimination;
use crate::scores::paired_values;
use crate::stats::{self, RatioCi};
use crate::summary::Summary;

/// How two runs' conclusions relate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Agreement {
    /// Both pick the same configuration.
    SameWinner,
    /// Different winners, not significantly different over both runs' rounds (with fewer
    /// than two such rounds: neither run separates them).
    NotSignificantlyDifferent,
    /// Different winners, and over both runs' rounds one is significantly better (with fewer
    /// than two such rounds: a run dropped the other's winner as worse).
    Disagree,
    /// A run has no winner.
    NoWinner,
}

/// One run's view of the other's winner.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Side {
    /// The run's id.
    pub run: i64,
    /// Its winner.
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
    /// with fewer than two common rounds, the other's winner left the race (far behind, worse,
    /// unlikely to be the best, failed) without being counted among those it cannot tell
    /// apart.
    pub separates: bool,
}

/// The comparison of two runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// Run `a`'s view of run `b`'s winner.
    pub a: Side,
    /// Run `b`'s view of run `a`'s winner.
    pub b: Side,
    /// Run `a`'s winner over run `b`'s, in the goal's direction (> 1: `a`'s is better), paired
    /// over the race rounds of both runs where both winners succeeded: the verdict's interval.
    pub pooled: Option<RatioCi>,
    /// Each run separates its own winner from the other's: the two runs order them opposite
    /// ways, each with confidence, so the machine's conditions changed between them.
    pub contradict: bool,
    /// How the two runs' conclusions relate.
    pub agreement: Agreement,
    /// Whether the two runs ran the same study file text.
    pub same_study: bool,
    /// The two runs' machines and, per configuration both measured, run `b`'s result over
    /// run `a`'s (`None`: not loaded from stores).
    #[serde(default)]
    pub cross: Option<CrossSystem>,
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
    // Values of different goals (or units) do not pool.
    let same_goal = a.1.goal == b.1.goal
        && a.1.unit == b.1.unit
        && a.1.higher_is_better == b.1.higher_is_better;
    let pooled = match (&sa.winner, &sb.winner) {
        (Some(x), Some(y)) if x != y && same_goal => {
            // Run a's winner (x) and run b's (y), round by round in each run.
            let (mut xs, mut ys) = pairs(a.2, x, y);
            let (yb, xb) = pairs(b.2, y, x);
            xs.extend(xb);
            ys.extend(yb);
            if a.1.higher_is_better {
                stats::paired_ratio_ci(&xs, &ys, 0.95)
            } else {
                stats::paired_ratio_ci(&ys, &xs, 0.95)
            }
        }
        _ => None,
    };
    let contradict = sa.ratio.is_some() && sb.ratio.is_some() && sa.separates && sb.separates;
    let agreement = match (&sa.winner, &sb.winner) {
        (None, _) | (_, None) => Agreement::NoWinner,
        (Some(x), Some(y)) if x == y => Agreement::SameWinner,
        _ => match &pooled {
            Some(p) if p.low > 1.0 || p.high < 1.0 => Agreement::Disagree,
            Some(_) => Agreement::NotSignificantlyDifferent,
            None if sa.separates || sb.separates => Agreement::Disagree,
            None => Agreement::NotSignificantlyDifferent,
        },
    };
    Comparison {
        a: sa,
        b: sb,
        pooled,
        contradict,
        agreement,
        same_study,
        cross: None,
    }
}

/// `winner / other` (inverted when lower is better) over the race rounds where both succeeded,
/// with its 95 % interval.
fn paired(trials: &[TrialRecord], winner: &str, other: &str, higher: bool) -> Option<RatioCi> {
    let (w, o) = pairs(trials, winner, other);
    if higher {
        stats::paired_ratio_ci(&w, &o, 0.95)
    } else {
        stats::paired_ratio_ci(&o, &w, 0.95)
    }
}

/// The values of `x` and `y` in the run's race rounds where both succeeded, round by round.
fn pairs(trials: &[TrialRecord], x: &str, y: &str) -> (Vec<f64>, Vec<f64>) {
    let last = trials
        .iter()
        .filter(|t| t.phase == TrialPhase::Race)
        .map(|t| t.round)
        .max()
        .unwrap_or(0);
    paired_values(trials, x, y, last)
}

/// Loads run `a` from `store_a` and run `b` from `store_b` (the same store or another) and
/// compares them, with the machines they ran on and the ratio of their results per
/// configuration; a run that has not finished has no summary and is an error that says how to
/// finish it.
pub fn compare_runs(store_a: &Store, a: i64, store_b: &Store, b: i64) -> Result<Comparison> {
    type Loaded = (String, String, Summary, Vec<TrialRecord>);
    let load = |store: &Store, run: i64| -> Result<Loaded> {
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
        Ok((rec.spec, rec.host, summary, store.trials(run)?))
    };
    let (spec_a, host_a, sa, ta) = load(store_a, a)?;
    let (spec_b, host_b, sb, tb) = load(store_b, b)?;
    let mut c = compare((a, &sa, &ta), (b, &sb, &tb), spec_a == spec_b);
    c.cross = Some(cross_system((&sa, &ta, &host_a), (&sb, &tb, &host_b)));
    Ok(c)
}

/// Refuses two stores of different schema versions before either is opened (opening would
/// upgrade an older one in place, and a newer one cannot be read), naming both and what to do.
pub fn check_schemas(a: &Path, b: &Path) -> Result<()> {
    let (va, vb) = (Store::schema_version_at(a)?, Store::schema_version_at(b)?);
    if va == vb {
        return Ok(());
    }
    let supported = perfpilot_store::schema::SCHEMA_VERSION;
    let (newer, older) = if va > vb { (a, b) } else { (b, a) };
    let advice = if va.max(vb) > supported {
        format!(
            "compare them with the perfpilot that wrote {} (or a newer one), which reads both",
            newer.display()
        )
    } else {
        format!(
            "upgrade {} first by opening it with this perfpilot (`perfpilot study list --store {}` upgrades it in place; copy it first to keep the original), then compare again",
            older.display(),
            older.display()
        )
    };
    Err(StudyError::SchemaMismatch {
        a: a.to_path_buf(),
        version_a: va,
        b: b.to_path_buf(),
        version_b: vb,
        supported,
        advice,
    })
}
