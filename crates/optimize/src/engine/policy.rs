//! Who the engine may touch and who is eligible: a workload the config excludes (or does not
//! match under `only_matched`), one with `PERFPILOT=off` in a member's environment, one tuned by
//! hand (a narrower affinity or cpuset perfpilot did not set, or a mask changed behind its
//! back) is left alone; one too young or too idle is not eligible yet; a strategy backed off
//! for a workload is not tried on it until the back-off ends.

use std::collections::HashMap;

use perfpilot_observe::Topology;
use perfpilot_observe::workload::Workload;
use perfpilot_store::Store;
use perfpilot_sys::process::ProcReader;
use perfpilot_sys::{CpuSet, Fs};

use super::enforce::mask_of;
use crate::config::{DaemonConfig, Identity, Rule, RuleAction};

/// The engine's memory of who may be touched.
pub(super) struct Policy {
    fs: Fs,
    reader: ProcReader,
    pub(super) config: DaemonConfig,
    /// `PERFPILOT=off` per process (pid, start time): read once per process.
    opted_out: HashMap<(i32, u64), bool>,
    /// (executable, cgroup) per process (pid, start time): read once per process.
    identity: HashMap<(i32, u64), (Option<String>, Option<String>)>,
    /// Workloads made manual (their mask changed behind perfpilot's back), with why.
    pub(super) manual: HashMap<String, String>,
}

impl Policy {
    /// A policy over `fs` with the daemon's configuration.
    pub(super) fn new(fs: &Fs, config: DaemonConfig) -> Policy {
        Policy {
            fs: fs.clone(),
            reader: ProcReader::new(fs),
            config,
            opted_out: HashMap::new(),
            identity: HashMap::new(),
            manual: HashMap::new(),
        }
    }

    /// The executable and cgroup of a process, read once.
    fn identity_of(&mut self, pid: i32, starttime: u64) -> (Option<String>, Option<String>) {
        if let Some(v) = self.identity.get(&(pid, starttime)) {
            return v.clone();
        }
        let exe = self
            .reader
            .exe(pid)
            .ok()
            .flatten()
            .map(|p| p.to_string_lossy().into_owned());
        let cgroup = self
            .fs
            .read_opt(&format!("proc/{pid}/cgroup"))
            .ok()
            .flatten()
            .and_then(|t| {
                t.lines()
                    .find_map(|l| l.strip_prefix("0::").map(str::to_string))
            });
        self.identity
            .insert((pid, starttime), (exe.clone(), cgroup.clone()));
        (exe, cgroup)
    }

    /// The config rule matching a workload's first member (by the identity read for it by
    /// [`Policy::left_alone`]).
    pub(super) fn rule_for(&self, w: &Workload) -> Option<&Rule> {
        let m = w.members.first()?;
        let (exe, cgroup) = self
            .identity
            .get(&(m.pid, m.starttime))
            .cloned()
            .unwrap_or((None, None));
        self.config.rule_for(&Identity {
            comm: &w.comm,
            exe: exe.as_deref(),
            cmdline: &w.cmdline,
            cgroup: cgroup.as_deref(),
        })
    }

    /// Whether a process has `PERFPILOT=off` in its environment, read once.
    fn opted_out(&mut self, pid: i32, starttime: u64) -> bool {
        let key = (pid, starttime);
        if let Some(v) = self.opted_out.get(&key) {
            return *v;
        }
        let v = matches!(self.reader.environ_var(pid, "PERFPILOT"), Ok(Some(ref x)) if x == "off");
        self.opted_out.insert(key, v);
        v
    }

    /// Whether a workload is left alone by the config or by `PERFPILOT=off` (rather than
    /// because it was tuned by hand); read after [`Policy::left_alone`].
    pub(super) fn excluded(&mut self, w: &Workload) -> bool {
        match self.rule_for(w).map(|r| r.action) {
            Some(RuleAction::Exclude) => return true,
            None if self.config.only_matched => return true,
            _ => {}
        }
        w.members.iter().any(|m| self.opted_out(m.pid, m.starttime))
    }

    /// Why a workload is left alone, if it is (config, `PERFPILOT=off`, manual tuning).
    /// `ours` is the mask perfpilot bound it to, if any: that one is not manual tuning.
    pub(super) fn left_alone(
        &mut self,
        topo: &Topology,
        w: &Workload,
        ours: Option<&CpuSet>,
    ) -> Option<String> {
        for m in &w.members {
            self.identity_of(m.pid, m.starttime);
        }
        match self.rule_for(w).map(|r| r.action) {
            Some(RuleAction::Exclude) => return Some("excluded by the config".into()),
            None if self.config.only_matched => {
                return Some("not matched by the config (only_matched)".into());
            }
            _ => {}
        }
        for m in &w.members {
            if self.opted_out(m.pid, m.starttime) {
                return Some(format!(
                    "opted out (PERFPILOT=off in the environment of pid {})",
                    m.pid
                ));
            }
        }
        if let Some(why) = self.manual.get(&w.signature) {
            return Some(why.clone());
        }
        for m in &w.members {
            if let Some(mask) = &mask_of(&self.fs, m)
                && !topo.online.is_subset(mask)
                && ours != Some(mask)
            {
                return Some(format!(
                    "manually tuned: pid {} has affinity {mask} (not set by perfpilot)",
                    m.pid
                ));
            }
            if let Ok(Some(cs)) = perfpilot_sys::affinity::cpuset_of(&self.fs, m.pid)
                && !topo.online.is_subset(&cs)
            {
                return Some(format!(
                    "manually tuned: pid {} is in a cpuset of {cs}",
                    m.pid
                ));
            }
        }
        None
    }
}

/// Idle and small: a workload status does not even list (under the smaller of
/// `min_cpu_cores` and 0.05 cores, clamped to at least 0.01, and under `min_memory_mib`).
pub(super) fn unlisted(w: &Workload, min_cpu_cores: f64, min_memory_bytes: u64) -> bool {
    w.cpu_cores < min_cpu_cores.clamp(0.01, 0.05) && w.rss < min_memory_bytes
}

/// Why a workload that is not left alone is not eligible yet: younger than `min_age_s`, or
/// using less CPU than `min_cpu_cores`.
pub(super) fn ineligible(w: &Workload, min_age_s: f64, min_cpu_cores: f64) -> Option<String> {
    if w.age_s < min_age_s {
        return Some(format!(
            "too young ({:.0} s < min_age_s {min_age_s})",
            w.age_s
        ));
    }
    if w.cpu_cores < min_cpu_cores {
        return Some(format!(
            "uses {:.2} cores < min_cpu_cores {min_cpu_cores}",
            w.cpu_cores
        ));
    }
    None
}

/// The back-off of `strategy` for the workload `signature` at `now_ms`: `Some((seconds left,
/// why))` while it lasts.
pub(super) fn backed_off(
    store: &Store,
    signature: &str,
    strategy: &str,
    now_ms: i64,
) -> Result<Option<(f64, String)>, perfpilot_store::Error> {
    Ok(store
        .backoff_get(signature, strategy)?
        .filter(|(until, _)| *until > now_ms)
        .map(|(until, why)| ((until - now_ms) as f64 / 1000.0, why)))
}
