//! `perfpilot study`: validate, run, resume and report configuration studies. Each command
//! parses its arguments, calls the study library and prints what it returns.

mod cross;
mod print;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use perfpilot_observe::{Fs, Topology};
use perfpilot_store::Store;
use perfpilot_study::compare::{check_schemas, compare_runs};
use perfpilot_study::hosts::{self, WorkerConfig};
use perfpilot_study::replay::{ReplayOptions, replay_run};
use perfpilot_study::report::{self, ReportOptions};
use perfpilot_study::spec::{Finding, Severity, preflight};
use perfpilot_study::{
    Budget, RunOptions, Study, Validation, run_scaling, run_study, stored_study,
};

use crate::cmd::record::store_path;
use crate::cmd::remote::log;
use print::{print_comparison, print_replay, print_run, print_scaling, print_validation};

/// Search a deployment's configuration space under load and report the best configuration.
///
///   perfpilot study validate examples/studies/scoring-quick.toml
///   perfpilot study run examples/studies/scoring-quick.toml
///   perfpilot study report 1 --md
#[derive(Args, Debug)]
pub struct StudyArgs {
    #[command(subcommand)]
    sub: StudySub,
}

#[derive(Subcommand, Debug)]
enum StudySub {
    /// Check a study file without running it: the programs, files, knobs and ports it needs
    /// here; its trials, layouts and estimated duration. Exits 1 when a run would fail.
    Validate(ValidateArgs),
    /// Run a study (or continue one with --resume); every trial goes to the store.
    Run(RunArgs),
    /// Sweep the users for the study's [scaling] configuration; print the saturation point,
    /// the knee and the points for `perfpilot model fit`.
    Scale(ScaleArgs),
    /// The report of a stored run: trials, scaling view, factor effects, the best
    /// configuration and its apply script.
    Report(ReportArgs),
    /// Replay racing on an exhaustive run (`study run --exhaustive`): the trials a race would
    /// have spent on the same measurements, its winner, and over shuffled round orders how
    /// often it picks the exhaustive run's winner.
    Replay(ReplayArgs),
    /// Compare two runs of a study (e.g. the same file run twice): the same winner, different
    /// winners not significantly different over both runs' rounds, or one really better; the
    /// machines they ran on, and per configuration both measured, run B's result over run A's
    /// (per core and per instance too) with 95 % intervals (--store-b: a run from another
    /// machine's store).
    Compare(CompareArgs),
    /// Serve study coordinators (`study run --hosts`): run the trials they send on this host,
    /// one coordinator after the other. It runs whatever the study's commands say, as this
    /// user: a coordinator starts it over SSH (`--stdio`), or it listens with mutual TLS
    /// (`--tls-cert`, `--tls-key`, `--tls-ca`) and serves only coordinators its CA signed.
    Worker(WorkerArgs),
    /// List the study runs in the store.
    List {
        #[command(flatten)]
        store: StoreArg,
    },
}

#[derive(Args, Debug)]
struct ValidateArgs {
    file: PathBuf,
}

#[derive(Args, Debug)]
struct RunArgs {
    /// The study file (with --resume: optional, the stored copy is used).
    file: Option<PathBuf>,
    #[command(flatten)]
    store: StoreArg,
    /// Continue study run RUN from the store.
    #[arg(long, value_name = "RUN")]
    resume: Option<i64>,
    /// Run every repetition of every configuration (no racing).
    #[arg(long)]
    exhaustive: bool,
    /// The race's budget, overriding the study's run.budget: trials with the confirmation
    /// (120) or a share of an exhaustive run's ("50%").
    #[arg(long, value_parser = parse_budget)]
    budget: Option<Budget>,
    /// No progress bar.
    #[arg(long, short)]
    quiet: bool,
    /// Run the trials on these hosts, comma-separated: ssh://[USER@]HOST[:PORT] (the worker
    /// is started there over SSH for this run: `perfpilot study worker --stdio`), HOST:PORT of
    /// a listening `perfpilot study worker` (mutual TLS with --tls-cert, plain TCP without),
    /// or `local` for this process. Each host runs whole rounds, one at a time, so as many
    /// rounds run at once as there are hosts; a host lost mid-round loses that round, which
    /// runs again on another host.
    #[arg(long, value_delimiter = ',', value_name = "HOST|local")]
    hosts: Vec<String>,
    #[command(flatten)]
    dial: super::remote::DialArgs,
    #[command(flatten)]
    tls: super::remote::TlsArgs,
}

#[derive(Args, Debug)]
struct WorkerArgs {
    #[command(flatten)]
    listen: super::remote::ListenArgs,
    #[command(flatten)]
    tls: super::remote::TlsArgs,
    /// The store whose knob journal (`<store>.knobs-journal.json`) holds the undo records of
    /// the knobs trials change here (no trial is stored here: the coordinator stores them).
    #[command(flatten)]
    store: StoreArg,
    /// Claim this perfpilot version in the hello (tests of the version check).
    #[arg(long, hide = true)]
    pretend_version: Option<String>,
}

#[derive(Args, Debug)]
struct ScaleArgs {
    file: PathBuf,
    #[command(flatten)]
    store: StoreArg,
    /// User counts (default: the study's scaling.users, else 1,2,4,8,16,32).
    #[arg(long, value_delimiter = ',')]
    users: Vec<usize>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    #[arg(long, short)]
    quiet: bool,
}

#[derive(Args, Debug)]
struct ReportArgs {
    run: i64,
    #[command(flatten)]
    store: StoreArg,
    /// HTML with inline SVG charts.
    #[arg(long, conflicts_with_all = ["md", "json"])]
    html: bool,
    /// Markdown (the default).
    #[arg(long, conflicts_with = "json")]
    md: bool,
    /// JSON.
    #[arg(long)]
    json: bool,
    /// Also write the apply script (apply.sh) and systemd drop-ins into DIR: the winner's when
    /// it is shown significantly better than the baseline, else the baseline's.
    #[arg(long, value_name = "DIR")]
    apply: Option<PathBuf>,
    /// With --apply: the winner's script even when it is not shown significantly better than
    /// the baseline.
    #[arg(long, requires = "apply")]
    force: bool,
}

#[derive(Args, Debug)]
struct ReplayArgs {
    run: i64,
    #[command(flatten)]
    store: StoreArg,
    /// Round orders to race over (the stored order first).
    #[arg(long, default_value_t = 200)]
    orders: usize,
    /// Rounds before the first rank test (default: the study's run.min_rounds).
    #[arg(long)]
    min_rounds: Option<usize>,
    /// The effect below which configurations count as equivalent, e.g. 0.05 (default: the
    /// study's objective.min_effect).
    #[arg(long)]
    min_effect: Option<f64>,
    /// Equivalent configurations leave the race: true or false (default: the study's
    /// run.drop_equivalent).
    #[arg(long)]
    drop_equivalent: Option<bool>,
    /// The conditional power below which a tied configuration leaves (default: the study's
    /// run.futility; 0 turns the rule off).
    #[arg(long)]
    futility: Option<f64>,
    /// The chance of being the best below which a configuration leaves from round 7 on
    /// (default: the study's run.min_chance; 0 turns the rule off).
    #[arg(long)]
    min_chance: Option<f64>,
    /// The share behind the leader beyond which a configuration leaves from round 3 on
    /// (default: the study's run.far_behind; 0 turns the rule off).
    #[arg(long)]
    far_behind: Option<f64>,
    /// The expected loss (share of the leader's score) below which the race ends
    /// (default: the study's run.stop_loss; 0 turns the rule off).
    #[arg(long)]
    stop_loss: Option<f64>,
    /// The race's budget: trials (120) or a share of the exhaustive run's ("50%"); "none"
    /// for no budget (default: the study's run.budget).
    #[arg(long, value_parser = parse_budget_or_none)]
    budget: Option<BudgetOverride>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct CompareArgs {
    a: i64,
    b: i64,
    #[command(flatten)]
    store: StoreArg,
    /// The store holding run B, when it is not the one holding run A (--store).
    #[arg(long, value_name = "PATH")]
    store_b: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct StoreArg {
    /// The store (default: $XDG_STATE_HOME/perfpilot/perfpilot.db, /var/lib/perfpilot/perfpilot.db for root).
    #[arg(long, value_name = "PATH")]
    store: Option<PathBuf>,
}

impl StudyArgs {
    /// Whether this command speaks to workers or coordinators (a peer that goes away must be
    /// an error, not a SIGPIPE that ends the process).
    pub fn talks_to_peers(&self) -> bool {
        match &self.sub {
            StudySub::Worker(_) => true,
            StudySub::Run(a) => !a.hosts.is_empty(),
            _ => false,
        }
    }
}

pub fn run(a: StudyArgs) -> Result<()> {
    match a.sub {
        StudySub::Validate(a) => validate(a),
        StudySub::Run(a) => run_one(a),
        StudySub::Scale(a) => scale(a),
        StudySub::Report(a) => report(a),
        StudySub::Replay(a) => replay(a),
        StudySub::Compare(a) => compare(a),
        StudySub::Worker(a) => worker(a),
        StudySub::List { store } => list(store),
    }
}

fn topology() -> Result<Topology> {
    Topology::read(&Fs::live()).context("reading the machine's topology")
}

/// Run options with progress unless `quiet`, and a Ctrl-C handler that stops the run after
/// restoring every knob.
fn options(store: PathBuf, quiet: bool) -> Result<RunOptions> {
    let mut o = RunOptions::new(store);
    o.progress = !quiet;
    let stop = o.stop.clone();
    ctrlc::set_handler(move || {
        if stop.swap(true, Ordering::SeqCst) {
            eprintln!("perfpilot study: stopping (restoring knobs, stopping instances)…");
        } else {
            eprintln!(
                "\nperfpilot study: Ctrl-C: finishing the current step, then restoring every knob"
            );
        }
    })
    .context("installing the Ctrl-C handler")?;
    Ok(o)
}

/// What `study::preflight` finds for `study` run from the current directory.
fn findings(study: &Study) -> Result<Vec<Finding>> {
    let here = std::env::current_dir().context("reading the current directory")?;
    Ok(preflight(study, &here))
}

/// An error when `findings` hold one: `doing` says what is refused.
fn refuse_on_errors(file: &Path, findings: &[Finding], doing: &str) -> Result<()> {
    let errors = findings.iter().filter(|f| f.is_error()).count();
    if errors > 0 {
        bail!(
            "{}: {errors} error(s) above: {doing}; fix them, then `perfpilot study validate {}` checks again",
            file.display(),
            file.display()
        );
    }
    Ok(())
}

/// Checks `study` before a run: prints errors and warnings on stderr, and refuses on an error.
fn check_before_run(study: &Study) -> Result<()> {
    let found = findings(study)?;
    for f in found.iter().filter(|f| f.severity != Severity::Note) {
        eprintln!("{f}");
    }
    refuse_on_errors(&study.path, &found, "nothing was started")
}

fn validate(a: ValidateArgs) -> Result<()> {
    let study = Study::load(&a.file)?;
    let topo = topology()?;
    let found = findings(&study)?;
    print_validation(&Validation::new(study, &topo), &found);
    refuse_on_errors(&a.file, &found, "a run would fail")
}

fn run_one(a: RunArgs) -> Result<()> {
    let path = store_path(a.store.store)?;
    let study = match (&a.file, a.resume) {
        (Some(f), _) => Study::load(f)?,
        (None, Some(run)) => stored_study(&path, run)?,
        (None, None) => bail!("give a study file (or --resume RUN)"),
    };
    // With hosts only elsewhere, each worker checks the study on its own host.
    if a.hosts.is_empty() || a.hosts.iter().any(|h| h.trim() == hosts::LOCAL) {
        check_before_run(&study)?;
    }
    let topo = topology()?;
    let mut opts = options(path.clone(), a.quiet)?;
    opts.resume = a.resume;
    opts.hosts = a.hosts;
    opts.dialer = a.dial.dialer(&a.tls)?;
    if a.exhaustive {
        opts.racing = Some(false);
    }
    opts.budget = a.budget;
    let out = run_study(&study, &topo, &opts)?;
    print_run(&out, &path);
    Ok(())
}

fn scale(a: ScaleArgs) -> Result<()> {
    let study = Study::load(&a.file)?;
    check_before_run(&study)?;
    let path = store_path(a.store.store)?;
    let topo = topology()?;
    let opts = options(path, a.quiet)?;
    let s = run_scaling(&study, &topo, &opts, &a.users)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&s)?);
    } else {
        print_scaling(&s);
    }
    Ok(())
}

fn report(a: ReportArgs) -> Result<()> {
    let path = store_path(a.store.store)?;
    let s = Store::open_existing(&path)?;
    let r = report::build_with(&s, a.run, ReportOptions { force: a.force })?;
    if let Some(dir) = a.apply {
        let Some(apply) = r.apply.as_ref() else {
            bail!(
                "study run {}: {}",
                a.run,
                r.apply_note
                    .as_deref()
                    .unwrap_or("this run has no best configuration to apply")
            );
        };
        let sh = apply.write_to(&dir)?;
        eprintln!(
            "wrote {} ({}) and {} systemd drop-in(s) under {}",
            sh.display(),
            apply.config,
            apply.dropins.len(),
            dir.display()
        );
        if let Some(note) = &r.apply_note {
            eprintln!("note: {note}");
        }
    }
    let out = if a.html {
        report::to_html(&r)
    } else if a.json {
        report::to_json(&r)
    } else {
        report::to_markdown(&r)
    };
    print!("{out}");
    Ok(())
}

fn replay(a: ReplayArgs) -> Result<()> {
    let path = store_path(a.store.store)?;
    let s = Store::open_existing(&path)?;
    let opts = ReplayOptions {
        orders: a.orders,
        seed: 1,
        min_rounds: a.min_rounds,
        min_effect: a.min_effect,
        futility: a.futility,
        min_chance: a.min_chance,
        far_behind: a.far_behind,
        stop_loss: a.stop_loss,
        budget: a.budget.map(|b| b.0),
        drop_equivalent: a.drop_equivalent,
    };
    let r = replay_run(&s, a.run, &opts)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        print_replay(a.run, &r);
    }
    Ok(())
}

fn compare(a: CompareArgs) -> Result<()> {
    let path = store_path(a.store.store)?;
    if let Some(pb) = &a.store_b {
        check_schemas(&path, pb)?;
    }
    let s = Store::open_existing(&path)?;
    let other = match &a.store_b {
        Some(p) => Some(Store::open_existing(p)?),
        None => None,
    };
    let c = compare_runs(&s, a.a, other.as_ref().unwrap_or(&s), a.b)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&c)?);
        return Ok(());
    }
    // Runs from two stores are named with their store.
    let (la, lb) = match &a.store_b {
        Some(pb) => (
            format!("run {} ({})", a.a, path.display()),
            format!("run {} ({})", a.b, pb.display()),
        ),
        None => (format!("run {}", a.a), format!("run {}", a.b)),
    };
    print_comparison(&c, &la, &lb);
    Ok(())
}

/// `study worker`: serves coordinators until Ctrl-C (which, during a trial, ends the trial
/// and restores its knobs first).
fn worker(a: WorkerArgs) -> Result<()> {
    let path = store_path(a.store.store)?;
    // Absolute: a session runs from its coordinator's directory.
    let path = std::path::absolute(&path)
        .with_context(|| format!("resolving the store path {}", path.display()))?;
    let knob_journal = path.with_extension("knobs-journal.json");
    if let Some(dir) = knob_journal.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating {} for the knob journal", dir.display()))?;
    }
    let cfg = WorkerConfig {
        version: a
            .pretend_version
            .unwrap_or_else(|| hosts::VERSION.to_string()),
        topology: topology()?,
        knob_fs: Fs::live(),
        knob_journal,
        quit: Arc::new(AtomicBool::new(false)),
        busy: Arc::new(AtomicBool::new(false)),
    };
    let (quit, busy) = (cfg.quit.clone(), cfg.busy.clone());
    ctrlc::set_handler(move || {
        if !busy.load(Ordering::SeqCst) {
            // No trial runs: nothing to restore.
            std::process::exit(130);
        }
        quit.store(true, Ordering::SeqCst);
        eprintln!("\nperfpilot study worker: Ctrl-C: ending the trial, restoring every knob");
    })
    .context("installing the Ctrl-C handler")?;
    if a.listen.stdio {
        let peer = super::remote::stdio_peer();
        log(&format!(
            "perfpilot {} study worker on stdio for {peer}",
            cfg.version
        ));
        hosts::serve_stdio(&cfg, peer, log)?;
        return Ok(());
    }
    let l = a.listen.bind(&a.tls, "10.0.0.2:7071")?;
    log(&format!(
        "perfpilot {} study worker listening on {} ({})",
        cfg.version,
        l.listener
            .local_addr()
            .map_or_else(|_| "?".to_string(), |a| a.to_string()),
        l.how
    ));
    hosts::serve(&l.listener, &l.admission, &cfg, log)?;
    Ok(())
}

fn list(store: StoreArg) -> Result<()> {
    let path = store_path(store.store)?;
    let s = Store::open_existing(&path)?;
    let runs = s.studies()?;
    if runs.is_empty() {
        eprintln!("no study runs in {}", path.display());
    }
    for r in runs {
        println!("{:>4}  {:<12} {:<30} {}", r.id, r.state, r.name, r.file);
    }
    Ok(())
}

/// `--budget`: `120` or `50%`.
fn parse_budget(s: &str) -> std::result::Result<Budget, String> {
    Budget::parse(s).ok_or_else(|| {
        format!("{s:?}: give a number of trials (120) or a share of an exhaustive run's (\"50%\")")
    })
}

/// `study replay --budget`: a budget, or none.
#[derive(Clone, Debug)]
struct BudgetOverride(Option<Budget>);

/// `study replay --budget`: as [`parse_budget`], or `none`.
fn parse_budget_or_none(s: &str) -> std::result::Result<BudgetOverride, String> {
    if s.eq_ignore_ascii_case("none") {
        Ok(BudgetOverride(None))
    } else {
        parse_budget(s).map(|b| BudgetOverride(Some(b)))
    }
}
