//! `perfpilot advise`: best-practice checks with their evidence, the command that applies each
//! and how to verify it; read-only.

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::Args;
use perfpilot_advise::{Finding, Options, Report, Severity, Verify};
use perfpilot_sys::Fs;

/// The exit statuses of `advise --check`, in `--help`.
pub const EXIT_HELP: &str = "\
Exit status with --check:
  0   no warning or critical finding (info findings do not count)
  1   at least one warning
  2   at least one critical finding
Without --check: 0, or 1 when the command itself failed.";

#[derive(Args)]
pub struct AdviseArgs {
    /// Print the report as JSON (its shape: docs/advise.md).
    #[arg(long)]
    json: bool,
    /// Look only at this process (system-wide checks still run).
    #[arg(long, value_name = "PID")]
    pid: Option<i32>,
    /// The daemon's state directory: what it does with each workload (its status).
    #[arg(long, value_name = "DIR", env = "PERFPILOT_STATE_DIR")]
    state_dir: Option<PathBuf>,
    /// The daemon's store, for what it measured here [default: STATE_DIR/perfpilot.db].
    #[arg(long, value_name = "PATH")]
    store: Option<PathBuf>,
    /// For CI and fleets: exit 0, 1 (warnings) or 2 (critical).
    #[arg(long)]
    check: bool,
    /// Leave out findings with this id (repeatable): `--ignore cpu.governor`.
    #[arg(long, value_name = "ID")]
    ignore: Vec<String>,
    /// Read a captured tree instead of the live system (its `sys/` and `proc/`).
    #[arg(long, value_name = "DIR", hide = true)]
    root: Option<PathBuf>,
}

pub fn run(a: AdviseArgs) -> anyhow::Result<()> {
    let fs = a.root.map(Fs::at).unwrap_or_default();
    let state_dir = a
        .state_dir
        .unwrap_or_else(perfpilot_optimize::daemon::default_state_dir);
    let store = a
        .store
        .unwrap_or_else(|| perfpilot_optimize::daemon::store_path(&state_dir));
    let opts = Options {
        pid: a.pid,
        store: Some(store),
        state_dir: Some(state_dir),
        ignore: a.ignore,
        // The dry run's two samples: rates need an interval; a second is enough to tell busy
        // from idle and keeps advise within seconds.
        settle: std::time::Duration::from_secs(1),
        ..Options::default()
    };
    let report = perfpilot_advise::advise(&fs, &opts);
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render(&report));
    }
    if a.check {
        use std::io::Write;
        std::io::stdout().flush()?;
        std::process::exit(report.check_status());
    }
    Ok(())
}

fn count(report: &Report, s: Severity) -> usize {
    report.findings.iter().filter(|f| f.severity == s).count()
}

/// The report as text: a summary line, each finding, then what was skipped.
pub fn render(r: &Report) -> String {
    let mut s = String::new();
    let n = r.findings.len();
    let _ = writeln!(
        s,
        "{n} finding{} ({} critical, {} warning, {} info) over {} processes{}{}",
        if n == 1 { "" } else { "s" },
        count(r, Severity::Critical),
        count(r, Severity::Warning),
        count(r, Severity::Info),
        r.processes,
        if r.ignored > 0 {
            format!("; {} ignored", r.ignored)
        } else {
            String::new()
        },
        if r.skipped.is_empty() {
            String::new()
        } else {
            format!("; {} skipped (below)", r.skipped.len())
        },
    );
    for f in &r.findings {
        s.push('\n');
        finding(&mut s, f);
    }
    if let Some(d) = &r.daemon {
        let _ = writeln!(s, "\nwhat the daemon does: {}", d.note);
        for w in &d.workloads {
            let pids: Vec<String> = w.pids.iter().map(i32::to_string).collect();
            let _ = writeln!(s, "  {} (pids {}): {}", w.name, pids.join(","), w.next);
        }
    }
    if !r.skipped.is_empty() {
        let _ = writeln!(s, "\nskipped:");
        for k in &r.skipped {
            let _ = writeln!(s, "  {}: {}", k.check, k.reason);
        }
    }
    s
}

fn finding(s: &mut String, f: &Finding) {
    let _ = writeln!(
        s,
        "{} {}  {}",
        f.severity.as_str().to_uppercase(),
        f.id,
        f.subject
    );
    let _ = writeln!(s, "  {}", f.title);
    if let Some(m) = &f.measured {
        let _ = writeln!(s, "  {}", m.summary);
    }
    for (i, e) in f.evidence.iter().enumerate() {
        let label = if i == 0 { "evidence:" } else { "" };
        let _ = writeln!(s, "  {label:9} {} = {}   [{}]", e.what, e.value, e.source);
    }
    let _ = writeln!(s, "  {:9} {}", "why:", f.why);
    let _ = writeln!(s, "  {:9} {}", "effect:", f.effect);
    let _ = writeln!(s, "  {:9} {}", "apply:", f.apply);
    let _ = writeln!(s, "  {:9} {}", "verify:", f.verify);
    if let Verify::Study { file: text } | Verify::DaemonConfig { text } = &f.verify {
        for line in text.lines() {
            let _ = writeln!(s, "            | {line}");
        }
    }
}
