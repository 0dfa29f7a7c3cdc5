//! Verdicts: how many windows a trial measures, the gain its windows give with its interval,
//! and what ending a trial does with it — kept and enforced, reverted and backed off, ended
//! (huge pages stay), or abandoned without a verdict.

use perfpilot_store::journal::ActionState;
use perfpilot_sys::failpoint::kill_point;
use serde::{Deserialize, Serialize};
use tracing::info;

use super::apply::{json, reapply};
use super::enforce::Held;
use super::trial::{Ending, Trial};
use super::{Engine, EngineError};
use crate::journal;
use crate::signal::SignalKind;
use crate::stats::{self, Decision, Gain, Stats};
use crate::tunables::Tunables;

/// The evidence behind a decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// The action judged.
    pub action: i64,
    /// The signal that judged it, described.
    pub signal: String,
    /// Whether a larger signal is better.
    pub higher_is_better: bool,
    /// Whether the windows were interleaved off/on pairs.
    pub interleaved: bool,
    /// The windows without the change.
    pub before: Stats,
    /// The windows with the change.
    pub after: Stats,
    /// The gain (> 1 is better) with its interval; `None` when there were too few windows.
    pub gain: Option<Gain>,
    /// What was decided.
    pub decision: Decision,
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

/// How many windows a trial measures: at least `min` a side; a sequential trial as many as its
/// baseline's noise needs for an interval of about ±`resolution`, up to `max`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct WindowPlan {
    pub(super) min: usize,
    pub(super) max: usize,
    pub(super) resolution: f64,
    pub(super) confidence: f64,
    /// `rest_change_max`: how far the rest of the machine may move (0: not checked).
    pub(super) rest_share: f64,
    /// `min_effect`: the gain a kept action's interval must clear.
    pub(super) min_effect: f64,
}

impl WindowPlan {
    /// The plan the tunables give.
    pub(super) fn of(tun: &Tunables) -> WindowPlan {
        WindowPlan {
            min: tun.window_count(),
            max: tun.max_windows as usize,
            resolution: tun.resolution,
            confidence: tun.confidence,
            rest_share: tun.rest_change_max,
            min_effect: tun.min_effect,
        }
    }

    /// Exactly `n` windows a side, whatever the noise.
    #[cfg(test)]
    pub(super) fn fixed(n: usize) -> WindowPlan {
        WindowPlan {
            min: n,
            max: n,
            resolution: 1.0,
            confidence: 0.95,
            rest_share: 0.0,
            min_effect: 0.02,
        }
    }
}

/// The gain of windows with the change over windows without: off/on pairs (as many as both
/// sides have) when interleaved, else independent samples.
fn gain_of(
    off: &[f64],
    on: &[f64],
    interleaved: bool,
    higher_is_better: bool,
    confidence: f64,
) -> Option<Gain> {
    if interleaved {
        let n = off.len().min(on.len());
        stats::gain_paired(&off[..n], &on[..n], higher_is_better, confidence)
    } else {
        stats::gain_sequential(off, on, higher_is_better, confidence)
    }
}

/// The verdict on a trial that ended: from its windows when complete (a gain with its interval,
/// decided against `min_effect`), else neutral for the reason it ended early.
pub(super) fn judge(t: &Trial, ending: &Ending, confidence: f64, min_effect: f64) -> Verdict {
    let hib = t.signal.as_ref().is_none_or(|s| s.higher_is_better());
    let (gain, decision, why) = match ending {
        Ending::Early(why) | Ending::Abandoned(why) => (None, Decision::Neutral, why.clone()),
        Ending::Complete => {
            // A trial decided at an interim look is judged at that look's stricter level.
            let confidence = t.early.map_or(confidence, |e| e.confidence);
            match gain_of(&t.off_obs, &t.on_obs, t.doc.interleave, hib, confidence) {
                Some(g) => {
                    let d = stats::decide(&g, min_effect);
                    let why = match d {
                        Decision::Keep => format!(
                            "gain {:.3} ({:.3}..{:.3}) clears the minimum effect {min_effect}",
                            g.ratio, g.ci_low, g.ci_high
                        ),
                        Decision::Revert => format!(
                            "it made things worse: gain {:.3} ({:.3}..{:.3})",
                            g.ratio, g.ci_low, g.ci_high
                        ),
                        Decision::Neutral => format!(
                            "no clear effect: gain {:.3} ({:.3}..{:.3}) does not clear {min_effect}",
                            g.ratio, g.ci_low, g.ci_high
                        ),
                    };
                    let why = if g.serial > 0.0 {
                        format!(
                            "{why}; the interval allows for windows alike from one to the next (lag-1 autocorrelation {:.2})",
                            g.serial
                        )
                    } else {
                        why
                    };
                    (Some(g), d, why)
                }
                None => (
                    None,
                    Decision::Neutral,
                    "too few usable windows to judge".into(),
                ),
            }
        }
    };
    let why = match t.early {
        Some(e) if *ending == Ending::Complete => format!(
            "{why}, at an early look: {} of {} windows after the change, at {:.2} % (one of {} looks)",
            t.on_obs.len(),
            e.planned,
            e.confidence * 100.0,
            e.looks
        ),
        _ => why,
    };
    let shadow = if t.shadow_off.is_empty() && t.shadow_on.is_empty() {
        Vec::new()
    } else {
        let gain = gain_of(
            &t.shadow_off,
            &t.shadow_on,
            t.doc.interleave,
            true,
            confidence,
        );
        vec![ShadowGain {
            signal: SignalKind::Syscalls.describe(),
            gain,
        }]
    };
    Verdict {
        action: t.id,
        signal: t.signal.as_ref().map(|s| s.describe()).unwrap_or_default(),
        higher_is_better: hib,
        interleaved: t.doc.interleave,
        before: Stats::of(&t.off_obs),
        after: Stats::of(&t.on_obs),
        gain,
        decision,
        why,
        shadow,
    }
}

impl Engine {
    /// Ends a trial: decides from its windows (or from why it ended early), keeps or reverts,
    /// stores the verdict and the back-off.
    pub(super) fn finish(&mut self, mut t: Trial, ending: Ending) -> Result<(), EngineError> {
        if t.signal.is_none() && ending == Ending::Complete {
            let v = serde_json::json!({ "action": t.id, "decision": "unverified", "why": "no usable signal; applied because allow_unverified is on" });
            self.store.journal_set_verdict(t.id, &v.to_string())?;
            kill_point("engine.verdict.kept");
            self.store
                .journal_set_state(t.id, ActionState::Kept, "unverified")?;
            info!(action = t.id, workload = %t.name, strategy = %t.strategy, "kept without verification: {}", t.reason);
            self.actions.held.push(Held {
                id: t.id,
                signature: t.signature.clone(),
                strategy: t.strategy,
                doc: t.doc,
            });
            return Ok(());
        }
        if let Ending::Abandoned(why) = &ending {
            return self.abandon(t, why);
        }
        let verdict = judge(&t, &ending, self.tun.confidence, self.tun.min_effect);
        self.store.journal_set_verdict(t.id, &json(&verdict))?;
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
                    .journal_set_state(t.id, ActionState::Kept, &why)?;
                self.actions.held.push(Held {
                    id: t.id,
                    signature: t.signature.clone(),
                    strategy: t.strategy,
                    doc: t.doc,
                });
            }
            _ if manual => {
                info!(action = t.id, workload = %t.name, strategy = %t.strategy, "{why}");
                self.store
                    .journal_set_state(t.id, ActionState::Manual, &why)?;
            }
            _ => {
                let lines = if t.on || !t.doc.interleave {
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
                info!(action = t.id, workload = %t.name, strategy = %t.strategy, "{what}: {why}; {}", lines.join("; "));
                self.store
                    .journal_set_state(t.id, state, &format!("{what}: {why}"))?;
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

    /// Ends a trial whose data cannot be judged: undone as far as it can be, no verdict on the
    /// strategy, no back-off.
    fn abandon(&mut self, mut t: Trial, why: &str) -> Result<(), EngineError> {
        let v = serde_json::json!({ "action": t.id, "decision": "abandoned", "why": why });
        self.store.journal_set_verdict(t.id, &v.to_string())?;
        let lines = journal::undo_all(&self.fs, &t.doc.members, &t.undo);
        kill_point("engine.verdict.undone");
        t.on = false;
        let state = if t.doc.irreversible {
            ActionState::Ended
        } else {
            ActionState::Reverted
        };
        info!(action = t.id, workload = %t.name, strategy = %t.strategy, "{why}; {}", lines.join("; "));
        self.store.journal_set_state(t.id, state, why)?;
        Ok(())
    }
}
