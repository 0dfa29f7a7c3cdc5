//! The scratch file system on a loop device: made, mounted, its device's queue settings
//! readable, removed completely (also when mkfs fails half way), removal repeatable. Needs
//! root and loop devices; where they are missing the test says so and checks only that the
//! reason is given.

use std::path::{Path, PathBuf};
use std::process::Command;

use perfpilot_sys::scratchfs::{ScratchSpec, create, is_mounted, remove, unavailable};

/// Removes the scratch file system when the test ends, also on panic.
struct Guard {
    backing: PathBuf,
    mount: PathBuf,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Err(e) = remove(&self.backing, &self.mount) {
            eprintln!("cleanup failed: {e}");
        }
    }
}

fn loops_of(backing: &Path) -> String {
    let out = Command::new("losetup")
        .arg("-j")
        .arg(backing)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn spec(dir: &Path, fstype: &str, options: &[&str]) -> ScratchSpec {
    ScratchSpec {
        backing: dir.join("scratch.img"),
        size_bytes: 320 << 20,
        fstype: fstype.into(),
        mkfs_options: options.iter().map(|s| s.to_string()).collect(),
        mount: dir.join("mnt"),
        mount_options: String::new(),
    }
}

#[test]
fn a_scratch_file_system_is_made_mounted_and_removed_without_a_trace() {
    if let Some(why) = unavailable("ext4") {
        eprintln!("skipped: no scratch file system on this machine: {why}");
        assert!(!why.is_empty());
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for (fstype, opts) in [("ext4", vec!["-b", "1024", "-N", "4000"]), ("xfs", vec![])] {
        if let Some(why) = unavailable(fstype) {
            eprintln!("{fstype} skipped: {why}");
            continue;
        }
        let s = spec(dir.path(), fstype, &opts);
        let _guard = Guard {
            backing: s.backing.clone(),
            mount: s.mount.clone(),
        };
        let dev = create(&s).unwrap();
        assert!(dev.starts_with("loop"), "{dev}");
        assert!(is_mounted(&s.mount));
        let ra = std::fs::read_to_string(format!("/sys/block/{dev}/queue/read_ahead_kb")).unwrap();
        assert!(ra.trim().parse::<u64>().is_ok(), "{ra}");
        std::fs::write(s.mount.join("f"), b"data").unwrap();
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
        let line = mounts
            .lines()
            .find(|l| l.contains(&*s.mount.to_string_lossy()))
            .unwrap();
        assert!(line.split_whitespace().nth(2) == Some(fstype), "{line}");
        if fstype == "ext4" {
            // The inode count given as an mkfs option is the file system's.
            let st = inode_total(&s.mount);
            assert!(st < 5000, "{st} inodes");
        }
        let did = remove(&s.backing, &s.mount).unwrap();
        assert!(
            did.contains("unmounted") && did.contains("detached"),
            "{did}"
        );
        assert!(!is_mounted(&s.mount));
        assert!(!s.backing.exists());
        assert!(loops_of(&s.backing).is_empty());
        assert!(
            remove(&s.backing, &s.mount)
                .unwrap()
                .contains("nothing left")
        );
    }
}

/// Inodes of the file system at `p` (`df -i`'s total).
fn inode_total(p: &Path) -> u64 {
    let out = Command::new("df")
        .args(["--output=itotal"])
        .arg(p)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .nth(1)
        .and_then(|l| l.trim().parse().ok())
        .unwrap()
}

#[test]
fn a_failing_mkfs_names_its_error_and_leaves_nothing_after_removal() {
    if let Some(why) = unavailable("ext4") {
        eprintln!("skipped: no scratch file system on this machine: {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // More inodes than ext4 can count (mke2fs rounds a bad block size such as 3000 instead).
    let s = spec(dir.path(), "ext4", &["-N", "99999999999"]);
    let _guard = Guard {
        backing: s.backing.clone(),
        mount: s.mount.clone(),
    };
    let e = create(&s).unwrap_err().to_string();
    assert!(e.contains("mkfs.ext4") && e.contains("exited with"), "{e}");
    remove(&s.backing, &s.mount).unwrap();
    assert!(!s.backing.exists());
    assert!(loops_of(&s.backing).is_empty());
}

#[test]
fn a_missing_mkfs_is_reported_with_the_package_to_install() {
    let why = unavailable("nosuchfs").unwrap();
    assert!(why.contains("mkfs.nosuchfs is not installed"), "{why}");
}
