//! `perfpilot advise` on the live system with two planted conditions: a small loop-mounted ext4
//! file system with few inodes left, and a process whose threads far exceed its one CPU.
//! Needs root (to loop-mount); without it the test says it was skipped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

const EXE: &str = env!("CARGO_BIN_EXE_perfpilot");
/// Set in the environment of this binary re-run as the many-threaded process.
const HELPER: &str = "PERFPILOT_ADVISE_THREADS_HELPER";
const HELPER_THREADS: usize = 64;

/// A loop-mounted ext4 file system of 64 inodes, filled with empty files until two are left;
/// unmounted (and its image removed) on drop, also on panic.
struct FewInodes {
    dir: tempfile::TempDir,
    mounted: bool,
}

impl FewInodes {
    fn plant() -> FewInodes {
        let dir = tempfile::tempdir().unwrap();
        let mut me = FewInodes {
            dir,
            mounted: false,
        };
        let img = me.image();
        let mnt = me.mount_point();
        std::fs::create_dir(&mnt).unwrap();
        run("truncate", &["-s", "8M", img.to_str().unwrap()]);
        run("mkfs.ext4", &["-q", "-N", "64", img.to_str().unwrap()]);
        run(
            "mount",
            &["-o", "loop", img.to_str().unwrap(), mnt.to_str().unwrap()],
        );
        me.mounted = true;
        // Empty files until the inodes run out (ENOSPC), then two given back.
        let mut made = Vec::new();
        for i in 0..1000 {
            let p = mnt.join(format!("f{i}"));
            match std::fs::File::create(&p) {
                Ok(_) => made.push(p),
                Err(_) => break,
            }
        }
        assert!(made.len() > 10, "only {} files fit", made.len());
        for p in made.iter().rev().take(2) {
            std::fs::remove_file(p).unwrap();
        }
        me
    }

    fn image(&self) -> PathBuf {
        self.dir.path().join("fs.img")
    }

    fn mount_point(&self) -> PathBuf {
        self.dir.path().join("mnt")
    }
}

impl Drop for FewInodes {
    fn drop(&mut self) {
        if self.mounted {
            let mnt = self.mount_point();
            let ok = Command::new("umount")
                .arg(&mnt)
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                // Busy: detach it now, the kernel frees it when the last user goes.
                let _ = Command::new("umount").arg("-l").arg(&mnt).status();
            }
        }
    }
}

fn run(cmd: &str, args: &[&str]) {
    let st = Command::new(cmd).args(args).status().unwrap();
    assert!(st.success(), "{cmd} {args:?} failed: {st}");
}

/// This test binary re-run under `taskset -c 0` as a process of many sleeping threads; killed
/// on drop.
struct Threads(Child);

impl Threads {
    fn spawn() -> Threads {
        let me = std::env::current_exe().unwrap();
        let child = Command::new("taskset")
            .args(["-c", "0"])
            .arg(me)
            .args(["--exact", "many_threads_helper", "--nocapture"])
            .env(HELPER, "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let mut t = Threads(child);
        // Ready when its status shows the threads (taskset execs the binary in place).
        let status = PathBuf::from(format!("/proc/{}/status", t.0.id()));
        loop {
            if let Some(st) = t.0.try_wait().unwrap() {
                panic!("the many-threaded helper exited before it was ready: {st}");
            }
            let text = std::fs::read_to_string(&status).unwrap_or_default();
            let threads = text
                .lines()
                .find_map(|l| l.strip_prefix("Threads:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            if threads >= HELPER_THREADS {
                return t;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

impl Drop for Threads {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The many-threaded process: does nothing unless run as the helper; then its threads sleep
/// until stdin closes (the test ends or dies).
#[test]
fn many_threads_helper() {
    if std::env::var_os(HELPER).is_none() {
        return;
    }
    let _threads: Vec<_> = (0..HELPER_THREADS)
        .map(|_| std::thread::spawn(std::thread::park))
        .collect();
    let mut buf = String::new();
    let _ = std::io::stdin().read_line(&mut buf);
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

fn findings<'a>(report: &'a serde_json::Value, id: &str) -> Vec<&'a serde_json::Value> {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["id"] == id)
        .collect()
}

#[test]
fn advise_finds_a_file_system_out_of_inodes_and_a_process_with_too_many_threads() {
    if !is_root() {
        println!("skipped: loop-mounting a file system needs root");
        return;
    }
    let fs = FewInodes::plant();
    let threads = Threads::spawn();
    let pid = threads.0.id();
    let no_store = fs.dir.path().join("no-store.db");
    let out = Command::new(EXE)
        .args(["advise", "--json", "--check", "--store"])
        .arg(&no_store)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}); stderr: {stderr}"));
    // A critical finding: --check exits 2.
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");

    let mount = format!("mount {}", fs.mount_point().display());
    let inodes = findings(&report, "fs.inodes-low");
    let f = inodes
        .iter()
        .find(|f| f["subject"] == mount.as_str())
        .unwrap_or_else(|| panic!("no inode finding for {mount}: {inodes:#?}"));
    assert_eq!(f["severity"], "critical");
    assert!(
        f["verify"]["command"]
            .as_str()
            .unwrap()
            .starts_with("df -i")
    );

    let subject = format!("pid {pid} (");
    let over = findings(&report, "cpu.oversubscribed");
    let f = over
        .iter()
        .find(|f| f["subject"].as_str().unwrap().starts_with(&subject))
        .unwrap_or_else(|| panic!("no oversubscription finding for pid {pid}: {over:#?}"));
    assert!(
        f["evidence"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["what"] == "Cpus_allowed_list" && e["value"] == "0"),
        "{f:#?}"
    );
    drop(threads);
    assert!(Path::new(&fs.mount_point()).exists());
}
