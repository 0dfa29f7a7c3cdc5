//! The read-ahead strategy end to end, on a loop device each test makes (ext4 on a sparse
//! backing file, `perfpilot_sys::scratchfs`): its `read_ahead_kb` set small, a reader the test
//! spawns (`perfpilot bench read`, matched by the config under `only_matched`, judged by a
//! probe of the bytes it has read), and a daemon limited to that device
//! (`read_ahead_devices`), so no other device or process of the machine is touched.
//!
//! - A sequential scan, each file's cached pages dropped before it is read, gets `read_ahead_kb`
//!   raised, measured in switchback periods (on and off in a seeded order), and kept with a gain.
//! - Random single-page reads get no action: the requests are a page each, under the
//!   read-ahead window, and random reads only ever lower read-ahead, which at 8 KiB is already
//!   under the strategy's random setting (32 KiB).
//!
//! Skipped (and saying why) without root, loop devices or mkfs.ext4. The backing file goes to
//! /dev/shm where it has room, so the reads never reach the machine's disk; the figures the
//! tests print are in docs/optimizer.md (*Read-ahead*).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use perfpilot_sys::scratchfs::{self, ScratchSpec};

mod support;
use support::{Dir, EXE, Load, status_if_written, status_json, terminate, wait_until};

/// The tests run one at a time: each one's reader and daemon would disturb the other's windows.
static SERIAL: Mutex<()> = Mutex::new(());

/// The small read-ahead the tests start from, KiB.
const SMALL_KB: u64 = 8;
/// Files the reader reads, and the size of each: small files are opened often, and a changed
/// `read_ahead_kb` applies to files opened after the change.
const FILES: usize = 16;
const FILE_MIB: usize = 4;

/// A loop device with ext4 mounted, made for one test; its `read_ahead_kb` restored, the file
/// system unmounted, the device detached and the backing file removed when dropped (also when
/// the test panics).
struct LoopFs {
    backing: PathBuf,
    mount: PathBuf,
    /// The device's name (`loop3`).
    dev: String,
    /// `read_ahead_kb` as the device had it, once the test changed it.
    ra_before: Option<String>,
}

impl LoopFs {
    /// Makes the file system and writes the reader's files; `None` (the test is skipped, and
    /// says why) where loop devices cannot be made.
    fn make(tag: &str) -> Option<LoopFs> {
        if let Some(why) = scratchfs::unavailable("ext4") {
            println!("skipped: {why}");
            return None;
        }
        let id = format!("perfpilot-readahead-{tag}-{}", std::process::id());
        let backing = backing_dir().join(format!("{id}.img"));
        let mount = std::env::temp_dir().join(format!("{id}.mnt"));
        let spec = ScratchSpec {
            backing: backing.clone(),
            size_bytes: 256 << 20,
            fstype: "ext4".into(),
            mkfs_options: vec![],
            mount: mount.clone(),
            mount_options: String::new(),
        };
        scratchfs::check(&spec).unwrap_or_else(|e| panic!("{e}"));
        // A guard before anything is made: a failure part-way is cleaned up too.
        let mut fs = LoopFs {
            backing,
            mount,
            dev: String::new(),
            ra_before: None,
        };
        fs.dev = scratchfs::create(&spec).unwrap_or_else(|e| panic!("making {spec:?}: {e}"));
        let data = fs.data();
        std::fs::create_dir(&data).unwrap();
        let block: Vec<u8> = (0..FILE_MIB << 20).map(|i| (i % 251) as u8).collect();
        for i in 0..FILES {
            std::fs::write(data.join(format!("part{i:02}.dat")), &block).unwrap();
        }
        println!(
            "{}: ext4 on {}, backing {} (direct I/O), {FILES} files of {FILE_MIB} MiB",
            fs.dev,
            fs.mount.display(),
            fs.backing.display()
        );
        Some(fs)
    }

    /// The directory of the reader's files.
    fn data(&self) -> PathBuf {
        self.mount.join("data")
    }

    fn ra_path(&self) -> PathBuf {
        PathBuf::from(format!("/sys/block/{}/queue/read_ahead_kb", self.dev))
    }

    fn read_ahead(&self) -> u64 {
        let p = self.ra_path();
        let t = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        t.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{}: {t:?}", p.display()))
    }

    fn set_read_ahead(&mut self, kb: u64) {
        let p = self.ra_path();
        if self.ra_before.is_none() {
            self.ra_before = Some(self.read_ahead().to_string());
        }
        std::fs::write(&p, kb.to_string()).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        if let Some(v) = &self.ra_before
            && let Err(e) = std::fs::write(self.ra_path(), v)
        {
            eprintln!("restoring {}: {e}", self.ra_path().display());
        }
        match scratchfs::remove(&self.backing, &self.mount) {
            Ok(did) => println!("cleanup: {did}"),
            Err(e) => eprintln!("cleanup of {}: {e}", self.backing.display()),
        }
    }
}

/// /dev/shm when it has room for the backing file (the reads then stay in memory: the test
/// does not load the machine's disk), else the temporary directory.
fn backing_dir() -> PathBuf {
    let shm = Path::new("/dev/shm");
    let avail = Command::new("df")
        .args(["-B1", "--output=avail"])
        .arg(shm)
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .nth(1)?
                .trim()
                .parse::<u64>()
                .ok()
        });
    if avail.is_some_and(|a| a >= 1 << 30) {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// A daemon whose standard error is drained while it runs (a debug log fills a pipe); stopped
/// with SIGTERM and waited for when dropped.
struct Daemon {
    child: Option<Child>,
    log: Option<JoinHandle<String>>,
}

impl Daemon {
    fn start(config: &Path, state: &Path, log_level: &str) -> Daemon {
        let mut child = Command::new(EXE)
            .args(["daemon", "--config"])
            .arg(config)
            .arg("--state-dir")
            .arg(state)
            .args(["--for", "180s", "--log", log_level])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stderr = child.stderr.take().unwrap();
        let log = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = stderr.read_to_string(&mut s);
            s
        });
        Daemon {
            child: Some(child),
            log: Some(log),
        }
    }

    /// Stops it as systemd does; its log. It must exit 0.
    fn stop(mut self) -> String {
        let mut c = self.child.take().unwrap();
        terminate(&c);
        let status = c.wait().unwrap();
        let log = self.log.take().unwrap().join().unwrap();
        assert!(status.success(), "daemon exited {status}:\n{log}");
        log
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            terminate(&c);
            let _ = c.wait();
        }
    }
}

/// The config: only the reader (matched by its progress file, which carries this test's pid),
/// judged by the bytes it has read; only `dev`; read-ahead the one strategy on; fast windows
/// (the CPU budget raised so that the daemon does not stretch them on a busy machine).
fn config(dir: &Dir, dev: &str, progress: &Path) -> PathBuf {
    let p = progress.display();
    dir.config(&format!(
        "only_matched = true\nread_ahead_devices = [\"{dev}\"]\n\n[tunables]\ninterval_s = 0.5\nwindows = 6\nmax_windows = 40\nmin_age_s = 0\nmin_cpu_cores = 0\nmin_memory_mib = 0\ncache_affinity = false\nmemory_affinity = false\nlarge_pages = false\nread_ahead = true\nread_ahead_min_mb_per_s = 1\nbackoff_s = 3600\ncpu_budget_pct = 20\n\n[[workload]]\nmatch = {{ cmdline = \"--progress {p}\" }}\nsignal = {{ command = \"cat {p}\", kind = \"counter\" }}\n"
    ))
}

fn reader(data: &Path, progress: &Path, random: bool) -> Load {
    let mut c = Command::new(EXE);
    c.args(["bench", "read", "--dir"])
        .arg(data)
        .arg("--progress")
        .arg(progress);
    if random {
        c.arg("--random");
    }
    Load::ready(c)
}

/// The reader's rate over `secs`, MB/s (from its progress file).
fn reader_mb_s(progress: &Path, secs: f64) -> f64 {
    let read = || -> f64 {
        std::fs::read_to_string(progress)
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(0.0)
    };
    let (a, t) = (read(), Instant::now());
    std::thread::sleep(Duration::from_secs_f64(secs));
    (read() - a) / t.elapsed().as_secs_f64() / 1e6
}

/// The read-ahead actions on `dev` in a status document.
fn device_actions(s: &serde_json::Value, dev: &str) -> Vec<serde_json::Value> {
    s["actions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["strategy"] == "read_ahead" && a["signature"] == format!("device:{dev}"))
        .cloned()
        .collect()
}

#[test]
fn a_sequential_scan_under_a_small_read_ahead_gets_it_raised_and_kept_with_a_gain() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(mut fs) = LoopFs::make("seq") else {
        return;
    };
    fs.set_read_ahead(SMALL_KB);
    let dir = Dir::new("readahead-seq");
    let progress = dir.0.join("seq-progress");
    let r = reader(&fs.data(), &progress, false);
    let small = reader_mb_s(&progress, 1.0);
    let cfg = config(&dir, &fs.dev, &progress);
    let d = Daemon::start(&cfg, &dir.state(), "info");
    let t0 = Instant::now();
    let decided = wait_until(Duration::from_secs(120), || {
        status_if_written(&dir.state()).is_some_and(|s| {
            device_actions(&s, &fs.dev)
                .iter()
                .any(|a| a["verdict"]["decision"].is_string())
        })
    });
    let took = t0.elapsed().as_secs_f64();
    // While kept, the raised value holds.
    let held = fs.read_ahead();
    let s = status_json(&dir.state());
    let log = d.stop();
    drop(r);
    assert!(decided, "no read-ahead verdict within 120 s:\n{log}");
    let actions = device_actions(&s, &fs.dev);
    assert_eq!(actions.len(), 1, "{actions:#?}\n{log}");
    let a = &actions[0];
    let reason = a["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("sequential")
            && reason.contains(&format!("read_ahead_kb {SMALL_KB} -> 512")),
        "{a:#}"
    );
    let v = &a["verdict"];
    assert_eq!(v["decision"], "keep", "{a:#}\n{log}");
    assert_eq!(a["state"], "kept", "{a:#}");
    assert_eq!(v["design"], "switchback", "{a:#}");
    let gain = v["gain"]["ratio"].as_f64().unwrap();
    let low = v["gain"]["ci_low"].as_f64().unwrap();
    assert!(gain > 1.0 && low > 1.0, "{a:#}");
    assert_eq!(held, 512, "read_ahead_kb while the action was kept");
    // Stopped, the daemon reverts what it kept (revert_on_stop): the small value is back.
    assert_eq!(fs.read_ahead(), SMALL_KB);
    let (before, after) = (&v["before"], &v["after"]);
    println!(
        "{}: read_ahead_kb {SMALL_KB} -> 512 kept: gain x{gain:.2} [{low:.2}, {:.2}] over {} windows of 0.5 s with the change on; reader {:.0} MB/s off (sd {:.0}), {:.0} MB/s on (sd {:.0}); {small:.0} MB/s before the daemon started; verdict {took:.1} s after the daemon started",
        fs.dev,
        v["gain"]["ci_high"].as_f64().unwrap(),
        after["n"],
        before["mean"].as_f64().unwrap() / 1e6,
        before["sd"].as_f64().unwrap() / 1e6,
        after["mean"].as_f64().unwrap() / 1e6,
        after["sd"].as_f64().unwrap() / 1e6,
    );
}

#[test]
fn random_reads_under_a_small_read_ahead_get_no_action() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(mut fs) = LoopFs::make("rnd") else {
        return;
    };
    fs.set_read_ahead(SMALL_KB);
    let dir = Dir::new("readahead-rnd");
    let progress = dir.0.join("rnd-progress");
    let r = reader(&fs.data(), &progress, true);
    let cfg = config(&dir, &fs.dev, &progress);
    let d = Daemon::start(&cfg, &dir.state(), "debug");
    // Long enough for a sequential load's trial to have started (its steady gate takes 3
    // scans, 1.5 s) several times over.
    let mb_s = reader_mb_s(&progress, 6.0);
    let s = status_json(&dir.state());
    let log = d.stop();
    drop(r);
    assert!(
        device_actions(&s, &fs.dev).is_empty(),
        "{:#?}\n{log}",
        device_actions(&s, &fs.dev)
    );
    // It looked, saw random reads above read_ahead_min_mb_per_s, and said why it left them.
    let why = log
        .lines()
        .filter(|l| l.contains("read_ahead: no action") && l.contains(&fs.dev))
        .rfind(|l| l.contains("already suits its random reads"))
        .unwrap_or_else(|| panic!("no random-read decision on {} in the log:\n{log}", fs.dev));
    assert_eq!(fs.read_ahead(), SMALL_KB);
    let why = why.split_once("no action: ").map_or(why, |(_, w)| w);
    let why = why.split_once(" device=").map_or(why, |(w, _)| w);
    println!("{}: random reads, {mb_s:.1} MB/s: no action: {why}", fs.dev);
}
