//! Concurrent controls: a trial on one workload judged against a sibling of the same kind left
//! as it is (another instance of the same program serving the same kind of signal). Both are
//! read in the same scans, their windows cut over the same spans, and the trial judges the
//! ratio of the two: whatever moves the whole machine moves both and cancels.

use std::collections::HashMap;

use perfpilot_observe::workload::Workload;
use perfpilot_observe::{CpuSet, Rates};

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
    /// Where it runs beside the treated workload.
    pub(super) cpus: CpuSharing,
}

/// Where a control runs beside the treated workload, by the CPUs each may run on. On a VM each
/// virtual CPU's speed steps with what the host runs beside it, so a control on other CPUs
/// wanders against the treated workload instead of cancelling its drift (docs/optimizer.md, "A
/// control on another CPU"): a sibling on the same CPUs is preferred.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum CpuSharing {
    /// Both may run on the same CPUs (both unbound included).
    Same,
    /// Their CPUs overlap: this many are shared.
    Overlapping(usize),
    /// Bound to CPUs the treated workload does not run on.
    Apart,
}

impl CpuSharing {
    /// For `status` and the journal.
    pub(super) fn describe(self) -> String {
        match self {
            CpuSharing::Same => "on the same CPUs".into(),
            CpuSharing::Overlapping(n) => format!("sharing {n} of its CPUs"),
            CpuSharing::Apart => {
                "on other CPUs (whose speeds may wander apart: the trial may need longer)".into()
            }
        }
    }
}

/// The CPUs `w` may run on: its members' masks together, all of `online` where a mask is not
/// known.
fn allowed(w: &Workload, online: &CpuSet) -> CpuSet {
    w.members.iter().fold(CpuSet::new(), |acc, m| {
        acc.union(m.cpus_allowed.as_ref().unwrap_or(online))
    })
}

/// How much two sets of CPUs share: the shared over either's (Jaccard), 0 for two empty sets.
fn overlap(a: &CpuSet, b: &CpuSet) -> f64 {
    let either = a.union(b).len();
    match either {
        0 => 0.0,
        n => a.intersection(b).len() as f64 / n as f64,
    }
}

/// `siblings` in the order to try them as `w`'s control, with where each runs beside it: first
/// those sharing most of the CPUs `w` may run on, then most of those its threads last ran on
/// (overlaps as shared over either's); siblings alike in both keep their order.
pub(super) fn by_closeness<'a>(
    w: &Workload,
    siblings: impl IntoIterator<Item = &'a Workload>,
    online: &CpuSet,
) -> Vec<(&'a Workload, CpuSharing)> {
    let (mine, used) = (allowed(w, online), w.cpus_used());
    let mut ranked: Vec<_> = siblings
        .into_iter()
        .map(|s| {
            let theirs = allowed(s, online);
            let shared = mine.intersection(&theirs).len();
            let sharing = if mine == theirs {
                CpuSharing::Same
            } else if shared > 0 {
                CpuSharing::Overlapping(shared)
            } else {
                CpuSharing::Apart
            };
            let rank = (overlap(&mine, &theirs), overlap(&used, &s.cpus_used()));
            (s, sharing, rank)
        })
        .collect();
    ranked.sort_by(|x, y| y.2.partial_cmp(&x.2).unwrap_or(std::cmp::Ordering::Equal));
    ranked
        .into_iter()
        .map(|(s, sharing, _)| (s, sharing))
        .collect()
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

/// The scans a trial waits for a sibling's signal to become steady before it goes on without a
/// control: twice the gate's readings and one more.
const SIBLING_WAIT_SCANS: u64 = 2 * super::steady::STEADY_READINGS as u64 + 1;

/// Why `s`, another instance of `w`'s program under the same user, cannot stand as a control
/// for a trial judged by `signal` (`theirs`: `s`'s signal): a signal of another kind or
/// direction. (How busy each is does not matter once both pass the steady gate: the ratio
/// cancels what moves both, and one scan's CPU on a busy machine says little.) `None` when it
/// can.
pub(super) fn unlike(signal: &SignalKind, theirs: &SignalKind) -> Option<String> {
    (!(signal.source() == theirs.source()
        && signal.higher_is_better() == theirs.higher_is_better()
        && same_kind(signal, theirs)))
    .then(|| format!("its signal is another kind ({})", theirs.describe()))
}

/// What the search for a control found.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Sibling {
    /// This one: its windows start afresh with the treated workload's.
    Found(Control),
    /// One whose signal is not steady yet: the trial waits a scan for it (its name).
    Wait(String),
    /// None; the other instances of the program, each with why it cannot be the control.
    None(Vec<String>),
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
    /// A sibling of `w` to judge a trial of `kind` against (another instance of the same
    /// program under the same user, eligible, steady and free; the one sharing most of `w`'s
    /// CPUs first), a sibling worth waiting a scan for, or why there is none. A found control's windows and `w`'s start afresh this scan, so
    /// that they are cut over the same spans from here on.
    pub(super) fn sibling(
        &mut self,
        w: &Workload,
        kind: StrategyKind,
        signal: &SignalKind,
        workloads: &[Workload],
        rates: &Rates,
    ) -> Sibling {
        let actions = &self.actions;
        let mut why_not = Vec::new();
        let instances = by_closeness(
            w,
            workloads
                .iter()
                .filter(|s| s.signature != w.signature && s.comm == w.comm && s.uid == w.uid),
            &self.topo.online,
        )
        .into_iter()
        .map(|(s, cpus)| (s, cpus, actions.taken(&s.signature, kind)))
        .collect::<Vec<_>>();
        let name = |s: &Workload| {
            format!(
                "{} (pid {})",
                s.name,
                s.pids().first().copied().unwrap_or(0)
            )
        };
        for (s, cpus, busy) in instances {
            if busy {
                why_not.push(format!(
                    "{}: in a trial, or holding {kind} that could still be undone",
                    name(s)
                ));
                continue;
            }
            if let Some(why) = self.policy.left_alone(&self.topo, s, None) {
                why_not.push(format!("{}: {why}", name(s)));
                continue;
            }
            let theirs = match self.signal_of(s, rates) {
                Ok(t) => t,
                Err(why) => {
                    why_not.push(format!("{}: {why}", name(s)));
                    continue;
                }
            };
            if let Some(why) = unlike(signal, &theirs) {
                why_not.push(format!("{}: {why}", name(s)));
                continue;
            }
            if let Err(why) = self.steady_signal(s, &theirs, rates) {
                if self.steady.waited_for_sibling(&w.signature) <= SIBLING_WAIT_SCANS {
                    return Sibling::Wait(name(s));
                }
                why_not.push(format!("{}: {why}", name(s)));
                continue;
            }
            self.steady.take(&s.signature);
            self.watch.signals.restart_windows(&w.signature);
            self.watch.signals.restart_windows(&s.signature);
            return Sibling::Found(Control {
                signature: s.signature.clone(),
                name: name(s),
                members: s.members.iter().map(|m| (m.pid, m.starttime)).collect(),
                signal: theirs,
                cpus,
            });
        }
        Sibling::None(why_not)
    }
}

#[cfg(test)]
mod tests {
    use perfpilot_observe::CpuSet;
    use perfpilot_observe::workload::Workload;

    use super::{CpuSharing, by_closeness};

    /// An instance named `name` bound to `mask` (unbound: `None`), its thread last on `last`.
    fn instance(name: &str, mask: Option<&str>, last: u32) -> Workload {
        let mut w = crate::strategy::testing::workload(&[(last, 0.5)]);
        w.name = name.into();
        w.signature = name.into();
        w.members[0].cpus_allowed = mask.map(|m| CpuSet::parse(m).expect("a CPU list"));
        w
    }

    /// The names of `siblings` in the order `by_closeness` tries them, with where each runs.
    fn ranked(treated: &Workload, siblings: &[&Workload]) -> Vec<(String, CpuSharing)> {
        let online = CpuSet::parse("0-3").expect("a CPU list");
        by_closeness(treated, siblings.iter().copied(), &online)
            .into_iter()
            .map(|(w, c)| (w.name.clone(), c))
            .collect()
    }

    #[test]
    fn a_sibling_bound_to_the_treated_workloads_cpus_is_tried_first_and_one_on_other_cpus_last() {
        let treated = instance("treated", Some("1-3"), 2);
        let apart = instance("apart", Some("0"), 0);
        let unbound = instance("unbound", None, 1);
        let same = instance("same", Some("1-3"), 3);
        let half = instance("half", Some("3"), 3);
        assert_eq!(
            ranked(&treated, &[&apart, &unbound, &same, &half]),
            vec![
                ("same".to_string(), CpuSharing::Same),
                ("unbound".to_string(), CpuSharing::Overlapping(3)),
                ("half".to_string(), CpuSharing::Overlapping(1)),
                ("apart".to_string(), CpuSharing::Apart),
            ]
        );
    }

    #[test]
    fn unbound_siblings_are_on_the_same_cpus_and_ranked_by_where_their_threads_last_ran() {
        let treated = instance("treated", None, 1);
        let elsewhere = instance("elsewhere", None, 3);
        let beside = instance("beside", None, 1);
        assert_eq!(
            ranked(&treated, &[&elsewhere, &beside]),
            vec![
                ("beside".to_string(), CpuSharing::Same),
                ("elsewhere".to_string(), CpuSharing::Same),
            ]
        );
        assert_eq!(CpuSharing::Same.describe(), "on the same CPUs");
    }
}
