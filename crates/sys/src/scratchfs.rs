//! A scratch file system on a loop device, made and removed by a study: a sparse backing file,
//! `losetup` (direct I/O on, so reads reach the backing device rather than the host's page
//! cache), `mkfs.TYPE` with the level's options, `mount`. Removing it is idempotent (unmount if
//! mounted, detach every loop device on the backing file, delete the file), so an undo record
//! in a journal can be replayed after a crash at any step.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// What to make.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScratchSpec {
    /// The backing file (created; must not exist).
    pub backing: PathBuf,
    /// Its size in bytes (sparse).
    pub size_bytes: u64,
    /// The file-system type (`ext4`, `xfs`): `mkfs.TYPE` makes it.
    pub fstype: String,
    /// Options for `mkfs.TYPE` (block size, inode count, …), as words.
    pub mkfs_options: Vec<String>,
    /// Where it is mounted (created when missing; must not be a mount point already).
    pub mount: PathBuf,
    /// Options for `mount -o` (empty: none).
    pub mount_options: String,
}

/// Why a file-system type cannot be made on this machine (`None`: it can): the tools
/// missing, no loop-device support, or not root.
pub fn unavailable(fstype: &str) -> Option<String> {
    let mkfs = format!("mkfs.{fstype}");
    let package = match fstype {
        "xfs" => "xfsprogs",
        "ext2" | "ext3" | "ext4" => "e2fsprogs",
        "btrfs" => "btrfs-progs",
        _ => "the package that provides it",
    };
    if !on_path(&mkfs) {
        return Some(format!("{mkfs} is not installed (apt install {package})"));
    }
    for tool in ["losetup", "mount", "umount"] {
        if !on_path(tool) {
            return Some(format!(
                "{tool} is not installed (apt install util-linux mount)"
            ));
        }
    }
    if !Path::new("/dev/loop-control").exists() {
        return Some("this machine has no loop devices (/dev/loop-control is missing: modprobe loop, or run outside a container)".into());
    }
    if !crate::user::is_root() {
        return Some("making a loop device and mounting it needs root".into());
    }
    None
}

fn on_path(program: &str) -> bool {
    ["/usr/sbin", "/sbin", "/usr/bin", "/bin"]
        .iter()
        .map(PathBuf::from)
        .chain(
            std::env::var_os("PATH")
                .iter()
                .flat_map(std::env::split_paths),
        )
        .any(|d| d.join(program).is_file())
}

fn command_error(call: &'static str, target: String, detail: String) -> Error {
    Error::Syscall {
        call,
        target,
        source: std::io::Error::other(detail),
    }
}

/// Runs `argv`; its stdout on success, an error with its stderr otherwise.
fn run(call: &'static str, argv: &[&str], target: &str) -> Result<String> {
    let out = Command::new(argv[0])
        .args(&argv[1..])
        .output()
        .map_err(|e| {
            command_error(
                call,
                target.to_string(),
                format!("cannot run {}: {e}", argv[0]),
            )
        })?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(command_error(
            call,
            target.to_string(),
            format!(
                "`{}` exited with {}: {}",
                argv.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        ))
    }
}

/// Whether `path` is a mount point (listed in `/proc/self/mounts`).
pub fn is_mounted(path: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string("/proc/self/mounts") else {
        return false;
    };
    let want = path.to_string_lossy();
    text.lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        // /proc/mounts escapes blanks as \040.
        .any(|m| m.replace("\\040", " ") == want)
}

/// Checks that `spec` can be made without touching anything of someone else's: the backing
/// file does not exist and the mount point is not mounted.
pub fn check(spec: &ScratchSpec) -> Result<()> {
    if spec.backing.exists() {
        return Err(command_error(
            "scratch file system",
            spec.backing.display().to_string(),
            "the backing file exists already: remove it or choose another storage.backing".into(),
        ));
    }
    if is_mounted(&spec.mount) {
        return Err(command_error(
            "scratch file system",
            spec.mount.display().to_string(),
            "something is mounted there already: unmount it or choose another storage.mount".into(),
        ));
    }
    if let Some(why) = unavailable(&spec.fstype) {
        return Err(command_error(
            "scratch file system",
            spec.fstype.clone(),
            why,
        ));
    }
    Ok(())
}

/// Makes the file system: backing file, loop device, mkfs, mount. Returns the loop device's
/// name (`loop3`). After an error, [`remove`] cleans up whatever was made.
pub fn create(spec: &ScratchSpec) -> Result<String> {
    let backing = spec.backing.display().to_string();
    if let Some(dir) = spec.backing.parent() {
        std::fs::create_dir_all(dir).map_err(|source| Error::Io {
            path: dir.to_path_buf(),
            source,
        })?;
    }
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&spec.backing)
        .map_err(|source| Error::Io {
            path: spec.backing.clone(),
            source,
        })?;
    f.set_len(spec.size_bytes).map_err(|source| Error::Io {
        path: spec.backing.clone(),
        source,
    })?;
    drop(f);
    let dev = run(
        "losetup",
        &["losetup", "--find", "--show", "--direct-io=on", &backing],
        &backing,
    )?;
    let mut mkfs: Vec<&str> = vec![];
    let prog = format!("mkfs.{}", spec.fstype);
    mkfs.push(&prog);
    // Quiet, and no question about the (fresh) device.
    match spec.fstype.as_str() {
        "xfs" | "btrfs" => mkfs.extend(["-q", "-f"]),
        "ext2" | "ext3" | "ext4" => mkfs.extend(["-q", "-F"]),
        _ => {}
    }
    mkfs.extend(spec.mkfs_options.iter().map(String::as_str));
    mkfs.push(&dev);
    run("mkfs", &mkfs, &dev)?;
    std::fs::create_dir_all(&spec.mount).map_err(|source| Error::Io {
        path: spec.mount.clone(),
        source,
    })?;
    let mount = spec.mount.display().to_string();
    let mut argv = vec!["mount", "-t", spec.fstype.as_str()];
    if !spec.mount_options.is_empty() {
        argv.extend(["-o", spec.mount_options.as_str()]);
    }
    argv.extend([dev.as_str(), mount.as_str()]);
    run("mount", &argv, &mount)?;
    Ok(dev.trim_start_matches("/dev/").to_string())
}

/// Removes what [`create`] made: unmounts `mount` (if mounted), detaches every loop device
/// backed by `backing`, deletes `backing`. Safe to repeat; returns what it did.
pub fn remove(backing: &Path, mount: &Path) -> Result<String> {
    let mut did = Vec::new();
    if is_mounted(mount) {
        let m = mount.display().to_string();
        run("umount", &["umount", &m], &m)?;
        did.push(format!("unmounted {m}"));
        let _ = std::fs::remove_dir(mount);
    }
    if backing.exists() {
        let b = backing.display().to_string();
        let listed = run(
            "losetup",
            &["losetup", "--noheadings", "--output", "NAME", "-j", &b],
            &b,
        )?;
        for dev in listed.lines().map(str::trim).filter(|l| !l.is_empty()) {
            run("losetup", &["losetup", "-d", dev], dev)?;
            did.push(format!("detached {dev}"));
        }
        std::fs::remove_file(backing).map_err(|source| Error::Io {
            path: backing.to_path_buf(),
            source,
        })?;
        did.push(format!("removed {b}"));
    }
    if did.is_empty() {
        did.push(format!("nothing left of {}", backing.display()));
    }
    Ok(did.join(", "))
}
