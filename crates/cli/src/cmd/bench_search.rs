//! `perfpilot bench search`: the iterated search scored on a known answer — a planted response
//! surface over 2,500 configurations whose trials are computed with 5 % noise and run through
//! the study runner itself (`perfpilot_study::surface`), once per seed; prints each seed's
//! choice against the true best and the trials it took against an exhaustive run's.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use perfpilot_observe::{Fs, Topology};
use perfpilot_study::Budget;
use perfpilot_study::surface::{self, Bench};

#[derive(Args)]
pub struct SearchArgs {
    /// Seeds to run: 1..=N.
    #[arg(long, default_value_t = 10)]
    seeds: u64,
    /// The first seed.
    #[arg(long, default_value_t = 1)]
    first_seed: u64,
    /// The budget in trials (1250) or a share of an exhaustive run's ("10%") [default: the
    /// bed's, 1,250 trials: 10 % of an exhaustive run with 5 repetitions].
    #[arg(long, value_parser = parse_budget)]
    budget: Option<Budget>,
    /// Where the runs' stores go [default: a temporary directory, removed after].
    #[arg(long, value_name = "DIR")]
    store_dir: Option<PathBuf>,
    /// Print the bed's study file and exit.
    #[arg(long)]
    print_study: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

fn parse_budget(s: &str) -> Result<Budget, String> {
    Budget::parse(s).ok_or_else(|| format!("{s:?}: give trials (1250) or a share (\"10%\")"))
}

pub fn run(a: SearchArgs) -> anyhow::Result<()> {
    if a.print_study {
        print!("{}", surface::STUDY);
        return Ok(());
    }
    let topo = Topology::read(&Fs::live()).context("reading the machine's topology")?;
    let (dir, temporary) = match &a.store_dir {
        Some(d) => (d.clone(), false),
        None => (
            std::env::temp_dir().join(format!("perfpilot-bench-search-{}", std::process::id())),
            true,
        ),
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let seeds: Vec<u64> = (a.first_seed..a.first_seed + a.seeds).collect();
    let bench = surface::bench(&seeds, a.budget, &dir, &topo);
    if temporary {
        let _ = std::fs::remove_dir_all(&dir);
    }
    let bench = bench?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&bench)?);
    } else {
        print_bench(&bench);
    }
    Ok(())
}

fn print_bench(b: &Bench) {
    println!(
        "known-answer bed: {} configurations; best {} at {:.1}; {} within 2 % of it",
        b.configurations, b.best.0, b.best.1, b.within_two_percent
    );
    println!(
        "budget {} trials; an exhaustive run with 5 repetitions takes {} ({:.1} %)",
        b.budget,
        b.exhaustive_five,
        100.0 * b.budget as f64 / b.exhaustive_five as f64
    );
    println!(
        "{:>5} {:>8} {:>6} {:>8} {:>8} {:>7} {:>10} {:>11} {:>7}  chosen",
        "seed",
        "of best",
        "rank",
        "trials",
        "of ex×5",
        "raced",
        "iterations",
        "best raced",
        "its n"
    );
    for r in &b.runs {
        println!(
            "{:>5} {:>7.1}% {:>6} {:>8} {:>7.1}% {:>7} {:>10} {:>10.1}% {:>7}  {}",
            r.seed,
            100.0 * r.share_of_best,
            r.rank,
            r.trials,
            100.0 * r.trials as f64 / b.exhaustive_five as f64,
            r.raced,
            r.iterations,
            100.0 * r.best_raced,
            r.chosen_trials,
            r.chosen
        );
    }
    let within = b.runs.iter().filter(|r| r.share_of_best >= 0.98).count();
    let worst = b
        .runs
        .iter()
        .map(|r| r.share_of_best)
        .fold(f64::INFINITY, f64::min);
    let most = b.runs.iter().map(|r| r.trials).max().unwrap_or(0);
    println!(
        "within 2 % of the best: {within} of {} seeds; worst {:.1} %; trials at most {most} ({:.1} % of exhaustive × 5)",
        b.runs.len(),
        100.0 * worst,
        100.0 * most as f64 / b.exhaustive_five as f64
    );
}
