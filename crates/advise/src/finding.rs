//! What a check reports: a [`Finding`] (something worth changing, with its evidence, its source,
//! the command that applies it and how to verify it) or a [`Skipped`] check (what could not be
//! read, and why).

use serde::{Deserialize, Serialize};

/// How much a finding matters. Ordered: `Info < Warning < Critical`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Worth knowing; may help.
    Info,
    /// Likely costs performance now.
    Warning,
    /// Will fail or is failing (a resource about to run out).
    Critical,
}

impl Severity {
    /// The lowercase word (`info`, `warning`, `critical`), as in the JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        }
    }
}

impl std::fmt::Display for Severity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One value a finding rests on, with the file it was read from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evidence {
    /// What the value is (`AnonHugePages`, `threads`).
    pub what: String,
    /// The value as read, in units people read (`3.2 GiB`, `madvise`).
    pub value: String,
    /// Where it was read: a kernel path such as `/proc/1234/smaps_rollup`, or `statvfs(/srv)`.
    pub source: String,
}

impl Evidence {
    /// Evidence `what` = `value`, read from `source`.
    pub fn new(
        what: impl Into<String>,
        value: impl Into<String>,
        source: impl Into<String>,
    ) -> Self {
        Evidence {
            what: what.into(),
            value: value.into(),
            source: source.into(),
        }
    }
}

/// How to verify that applying a finding helps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Verify {
    /// A `perfpilot study` file that measures the change under load (its `[load]` section is a
    /// template to fill in: only the user knows the load).
    Study {
        /// The study file's text (TOML).
        file: String,
    },
    /// A daemon config fragment that lets the daemon measure it.
    DaemonConfig {
        /// The config text (TOML).
        text: String,
    },
    /// A daemon strategy covers it: the daemon tries it, measures it and keeps or reverts it.
    DaemonWillTry {
        /// The strategy (`large_pages`, `memory_affinity`, `cache_affinity`, `read_ahead`).
        strategy: String,
    },
    /// Not a speed question: a command whose output shows the condition gone.
    Observe {
        /// The command to run.
        command: String,
        /// What its output should show.
        expect: String,
    },
}

impl std::fmt::Display for Verify {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Verify::Study { .. } => {
                f.write_str("measure it with the study file below (fill in [load])")
            }
            Verify::DaemonConfig { .. } => {
                f.write_str("let the daemon measure it with the config below")
            }
            Verify::DaemonWillTry { strategy } => write!(f, "the daemon will try this: {strategy}"),
            Verify::Observe { command, expect } => write!(f, "run `{command}`: {expect}"),
        }
    }
}

/// What the daemon measured on this host for a finding's strategy and workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    /// The strategy measured.
    pub strategy: String,
    /// Trials kept.
    pub kept: u32,
    /// Trials reverted (worse).
    pub reverted: u32,
    /// Trials reverted as no different.
    pub neutral: u32,
    /// The gain of the latest judged trial (> 1 is better), with its interval.
    pub gain: Option<f64>,
    /// The interval's low end.
    pub ci_low: Option<f64>,
    /// The interval's high end.
    pub ci_high: Option<f64>,
    /// In one line: `measured here: kept ×1.12 [1.05, 1.19] (action 7)`.
    pub summary: String,
}

/// Something worth changing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// The rule's stable id (`thp.disabled-large-anon`): the same on every host and run, and what
    /// `--ignore` takes.
    pub id: String,
    /// What it is about: `system`, `pid 1234 (java)`, `mount /srv`.
    pub subject: String,
    /// How much it matters.
    pub severity: Severity,
    /// In one line, what is wrong.
    pub title: String,
    /// The values read, each with its file.
    pub evidence: Vec<Evidence>,
    /// Why this matters: a source (a seed, a kernel document, a vendor guide).
    pub why: String,
    /// The expected effect of applying it.
    pub effect: String,
    /// The exact command or config line that applies it.
    pub apply: String,
    /// How to verify it.
    pub verify: Verify,
    /// What the daemon measured here for it, if anything (ranks the finding).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured: Option<Measured>,
    /// The daemon strategy that covers it, if one does (matched against the journal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<String>,
    /// The command line of the process it is about, if it is about one (matched against the
    /// journal's workload signatures).
    #[serde(skip)]
    pub(crate) cmdline: Option<String>,
}

/// A check that could not run, or could not look at everything.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped {
    /// The check (`thp`, `governor`, `inodes`, …).
    pub check: String,
    /// What could not be read and why: `could not read /proc/12/smaps_rollup (Permission
    /// denied): run as root or as the process's owner`.
    pub reason: String,
}

impl Skipped {
    /// A check skipped for `reason`.
    pub fn new(check: &str, reason: impl Into<String>) -> Self {
        Skipped {
            check: check.to_string(),
            reason: reason.into(),
        }
    }

    /// A check skipped because a read failed: says the file and the reason, and what to do
    /// for a permission error.
    pub fn from_error(check: &str, e: &perfpilot_sys::Error) -> Self {
        let (what, hint) = describe(e);
        Skipped::new(check, format!("{what}{hint}"))
    }
}

/// A failed read in words: `could not read FILE (why)`, and what to do about it (`: run as
/// root …` for a permission error, else nothing).
pub(crate) fn describe(e: &perfpilot_sys::Error) -> (String, &'static str) {
    use perfpilot_sys::Error as E;
    let hint = if e.is_permission() {
        ": run as root or as the process's owner to include it"
    } else {
        ""
    };
    let what = match e {
        E::Io { path, source } => format!("could not read {} ({source})", path.display()),
        E::Parse { path, line, msg } => format!("could not read {}:{line} ({msg})", path.display()),
        E::Vanished { path } => format!("could not read {} (the process exited)", path.display()),
        other => format!("could not read: {other}"),
    };
    (what, hint)
}
