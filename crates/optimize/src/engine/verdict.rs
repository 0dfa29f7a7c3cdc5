//! Verdicts: how many windows a trial measures, the gain its windows give with its interval,
//! and what ending a trial does with it — kept and enforced, reverted and backed off, ended
//! (huge pages stay), or abandoned without a verdict.

use perfpilot_store::journal::ActionState;
use perfpilot_sys::failpoint::kill_point;
use serde::{Deserialize, Serialize};
use tracing::info;

use super::apply::{json, reapply};
use super::enforce::{Held, HeldWatch};
use super::trial::{Design, Trial};
use super::{Engine, EngineError};
use crate::design::{DesignKind, EndReason, Prior, Shown, Watch};
use crate::gain::{self, Decision, Gain};
use crate::journal;
use crate::signal::SignalKind;
use perfpilot_stats::Summary;

/// The evidence behind a decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// The action judged.
    pub action: i64,
    /// The signal that judged it, described.
    pub signal: String,
    /// Whether a larger signal is better.
    pub higher_is_better: bool,
    /// How the trial was designed (verdicts stored before designs were named read as
    /// before/after).
    #[serde(default)]
    pub design: DesignKind,
    /// The kind of server judged (its preset, else its command): earlier verdicts of a strategy
    /// on the same kind form the prior of a one-way trial.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// The sibling judged beside it, for a concurrent control.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control: Option<String>,
    /// The windows without the change (with a control: the ratios to it).
    pub before: Summary,
    /// The windows with the change.
    pub after: Summary,
    /// The gain (> 1 is better) with its interval; `None` when there were too few windows.
    pub gain: Option<Gain>,
    /// What was decided.
    pub decision: Decision,
    /// What the windows showed: an effect, or for a change that cannot be undone only that it
    /// did no harm.
    #[serde(default)]
    pub shown: Shown,
    /// Earlier verdicts taken as a prior (the interval is then a credible one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prior: Option<Prior>,
    /// Seconds from the trial's start to this verdict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_after_s: Option<f64>,
    /// Why the trial ended, as the metrics count it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub ended: String,
    /// Why, in a sentence.
    pub why: String,
    /// The same windows seen by the system-call proxy, when the signal was something else:
    /// whether the proxy would have judged alike (docs/proofs.md, the agreement table).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shadow: Vec<ShadowGain>,
}

/// The gain a shadow signal saw over a trial's windows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShadowGain {
    /// The shadow signal, described.
    pub signal: String,
    /// Its gain with the interval; `None` with too few windows.
    pub gain: Option<Gain>,
}

/// The gain, decision, what was shown and how it was decided of a trial that ended complete.
fn decided(t: &Trial, confidence: f64, min_effect: f64) -> Option<(Gain, Decision, Shown, String)> {
    match &t.design {
        Design::Sequential(s) => {
            let (g, d, shown) = s.decide()?;
            let how = match s.early {
                Some(e) => format!(
                    ", at an early look: {} of {} windows after the change, at {:.2} % (one of {} looks)",
                    s.on.len(),
                    e.planned,
                    e.confidence * 100.0,
                    e.looks
                ),
                None => String::new(),
            };
            Some((g, d, shown, how))
        }
        Design::Switchback(sb) => {
            let p = sb.periods.as_ref()?;
            let (g, d) = match p.decided {
                Some(x) => x,
                None => {
                    let g = p.gain(confidence)?;
                    (g, gain::decide(&g, min_effect))
                }
            };
            let mut dropped = Vec::new();
            if p.dropped_pairs > 0 {
                dropped.push(format!(
                    "{} dropped: the rest of the machine moved",
                    p.dropped_pairs
                ));
            }
            if p.regime_dropped > 0 {
                dropped.push(format!(
                    "{} dropped: the workload's own level stepped",
                    p.regime_dropped
                ));
            }
            let how = format!(
                ", from {} pairs of periods{}",
                p.pairs(),
                if dropped.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", dropped.join("; "))
                }
            );
            Some((g, d, Shown::Effect, how))
        }
    }
}

/// The sentence for a decision on a gain.
fn sentence(g: &Gain, d: Decision, shown: Shown, min_effect: f64) -> String {
    let iv = format!("{:.3} ({:.3}..{:.3})", g.ratio, g.ci_low, g.ci_high);
    let why = match (d, shown) {
        (Decision::Keep, Shown::NoHarm { bound }) => format!(
            "no loss worse than {:.0} % at {:.0} % (gain {iv} not resolved)",
            bound * 100.0,
            g.confidence * 100.0
        ),
        (Decision::Keep, _) => format!("gain {iv} clears the minimum effect {min_effect}"),
        (Decision::Revert, _) => format!("it made things worse: gain {iv}"),
        (Decision::Neutral, _) => format!("no clear effect: gain {iv} does not clear {min_effect}"),
    };
    if g.serial > 0.0 {
        format!(
            "{why}; the interval allows for windows alike from one to the next (lag-1 autocorrelation {:.2})",
            g.serial
        )
    } else {
        why
    }
}

/// The verdict on a trial that ended: from its design's windows when complete (a gain with its
/// interval, decided against `min_effect`), else neutral for the reason it ended.
pub(super) fn judge(t: &Trial, end: &EndReason, confidence: f64, min_effect: f64) -> Verdict {
    let hib = t.signal.as_ref().is_none_or(|s| s.higher_is_better());
    let (gain, decision, shown, why) = match end {
        e if e.judged() => match decided(t, confidence, min_effect) {
            Some((g, d, shown, how)) => {
                let bound = match e {
                    EndReason::TimeBound { after_s } => {
                        format!(", at its time bound ({after_s:.0} s)")
                    }
                    _ => String::new(),
                };
                (
                    Some(g),
                    d,
                    shown,
                    format!("{}{how}{bound}", sentence(&g, d, shown, min_effect)),
                )
            }
            None => (
                None,
                Decision::Neutral,
                Shown::Effect,
                "too few usable windows to judge".into(),
            ),
        },
        other => (None, Decision::Neutral, Shown::Effect, other.to_string()),
    };
    let prior = match &t.design {
        Design::Sequential(s) => s.one_way.as_ref().and_then(|r| r.prior.clone()),
        Design::Switchback(_) => None,
    };
    let why = match &prior {
        Some(p) if gain.is_some() => format!(
            "{why}; with {} earlier verdicts of {} as a prior (×{:.3}, sd {:.3} on the log scale): a credible interval",
            p.verdicts,
            p.of,
            p.belief.mean.exp(),
            p.belief.sd
        ),
        _ => why,
    };
    let (off, on) = t.windows();
    let shadow = if t.shadow_off.is_empty() && t.shadow_on.is_empty() {
        Vec::new()
    } else {
        vec![ShadowGain {
            signal: SignalKind::Syscalls.describe(),
            gain: gain::gain_sequential(&t.shadow_off, &t.shadow_on, true, confidence),
        }]
    };
    Verdict {
        action: t.id,
        signal: t.signal.as_ref().map(|s| s.describe()).unwrap_or_default(),
        higher_is_better: hib,
        design: t.design_kind(),
        kind: t.kind.clone(),
        control: t.control.as_ref().map(|c| c.name.clone()),
        before: Summary::of(&off),
        after: Summary::of(&on),
        gain,
        decision,
        shown,
        prior,
        decided_after_s: Some(perfpilot_sys::clock::mono_s() - t.started_s),
        ended: end.label().to_string(),
        why,
        shadow,
    }
}

impl Engine {
    /// Ends a trial: decides from its windows (or from why it ended early), keeps or reverts,
    /// stores the verdict and the back-off.
    pub(super) fn finish(&mut self, mut t: Trial, ending: EndReason) -> Result<(), EngineError> {
        crate::counters::COUNTERS.trial_ended(ending.label());
        if t.signal.is_none() && ending.judged() {
            let v = serde_json::json!({ "action": t.id, "decision": "unverified", "why": "no usable signal; applied because allow_unverified is on" });
            kill_point("engine.verdict.kept");
            self.store
                .journal_close(t.id, &v.to_string(), ActionState::Kept, "unverified")?;
            info!(action = t.id, workload = %t.name, strategy = %t.strategy, "kept without verification: {}", t.reason);
            self.actions.held.push(Held {
                id: t.id,
                signature: t.signature.clone(),
                strategy: t.strategy,
                doc: t.doc,
                watch: None,
            });
            return Ok(());
        }
        if ending.abandoned() {
            return self.abandon(t, &ending.to_string());
        }
        let verdict = judge(&t, &ending, self.tun.confidence, self.tun.min_effect);
        let evidence = json(&verdict);
        let why = verdict.why;
        let manual = self.policy.manual.contains_key(&t.signature);
        match verdict.decision {
            Decision::Keep => {
                if !t.on {
                    reapply(&self.fs, t.id, &t.doc.changes);
                }
                info!(action = t.id, workload = %t.name, strategy = %t.strategy, "kept: {why} [{}]", t.reason);
                kill_point("engine.verdict.kept");
                self.store
                    .journal_close(t.id, &evidence, ActionState::Kept, &why)?;
                let watch = self.watch_after(&t, verdict.design);
                self.actions.held.push(Held {
                    id: t.id,
                    signature: t.signature.clone(),
                    strategy: t.strategy,
                    doc: t.doc,
                    watch,
                });
            }
            _ if manual => {
                info!(action = t.id, workload = %t.name, strategy = %t.strategy, "{why}");
                self.store
                    .journal_close(t.id, &evidence, ActionState::Manual, &why)?;
            }
            _ => {
                // A switchback trial that ended off has nothing left on.
                let lines = if t.on || !matches!(t.design, Design::Switchback(_)) {
                    journal::undo_all(&self.fs, &t.doc.members, &t.undo)
                } else {
                    Vec::new()
                };
                kill_point("engine.verdict.undone");
                t.on = false;
                // Huge pages are not split back: such an action ends, it is not reverted.
                let (what, state) = if t.doc.irreversible {
                    (
                        "ended, not reverted (its huge pages stay: they cannot be split back cheaply)",
                        ActionState::Ended,
                    )
                } else {
                    ("reverted", ActionState::Reverted)
                };
                let undone = if lines.is_empty() {
                    "its last period was off".to_string()
                } else {
                    lines.join("; ")
                };
                info!(action = t.id, workload = %t.name, strategy = %t.strategy, "{what}: {why}; {undone}");
                self.store
                    .journal_close(t.id, &evidence, state, &format!("{what}: {why}"))?;
                self.store.backoff_set(
                    &t.signature,
                    t.strategy.as_str(),
                    perfpilot_sys::clock::now_ms() + (self.tun.backoff_s * 1000.0) as i64,
                    &why,
                )?;
            }
        }
        Ok(())
    }

    /// The watch after a one-way keep: the action's later windows against its baseline, for as
    /// many windows again as the trial measured after the change (`watch_windows` × that).
    fn watch_after(&self, t: &Trial, design: DesignKind) -> Option<HeldWatch> {
        let Design::Sequential(s) = &t.design else {
            return None;
        };
        if design != DesignKind::OneWay || self.tun.watch_windows <= 0.0 {
            return None;
        }
        let windows =
            ((s.on.len().max(s.plan().min) as f64) * self.tun.watch_windows).ceil() as usize;
        Some(HeldWatch {
            judge: t.judge.clone(),
            watch: Watch::new(
                s.off.clone(),
                s.hib,
                windows,
                s.plan().min,
                self.tun.confidence,
            ),
        })
    }

    /// Ends a trial whose data cannot be judged: undone as far as it can be, no verdict on the
    /// strategy, no back-off.
    fn abandon(&mut self, mut t: Trial, why: &str) -> Result<(), EngineError> {
        let v = serde_json::json!({ "action": t.id, "decision": "abandoned", "why": why });
        let lines = journal::undo_all(&self.fs, &t.doc.members, &t.undo);
        kill_point("engine.verdict.undone");
        t.on = false;
        let state = if t.doc.irreversible {
            ActionState::Ended
        } else {
            ActionState::Reverted
        };
        info!(action = t.id, workload = %t.name, strategy = %t.strategy, "{why}; {}", lines.join("; "));
        self.store.journal_close(t.id, &v.to_string(), state, why)?;
        Ok(())
    }
}
