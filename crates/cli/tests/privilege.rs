//! Least privilege: the daemon keeps only the capabilities it needs once started (also in its
//! bounding set), creates its state directory 0700 and its store 0600, and `revert` and
//! `tunables -o` refuse a user who is neither root nor the owner of the state directory.
//!
//! The daemon here matches nothing (`only_matched` with no workload): it changes nothing.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::{Command, Stdio};
use std::time::Duration;

mod support;
use support::{Dir, EXE, status_if_written, terminate, wait_until};

/// A capability mask line of `/proc/PID/status` (`CapEff:` …), as bits.
fn cap_line(pid: u32, key: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let hex = s
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .unwrap()
        .trim()
        .to_string();
    u64::from_str_radix(&hex, 16).unwrap()
}

fn keeps() -> u64 {
    perfpilot_optimize::privilege::DAEMON_KEEPS
        .iter()
        .map(|k| k.0.bitmask())
        .fold(0, |a, b| a | b)
}

#[test]
fn the_daemon_drops_what_it_does_not_need_and_keeps_its_state_private() {
    let me = std::process::id();
    let permitted = cap_line(me, "CapPrm:");
    if permitted & !keeps() == 0 {
        eprintln!("unsupported here: this test holds no capability the daemon would drop");
        return;
    }
    let dir = Dir::new("caps");
    // No strategy that writes a knob; and the knob it would raise at start lives in an overlay
    // (honoured by this test build), never the global one.
    let cfg = dir.config(
        "only_matched = true\n[tunables]\ninterval_s = 0.5\nlarge_pages = false\nshmem_advise_at_start = false\nread_ahead = false\n",
    );
    let overlay = dir.0.join("overlay");
    let knob = overlay.join("sys/kernel/mm/transparent_hugepage/shmem_enabled");
    std::fs::create_dir_all(knob.parent().unwrap()).unwrap();
    std::fs::write(&knob, "always within_size advise [never] deny force\n").unwrap();
    let state = dir.state();
    let d = Command::new(EXE)
        .args(["daemon", "--config"])
        .arg(&cfg)
        .arg("--state-dir")
        .arg(&state)
        .args(["--for", "60s"])
        .env("PERFPILOT_SYSFS_OVERLAY", &overlay)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = d.id();
    // status.json is written after the first scan, which comes after the drop.
    assert!(
        wait_until(Duration::from_secs(60), || state
            .join("status.json")
            .exists()
            && status_if_written(&state).is_some_and(|s| s["running"] == true)),
        "the daemon never started"
    );
    let eff = cap_line(pid, "CapEff:");
    let prm = cap_line(pid, "CapPrm:");
    let bnd = cap_line(pid, "CapBnd:");
    terminate(&d);
    let out = d.wait_with_output().unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    let want = permitted & keeps();
    assert_eq!(eff, want, "CapEff {eff:x}, want {want:x}\n{log}");
    assert_eq!(prm, want, "CapPrm {prm:x}, want {want:x}");
    if permitted & (1 << 8) != 0 {
        // With CAP_SETPCAP the bounding set is cut too: probes cannot regain the rest.
        assert_eq!(bnd & !keeps(), 0, "CapBnd {bnd:x}");
    }
    assert!(log.contains("capabilities dropped; kept"), "{log}");
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&state), 0o700, "the state directory");
    assert_eq!(mode(&state.join("perfpilot.db")), 0o600, "the store");
}

/// `perfpilot ARGS` as uid/gid 65534 (nobody), through util-linux's `setpriv`.
fn as_nobody(args: &[&str]) -> Option<std::process::Output> {
    Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", EXE])
        .args(args)
        .output()
        .ok()
}

#[test]
fn revert_and_setting_tunables_refuse_a_user_who_does_not_own_the_state() {
    if perfpilot_sys::user::euid() != 0 {
        eprintln!("unsupported here: switching to another user needs root");
        return;
    }
    let dir = Dir::new("nonroot");
    // World-searchable, so that only the ownership check can refuse.
    std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o755)).unwrap();
    let state = dir.state();
    std::fs::create_dir_all(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o755)).unwrap();
    let s = state.to_str().unwrap();
    let Some(out) = as_nobody(&["revert", "--all", "--state-dir", s]) else {
        eprintln!("unsupported here: no setpriv");
        return;
    };
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("run it as root") && err.contains("perfpilot revert"),
        "{err}"
    );
    let out = as_nobody(&["tunables", "-o", "windows=4", "--state-dir", s]).unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("run it as root") && err.contains("tunables -o"),
        "{err}"
    );
    assert!(!state.join("perfpilot.db").exists(), "a store was created");

    // A user's own state directory: allowed.
    let own = dir.0.join("own");
    std::fs::create_dir_all(&own).unwrap();
    std::os::unix::fs::chown(&own, Some(65534), Some(65534)).unwrap();
    let o = own.to_str().unwrap();
    let out = as_nobody(&["tunables", "-o", "windows=4", "--state-dir", o]).unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let db = std::fs::metadata(own.join("perfpilot.db")).unwrap();
    assert_eq!(db.uid(), 65534);
    assert_eq!(db.permissions().mode() & 0o777, 0o600);
    let out = as_nobody(&["revert", "--all", "--state-dir", o]).unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
