//! Where this process may create CPU groups of its own, by the kernel's delegation rules:
//!
//! - cgroup v1 (and the v1 `cpu` controller of a hybrid machine): under the `cpu` and `cpuacct`
//!   hierarchy roots, where they are writable (root, outside a container with a read-only
//!   cgroup mount).
//! - cgroup v2: in a subtree delegated to this process (a systemd unit or transient scope with
//!   `Delegate=yes`, marked by its `trusted.delegate` or `user.delegate` attribute, or a
//!   directory this user owns); else under the root, where this process may write there. A
//!   delegated group that holds this process cannot hand controllers to children while it
//!   holds processes (the "no internal processes" rule), so this process first moves itself
//!   into a leaf `perfpilot-self` of it, and then enables `cpu` for the group's children.
//!
//! Anywhere else the answer is an error that names the path and the fix.

use std::ffi::CString;
use std::path::Path;

use super::{Dir, Hierarchies, Layout, Membership, Version};
use crate::{Error, Fs, Result};

/// The leaf this process moves itself into inside a delegated v2 group.
pub const SELF_LEAF: &str = "perfpilot-self";

/// Where new CPU groups go: the parent in the `cpu` hierarchy, and in the `cpuacct` one (the
/// same group on v2 and where the two are co-mounted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parent {
    /// The parent in the hierarchy holding the `cpu` controller.
    pub cpu: Dir,
    /// The parent in the hierarchy holding `cpuacct` (v1), or the same as `cpu`.
    pub acct: Dir,
    /// Whether that parent offers the `cpu` controller to its children (a quota can be set).
    pub quota: bool,
    /// Whether finding it enabled the `cpu` controller there (v2): to be given back when the
    /// groups are gone.
    pub enabled_cpu: bool,
}

/// The fix said with every refusal.
const FIX_V2: &str = "run it as root on the host, or inside a delegated scope: `systemd-run --scope -p Delegate=yes perfpilot …` (as a user: `systemd-run --user --scope -p Delegate=yes perfpilot …`); in a container, give it a private cgroup namespace with a writable cgroup2 mount (`docker run --cgroupns=private --privileged`, `podman run --systemd=always`)";
const FIX_V1: &str = "run it as root on the host; in a container, mount the cgroup hierarchies read-write (`docker run --privileged`) or run it outside the container";

fn refused(path: &Path, why: &str, fix: &str) -> Error {
    Error::Io {
        path: path.to_path_buf(),
        source: std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!("{why}; to create CPU groups, {fix}"),
        ),
    }
}

/// Whether this process (its effective ids) may write the file or create entries in the
/// directory (`faccessat(W_OK, AT_EACCESS)`: permission bits, ownership and read-only mounts
/// alike).
pub fn writable(path: &Path) -> bool {
    let Ok(c) = CString::new(path.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: c is a valid NUL-terminated path; faccessat only reads it.
    unsafe { libc::faccessat(libc::AT_FDCWD, c.as_ptr(), libc::W_OK, libc::AT_EACCESS) == 0 }
}

/// Whether a v2 group is marked delegated by systemd (`trusted.delegate` for system units,
/// `user.delegate` for a user manager's), and so belongs to the process it holds.
fn marked_delegated(path: &Path) -> bool {
    let Ok(c) = CString::new(path.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    ["trusted.delegate", "user.delegate"].iter().any(|name| {
        let Ok(n) = CString::new(*name) else {
            return false;
        };
        let mut buf = [0u8; 8];
        // SAFETY: valid NUL-terminated strings; buf is writable for its length.
        let r =
            unsafe { libc::getxattr(c.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        r > 0 && buf[0] == b'1'
    })
}

/// The controllers a v2 group offers its children (`cgroup.subtree_control`).
fn subtree(fs: &Fs, d: &Dir) -> Vec<String> {
    fs.read_opt(&d.file("cgroup.subtree_control"))
        .ok()
        .flatten()
        .map(|t| t.split_ascii_whitespace().map(str::to_string).collect())
        .unwrap_or_default()
}

/// The controllers available to a v2 group (`cgroup.controllers`).
fn available(fs: &Fs, d: &Dir) -> Vec<String> {
    fs.read_opt(&d.file("cgroup.controllers"))
        .ok()
        .flatten()
        .map(|t| t.split_ascii_whitespace().map(str::to_string).collect())
        .unwrap_or_default()
}

/// Finds (and on v2 prepares: moving this process into its leaf, enabling `cpu` for the
/// children) the parent of this process's new CPU groups. `me` is this process's
/// membership (`/proc/self/cgroup`).
pub fn parent(fs: &Fs, me: &Membership) -> Result<Parent> {
    let h = Hierarchies::detect(fs);
    match h.home("cpu") {
        Some((Version::V1, _)) => parent_v1(fs, &h),
        Some((Version::V2, root)) => parent_v2(fs, me, root),
        None => {
            let root = fs.path("sys/fs/cgroup");
            let why = match h.layout() {
                Layout::None => "no cgroup file system is mounted at /sys/fs/cgroup".to_string(),
                l => format!("this machine mounts {l} but no hierarchy offers the cpu controller"),
            };
            Err(refused(
                &root,
                &why,
                "mount one (`mount -t cgroup2 none /sys/fs/cgroup`) or enable the cpu controller",
            ))
        }
    }
}

fn parent_v1(fs: &Fs, h: &Hierarchies) -> Result<Parent> {
    let cpu_root = h.v1.get("cpu").cloned().unwrap_or_default();
    let Some(acct_root) = h.v1.get("cpuacct").cloned() else {
        return Err(refused(
            &fs.path("sys/fs/cgroup/cpuacct"),
            "the cgroup v1 cpuacct controller is not mounted",
            FIX_V1,
        ));
    };
    for root in [&cpu_root, &acct_root] {
        if !writable(&fs.path(root)) {
            return Err(refused(
                &fs.path(root),
                "this process may not create groups in this cgroup v1 hierarchy (read-only or not owned)",
                FIX_V1,
            ));
        }
    }
    let cpu = Dir::new(Version::V1, &cpu_root, "/");
    let quota = fs.path(&cpu.file("cpu.cfs_quota_us")).exists();
    Ok(Parent {
        acct: Dir::new(Version::V1, &acct_root, "/"),
        cpu,
        quota,
        enabled_cpu: false,
    })
}

fn parent_v2(fs: &Fs, me: &Membership, root: &str) -> Result<Parent> {
    let own = me
        .unified
        .as_deref()
        .map(|p| Dir::new(Version::V2, root, p))
        .unwrap_or_else(|| Dir::new(Version::V2, root, "/"));
    // Already moved into our leaf by an earlier group: its parent is ours.
    let own = match own.path.rsplit('/').next() {
        Some(SELF_LEAF) => own.parent().unwrap_or(own),
        _ => own,
    };
    let root_dir = Dir::new(Version::V2, root, "/");
    let delegated = !own.is_root()
        && (marked_delegated(&fs.path(&own.rel()))
            || (writable(&fs.path(&own.rel()))
                && writable(&fs.path(&own.file("cgroup.procs")))
                && writable(&fs.path(&own.file("cgroup.subtree_control")))
                && !writable(&fs.path(&root_dir.file("cgroup.subtree_control")))));
    let parent = if delegated {
        own
    } else if writable(&fs.path(root))
        && writable(&fs.path(&root_dir.file("cgroup.subtree_control")))
    {
        root_dir
    } else {
        let at = if own.is_root() { root_dir } else { own };
        return Err(refused(
            &fs.path(&at.rel()),
            "cgroup v2: this process may not create groups here (not root, not a delegated subtree, or a read-only mount)",
            FIX_V2,
        ));
    };
    let (quota, enabled_cpu) = enable_cpu(fs, &parent, me)?;
    Ok(Parent {
        acct: parent.clone(),
        cpu: parent,
        quota,
        enabled_cpu,
    })
}

/// Makes `cpu` available to `parent`'s children: on a non-root group that holds this process,
/// first moves this process into the leaf [`SELF_LEAF`]. Whether a quota can be set, and
/// whether this call enabled the controller.
fn enable_cpu(fs: &Fs, parent: &Dir, me: &Membership) -> Result<(bool, bool)> {
    if subtree(fs, parent).iter().any(|c| c == "cpu") {
        return Ok((true, false));
    }
    if !available(fs, parent).iter().any(|c| c == "cpu") {
        // Accounting (`cpu.stat`'s usage) still works without the controller.
        return Ok((false, false));
    }
    let holds_me = me
        .unified
        .as_deref()
        .map(|p| Dir::new(Version::V2, &parent.root, p).path)
        == Some(parent.path.clone());
    if !parent.is_root() && holds_me {
        let leaf = parent.child(SELF_LEAF);
        let dir = fs.path(&leaf.rel());
        match std::fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(source) => return Err(Error::Io { path: dir, source }),
        }
        let procs = fs.path(&leaf.file("cgroup.procs"));
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::getpid() };
        std::fs::write(&procs, pid.to_string()).map_err(|source| Error::Io {
            path: procs,
            source,
        })?;
    }
    let ctl = fs.path(&parent.file("cgroup.subtree_control"));
    match std::fs::write(&ctl, "+cpu") {
        Ok(()) => Ok((true, true)),
        Err(source) => Err(refused(
            &ctl,
            &format!(
                "cannot enable the cpu controller for the groups' parent ({source}; EBUSY: the group holds other processes, which the kernel forbids once it hands controllers down)"
            ),
            FIX_V2,
        )),
    }
}
