//! Kept actions are enforced: threads started since get perfpilot's mask (journaled first), a
//! mask changed behind perfpilot's back makes the workload's affinity manual, a cgroup cpuset
//! that shrank under the binding or an exited workload ends the action; after a restart, kept
//! actions are re-adopted and abandoned trials undone.

use perfpilot_observe::workload::{Member, Workload};
use perfpilot_store::Store;
use perfpilot_store::journal::ActionState;
use perfpilot_sys::change::{self, Change, Undo};
use perfpilot_sys::failpoint::kill_point;
use perfpilot_sys::process::ProcReader;
use perfpilot_sys::{CpuSet, Fs};
use tracing::{info, warn};

use std::collections::HashMap;

use super::apply::{describe, json};
use super::watch::Window;
use super::{Engine, EngineError};
use crate::cpu::making_changes;
use crate::design::one_way::WatchStep;
use crate::journal::{self, ActionDoc};
use crate::strategy::StrategyKind;

/// A kept action that is enforced (new threads get the mask; a mask changed behind our back
/// makes the workload manual).
pub(super) struct Held {
    pub(super) id: i64,
    pub(super) signature: String,
    pub(super) strategy: StrategyKind,
    pub(super) doc: ActionDoc,
    /// The watch after a one-way keep, while it lasts.
    pub(super) watch: Option<HeldWatch>,
}

/// A kept one-way action's watch and the workload whose signal it reads.
pub(super) struct HeldWatch {
    /// The judged workload's signature.
    pub(super) judge: String,
    /// The watch.
    pub(super) watch: crate::design::Watch,
}

impl Engine {
    /// Restores the actions a previous daemon left open: trials are undone (their outcome was
    /// never decided), kept actions are re-adopted while their processes live.
    pub fn recover(&mut self) -> Result<(), EngineError> {
        for rec in self.store.actions(true, 100_000)? {
            // The knob raised at start is taken over or restored by `begin` (startup.rs).
            if rec.signature == super::startup::SIGNATURE {
                continue;
            }
            let (doc, undo) = match journal::parse(&rec) {
                Ok(x) => x,
                Err(e) => {
                    warn!("{e}; marking it failed");
                    self.store
                        .journal_set_state(rec.id, ActionState::Failed, &e.to_string())?;
                    continue;
                }
            };
            if rec.state == ActionState::Kept {
                let alive = doc
                    .members
                    .iter()
                    .any(|(pid, st)| journal::starttime(&self.fs, *pid) == Some(*st))
                    || doc.members.is_empty();
                if alive {
                    info!(action = rec.id, workload = %rec.workload, strategy = %rec.strategy, "re-adopting kept action after restart");
                    // Its note may say how the last daemon left it at exit.
                    self.store.journal_set_state(
                        rec.id,
                        ActionState::Kept,
                        "kept; re-adopted when the daemon restarted",
                    )?;
                    if let Some(strategy) = StrategyKind::parse(&rec.strategy) {
                        self.actions.held.push(Held {
                            id: rec.id,
                            signature: rec.signature.clone(),
                            strategy,
                            doc,
                            watch: None,
                        });
                    }
                } else {
                    self.store.journal_set_state(
                        rec.id,
                        ActionState::Ended,
                        "its processes exited while the daemon was down",
                    )?;
                }
                continue;
            }
            for line in journal::undo_all(&self.fs, &doc.members, &undo) {
                info!(action = rec.id, workload = %rec.workload, strategy = %rec.strategy, "recovery: {line}");
            }
            kill_point("engine.recover.undone");
            self.store.journal_set_state(
                rec.id,
                ActionState::Reverted,
                "recovered after a crash: the trial was abandoned and its changes undone",
            )?;
        }
        Ok(())
    }

    /// Kept actions: new threads get the mask, a changed mask makes the workload manual, an
    /// exited workload ends the action, a watched one-way action whose later windows show a
    /// loss ends (`obs`: this scan's windows).
    pub(super) fn enforce_held(
        &mut self,
        workloads: &[Workload],
        obs: &HashMap<String, Window>,
    ) -> Result<(), EngineError> {
        let mut drop = Vec::new();
        for i in 0..self.actions.held.len() {
            if self.watch_held(i, obs)? {
                drop.push(i);
            }
        }
        for (i, h) in self.actions.held.iter_mut().enumerate() {
            if drop.contains(&i) {
                continue;
            }
            if h.signature.starts_with("device:") {
                continue;
            }
            let Some(w) = workloads.iter().find(|w| w.signature == h.signature) else {
                info!(action = h.id, strategy = %h.strategy, "its workload exited; the action ends");
                self.store
                    .journal_set_state(h.id, ActionState::Ended, "its workload exited")?;
                drop.push(i);
                continue;
            };
            let Some(mask) = h.doc.bound_to.clone() else {
                continue;
            };
            // The cgroup's cpuset shrank under the binding: the kernel has already narrowed
            // the threads' masks to what is left; the action ends (nothing to undo, not manual).
            let world = self.policy.world_of(&self.topo, w);
            if !mask.is_subset(&world.cpus) {
                let why = format!(
                    "its cpuset is now {}{}: the binding to {mask} no longer fits; the kernel moved its threads, the action ends",
                    world.cpus,
                    world.by.map(|c| format!(" ({c})")).unwrap_or_default()
                );
                info!(action = h.id, workload = %w.name, "{why}");
                self.store
                    .journal_set_state(h.id, ActionState::Ended, &why)?;
                drop.push(i);
                continue;
            }
            if let Some((pid, now)) = changed_mask(&self.fs, w, &h.doc, &mask) {
                let why = format!(
                    "manually tuned: pid {pid} affinity changed to {now} behind perfpilot's back; left as it is"
                );
                info!(action = h.id, workload = %w.name, "{why}");
                self.policy.manual.insert(h.signature.clone(), why.clone());
                self.store
                    .journal_set_state(h.id, ActionState::Manual, &why)?;
                drop.push(i);
                continue;
            }
            // Threads not yet bound (new ones, or new member processes). The undo list lives
            // in the journal; extend it there.
            let rec = self.store.action(h.id)?;
            let mut undo: Vec<Undo> = rec
                .and_then(|r| serde_json::from_str(&r.undo).ok())
                .unwrap_or_default();
            let n = bind_new_threads(
                &mut self.store,
                &self.fs,
                h.id,
                &mut h.doc,
                &mut undo,
                w,
                &mask,
            )?;
            if n > 0 {
                info!(action = h.id, workload = %w.name, "bound {n} new threads to {mask}");
            }
        }
        drop.sort_unstable();
        drop.dedup();
        for i in drop.into_iter().rev() {
            self.actions.held.remove(i);
        }
        Ok(())
    }

    /// Feeds this scan's window to held action `i`'s watch; `true` when a look showed a loss
    /// and the action ended (undone where it can be, its strategy backed off).
    fn watch_held(&mut self, i: usize, obs: &HashMap<String, Window>) -> Result<bool, EngineError> {
        let h = &mut self.actions.held[i];
        let Some(hw) = h.watch.as_mut() else {
            return Ok(false);
        };
        let Some(Window {
            main: Ok(Some(v)), ..
        }) = obs.get(&hw.judge)
        else {
            return Ok(false);
        };
        let g = match hw.watch.record(*v) {
            WatchStep::Continue => return Ok(false),
            WatchStep::Done => {
                info!(action = h.id, strategy = %h.strategy, "the watch after its verdict is over: no loss seen");
                h.watch = None;
                return Ok(false);
            }
            WatchStep::Harm(g) => g,
        };
        let (id, strategy, signature) = (h.id, h.strategy, h.signature.clone());
        let undo: Vec<Undo> = self
            .store
            .action(id)?
            .and_then(|r| serde_json::from_str(&r.undo).ok())
            .unwrap_or_default();
        let lines = journal::undo_all(&self.fs, &h.doc.members, &undo);
        let (what, state) = if h.doc.irreversible {
            ("ended (its huge pages stay)", ActionState::Ended)
        } else {
            ("reverted", ActionState::Reverted)
        };
        let why = format!(
            "a later look showed a loss: gain {:.3} ({:.3}..{:.3}) against the baseline it was judged by; {what}",
            g.ratio, g.ci_low, g.ci_high
        );
        warn!(action = id, strategy = %strategy, "{why}; {}", lines.join("; "));
        self.store.journal_set_state(id, state, &why)?;
        self.store.backoff_set(
            &signature,
            strategy.as_str(),
            perfpilot_sys::clock::now_ms() + (self.tun.backoff_s * 1000.0) as i64,
            &why,
        )?;
        Ok(true)
    }
}

/// The affinity of a member's main thread now: asked of the kernel on the live system (a
/// sample may carry over an idle process's older reading), else the sample's.
pub(super) fn mask_of(fs: &Fs, m: &Member) -> Option<CpuSet> {
    if fs.is_live() {
        perfpilot_sys::affinity::get_affinity(m.pid).ok()
    } else {
        m.cpus_allowed.clone()
    }
}

/// A member perfpilot bound whose mask is no longer `mask`: (pid, its mask now).
pub(super) fn changed_mask(
    fs: &Fs,
    w: &Workload,
    doc: &ActionDoc,
    mask: &CpuSet,
) -> Option<(i32, CpuSet)> {
    w.members
        .iter()
        .filter(|m| doc.members.iter().any(|d| d.0 == m.pid))
        .find_map(|m| mask_of(fs, m).filter(|c| c != mask).map(|c| (m.pid, c)))
}

/// Binds the threads of `w` that action `id` has no undo record for (threads started since,
/// new member processes) to `mask`, journaling first an undo that restores each to its
/// process's original mask: a thread started while bound inherited perfpilot's mask, which is
/// not its own. Returns how many threads were bound.
pub(super) fn bind_new_threads(
    store: &mut Store,
    fs: &Fs,
    id: i64,
    doc: &mut ActionDoc,
    undo: &mut Vec<Undo>,
    w: &Workload,
    mask: &CpuSet,
) -> Result<usize, EngineError> {
    let recorded = |undo: &[Undo], pid: i32| -> Vec<(i32, CpuSet)> {
        undo.iter()
            .filter_map(|u| match u {
                Undo::Affinity { pid: p, masks } if *p == pid => Some(masks.clone()),
                _ => None,
            })
            .flatten()
            .collect()
    };
    let mut bound = 0;
    let mut reader = ProcReader::new(fs);
    for m in &w.members {
        let known = recorded(undo, m.pid);
        // The thread list now (a sample may carry an idle process's list over).
        let tids = if fs.is_live() {
            reader.tids(m.pid).unwrap_or_else(|_| m.tids.clone())
        } else {
            m.tids.clone()
        };
        let new: Vec<i32> = tids
            .into_iter()
            .filter(|t| !known.iter().any(|k| k.0 == *t))
            .collect();
        if new.is_empty() {
            continue;
        }
        let c = Change::Affinity {
            pid: m.pid,
            tids: new.clone(),
            cpus: mask.clone(),
        };
        // The original mask: the process's main thread's record, else any of its threads', else
        // another member's (a process forked by a bound member inherited the mask too).
        let original = known
            .iter()
            .find(|k| k.0 == m.pid)
            .or(known.first())
            .map(|k| k.1.clone())
            .or_else(|| {
                undo.iter().find_map(|u| match u {
                    Undo::Affinity { masks, .. } => masks.first().map(|k| k.1.clone()),
                    _ => None,
                })
            });
        let u = match original {
            Some(orig) => Undo::Affinity {
                pid: m.pid,
                masks: new.iter().map(|t| (*t, orig.clone())).collect(),
            },
            None => match making_changes(|| change::prepare(fs, &c)) {
                Ok(u) => u,
                Err(e) => {
                    warn!(action = id, "cannot prepare {}: {e}", describe(&c));
                    continue;
                }
            },
        };
        if !doc.members.iter().any(|x| x.0 == m.pid) {
            doc.members.push((m.pid, m.starttime));
        }
        doc.changes.push(c.clone());
        undo.push(u);
        store.journal_extend(id, &json(doc), &json(undo))?;
        kill_point("engine.enforce.journaled");
        match making_changes(|| change::apply(fs, &c)) {
            Ok(_) => bound += new.len(),
            Err(e) => warn!(action = id, "binding new threads: {}: {e}", describe(&c)),
        }
    }
    Ok(bound)
}
