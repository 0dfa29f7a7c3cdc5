//! Mounted file systems and their figures (inodes and bytes, from `statvfs`). The mounts come
//! from `/proc/self/mounts` under the [`Fs`](perfpilot_sys::Fs); the figures are a live system
//! call, so a fixture tree supplies them instead through [`MountFigures::Given`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The figures of one mounted file system.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsFigures {
    /// Inodes in all (0: the file system allocates them on demand, as btrfs does).
    pub inodes: u64,
    /// Inodes free for unprivileged users.
    pub inodes_free: u64,
    /// Bytes in all.
    pub bytes: u64,
    /// Bytes free for unprivileged users.
    pub bytes_free: u64,
}

/// Where the figures of mounted file systems come from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum MountFigures {
    /// `statvfs` of each mount point (the live system).
    #[default]
    Live,
    /// Figures given by mount point (a fixture tree, a test); a mount without figures is
    /// skipped.
    Given(BTreeMap<String, FsFigures>),
}

/// Why a mount's figures could not be had.
#[derive(Debug, thiserror::Error)]
pub enum FiguresError {
    /// `statvfs` failed.
    #[error("statvfs({mount}) failed: {source}")]
    Statvfs {
        /// The mount point.
        mount: String,
        /// What the kernel said.
        #[source]
        source: std::io::Error,
    },
    /// No figures were given for this mount.
    #[error("no figures given for {mount} (a fixture tree has no statvfs)")]
    NotGiven {
        /// The mount point.
        mount: String,
    },
}

impl MountFigures {
    /// The figures of the file system mounted at `mount`.
    pub fn of(&self, mount: &str) -> Result<FsFigures, FiguresError> {
        match self {
            MountFigures::Live => {
                let s = rustix::fs::statvfs(mount).map_err(|e| FiguresError::Statvfs {
                    mount: mount.to_string(),
                    source: e.into(),
                })?;
                Ok(FsFigures {
                    inodes: s.f_files,
                    inodes_free: s.f_favail,
                    bytes: s.f_blocks.saturating_mul(s.f_frsize),
                    bytes_free: s.f_bavail.saturating_mul(s.f_frsize),
                })
            }
            MountFigures::Given(m) => m.get(mount).copied().ok_or_else(|| FiguresError::NotGiven {
                mount: mount.to_string(),
            }),
        }
    }
}

/// One line of `/proc/self/mounts`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mount {
    /// The device (`/dev/sda1`, `tmpfs`).
    pub device: String,
    /// Where it is mounted (octal escapes undone).
    pub point: String,
    /// The file system type.
    pub fstype: String,
}

/// File system types that hold no user files (their inode counts mean nothing).
const VIRTUAL: &[&str] = &[
    "proc",
    "sysfs",
    "devtmpfs",
    "devpts",
    "cgroup",
    "cgroup2",
    "securityfs",
    "debugfs",
    "tracefs",
    "pstore",
    "bpf",
    "mqueue",
    "hugetlbfs",
    "configfs",
    "fusectl",
    "autofs",
    "binfmt_misc",
    "efivarfs",
    "rpc_pipefs",
    "nsfs",
    "ramfs",
    "squashfs",
    "overlay",
    "iso9660",
    "selinuxfs",
    "fuse.gvfsd-fuse",
    "fuse.portal",
];

/// Parses `/proc/self/mounts`, keeping file systems that hold files (one line per mount
/// point: the last mount over a point is the visible one).
pub(crate) fn parse_mounts(text: &str) -> Vec<Mount> {
    let mut by_point: BTreeMap<String, Mount> = BTreeMap::new();
    for line in text.lines() {
        let mut it = line.split_ascii_whitespace();
        let (Some(device), Some(point), Some(fstype)) = (it.next(), it.next(), it.next()) else {
            continue;
        };
        if VIRTUAL.contains(&fstype) {
            continue;
        }
        let point = unescape(point);
        by_point.insert(
            point.clone(),
            Mount {
                device: device.to_string(),
                point,
                fstype: fstype.to_string(),
            },
        );
    }
    by_point.into_values().collect()
}

/// Undoes the octal escapes of mount points (`\040` for a space).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mounts_keep_file_systems_with_files_and_undo_escapes() {
        let text = "proc /proc proc rw 0 0\n/dev/vda1 / ext4 rw 0 0\n/dev/loop0 /mnt/a\\040b ext4 rw 0 0\ntmpfs /run tmpfs rw 0 0\n";
        let m = parse_mounts(text);
        let points: Vec<&str> = m.iter().map(|m| m.point.as_str()).collect();
        assert_eq!(points, ["/", "/mnt/a b", "/run"]);
        assert_eq!(m[1].device, "/dev/loop0");
    }

    #[test]
    fn given_figures_without_the_mount_say_so() {
        let f = MountFigures::Given(BTreeMap::new());
        let e = f.of("/srv").unwrap_err().to_string();
        assert!(e.contains("/srv"), "{e}");
    }
}
