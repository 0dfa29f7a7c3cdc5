//! `perfpilot study`: validate, run, resume and report configuration studies.

use std::path::PathBuf;
use std::sync::atomic::Ordering;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use perfpilot_observe::{Fs, Topology};
use perfpilot_store::Store;
use perfpilot_study::compare::{Agreement, Side, compare_runs};
use perfpilot_study::replay::{ReplayOptions, replay_run};
use perfpilot_study::report::{self, chance_best_line};
use perfpilot_study::{Budget, RunOptions, Study, plan_study, run_scaling, run_study};

use crate::cmd::record::store_path;

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
    /// Check a study file without running it; print its trials, layouts and estimated duration.
    Validate { file: PathBuf },
    /// Run a study (or continue one with --resume); every trial goes to the store.
    Run {
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
    },
    /// Sweep the users for the study's [scaling] configuration; print the saturation point,
    /// the knee and the points for `perfpilot model fit`.
    Scale {
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
    },
    /// The report of a stored run: trials, scaling view, factor effects, the best
    /// configuration and its apply script.
    Report {
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
        /// Also write the apply script (apply.sh) and systemd drop-ins into DIR.
        #[arg(long, value_name = "DIR")]
        apply: Option<PathBuf>,
    },
    /// Replay racing on an exhaustive run (`study run --exhaustive`): the trials a race would
    /// have spent on the same measurements, its winner, and over shuffled round orders how
    /// often it picks the exhaustive run's winner.
    Replay {
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
    },
    /// Compare two runs of a study (e.g. the same file run twice): the same winner, different
    /// winners not significantly different over both runs' rounds, or one really better.
    Compare {
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
    },
    /// List the study runs in the store.
    List {
        #[command(flatten)]
        store: StoreArg,
    },
}

#[derive(Args, Debug)]
struct StoreArg {
    /// The store (default: $XDG_STATE_HOME/perfpilot/perfpilot.db, /var/lib/perfpilot/perfpilot.db for root).
    #[arg(long, value_name = "PATH")]
    store: Option<PathBuf>,
}

fn topology() -> Result<Topology> {
    Topology::read(&Fs::live()).context("reading the machine's topology")
}

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

fn secs(d: std::time::Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 {
        format!("{}h{:02}m", s / 3600, s % 3600 / 60)
    } else if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

pub fn run(a: StudyArgs) -> Result<()> {
    match a.sub {
        StudySub::Validate { file } => {
            let study = Study::load(&file)?;
            let topo = topology()?;
            let plan = plan_study(&study, &topo);
            println!(
                "{}: study {:?} is valid: {} factor(s), {} configuration(s), {} runnable here",
                file.display(),
                study.name,
                study.factors.len(),
                plan.configurations,
                plan.feasible
            );
            println!("objective: {}", study.objective.goal.describe());
            if !study.objective.constraints.is_empty() {
                println!("constraints: {}", study.objective.constraints.join(", "));
            }
            println!("baseline: {}", study.run.baseline);
            for c in study.configurations() {
                match perfpilot_study::plan(
                    &topo,
                    c.instances(),
                    c.cores_per_instance(),
                    c.binding(),
                ) {
                    Ok(l) => {
                        let sets: Vec<String> = l
                            .instances
                            .iter()
                            .map(|i| {
                                if i.bound {
                                    i.cpuset.to_string()
                                } else {
                                    "unbound".into()
                                }
                            })
                            .collect();
                        println!("  {c}: CPUs {}", sets.join(" | "));
                    }
                    Err(e) => println!("  {c}: cannot run here: {e}"),
                }
            }
            println!(
                "trials: at most {} ({} repetitions × {} configurations + {} confirmation), each ~{:.0} s",
                plan.max_trials,
                study.run.repetitions,
                plan.feasible,
                plan.max_trials - plan.feasible * study.run.repetitions,
                plan.seconds_per_trial
            );
            println!(
                "estimated duration: at most {}{}",
                secs(plan.max_duration),
                if study.run.racing {
                    " (racing usually stops earlier)"
                } else {
                    ""
                }
            );
            if let (Some(b), Some(n)) = (study.run.budget, plan.budget_trials) {
                println!(
                    "budget: {b}, at most {n} trials with the confirmation (~{}); the race ends before a round that would pass it",
                    secs(std::time::Duration::from_secs_f64(
                        n as f64 * plan.seconds_per_trial
                    ))
                );
                let first_test = plan.feasible * study.run.min_rounds + plan.max_trials
                    - plan.feasible * study.run.repetitions;
                if n < first_test {
                    println!(
                        "warning: run.budget ({n} trials) holds fewer than min_rounds ({}) rounds of the {} configurations and the confirmation ({first_test} trials): the race may end before its first rank test",
                        study.run.min_rounds, plan.feasible
                    );
                }
            }
            Ok(())
        }
        StudySub::Run {
            file,
            store,
            resume,
            exhaustive,
            budget,
            quiet,
        } => {
            let path = store_path(store.store)?;
            let study = match (&file, resume) {
                (Some(f), _) => Study::load(f)?,
                (None, Some(run)) => {
                    let s = Store::open(&path)?;
                    let rec = s.study(run)?.with_context(|| {
                        format!("the store {} has no study run {run}", path.display())
                    })?;
                    Study::parse(&rec.spec, std::path::Path::new(&rec.file))?
                }
                (None, None) => bail!("give a study file (or --resume RUN)"),
            };
            let topo = topology()?;
            let mut opts = options(path.clone(), quiet)?;
            opts.resume = resume;
            if exhaustive {
                opts.racing = Some(false);
            }
            opts.budget = budget;
            let out = run_study(&study, &topo, &opts)?;
            let s = &out.summary;
            println!(
                "study run {} ({}): {} trials in {} rounds, {:.0} s",
                out.run,
                path.display(),
                s.trials_run,
                s.rounds,
                s.elapsed_s
            );
            if s.racing {
                // Race trials of the whole run (a resumed run's earlier ones too) against
                // every feasible configuration in every round; confirmation is extra in both.
                let all = plan_study(&study, &topo).feasible * study.run.repetitions;
                let raced = Store::open(&path)?
                    .trials(out.run)?
                    .iter()
                    .filter(|t| t.phase == "race")
                    .count();
                if all > 0 {
                    println!(
                        "  raced: {raced} race trials of the {all} an exhaustive run takes ({:.1} %)",
                        100.0 * raced as f64 / all as f64
                    );
                }
            }
            for e in &s.eliminated {
                println!(
                    "  left the race after round {}: {} — {}",
                    e.round, e.config, e.reason
                );
            }
            match &s.winner {
                Some(w) => println!("best: {w}\n  {}", s.verdict),
                None => println!("no winner: {}", s.verdict),
            }
            if !s.indistinguishable.is_empty() {
                println!(
                    "  not significantly different from it (or equivalent, or tied within the rounds run): {}",
                    s.indistinguishable.join("; ")
                );
            }
            if let Some(line) = chance_best_line(&s.chance_best) {
                println!("  {line}");
            }
            for w in &s.warnings {
                println!("warning: {w}");
            }
            println!(
                "report: perfpilot study report {} --store {} [--html|--md|--json] [--apply DIR]",
                out.run,
                path.display()
            );
            Ok(())
        }
        StudySub::Scale {
            file,
            store,
            users,
            json,
            quiet,
        } => {
            let study = Study::load(&file)?;
            let path = store_path(store.store)?;
            let topo = topology()?;
            let opts = options(path, quiet)?;
            let users = if !users.is_empty() {
                users
            } else if !study.scaling.users.is_empty() {
                study.scaling.users.clone()
            } else {
                vec![1, 2, 4, 8, 16, 32]
            };
            let s = run_scaling(&study, &topo, &opts, &users)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&s)?);
                return Ok(());
            }
            println!("load sweep of {} (study run {})", s.config, s.run);
            println!(
                "{:>6} {:>12} {:>12} {:>10} {:>8} {:>10} {:>13}",
                "users", "req/s", "mean ms", "p99 ms", "errors", "CPU cores", "driver cores"
            );
            for p in &s.points {
                println!(
                    "{:>6} {:>12.1} {:>12.2} {:>10.2} {:>8} {:>10.2} {:>13.2}",
                    p.users,
                    p.throughput,
                    p.response_time_s.unwrap_or(f64::NAN) * 1000.0,
                    p.p99_ms.unwrap_or(f64::NAN),
                    p.errors,
                    p.cpu.get("app").copied().unwrap_or(f64::NAN),
                    p.driver_cores.unwrap_or(f64::NAN)
                );
            }
            for (u, r) in &s.failed {
                println!("{u} users: failed: {r}");
            }
            for w in &s.warnings {
                println!("warning: {w}");
            }
            println!(
                "saturation (95 % of peak throughput): {} users; knee (max throughput/response time): {} users",
                s.saturation_users.map_or("–".into(), |u| u.to_string()),
                s.knee_users.map_or("–".into(), |u| u.to_string())
            );
            println!("\n# points for a model file ([[measurements]], perfpilot model fit):");
            print!("{}", s.model_toml(0.0));
            Ok(())
        }
        StudySub::Report {
            run,
            store,
            html,
            md: _,
            json,
            apply,
        } => {
            let path = store_path(store.store)?;
            let s = Store::open(&path)?;
            let r = report::build(&s, run)?;
            if let Some(dir) = apply {
                let a = r
                    .apply
                    .as_ref()
                    .context("this run has no best configuration to apply")?;
                std::fs::create_dir_all(&dir)
                    .with_context(|| format!("creating {}", dir.display()))?;
                let sh = dir.join("apply.sh");
                std::fs::write(&sh, &a.shell)
                    .with_context(|| format!("writing {}", sh.display()))?;
                #[cfg(unix)]
                {
                    use std::os::unix::fs::PermissionsExt;
                    let _ = std::fs::set_permissions(&sh, std::fs::Permissions::from_mode(0o755));
                }
                for (p, content) in &a.dropins {
                    let f = dir.join(p);
                    if let Some(parent) = f.parent() {
                        std::fs::create_dir_all(parent)
                            .with_context(|| format!("creating {}", parent.display()))?;
                    }
                    std::fs::write(&f, content)
                        .with_context(|| format!("writing {}", f.display()))?;
                }
                eprintln!(
                    "wrote {} and {} systemd drop-in(s) under {}",
                    sh.display(),
                    a.dropins.len(),
                    dir.display()
                );
            }
            let out = if html {
                report::to_html(&r)
            } else if json {
                report::to_json(&r)
            } else {
                report::to_markdown(&r)
            };
            print!("{out}");
            Ok(())
        }
        StudySub::Replay {
            run,
            store,
            orders,
            min_rounds,
            min_effect,
            futility,
            min_chance,
            far_behind,
            stop_loss,
            budget,
            drop_equivalent,
            json,
        } => {
            let path = store_path(store.store)?;
            let s = Store::open(&path)?;
            let opts = ReplayOptions {
                orders,
                seed: 1,
                min_rounds,
                min_effect,
                futility,
                min_chance,
                far_behind,
                stop_loss,
                budget: budget.map(|b| b.0),
                drop_equivalent,
            };
            let r = replay_run(&s, run, &opts)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
                return Ok(());
            }
            let pct = |a: f64, b: f64| if b > 0.0 { 100.0 * a / b } else { 0.0 };
            let first = &r.stored_order;
            println!(
                "exhaustive run {run}: {} race trials over {} rounds; winner {}",
                r.exhaustive_trials,
                r.rounds,
                r.exhaustive_winner.as_deref().unwrap_or("–")
            );
            if !r.exhaustive_not_worse.is_empty() {
                println!(
                    "  not significantly worse than it over every round: {}",
                    r.exhaustive_not_worse.join("; ")
                );
            }
            if let Some(line) = chance_best_line(&r.exhaustive_chance_best) {
                println!("  {line}");
            }
            println!(
                "race in the stored order: {} trials ({:.1} % of exhaustive) in {} rounds; winner {}",
                first.trials,
                pct(first.trials as f64, r.exhaustive_trials as f64),
                first.rounds,
                first.winner.as_deref().unwrap_or("–")
            );
            for e in &first.left {
                println!("  round {}: {} — {}", e.round, e.config, e.reason);
            }
            println!(
                "over {} round orders: race trials mean {:.1} ({:.1} % of exhaustive), min {}, max {}, over half in {} ({:.1} %); same winner {} ({:.1} %); a winner the exhaustive run cannot tell from its own {} ({:.1} %)",
                r.orders,
                r.trials_mean,
                pct(r.trials_mean, r.exhaustive_trials as f64),
                r.trials_min,
                r.trials_max,
                r.over_half,
                pct(r.over_half as f64, r.orders as f64),
                r.same_winner,
                pct(r.same_winner as f64, r.orders as f64),
                r.acceptable_winner,
                pct(r.acceptable_winner as f64, r.orders as f64)
            );
            println!(
                "  the races' winners, judged on every exhaustive round: {:.1} % of the exhaustive winner's score on average, {:.1} % at worst",
                100.0 * r.winner_share_mean,
                100.0 * r.winner_share_min
            );
            if r.budget_ended > 0 {
                println!(
                    "  run.budget ended the race in {} orders ({:.1} %)",
                    r.budget_ended,
                    pct(r.budget_ended as f64, r.orders as f64)
                );
            }
            Ok(())
        }
        StudySub::Compare {
            a,
            b,
            store,
            store_b,
            json,
        } => {
            let path = store_path(store.store)?;
            let s = Store::open(&path)?;
            let other = match &store_b {
                Some(p) => Some(Store::open(p)?),
                None => None,
            };
            let c = compare_runs(&s, a, other.as_ref().unwrap_or(&s), b)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&c)?);
                return Ok(());
            }
            // Runs from two stores are named with their store.
            let (la, lb) = match &store_b {
                Some(pb) => (
                    format!("run {a} ({})", path.display()),
                    format!("run {b} ({})", pb.display()),
                ),
                None => (format!("run {a}"), format!("run {b}")),
            };
            if !c.same_study {
                println!("note: {la} and {lb} ran different study files");
            }
            print_side(&c.a, &la, &c.b, &lb);
            print_side(&c.b, &lb, &c.a, &la);
            if let Some(p) = &c.pooled {
                println!(
                    "over both runs' rounds: {la}'s winner vs {lb}'s ×{:.3} (95 % CI {:.3}–{:.3}, {} rounds)",
                    p.ratio, p.low, p.high, p.pairs
                );
            }
            if c.contradict {
                println!(
                    "the runs contradict each other: each separates its own winner from the other's, so their order changed with the machine's conditions between the runs"
                );
            }
            let better = match &c.pooled {
                Some(p) if p.ratio >= 1.0 => &la,
                _ => &lb,
            };
            println!(
                "{}",
                match c.agreement {
                    Agreement::SameWinner => "agree: the same winner".to_string(),
                    Agreement::NotSignificantlyDifferent if c.pooled.is_some() =>
                        "agree within what the runs resolve: different winners, not significantly different over both runs' rounds (the 95 % interval of their ratio includes 1); either is a sound pick"
                            .to_string(),
                    Agreement::NotSignificantlyDifferent =>
                        "agree within what the runs resolve: different winners, and neither run separates them"
                            .to_string(),
                    Agreement::Disagree if c.pooled.is_some() => format!(
                        "disagree: over both runs' rounds {better}'s winner is significantly better; run more rounds or longer measurements before choosing"
                    ),
                    Agreement::Disagree =>
                        "disagree: a run dropped the other's winner as worse, and they share too few rounds to compare them directly"
                            .to_string(),
                    Agreement::NoWinner => "no comparison: a run has no winner".to_string(),
                }
            );
            Ok(())
        }
        StudySub::List { store } => {
            let path = store_path(store.store)?;
            let s = Store::open(&path)?;
            for r in s.studies()? {
                println!("{:>4}  {:<12} {:<30} {}", r.id, r.state, r.name, r.file);
            }
            Ok(())
        }
    }
}

/// One run's view of the other run's winner (`me_label`, `other_label`: how to name them).
fn print_side(me: &Side, me_label: &str, other: &Side, other_label: &str) {
    println!("{me_label}: winner {}", me.winner.as_deref().unwrap_or("–"));
    let Some(o) = other
        .winner
        .as_deref()
        .filter(|o| Some(*o) != me.winner.as_deref())
    else {
        return;
    };
    if let Some(e) = &me.other_left {
        println!(
            "  {other_label}'s winner left this race after round {}: {}",
            e.round, e.reason
        );
    } else if me.holds_other {
        println!("  {other_label}'s winner {o} is among those it cannot tell from its own");
    }
    if let Some(r) = &me.ratio {
        println!(
            "  its winner vs {other_label}'s, paired over its rounds: ×{:.3} (95 % CI {:.3}–{:.3}, {} rounds): {}",
            r.ratio,
            r.low,
            r.high,
            r.pairs,
            if me.separates {
                "separated"
            } else {
                "not significantly different"
            }
        );
    }
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
