//! `perfpilot advise`: best-practice checks of a Linux host and its processes, each finding
//! with its evidence (the values read and the file each came from), why it matters (a seed, a
//! kernel document, a vendor guide), the expected effect, the exact command that applies it,
//! and how to verify it (a generated study file, or the daemon strategy that will try it).
//!
//! Read-only and safe as any user: what cannot be read (another user's `/proc/PID/*`, a file a
//! fixture tree lacks) makes its check say so in [`Report::skipped`], never fail. Findings the
//! daemon already measured on this host (kept or reverted, in the store's journal) say so and
//! rank by the measured gain.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use perfpilot_sys::{CpuSet, Fs};

mod cgroup;
mod check;
pub mod dryrun;
pub mod finding;
mod history;
pub mod mounts;
mod procs;
mod study;

pub use dryrun::{DaemonView, ViewSource, WorkloadPlan};
pub use finding::{Evidence, Finding, Measured, Severity, Skipped, Verify};
pub use mounts::{FsFigures, MountFigures};

/// The version of the JSON shape of [`Report`] (`docs/advise.md`); raised when a field changes
/// meaning or goes away (new fields do not raise it).
pub const REPORT_VERSION: u32 = 1;

/// What to look at.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Only this process (system-wide checks still run).
    pub pid: Option<i32>,
    /// The daemon's store, for verdict history; `None`: no history.
    pub store: Option<PathBuf>,
    /// The daemon's state directory, for what it does with each workload; `None`: not shown.
    pub state_dir: Option<PathBuf>,
    /// Finding ids to leave out (`thp.low-anon-coverage`).
    pub ignore: Vec<String>,
    /// Where the figures of mounted file systems come from.
    pub mounts: MountFigures,
    /// The time between the dry run's two samples (rates need two).
    pub settle: std::time::Duration,
}

/// What `advise` found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// [`REPORT_VERSION`].
    pub version: u32,
    /// User processes looked at.
    pub processes: usize,
    /// The findings, ranked (see [`rank`]).
    pub findings: Vec<Finding>,
    /// Checks, or parts of checks, that could not run, and why.
    pub skipped: Vec<Skipped>,
    /// Findings left out by `ignore`.
    pub ignored: usize,
    /// What the daemon does with each workload (from its own status), when a state directory
    /// was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daemon: Option<DaemonView>,
}

impl Report {
    /// The most severe finding's severity, if any.
    pub fn worst(&self) -> Option<Severity> {
        self.findings.iter().map(|f| f.severity).max()
    }

    /// The exit status of `advise --check`: 0 with no warning or critical finding, 1 with
    /// warnings, 2 with a critical one.
    pub fn check_status(&self) -> i32 {
        match self.worst() {
            Some(Severity::Critical) => 2,
            Some(Severity::Warning) => 1,
            _ => 0,
        }
    }
}

/// Runs every check on `fs` and returns the ranked findings. Never fails: whatever could not
/// be read is in [`Report::skipped`].
pub fn advise(fs: &Fs, opts: &Options) -> Report {
    let mut found = check::Found::default();
    let procs = match procs::read(fs, opts.pid) {
        Ok(p) => p,
        Err(e) => {
            found.skip_err("processes", &e);
            procs::Procs::default()
        }
    };
    found.skipped.extend(procs.unreadable.iter().cloned());
    let online = fs
        .read("sys/devices/system/cpu/online")
        .ok()
        .and_then(|t| CpuSet::parse(t.trim()).ok());
    let ctx = check::Ctx {
        fs,
        procs: &procs,
        mounts: &opts.mounts,
        online,
    };
    check::thp::run(&ctx, &mut found);
    check::governor::run(&ctx, &mut found);
    check::vm::run(&ctx, &mut found);
    check::dirty::run(&ctx, &mut found);
    check::cpus::run(&ctx, &mut found);
    check::limits::run(&ctx, &mut found);
    check::numa::run(&ctx, &mut found);
    check::net::run(&ctx, &mut found);
    check::ports::run(&ctx, &mut found);
    check::pressure::run(&ctx, &mut found);
    check::jvm::run(&ctx, &mut found);
    check::postgres::run(&ctx, &mut found);
    check::malloc::run(&ctx, &mut found);
    check::block::run(&ctx, &mut found);

    let mut findings = found.findings;
    let before = findings.len();
    findings.retain(|f| !opts.ignore.contains(&f.id));
    let ignored = before - findings.len();
    if let Some(path) = &opts.store {
        match perfpilot_store::Store::open_existing(path).and_then(|s| history::read(&s)) {
            Ok(actions) => {
                for f in &mut findings {
                    f.measured = history::measured(f, &actions);
                }
            }
            Err(e) if e.is_nothing_there() => {}
            Err(e) => found.skipped.push(Skipped::new(
                "history",
                format!(
                    "could not read the daemon's verdicts from {}: {e}",
                    path.display()
                ),
            )),
        }
    }
    rank(&mut findings);
    Report {
        version: REPORT_VERSION,
        processes: procs.list.len(),
        findings,
        skipped: found.skipped,
        ignored,
        daemon: opts
            .state_dir
            .as_deref()
            .map(|d| dryrun::read(fs, d, opts.settle)),
    }
}

/// Ranks findings: critical ones first; then those the daemon measured here as a gain, the
/// largest gain first; then the rest by severity; measured losses last. Ties by id, subject.
pub fn rank(findings: &mut [Finding]) {
    fn key(f: &Finding) -> (u8, i64, u8) {
        let gain = f.measured.as_ref().and_then(|m| m.gain);
        let tier = match (f.severity, gain) {
            (Severity::Critical, _) => 0,
            (_, Some(g)) if g >= 1.0 => 1,
            (_, Some(_)) => 3,
            _ => 2,
        };
        // Larger gains first: the negated gain in thousandths.
        let g = gain.map_or(0, |g| -(g * 1000.0).round() as i64);
        (tier, g, 2 - f.severity as u8)
    }
    findings.sort_by(|a, b| {
        key(a)
            .cmp(&key(b))
            .then_with(|| a.id.cmp(&b.id))
            .then_with(|| a.subject.cmp(&b.subject))
    });
}
