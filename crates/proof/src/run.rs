//! `perfpilot-proof run`: the plan's cells one after another, each appended to the results
//! file as it ends, then the table.

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result, bail};
use perfpilot_sys::Fs;

use crate::cells::{self, CellSetup};
use crate::install;
use crate::options::{RunArgs, ServerName};
use crate::record::Machine;
use crate::record::{self, CellRecord, Line, Outcome, RunHeader};
use crate::schedule::{self, Step};
use crate::servers::{self, Ctx, Kind, Load, Warm};
use crate::settings::ThpState;
use crate::stop;
use crate::summary;

fn now() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

/// The perfpilot binary: given, else next to this one (both are built into one target
/// directory), else on PATH.
fn perfpilot_binary(given: Option<&Path>) -> Result<PathBuf> {
    if let Some(p) = given {
        return Ok(p.to_path_buf());
    }
    let sibling = std::env::current_exe()
        .ok()
        .and_then(|e| Some(e.parent()?.join("perfpilot")));
    sibling
        .filter(|p| p.is_file())
        .or_else(|| perfpilot_lab::tool::find("perfpilot"))
        .context("the perfpilot binary was not found next to perfpilot-proof or on PATH: build it (scripts/proof does) or pass --perfpilot")
}

/// The results already in a file: its seed and the (round, server, cell) measured.
/// A cell run by its round, server and cell names.
type Done = HashSet<(u32, String, String)>;

fn resumed(path: &Path) -> Result<(u64, Done)> {
    let lines = record::read(path)?;
    let seed = lines
        .iter()
        .rev()
        .find_map(|l| match l {
            Line::Run(h) => Some(h.seed),
            Line::Cell(_) => None,
        })
        .with_context(|| {
            format!(
                "{} has no run header: is it a results file?",
                path.display()
            )
        })?;
    let done = lines
        .iter()
        .filter_map(|l| match l {
            Line::Cell(c) if c.outcome == Outcome::Ok => {
                Some((c.round, c.server.clone(), c.cell.clone()))
            }
            _ => None,
        })
        .collect();
    Ok((seed, done))
}

/// Runs the proof.
pub fn run(a: RunArgs) -> Result<()> {
    if !perfpilot_sys::user::is_root() {
        bail!(
            "perfpilot-proof run must run as root: its cells change global kernel settings (THP, huge pages) and start servers as their own users"
        );
    }
    let fs = Fs::live();
    let (out, seed, done) = match &a.resume {
        Some(p) => {
            let (seed, done) = resumed(p)?;
            (p.clone(), seed, done)
        }
        None => {
            let default = PathBuf::from(format!("proof-{}.jsonl", now().replace(':', "-")));
            (a.out.clone().unwrap_or(default), a.seed, HashSet::new())
        }
    };
    let (work, _tmp) = match &a.work_dir {
        Some(d) => {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
            (d.clone(), None)
        }
        None => {
            let t = tempfile::Builder::new()
                .prefix("perfpilot-proof-")
                .tempdir()
                .context("creating a temporary work directory")?;
            (t.path().to_path_buf(), Some(t))
        }
    };
    // Servers run as their own users and must reach their directories below this one.
    std::fs::set_permissions(&work, std::fs::Permissions::from_mode(0o755))?;
    let ctx = Ctx {
        work: work.clone(),
        perfpilot: perfpilot_binary(a.perfpilot.as_deref())?,
        self_exe: std::env::current_exe().context("finding this binary")?,
        sizes: a.sizes.clone(),
    };
    let args: Vec<String> = std::env::args().collect();
    let header = RunHeader {
        command: shlex::try_join(args.iter().map(String::as_str))
            .unwrap_or_else(|_| args.join(" ")),
        seed,
        started: now(),
        machine: Machine::read(&fs),
    };
    record::append(&out, &Line::Run(header.clone()))?;
    eprintln!(
        "proof: results go to {} as each cell ends; work directory {}",
        out.display(),
        work.display()
    );
    eprintln!("proof: machine: {}", header.machine.describe());

    let mut servers: HashMap<ServerName, Box<dyn Kind>> =
        a.servers.iter().map(|&s| (s, servers::server(s))).collect();
    if a.install {
        let mut tools: Vec<install::Tool> = servers.values().flat_map(|s| s.tools()).collect();
        tools.extend(a.cells.iter().flat_map(|&c| cells::tools(c)));
        install::install(&tools)?;
    }
    let plan = schedule::plan(&a.servers, &a.cells, a.rounds, seed);
    let mut prepared: HashMap<ServerName, std::result::Result<(), String>> = HashMap::new();
    let total = plan.len();
    for (i, step) in plan.iter().enumerate() {
        if done.contains(&(
            step.round,
            step.server.name().to_string(),
            step.cell.name().to_string(),
        )) {
            continue;
        }
        if stop::stopping() {
            break;
        }
        eprintln!(
            "proof: [{}/{total}] round {} {} {}",
            i + 1,
            step.round,
            step.server.name(),
            step.cell.name()
        );
        let Some(server) = servers.get_mut(&step.server) else {
            continue;
        };
        let rec = run_cell(&a, &fs, &ctx, *step, server.as_mut(), &mut prepared);
        if stop::stopping() {
            eprintln!(
                "proof: interrupted: this cell is not recorded (resume with --resume {})",
                out.display()
            );
            break;
        }
        eprintln!("proof:   {}", describe(&rec));
        record::append(&out, &Line::Cell(Box::new(rec)))?;
    }
    let text = summarize_file(&out, a.write_doc.as_deref())?;
    println!("{text}");
    stop::check_stop()
}

fn describe(r: &CellRecord) -> String {
    match (r.outcome, r.throughput) {
        (Outcome::Ok, Some(t)) => format!(
            "{} {}, p99 {}{}",
            perfpilot_units::number(t),
            r.unit,
            r.p99_ms
                .map(perfpilot_units::duration_ms)
                .unwrap_or_else(|| "—".to_string()),
            r.perfpilot
                .as_ref()
                .map(|d| format!(
                    ", daemon: {} actions, first kept {}",
                    d.actions.len(),
                    d.first_kept_s
                        .map(perfpilot_units::duration_secs)
                        .unwrap_or_else(|| "none".to_string())
                ))
                .unwrap_or_default()
        ),
        _ => format!("{:?}: {}", r.outcome, r.error.clone().unwrap_or_default()),
    }
}

/// Prints (returns) the table of a results file and writes it into `doc` when given.
pub fn summarize_file(path: &Path, doc: Option<&Path>) -> Result<String> {
    let lines = record::read(path)?;
    let header = lines.iter().find_map(|l| match l {
        Line::Run(h) => Some(h.clone()),
        Line::Cell(_) => None,
    });
    let cells: Vec<CellRecord> = lines
        .into_iter()
        .filter_map(|l| match l {
            Line::Cell(c) => Some(*c),
            Line::Run(_) => None,
        })
        .collect();
    let text = crate::doc::section(header.as_ref(), &summary::markdown(&cells));
    if let Some(d) = doc {
        crate::doc::write(d, &text)?;
        eprintln!("proof: wrote the table into {}", d.display());
    }
    Ok(text)
}

fn run_cell(
    a: &RunArgs,
    fs: &Fs,
    ctx: &Ctx,
    step: Step,
    server: &mut dyn Kind,
    prepared: &mut HashMap<ServerName, std::result::Result<(), String>>,
) -> CellRecord {
    let mut rec = CellRecord {
        round: step.round,
        server: step.server.name().to_string(),
        cell: step.cell.name().to_string(),
        outcome: Outcome::Failed,
        error: None,
        started: now(),
        throughput: None,
        unit: String::new(),
        p99_ms: None,
        errors: 0,
        thp: ThpState::read(fs),
        perfpilot: None,
        restored: Vec::new(),
    };
    let mut tools = server.tools();
    tools.extend(cells::tools(step.cell));
    if let Some(missing) = install::check(&tools) {
        rec.outcome = Outcome::NotInstalled;
        rec.error = Some(missing);
        return rec;
    }
    let prep = prepared.entry(step.server).or_insert_with(|| {
        server
            .prepare(ctx)
            .map_err(|e| format!("preparing {}: {e:#}", step.server.name()))
    });
    if let Err(e) = prep {
        rec.error = Some(e.clone());
        return rec;
    }
    let dir = ctx.work.join("cells").join(format!(
        "{}-{}-{}",
        step.round,
        step.server.name(),
        step.cell.name()
    ));
    if let Err(e) = fresh_dir(&dir) {
        rec.error = Some(format!("{e:#}"));
        return rec;
    }
    let mut setup = match cells::apply(step.cell, fs, ctx, server, &dir) {
        Ok(s) => s,
        Err(e) => {
            rec.error = Some(format!("setting up {}: {e:#}", step.cell.name()));
            return rec;
        }
    };
    rec.thp = ThpState::read(fs);
    rec.started = now();
    let warmup = a.warmup_of(step.server);
    let result = measure(a, warmup, ctx, server, step.server.process(), &mut setup);
    let (report, restored) = setup.finish();
    rec.perfpilot = report;
    rec.restored = restored;
    match result {
        Ok(load) => {
            rec.outcome = Outcome::Ok;
            rec.throughput = Some(load.throughput);
            rec.unit = load.unit.to_string();
            rec.p99_ms = load.p99_ms;
            rec.errors = load.errors;
        }
        Err(e) => rec.error = Some(format!("{e:#}")),
    }
    rec
}

/// An empty directory for a cell: a kept `--work-dir` may hold this cell's directory from an
/// interrupted run, and its daemon state would mix that run's actions into this cell's.
fn fresh_dir(dir: &Path) -> Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir)
            .with_context(|| format!("removing {} left by an earlier run", dir.display()))?;
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))
}

/// Fresh start, prewarm, settle, warm-up load, measured load, stop.
fn measure(
    a: &RunArgs,
    warmup: Duration,
    ctx: &Ctx,
    server: &mut dyn Kind,
    process: &str,
    setup: &mut CellSetup,
) -> Result<Load> {
    let mut run = server.start(ctx, setup.start)?;
    setup.server_started(process);
    let loaded = (|| {
        server.prewarm(ctx, &mut run)?;
        stop::sleep(a.settle)?;
        // The warm-up, then on while the cell's daemon decides: the verdict is measured on a
        // loaded server, and the measured load starts after it.
        let deciding = || setup.daemon_deciding();
        let w = Warm {
            min: warmup,
            max: warmup + a.decide_within,
            more: &deciding,
        };
        server.warm(ctx, &mut run, &w)?;
        stop::check_stop()?;
        let load = server.load(ctx, &mut run, a.measure, true)?;
        run.proc.check_alive()?;
        Ok::<Load, anyhow::Error>(load)
    })();
    let stopped = server.stop(ctx, run);
    let load = loaded?;
    stopped?;
    Ok(load)
}

#[cfg(test)]
mod tests {
    use super::fresh_dir;

    #[test]
    fn a_cell_directory_left_by_an_interrupted_run_is_emptied_before_the_cell() {
        let work = tempfile::tempdir().unwrap();
        let dir = work.path().join("cells/1-postgres-perfpilot");
        std::fs::create_dir_all(dir.join("perfpilot-state")).unwrap();
        std::fs::write(
            dir.join("perfpilot-state/perfpilot.db"),
            b"an earlier daemon",
        )
        .unwrap();
        fresh_dir(&dir).unwrap();
        assert!(dir.is_dir());
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        // A directory that did not exist is made.
        let new = work.path().join("cells/1-redis-untuned");
        fresh_dir(&new).unwrap();
        assert!(new.is_dir());
    }
}
