//! Concurrent controls: a trial on one workload judged against a sibling of the same kind left
//! as it is (another instance of the same program serving the same kind of signal). Both are
//! read in the same scans, their windows cut over the same spans, and the trial judges the
//! ratio of the two: whatever moves the whole machine moves both and cancels.

use std::collections::HashMap;

use perfpilot_observe::Rates;
use perfpilot_observe::workload::Workload;

use super::Engine;
use super::watch::Window;
use crate::config::ProbeSpec;
use crate::signal::SignalKind;
use crate::strategy::StrategyKind;

/// The sibling a trial is judged against.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Control {
    /// Its signature.
    pub(super) signature: String,
    /// Its name, for `status` and the log.
    pub(super) name: String,
    /// Its processes as (pid, start time) when the trial began.
    pub(super) members: Vec<(i32, u64)>,
    /// Its own signal (of the same kind as the treated workload's).
    pub(super) signal: SignalKind,
}

/// The control's window of this scan, beside the treated workload's.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Pairing {
    /// The trial has no control.
    None,
    /// The control's window completed this scan with this value.
    Paired(f64),
    /// No window of the control this scan (or it failed).
    Unpaired,
    /// The control is gone, and why ("exited", "restarted").
    Lost(String),
}

/// This scan's pairing of a trial's control.
pub(super) fn pairing(
    c: Option<&Control>,
    workloads: &[Workload],
    obs: &HashMap<String, Window>,
) -> Pairing {
    let Some(c) = c else {
        return Pairing::None;
    };
    let Some(w) = workloads.iter().find(|w| w.signature == c.signature) else {
        return Pairing::Lost("exited".into());
    };
    if !w
        .members
        .iter()
        .any(|m| c.members.contains(&(m.pid, m.starttime)))
    {
        return Pairing::Lost("restarted".into());
    }
    match obs.get(&c.signature).map(|o| &o.main) {
        Some(Ok(Some(v))) => Pairing::Paired(*v),
        _ => Pairing::Unpaired,
    }
}

/// Whether `s` can stand as a control for a trial of `kind` on `w` judged by `signal`: the
/// same program under the same user, a signal of the same kind and direction, about as busy
/// (within a factor of two: a sibling that hardly works drifts on its own), and not itself in
/// a trial or holding an action of the strategy.
pub(super) fn alike(w: &Workload, s: &Workload, signal: &SignalKind, theirs: &SignalKind) -> bool {
    s.signature != w.signature
        && s.comm == w.comm
        && s.uid == w.uid
        && signal.source() == theirs.source()
        && signal.higher_is_better() == theirs.higher_is_better()
        && same_kind(signal, theirs)
        && s.cpu_cores > 0.0
        && (0.5..=2.0).contains(&(w.cpu_cores / s.cpu_cores))
}

/// Signals of the same kind: the same preset, the same probe metric, the same kernel proxy.
fn same_kind(a: &SignalKind, b: &SignalKind) -> bool {
    match (a, b) {
        (SignalKind::Preset { preset: p, .. }, SignalKind::Preset { preset: q, .. }) => p == q,
        (SignalKind::Probe { probe: p }, SignalKind::Probe { probe: q }) => {
            probe_key(p) == probe_key(q)
        }
        _ => std::mem::discriminant(a) == std::mem::discriminant(b),
    }
}

/// What a probe reads, whichever endpoint it reads it from.
fn probe_key(p: &ProbeSpec) -> &str {
    match p {
        ProbeSpec::Http { metric, .. } => metric,
        ProbeSpec::Command { command, .. } => command,
    }
}

impl Engine {
    /// A sibling of `w` to judge a trial of `kind` against, when one is eligible, steady and
    /// free. Both workloads' windows start afresh this scan, so that they are cut over the same
    /// spans from here on.
    pub(super) fn sibling(
        &mut self,
        w: &Workload,
        kind: StrategyKind,
        signal: &SignalKind,
        workloads: &[Workload],
        rates: &Rates,
    ) -> Option<Control> {
        let actions = &self.actions;
        let busy = |sig: &str| {
            actions.trials.iter().any(|t| {
                t.signature == sig
                    || t.judge == sig
                    || t.control.as_ref().is_some_and(|c| c.signature == sig)
            }) || actions
                .held
                .iter()
                .any(|h| h.signature == sig && h.strategy == kind)
        };
        let free: Vec<&Workload> = workloads.iter().filter(|s| !busy(&s.signature)).collect();
        let mut candidates: Vec<(Workload, SignalKind)> = Vec::new();
        for s in free {
            if self.policy.left_alone(&self.topo, s, None).is_some() {
                continue;
            }
            if let Ok(theirs) = self.signal_of(s, rates)
                && alike(w, s, signal, &theirs)
            {
                candidates.push((s.clone(), theirs));
            }
        }
        for (s, theirs) in candidates {
            if self.steady_signal(&s, &theirs, rates).is_err() {
                continue;
            }
            self.steady.take(&s.signature);
            self.watch.restart_windows(&w.signature);
            self.watch.restart_windows(&s.signature);
            return Some(Control {
                signature: s.signature.clone(),
                name: s.name.clone(),
                members: s.members.iter().map(|m| (m.pid, m.starttime)).collect(),
                signal: theirs,
            });
        }
        None
    }
}
