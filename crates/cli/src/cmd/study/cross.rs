//! The cross-system part of `study compare`'s text: the two runs' machines side by side, and
//! per configuration both measured, run b's result over run a's, per core and per instance.

use perfpilot_lab::MachineFacts;
use perfpilot_study::cross::{CrossRatio, CrossSystem};
use perfpilot_units::{bytes, number};

/// The two machines side by side (`la`, `lb`: how the runs are named).
pub(super) fn print_machines(c: &CrossSystem, la: &str, lb: &str) {
    let width = la.chars().count().max(20);
    println!("{:<10} {:<width$} {}", "machine", la, lb);
    let (a, b) = (facts(&c.machine_a), facts(&c.machine_b));
    for ((name, x), (_, y)) in a.into_iter().zip(b) {
        println!("{name:<10} {x:<width$} {y}");
    }
}

/// A machine's rows: name and value (`–` when the run did not record it).
fn facts(m: &MachineFacts) -> [(&'static str, String); 5] {
    let known = |s: Option<String>| s.unwrap_or_else(|| "–".into());
    let mut cpus = known(m.cpus().map(|n| n.to_string()));
    if let (Some(cores), Some(smt)) = (m.cores, m.smt) {
        cpus.push_str(&format!(" ({cores} cores × SMT{smt})"));
    }
    [
        ("CPUs", cpus),
        ("CPU model", known(m.cpu_model.clone())),
        ("memory", known(m.memory_bytes.map(bytes))),
        ("kernel", known(m.kernel.clone())),
        ("hostname", known(m.hostname.clone())),
    ]
}

/// `×1.20 (1.15–1.26)`, or `–` when there is no ratio.
fn cell(r: &Option<CrossRatio>) -> String {
    match r {
        Some(CrossRatio {
            ratio,
            low: Some(lo),
            high: Some(hi),
        }) => format!("×{ratio:.3} ({lo:.3}–{hi:.3})"),
        Some(r) => format!("×{:.3} (no CI: < 2 trials)", r.ratio),
        None => "–".into(),
    }
}

/// The per-configuration ratios of run `lb` over run `la`.
pub(super) fn print_ratios(c: &CrossSystem, la: &str, lb: &str) {
    println!("{lb} over {la}, per configuration both measured (> 1: {lb} better; 95 % CI, Welch):");
    if let Some(why) = &c.refused {
        println!("  no ratios: {why}");
        return;
    }
    let width = c
        .configs
        .iter()
        .map(|r| r.config.len())
        .max()
        .unwrap_or(0)
        .max(13);
    println!(
        "  {:<width$} {:>7} {:>14} {:>14} {:>26} {:>26} {:>26}",
        "configuration",
        "trials",
        format!("a mean ({})", c.unit),
        format!("b mean ({})", c.unit),
        "result",
        format!("{} per core", c.rate_unit),
        format!("{} per instance", c.rate_unit),
    );
    for r in &c.configs {
        println!(
            "  {:<width$} {:>7} {:>14} {:>14} {:>26} {:>26} {:>26}",
            r.config,
            format!("{}/{}", r.trials_a, r.trials_b),
            number(r.mean_a),
            number(r.mean_b),
            cell(&r.result),
            cell(&r.per_core),
            cell(&r.per_instance),
        );
    }
    if c.configs.is_empty() {
        println!("  (no configuration has successful trials in both runs)");
    }
    if !c.only_a.is_empty() {
        println!("  only in {la}: {}", c.only_a.join("; "));
    }
    if !c.only_b.is_empty() {
        println!("  only in {lb}: {}", c.only_b.join("; "));
    }
}
