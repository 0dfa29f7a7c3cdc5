//! Control groups, v1 and v2: which hierarchies a machine mounts (v2 alone, v1 alone, or
//! both: "hybrid", v1 controllers beside an empty v2 tree at `/sys/fs/cgroup/unified`), the
//! cgroup a process is in (`/proc/PID/cgroup`), one group's files in either layout ([`read`]:
//! CPU quota, CPU use, cpusets, memory, pressure), the container and Kubernetes pod a group
//! path names ([`container`]), and where this process may create groups of its own
//! ([`place`]). Every reader is rooted at an [`Fs`], so both layouts are tested on fixture
//! trees (`tests/fixtures/cgroup-*`).
//!
//! The hierarchies are found at their standard mount points under `/sys/fs/cgroup` (every
//! distribution and container runtime mounts them there); paths from `/proc/PID/cgroup` are
//! those of the reader's cgroup namespace, as the kernel prints them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::fs::read_pid_file;
use crate::{Error, Fs, Result};

pub mod container;
pub mod place;
pub mod read;

/// The v2 mount of a unified-only machine.
const V2_ROOT: &str = "sys/fs/cgroup";
/// The v2 mount of a hybrid machine (systemd's `unified` tree).
const HYBRID_ROOT: &str = "sys/fs/cgroup/unified";

/// Which hierarchy a group's files belong to: they have different names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Version {
    /// cgroup v1: one hierarchy per controller (or per set of co-mounted controllers).
    V1,
    /// cgroup v2: one unified hierarchy.
    V2,
}

/// How the machine mounts cgroups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    /// Only the unified v2 hierarchy (Debian 12, Ubuntu 22.04+, RHEL 9, current Kubernetes
    /// nodes).
    V2,
    /// v1 controllers and a v2 tree beside them (systemd's hybrid mode; older distributions).
    Hybrid,
    /// v1 controllers only.
    V1,
    /// No cgroup file system mounted.
    None,
}

impl std::fmt::Display for Layout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Layout::V2 => "cgroup v2",
            Layout::Hybrid => "cgroup v1 + v2 (hybrid)",
            Layout::V1 => "cgroup v1",
            Layout::None => "no cgroup file system",
        })
    }
}

/// The mounted hierarchies: the v2 tree (where mounted) with the controllers it offers, and
/// each v1 controller's directory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hierarchies {
    /// The v2 tree's root, relative to the `Fs` root (`sys/fs/cgroup` or
    /// `sys/fs/cgroup/unified`).
    pub v2: Option<String>,
    /// Controllers the v2 root offers (`cgroup.controllers`).
    pub v2_controllers: Vec<String>,
    /// Each mounted v1 controller's hierarchy root (`cpu` → `sys/fs/cgroup/cpu,cpuacct`).
    pub v1: BTreeMap<String, String>,
}

/// The v1 controllers perfpilot reads or writes.
const V1_CONTROLLERS: [&str; 5] = ["cpu", "cpuacct", "cpuset", "memory", "hugetlb"];

impl Hierarchies {
    /// The hierarchies mounted under `fs`'s `/sys/fs/cgroup`.
    pub fn detect(fs: &Fs) -> Hierarchies {
        let mut h = Hierarchies::default();
        for root in [V2_ROOT, HYBRID_ROOT] {
            if let Ok(Some(text)) = fs.read_opt(&format!("{root}/cgroup.controllers")) {
                h.v2 = Some(root.to_string());
                h.v2_controllers = text.split_ascii_whitespace().map(str::to_string).collect();
                break;
            }
        }
        if h.v2.as_deref() == Some(V2_ROOT) {
            return h;
        }
        // v1: a directory per controller, or per co-mounted set (`cpu,cpuacct`, with `cpu`
        // and `cpuacct` as links to it on most distributions).
        let names = fs.list(V2_ROOT).unwrap_or_default();
        for c in V1_CONTROLLERS {
            let mut found = None;
            if looks_v1(fs, &format!("{V2_ROOT}/{c}"), c) {
                found = Some(format!("{V2_ROOT}/{c}"));
            } else if let Some(n) = names.iter().find(|n| {
                n.contains(',')
                    && n.split(',').any(|x| x == c)
                    && looks_v1(fs, &format!("{V2_ROOT}/{n}"), c)
            }) {
                found = Some(format!("{V2_ROOT}/{n}"));
            }
            if let Some(dir) = found {
                h.v1.insert(c.to_string(), dir);
            }
        }
        h
    }

    /// The layout these hierarchies make.
    pub fn layout(&self) -> Layout {
        match (self.v2.as_deref(), self.v1.is_empty()) {
            (Some(V2_ROOT), _) => Layout::V2,
            (Some(_), false) => Layout::Hybrid,
            (Some(_), true) => Layout::V2,
            (None, false) => Layout::V1,
            (None, true) => Layout::None,
        }
    }

    /// Where `controller` is attached: the v1 hierarchy that has it, else the v2 tree when its
    /// root offers it.
    pub fn home(&self, controller: &str) -> Option<(Version, &str)> {
        if let Some(d) = self.v1.get(controller) {
            return Some((Version::V1, d));
        }
        let v2 = self.v2.as_deref()?;
        // Every v2 group has `cpu.stat`'s usage and the pressure files, with or without the
        // cpu controller (which only adds `cpu.max` and the weights).
        let offered = matches!(controller, "cpu" | "cpuacct" | "pressure")
            || self.v2_controllers.iter().any(|c| c == controller);
        offered.then_some((Version::V2, v2))
    }
}

/// Whether `dir` is a v1 hierarchy holding `controller`: it has the hierarchy files
/// (`cgroup.procs`, `tasks`) or the controller's own (`cpuset.cpus`, `cpu.cfs_quota_us`).
fn looks_v1(fs: &Fs, dir: &str, controller: &str) -> bool {
    let Ok(names) = fs.list(dir) else {
        return false;
    };
    let own = format!("{controller}.");
    names
        .iter()
        .any(|n| n == "cgroup.procs" || n == "tasks" || n.starts_with(&own))
}

/// The cgroups of one process, from `/proc/PID/cgroup`: its v2 path and its path in each v1
/// hierarchy.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Membership {
    /// Its path in the v2 tree (`0::/…`).
    pub unified: Option<String>,
    /// Its path per v1 controller (`4:memory:/…`); `name=systemd` kept under that name.
    pub v1: BTreeMap<String, String>,
}

impl Membership {
    /// Parses the text of `/proc/PID/cgroup`.
    pub fn parse(text: &str) -> Membership {
        let mut m = Membership::default();
        for line in text.lines() {
            let mut it = line.splitn(3, ':');
            let (Some(id), Some(ctrls), Some(path)) = (it.next(), it.next(), it.next()) else {
                continue;
            };
            if id == "0" && ctrls.is_empty() {
                m.unified = Some(path.to_string());
            } else {
                for c in ctrls.split(',').filter(|c| !c.is_empty()) {
                    m.v1.insert(c.to_string(), path.to_string());
                }
            }
        }
        m
    }

    /// Reads `/proc/PID/cgroup`; a process that exited gives [`Error::Vanished`].
    pub fn of_pid(fs: &Fs, pid: i32) -> Result<Membership> {
        let path = fs.path(&format!("proc/{pid}/cgroup"));
        let mut buf = Vec::new();
        read_pid_file(&path, &mut buf)?;
        Ok(Membership::parse(&String::from_utf8_lossy(&buf)))
    }

    /// Reads this process's own `/proc/self/cgroup`.
    pub fn of_self(fs: &Fs) -> Result<Membership> {
        let rel = "proc/self/cgroup";
        Ok(Membership::parse(&fs.read(rel)?))
    }

    /// The path that names the process's group best: the v2 one on a v2 or hybrid machine
    /// whose v2 path is not the root, else the v1 `cpuset`, `cpu` or `memory` path, else the
    /// systemd one (`/` when it is in no group of its own).
    pub fn path(&self, h: &Hierarchies) -> String {
        let v1 = ["cpuset", "cpu", "memory", "name=systemd"]
            .iter()
            .filter_map(|c| self.v1.get(*c))
            .find(|p| *p != "/");
        match (&self.unified, h.layout()) {
            (Some(p), Layout::V2) => p.clone(),
            (Some(p), _) if p != "/" && v1.is_none() => p.clone(),
            _ => v1
                .or(self.unified.as_ref())
                .cloned()
                .unwrap_or_else(|| "/".into()),
        }
    }

    /// The process's group for `controller`: the directory holding its files (relative to the
    /// `Fs` root) and its version. `None` where the controller is not mounted or the process
    /// is not listed in its hierarchy.
    pub fn dir(&self, h: &Hierarchies, controller: &str) -> Option<Dir> {
        let (version, root) = h.home(controller)?;
        let path = match version {
            Version::V1 => self.v1.get(controller)?,
            Version::V2 => self.unified.as_ref()?,
        };
        Some(Dir::new(version, root, path))
    }
}

/// One cgroup directory in one hierarchy.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Dir {
    /// Which hierarchy.
    pub version: Version,
    /// The hierarchy's root, relative to the `Fs` root.
    pub root: String,
    /// The group's path inside the hierarchy (`/` for the root).
    pub path: String,
}

impl Dir {
    /// The group `path` (as `/proc/PID/cgroup` prints it) of the hierarchy at `root`.
    pub fn new(version: Version, root: &str, path: &str) -> Dir {
        let path = format!("/{}", path.trim().trim_matches('/'));
        Dir {
            version,
            root: root.trim_end_matches('/').to_string(),
            path,
        }
    }

    /// The directory relative to the `Fs` root.
    pub fn rel(&self) -> String {
        if self.path == "/" {
            self.root.clone()
        } else {
            format!("{}{}", self.root, self.path)
        }
    }

    /// The file `name` of this group, relative to the `Fs` root.
    pub fn file(&self, name: &str) -> String {
        format!("{}/{name}", self.rel())
    }

    /// Whether this is the hierarchy's root group.
    pub fn is_root(&self) -> bool {
        self.path == "/"
    }

    /// The parent group (`None` for the root).
    pub fn parent(&self) -> Option<Dir> {
        if self.is_root() {
            return None;
        }
        let (up, _) = self.path.rsplit_once('/')?;
        Some(Dir::new(self.version, &self.root, up))
    }

    /// The child group `name`.
    pub fn child(&self, name: &str) -> Dir {
        Dir::new(
            self.version,
            &self.root,
            &format!("{}/{name}", self.path.trim_end_matches('/')),
        )
    }

    /// This group and its ancestors, nearest first, the root last.
    pub fn ancestry(&self) -> impl Iterator<Item = Dir> {
        std::iter::successors(Some(self.clone()), Dir::parent)
    }
}

/// Errors about a group name the kernel would refuse or that would escape its parent.
pub(crate) fn check_name(name: &str) -> Result<()> {
    if name.is_empty() || name.contains('/') || name == "." || name == ".." {
        return Err(Error::parse(
            name,
            0,
            "a cgroup name must be one non-empty path component",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
