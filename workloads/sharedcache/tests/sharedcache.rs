//! End-to-end tests of the `sharedcache` binary: it serves a rising counter on /metrics, the
//! System V mode really shares one segment between processes, bad input fails with a message
//! naming the flag, and SIGTERM leaves no segment behind. No timing assertions.

#![allow(unsafe_code)] // tests call libc directly to set up and inspect the processes they spawn

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use perfpilot_testkit::{Listening, Stream, spawn_listening};

const BIN: &str = env!("CARGO_BIN_EXE_sharedcache");

/// How long the table may take to fill before `ready`.
const READY_LIMIT: Duration = Duration::from_secs(120);

/// A running `sharedcache`, killed (SIGKILL) and reaped when dropped.
struct Running {
    run: Listening,
    addr: String,
}

impl Running {
    /// Starts the binary on port 0 and waits for `ready`, returning the printed address.
    fn start(extra: &[&str]) -> Running {
        let mut cmd = Command::new(BIN);
        cmd.args(["--listen", "127.0.0.1:0"])
            .args(extra)
            .stderr(Stdio::inherit());
        let mut run = spawn_listening(cmd, Stream::Stdout, "listening on ", READY_LIMIT);
        run.wait_line(|l| l == "ready", READY_LIMIT);
        let addr = run.addr;
        assert!(
            addr.ip().is_loopback() && addr.port() != 0,
            "address {addr}"
        );
        Running {
            run,
            addr: addr.to_string(),
        }
    }

    fn pid(&self) -> u32 {
        self.run.pid()
    }

    fn get(&self, path: &str) -> (u16, String) {
        let mut s = TcpStream::connect(&self.addr).expect("connect to /metrics");
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        write!(s, "GET {path} HTTP/1.0\r\nHost: test\r\n\r\n").unwrap();
        let mut resp = String::new();
        s.read_to_string(&mut resp).unwrap();
        let status = resp
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .expect("status code");
        let body = resp
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        (status, body)
    }

    fn metrics(&self) -> String {
        let (status, body) = self.get("/metrics");
        assert_eq!(status, 200, "{body}");
        body
    }

    fn terminate(&mut self) -> ExitStatus {
        // SAFETY: signals our own child.
        unsafe { libc::kill(self.pid() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(st) = self.run.child().try_wait().unwrap() {
                return st;
            }
            assert!(Instant::now() < deadline, "no exit within 30 s of SIGTERM");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn metric(body: &str, name: &str) -> f64 {
    body.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("no {name} in:\n{body}"))
        .trim()
        .parse()
        .unwrap()
}

/// Scrapes until the counter passes `first` (the workload may be descheduled on a busy box).
fn wait_for_more_ops(run: &Running, first: f64) -> f64 {
    for _ in 0..600 {
        std::thread::sleep(Duration::from_millis(100));
        let now = metric(&run.metrics(), "sharedcache_ops_total");
        if now > first {
            return now;
        }
    }
    panic!("sharedcache_ops_total stuck at {first}");
}

/// One row of `/proc/sysvipc/shm`, keyed by column name.
fn shm_rows() -> Vec<std::collections::HashMap<String, String>> {
    let text = std::fs::read_to_string("/proc/sysvipc/shm").expect("/proc/sysvipc/shm");
    let mut lines = text.lines();
    let header: Vec<String> = lines
        .next()
        .unwrap()
        .split_whitespace()
        .map(String::from)
        .collect();
    lines
        .map(|l| {
            header
                .iter()
                .cloned()
                .zip(l.split_whitespace().map(String::from))
                .collect()
        })
        .collect()
}

fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        // Fields after the parenthesised command: state ppid ...
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        if rest.split_whitespace().nth(1) == Some(&pid.to_string()) {
            out.push(p);
        }
    }
    out
}

fn run_failing(args: &[&str]) -> String {
    let out = Command::new(BIN)
        .args(args)
        .output()
        .expect("spawn sharedcache");
    assert!(!out.status.success(), "{args:?} should fail");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn private_table_counter_increases_on_metrics() {
    let run = Running::start(&[
        "--table-mib",
        "32",
        "--threads",
        "2",
        "--report-interval",
        "1",
    ]);
    let m = run.metrics();
    assert!(m.contains("# TYPE sharedcache_ops_total counter"), "{m}");
    assert_eq!(metric(&m, "sharedcache_table_bytes"), (32u64 << 20) as f64);
    assert_eq!(metric(&m, "sharedcache_threads"), 2.0);
    assert_eq!(metric(&m, "sharedcache_up"), 1.0);
    assert!(m.contains("sharedcache_info{mode=\"private\"} 1"), "{m}");
    let first = metric(&m, "sharedcache_ops_total");
    let second = wait_for_more_ops(&run, first);
    assert!(second > first);
    let (status, _) = run.get("/");
    assert_eq!(status, 404);
    // The table is one private anonymous mapping, not a SysV segment.
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", run.pid())).unwrap();
    assert!(!maps.contains("/SYSV"), "{maps}");
}

#[test]
fn sysv_processes_share_one_segment_and_sigterm_removes_it() {
    let mut run = Running::start(&[
        "--table-mib",
        "32",
        "--threads",
        "1",
        "--mode",
        "sysv",
        "--processes",
        "2",
    ]);
    let pid = run.pid();
    let rows = shm_rows();
    let row = rows
        .iter()
        .find(|r| r["cpid"] == pid.to_string())
        .unwrap_or_else(|| panic!("no segment created by {pid} in /proc/sysvipc/shm"));
    let shmid = row["shmid"].clone();
    assert_eq!(row["nattch"], "2", "{row:?}");
    assert_eq!(row["size"], (32u64 << 20).to_string(), "{row:?}");

    let workers = children_of(pid);
    assert_eq!(workers.len(), 1, "workers of {pid}: {workers:?}");
    for p in [pid, workers[0]] {
        let maps = std::fs::read_to_string(format!("/proc/{p}/maps")).unwrap();
        assert!(
            maps.lines().any(|l| l.contains("/SYSV")),
            "no /SYSV mapping in /proc/{p}/maps:\n{maps}"
        );
    }

    let m = run.metrics();
    assert_eq!(metric(&m, "sharedcache_processes"), 2.0);
    assert_eq!(metric(&m, "sharedcache_threads"), 2.0);
    assert_eq!(metric(&m, "sharedcache_table_bytes"), (32u64 << 20) as f64);
    let first = metric(&m, "sharedcache_ops_total");
    wait_for_more_ops(&run, first);

    let status = run.terminate();
    assert!(status.success(), "exit status {status:?}");
    assert!(
        !shm_rows().iter().any(|r| r["shmid"] == shmid),
        "segment {shmid} still listed in /proc/sysvipc/shm after SIGTERM"
    );
    assert!(
        !std::path::Path::new(&format!("/proc/{}", workers[0])).exists(),
        "worker outlived the parent"
    );
}

#[test]
fn keyed_segment_is_visible_by_key_refuses_a_duplicate_and_goes_on_exit() {
    // A key unlikely to collide with anything else on the box.
    let key = 0x5c00_0000 | (std::process::id() & 0xffff) as i32;
    let key_s = key.to_string();
    let mut run = Running::start(&[
        "--table-mib",
        "16",
        "--threads",
        "1",
        "--mode",
        "sysv",
        "--shm-key",
        &key_s,
    ]);
    let rows = shm_rows();
    let row = rows
        .iter()
        .find(|r| r["key"] == key_s)
        .expect("segment listed under its key");
    assert_eq!(row["cpid"], run.pid().to_string());

    let err = run_failing(&[
        "--listen",
        "127.0.0.1:0",
        "--table-mib",
        "16",
        "--mode",
        "sysv",
        "--shm-key",
        &key_s,
    ]);
    assert!(err.contains("--shm-key") && err.contains("ipcrm"), "{err}");

    let status = run.terminate();
    assert!(status.success(), "exit status {status:?}");
    assert!(
        !shm_rows().iter().any(|r| r["key"] == key_s),
        "keyed segment left behind"
    );
}

#[test]
fn bad_flags_fail_naming_the_flag() {
    let err = run_failing(&["--table-mib", "0"]);
    assert!(err.contains("--table-mib"), "{err}");

    let err = run_failing(&["--record-bytes", "12"]);
    assert!(err.contains("--record-bytes"), "{err}");

    let err = run_failing(&["--listen", "127.0.0.1:0", "--processes", "2"]);
    assert!(
        err.contains("--processes") && err.contains("--mode sysv"),
        "{err}"
    );

    // Port in use.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let err = run_failing(&["--listen", &addr, "--table-mib", "1"]);
    assert!(err.contains("--listen") && err.contains(&addr), "{err}");

    // A table no machine can back: 512 TiB, private and as a SysV segment.
    let err = run_failing(&["--listen", "127.0.0.1:0", "--table-mib", "536870912"]);
    assert!(err.contains("--table-mib"), "{err}");
    let err = run_failing(&[
        "--listen",
        "127.0.0.1:0",
        "--table-mib",
        "536870912",
        "--mode",
        "sysv",
    ]);
    assert!(
        err.contains("--table-mib") && err.contains("shmget"),
        "{err}"
    );
}
