//! `perfpilot capacity`: run a capacity file (sweeps, fit from the lowest loads, predictions
//! checked point by point, scale-out), or re-analyse and render a saved run.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result, bail};
use clap::Args;
use perfpilot_capacity::{Capacity, Measured, analyse_measured, report};

/// Arguments of `perfpilot capacity`.
#[derive(Args, Debug)]
pub struct CapacityArgs {
    /// The capacity file (TOML; docs/capacity.md).
    pub file: PathBuf,
    /// Directory for the results: run.json, report.html, validation.md (created).
    #[arg(long, default_value = "capacity-out")]
    pub out: PathBuf,
    /// Do not measure: re-fit and render the run saved in OUT/run.json with this file's
    /// fitting choices.
    #[arg(long)]
    pub from_saved: bool,
}

/// Runs `perfpilot capacity`.
pub fn run(a: CapacityArgs) -> Result<()> {
    let cap = Capacity::load(&a.file)?;
    let saved = a.out.join("run.json");
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let write = |name: &str, text: &str| -> Result<()> {
        let p = a.out.join(name);
        std::fs::write(&p, text).with_context(|| format!("writing {}", p.display()))
    };
    let measured: Measured = if a.from_saved {
        let text = std::fs::read_to_string(&saved).with_context(|| {
            format!(
                "reading {} (run without --from-saved first)",
                saved.display()
            )
        })?;
        serde_json::from_str(&text)
            .with_context(|| format!("{} is not a saved capacity run", saved.display()))?
    } else {
        if std::env::consts::OS != "linux" {
            bail!("perfpilot capacity deploys with Linux cgroups and namespaces");
        }
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        ctrlc::set_handler(move || {
            flag.store(true, Ordering::SeqCst);
            eprintln!("\nperfpilot capacity: Ctrl-C: finishing the current point, then stopping every tier");
        })
        .context("installing the Ctrl-C handler")?;
        let m = perfpilot_capacity::measure(&cap, &stop, &|line| eprintln!("{line}"))?;
        // The measurements first: a fit that fails can be retried with --from-saved.
        write("run.json", &serde_json::to_string_pretty(&m)?)?;
        m
    };
    let result = analyse_measured(&cap, measured).with_context(|| {
        format!(
            "fitting the measurements (saved in {}: fix the file's [capacity] fit and rerun with --from-saved)",
            saved.display()
        )
    })?;
    if !a.from_saved {
        write("run.json", &serde_json::to_string_pretty(&result)?)?;
    }
    let md = report::to_markdown(&result);
    write("validation.md", &md)?;
    write("report.html", &report::to_html(&result))?;
    println!("{md}");
    println!(
        "Written: {0}/run.json, {0}/validation.md, {0}/report.html",
        a.out.display()
    );
    Ok(())
}
