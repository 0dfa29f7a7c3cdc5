//! `perfpilot bench verdicts`: a signal recorded with nothing changed (`scripts/signal-trace`)
//! replayed as trials at every start: planned before/after trials judged with an interval that
//! takes the windows as independent and as the daemon judges them, then each trial design as the
//! daemon runs it, with a true effect applied (`--effect`) or none; prints how often each
//! decided what, and how soon.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use perfpilot_optimize::design::replay::Effect;
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
    /// The design to replay: switchback, control (needs --control), before_after, one_way,
    /// interleave (the old fixed off/on pairs), or all.
    #[arg(long, default_value = "all")]
    design: String,
    /// A true multiplicative effect applied while the change is on (1: none).
    #[arg(long, default_value_t = 1.0)]
    effect: f64,
    /// Seconds the effect takes to set in (and to go again when switched off).
    #[arg(long, default_value_t = 0.0)]
    settle: f64,
    /// Seconds each switchback period drops after a switch (the tunable `switch_settle_s`; the
    /// daemon drops at least one window for huge pages and read-ahead).
    #[arg(long, default_value_t = 0.0)]
    switch_settle: f64,
    /// Seconds each switch of a switchback takes (a collapse of gigabytes): the trace flows on,
    /// unjudged, and the periods are planned for it.
    #[arg(long, default_value_t = 0.0)]
    switch: f64,
    /// With --switch: the periods are planned as if switches took no time.
    #[arg(long)]
    switch_unplanned: bool,
    /// The trace of a sibling recorded over the same time, for the control design.
    #[arg(long)]
    control: Option<PathBuf>,
    /// A trial starts at every N-th window.
    #[arg(long, default_value_t = 1)]
    stride: usize,
    /// The seed of the switchback periods' orders.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print the designs' tallies as JSON (one object, or one per design under its name).
    #[arg(long)]
    json: bool,
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
    anyhow::ensure!(
        a.effect > 0.0
            && a.settle >= 0.0
            && a.switch_settle >= 0.0
            && a.switch >= 0.0
            && a.stride >= 1,
        "--effect must be positive, --settle, --switch-settle and --switch not negative and --stride at least 1"
    );
    let designs = chosen_designs(&a)?;
    let (n, r) = trace::replay_file(&a.trace, a.window, &plan)
        .with_context(|| format!("replaying {}", a.trace.display()))?;
    let readings =
        trace::read(&a.trace).with_context(|| format!("reading {}", a.trace.display()))?;
    let windows = trace::windows(&readings, a.window);
    let control = match &a.control {
        Some(p) => Some(trace::windows(
            &trace::read(p).with_context(|| format!("reading {}", p.display()))?,
            a.window,
        )),
        None => None,
    };
    let tun = perfpilot_optimize::tunables::Tunables {
        windows: plan.min as f64,
        max_windows: plan.max as f64,
        resolution: plan.resolution,
        confidence: plan.confidence,
        min_effect: plan.min_effect,
        switch_settle_s: a.switch_settle,
        ..Default::default()
    };
    let opts = trace::DesignReplayOptions {
        window_s: a.window,
        effect: Effect {
            ratio: a.effect,
            settle: a.settle / a.window,
        },
        stride: a.stride,
        seed: a.seed,
        tun,
        switch_s: a.switch,
        switch_planned: !a.switch_unplanned,
    };
    let replays: Vec<trace::DesignReplay> = designs
        .iter()
        .filter_map(|d| trace::replay_design(d, &windows, control.as_deref(), &opts))
        .collect();
    if a.json {
        return print_json(&a, &replays);
    }
    print_text(&a, n, &r, &replays);
    Ok(())
}

/// The designs `--design` names (`all`: every one, `control` only with `--control`).
fn chosen_designs(a: &VerdictsArgs) -> anyhow::Result<Vec<&'static str>> {
    let designs: Vec<&'static str> = match a.design.as_str() {
        "all" => trace::DESIGNS
            .into_iter()
            .filter(|d| *d != "control" || a.control.is_some())
            .collect(),
        name => vec![
            *trace::DESIGNS
                .iter()
                .find(|d| **d == name)
                .with_context(|| {
                    format!(
                        "--design {name}: not a design; one of {} or all",
                        trace::DESIGNS.join(", ")
                    )
                })?,
        ],
    };
    anyhow::ensure!(
        !designs.contains(&"control") || a.control.is_some(),
        "--design control needs --control TRACE: the sibling's trace recorded over the same time"
    );
    Ok(designs)
}

/// `--json`: one design's tally, or every design's by name.
fn print_json(a: &VerdictsArgs, replays: &[trace::DesignReplay]) -> anyhow::Result<()> {
    let obj = |d: &trace::DesignReplay| {
        let t = &d.tally;
        serde_json::json!({
            "trials": t.trials,
            "decided_no_change": t.decided_no_change(),
            "kept": t.kept,
            "kept_no_harm": t.kept_no_harm,
            "reverted": t.reverted,
            "neutral": t.neutral,
            "median_decision_s": d.median_decision_s,
        })
    };
    let out = match replays {
        [one] if a.design != "all" => obj(one),
        all => {
            serde_json::Value::Object(all.iter().map(|d| (d.design.to_string(), obj(d))).collect())
        }
    };
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}

/// The trace's windows, the plain and serial no-change replays `r` of its `n` windows, then
/// each design's tally.
fn print_text(a: &VerdictsArgs, n: usize, r: &trace::Replay, replays: &[trace::DesignReplay]) {
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
    let effect = if a.effect == 1.0 {
        "no effect".to_string()
    } else {
        format!(
            "a true effect of ×{} (setting in over {} s)",
            a.effect, a.settle
        )
    };
    println!(
        "each design as the daemon runs it, a trial at every {} window(s), {effect}:",
        a.stride
    );
    for d in replays {
        let t = &d.tally;
        println!(
            "  {:<12} {} trials: {} kept, {} kept as no harm, {} reverted, {} neutral; verdict after {} (median)",
            d.design,
            t.trials,
            t.kept,
            t.kept_no_harm,
            t.reverted,
            t.neutral,
            perfpilot_units::duration_secs(d.median_decision_s)
        );
    }
}
