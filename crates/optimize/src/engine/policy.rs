//! Who the engine may touch and who is eligible: a workload the config excludes (or does not
//! match under `only_matched`) or with `PERFPILOT=off` in a member's environment is left alone;
//! a knob someone else set (`manual`: an affinity narrower than the cgroup's cpuset, a memory
//! policy, huge pages refused or the server's own) leaves alone the strategies it concerns, and
//! the whole workload only when it leaves every enabled strategy; one too young or too idle is
//! not eligible yet; a strategy backed off for a workload is not tried on it until the
//! back-off ends.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use perfpilot_observe::Topology;
use perfpilot_observe::workload::Workload;
use perfpilot_store::Store;
use perfpilot_sys::cgroup::Membership;
use perfpilot_sys::cgroup::container::{self, Container};
use perfpilot_sys::cgroup::read::Cpusets;
use perfpilot_sys::process::ProcReader;
use perfpilot_sys::{CpuSet, Fs};

use super::enforce::mask_of;
use super::manual::{self, Knob, ManualSetting, World};
use crate::config::{DaemonConfig, Identity, Rule, RuleAction};
use crate::strategy::StrategyKind;

/// How long what was read from a process's `numa_maps`, `smaps`, `status` and cgroup stands
/// before it is read again (a policy set or a group changed later is seen within this).
const REREAD: Duration = Duration::from_secs(60);
/// Entries of the per-process caches past which the stale ones are dropped.
const CACHE_MAX: usize = 4096;

/// Where a process runs: its cgroup path and the container that path names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Placement {
    /// Its cgroup path (`/proc/PID/cgroup`).
    pub(super) cgroup: Option<String>,
    /// The container and pod, where the path names one.
    pub(super) container: Option<Container>,
}

/// What manual tuning a workload has: its world and the knobs set by someone else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Manual {
    /// The CPUs and nodes its cgroups allow.
    pub(super) world: World,
    /// The knobs found set, one entry per knob.
    pub(super) settings: Vec<ManualSetting>,
}

impl Manual {
    /// The setting that leaves `kind` alone, if one does.
    pub(super) fn blocking(&self, kind: StrategyKind) -> Option<&ManualSetting> {
        self.settings.iter().find(|s| s.blocks.contains(&kind))
    }
}

/// The engine's memory of who may be touched.
pub(super) struct Policy {
    fs: Fs,
    reader: ProcReader,
    pub(super) config: DaemonConfig,
    /// `PERFPILOT=off` per process (pid, start time): read once per process.
    opted_out: HashMap<(i32, u64), bool>,
    /// (executable, cgroup) per process (pid, start time): read once per process.
    identity: HashMap<(i32, u64), (Option<String>, Option<String>)>,
    /// Workloads whose mask changed behind perfpilot's back (their affinity is manual), with
    /// why.
    pub(super) manual: HashMap<String, String>,
    /// The workload strategies the tunables switch on (the engine sets it at each reload).
    pub(super) enabled: Vec<StrategyKind>,
    /// The age (s) from which a workload's members' slow evidence is read: `min_age_s`, set by
    /// the engine at each reload (0 until then). No strategy acts on a younger workload, and
    /// reading `numa_maps` and `smaps` (page-table walks) of every process of a server as it
    /// starts was most of the daemon's own CPU in its first minute (docs/reliability.md).
    pub(super) slow_evidence_after_s: f64,
    /// The slow evidence of each process (pid, start time), with when it was read.
    settings: HashMap<(i32, u64), (Instant, Vec<ManualSetting>)>,
    /// Where each process runs, with when it was read.
    placements: HashMap<(i32, u64), (Instant, Placement)>,
    /// Each process's cgroups (`/proc/PID/cgroup`), with when they were read: a process rarely
    /// moves, and reading them for every member of every workload each scan was most of the
    /// daemon's opens once the groups were read once a scan (docs/reliability.md).
    memberships: HashMap<(i32, u64), (Instant, Membership)>,
    /// The cgroup cpusets read in this scan: a workload's world is asked for several times a
    /// scan, and a server's members share their groups.
    cpusets: Cpusets,
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
            enabled: vec![
                StrategyKind::CacheAffinity,
                StrategyKind::MemoryAffinity,
                StrategyKind::LargePages,
            ],
            slow_evidence_after_s: 0.0,
            settings: HashMap::new(),
            placements: HashMap::new(),
            memberships: HashMap::new(),
            cpusets: Cpusets::new(fs),
        }
    }

    /// Starts a scan: the groups' cpusets are read afresh (a group changed since the last scan
    /// is seen in this one; a process moved to another group, within [`REREAD`]).
    pub(super) fn new_scan(&mut self) {
        self.cpusets = Cpusets::new(&self.fs);
    }

    /// The world of `w` (its cgroups' cpusets), read once a scan.
    pub(super) fn world_of(&mut self, topo: &Topology, w: &Workload) -> World {
        let sets: Vec<_> = w
            .members
            .iter()
            .map(|m| {
                let mb = self.membership(m.pid, m.starttime)?;
                self.cpusets.of_membership(&mb).ok().flatten()
            })
            .collect();
        manual::world_from(topo, sets)
    }

    /// The cgroups of process (`pid`, `starttime`), read at most once a [`REREAD`]; `None`
    /// when it is gone or unreadable (tried again next time).
    fn membership(&mut self, pid: i32, starttime: u64) -> Option<Membership> {
        let key = (pid, starttime);
        if let Some((at, m)) = self.memberships.get(&key)
            && at.elapsed() < REREAD
        {
            return Some(m.clone());
        }
        let m = Membership::of_pid(&self.fs, pid).ok()?;
        prune(&mut self.memberships);
        self.memberships.insert(key, (Instant::now(), m.clone()));
        Some(m)
    }

    /// Where a workload runs: its first member's cgroup and container (read at most once a
    /// minute per process; a process that moved is seen within that).
    pub(super) fn placement(&mut self, w: &Workload) -> Placement {
        let Some(m) = w.members.first() else {
            return Placement::default();
        };
        let key = (m.pid, m.starttime);
        if let Some((at, p)) = self.placements.get(&key)
            && at.elapsed() < REREAD
        {
            return p.clone();
        }
        let membership = self.membership(m.pid, m.starttime);
        let h = self.cpusets.hierarchies();
        let cgroup = membership.map(|mb| mb.path(h)).filter(|p| p != "/");
        let p = Placement {
            container: cgroup
                .as_deref()
                .and_then(|c| container::identify(&self.fs, c)),
            cgroup,
        };
        prune(&mut self.placements);
        self.placements.insert(key, (Instant::now(), p.clone()));
        p
    }

    /// The knobs someone else set on a workload, and its world. `ours` is the mask perfpilot
    /// bound it to, if any: that one is not manual tuning. A workload younger than
    /// [`slow_evidence_after_s`](Self::slow_evidence_after_s) shows only its affinity: its
    /// members' memory policy and huge-page settings are read once it is old enough to act on.
    pub(super) fn manual(
        &mut self,
        topo: &Topology,
        w: &Workload,
        ours: Option<&CpuSet>,
    ) -> Manual {
        let world = self.world_of(topo, w);
        let mut settings = Vec::new();
        if let Some(why) = self.manual.get(&w.signature) {
            let why = why.strip_prefix("manually tuned: ").unwrap_or(why);
            settings.push(ManualSetting::new(Knob::Affinity, why));
        } else {
            let masks: Vec<(i32, Option<CpuSet>)> = w
                .members
                .iter()
                .map(|m| (m.pid, mask_of(&self.fs, m)))
                .collect();
            settings.extend(manual::affinity(topo, &world, &masks, ours));
        }
        let members = if w.age_s >= self.slow_evidence_after_s {
            &w.members[..]
        } else {
            &[]
        };
        for m in members {
            let key = (m.pid, m.starttime);
            let found = match self.settings.get(&key) {
                Some((at, v)) if at.elapsed() < REREAD => v.clone(),
                _ => {
                    let v = manual::process_settings(&self.fs, m.pid);
                    prune(&mut self.settings);
                    self.settings.insert(key, (Instant::now(), v.clone()));
                    v
                }
            };
            for s in found {
                if !settings.iter().any(|x| x.knob == s.knob) {
                    settings.push(s);
                }
            }
        }
        Manual { world, settings }
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
        let cgroup = self.membership(pid, starttime).and_then(|m| m.unified);
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

    /// Why a workload is left alone, if it is (config, `PERFPILOT=off`, or manual tuning of
    /// every knob the enabled strategies turn). `ours` is the mask perfpilot bound it to, if
    /// any: that one is not manual tuning.
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
        // Manual tuning leaves the whole workload alone only where it leaves every enabled
        // strategy alone.
        let manual = self.manual(topo, w, ours);
        let enabled: Vec<StrategyKind> = self.enabled.clone();
        if !manual.settings.is_empty()
            && !enabled.is_empty()
            && enabled.iter().all(|k| manual.blocking(*k).is_some())
        {
            let said: Vec<&str> = manual
                .settings
                .iter()
                .map(|s| s.evidence.as_str())
                .collect();
            return Some(format!("manually tuned: {}", said.join("; ")));
        }
        None
    }
}

/// Drops the entries read longer than [`REREAD`] ago once a cache is large (processes that
/// exited leave theirs behind).
fn prune<T>(cache: &mut HashMap<(i32, u64), (Instant, T)>) {
    if cache.len() >= CACHE_MAX {
        cache.retain(|_, (at, _)| at.elapsed() < REREAD);
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
