//! The checks, one family per file. Each reads through `perfpilot-sys` readers rooted at the
//! [`Fs`] it is given, and adds findings, or says what it could not read, to a [`Found`].

use perfpilot_sys::{CpuSet, Fs};

use crate::finding::{Finding, Severity, Skipped, Verify};
use crate::mounts::MountFigures;
use crate::procs::Procs;

pub(crate) mod block;
pub(crate) mod cpus;
pub(crate) mod dirty;
pub(crate) mod governor;
pub(crate) mod jvm;
pub(crate) mod limits;
pub(crate) mod malloc;
pub(crate) mod net;
pub(crate) mod numa;
pub(crate) mod ports;
pub(crate) mod postgres;
pub(crate) mod pressure;
pub(crate) mod thp;
pub(crate) mod vm;

/// What every check is given.
pub(crate) struct Ctx<'a> {
    /// The root of `/proc` and `/sys`.
    pub fs: &'a Fs,
    /// The processes, read once.
    pub procs: &'a Procs,
    /// Where mount figures (inodes) come from.
    pub mounts: &'a MountFigures,
    /// The online CPUs; `None` when `/sys/devices/system/cpu/online` could not be read.
    pub online: Option<CpuSet>,
}

/// What the checks found.
#[derive(Debug, Default)]
pub(crate) struct Found {
    /// Findings, in the order found.
    pub findings: Vec<Finding>,
    /// What could not be looked at.
    pub skipped: Vec<Skipped>,
}

impl Found {
    /// Adds a finding.
    pub fn add(&mut self, f: Finding) {
        self.findings.push(f);
    }

    /// Says that `check` could not read something.
    pub fn skip(&mut self, check: &str, reason: impl Into<String>) {
        self.skipped.push(Skipped::new(check, reason));
    }

    /// Says that `check` could not read something because of `e`.
    pub fn skip_err(&mut self, check: &str, e: &perfpilot_sys::Error) {
        self.skipped.push(Skipped::from_error(check, e));
    }
}

/// Per-process reads of one check that failed, summed into one skipped line: a thousand
/// processes of other users each refusing `maps` are one line, not a thousand.
#[derive(Debug, Default)]
pub(crate) struct Refused {
    count: usize,
    first: Option<(String, &'static str)>,
}

impl Refused {
    /// Notes a failed read; a process that exited meanwhile is not noted.
    pub fn note(&mut self, e: &perfpilot_sys::Error) {
        if e.is_vanished() {
            return;
        }
        self.count += 1;
        if self.first.is_none() {
            self.first = Some(crate::finding::describe(e));
        }
    }

    /// Adds the summary to `found` (nothing when every read succeeded).
    pub fn report(self, check: &str, what: &str, found: &mut Found) {
        if let Some((first, hint)) = self.first {
            let (more, hint) = match self.count {
                1 => (String::new(), hint.to_string()),
                n => (
                    format!(", and {} more like it", n - 1),
                    hint.replace(
                        "the process's owner to include it",
                        "their owner to include them",
                    ),
                ),
            };
            found.skip(check, format!("{what}: {first}{more}{hint}"));
        }
    }
}

/// A finding with its id, subject, severity and title; the caller fills in the rest with
/// struct-update syntax.
pub(crate) fn base(
    id: &str,
    subject: impl Into<String>,
    severity: Severity,
    title: String,
) -> Finding {
    Finding {
        id: id.to_string(),
        subject: subject.into(),
        severity,
        title,
        evidence: Vec::new(),
        why: String::new(),
        effect: String::new(),
        apply: String::new(),
        verify: Verify::Observe {
            command: String::new(),
            expect: String::new(),
        },
        measured: None,
        strategy: None,
        cmdline: None,
    }
}

/// Reads a `/proc/sys` or `/sys` knob as its value (`[madvise]` → `madvise`); `Ok(None)` when
/// the file does not exist.
pub(crate) fn knob(fs: &Fs, rel: &str) -> Result<Option<String>, perfpilot_sys::Error> {
    Ok(fs
        .read_opt(rel)?
        .map(|t| perfpilot_sys::knob::knob_value(&t)))
}

/// A share as a percentage for people (`12.3 %`).
pub(crate) fn pct(part: u64, whole: u64) -> String {
    if whole == 0 {
        return "0 %".to_string();
    }
    perfpilot_units::percent(part as f64 * 100.0 / whole as f64)
}

/// `Fs::read` reports a process that exited as a missing file; say it as such so that it is
/// not counted as refused.
pub(crate) fn vanished_as_such(e: perfpilot_sys::Error) -> perfpilot_sys::Error {
    match e {
        perfpilot_sys::Error::Io { path, source }
            if source.kind() == std::io::ErrorKind::NotFound
                || source.raw_os_error() == Some(libc_esrch()) =>
        {
            perfpilot_sys::Error::Vanished { path }
        }
        e => e,
    }
}

/// ESRCH, without a libc dependency for one number.
const fn libc_esrch() -> i32 {
    3
}
