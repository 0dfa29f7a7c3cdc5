//! `perfpilot bench verdicts`: a signal recorded with nothing changed (`scripts/signal-trace`)
//! replayed as no-change trials at every start, judged with an interval that takes the windows
//! as independent and as the daemon judges them; prints how often each decided something.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use perfpilot_optimize::trace::{self, ReplayPlan};

#[derive(Args)]
pub struct VerdictsArgs {
    /// The trace: `seconds,counter,cpu_seconds` rows, cumulative, as scripts/signal-trace writes.
    trace: PathBuf,
    /// The window, seconds (the daemon's for PostgreSQL's once-a-second counter: 8).
    #[arg(long, default_value_t = 8.0)]
    window: f64,
    /// The least windows a side, and the baseline that plans the count [default: the
    /// daemon's tunable `windows`].
    #[arg(long)]
    windows: Option<usize>,
    /// The most windows a side [default: tunable `max_windows`].
    #[arg(long)]
    max_windows: Option<usize>,
    /// The interval's half-width a trial plans for [default: tunable `resolution`].
    #[arg(long)]
    resolution: Option<f64>,
    /// The verdicts' confidence level [default: tunable `confidence`].
    #[arg(long)]
    confidence: Option<f64>,
    /// The gain a kept action's interval must clear [default: tunable `min_effect`].
    #[arg(long)]
    min_effect: Option<f64>,
}

pub fn run(a: VerdictsArgs) -> anyhow::Result<()> {
    let d = ReplayPlan::default();
    let plan = ReplayPlan {
        min: a.windows.unwrap_or(d.min),
        max: a.max_windows.unwrap_or(d.max),
        resolution: a.resolution.unwrap_or(d.resolution),
        confidence: a.confidence.unwrap_or(d.confidence),
        min_effect: a.min_effect.unwrap_or(d.min_effect),
    };
    anyhow::ensure!(
        a.window > 0.0 && plan.min >= 2 && plan.max >= plan.min,
        "--window must be positive, --windows at least 2 and --max-windows at least --windows"
    );
    let (n, r) = trace::replay_file(&a.trace, a.window, &plan)
        .with_context(|| format!("replaying {}", a.trace.display()))?;
    println!(
        "trace: {}, {n} windows of {} s",
        a.trace.display(),
        a.window
    );
    println!(
        "windows: cv {:.1} %, lag-1 autocorrelation {:.2}",
        r.cv * 100.0,
        r.lag1
    );
    let (least, median, most) = r.planned_spread().unwrap_or_default();
    println!(
        "no-change trials, one at every start: {} (windows a side planned: {least} to {most}, median {median})",
        r.plain.trials(),
    );
    for (what, d) in [
        ("taking the windows as independent", r.plain),
        (
            "allowing for their autocorrelation (the daemon's)",
            r.serial,
        ),
    ] {
        println!(
            "  {what}: {} of {} decided something ({} kept, {} reverted), {} neutral",
            d.false_verdicts(),
            d.trials(),
            d.keep,
            d.revert,
            d.neutral
        );
    }
    Ok(())
}
