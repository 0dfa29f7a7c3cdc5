//! The report as Markdown.

use std::fmt::Write as _;

use super::{Report, TrialRow, chance_best_line, figures_line};
use crate::race::{Elimination, Left};
use crate::scale::Scaling;
use crate::summary::{ConfigSummary, Summary};
use perfpilot_store::TrialPhase;
use perfpilot_units::MarkdownTable;

/// How a configuration left the race, in a word for the table.
fn left_word(kind: Left) -> &'static str {
    match kind {
        Left::Worse => "worse",
        Left::Failed => "failed",
        Left::Equivalent => "equivalent",
        Left::Tied => "tied",
        Left::Unlikely => "unlikely",
        Left::FarBehind => "far behind",
        Left::Settled => "settled",
        Left::NotElite => "not an elite",
    }
}

/// An iterated search: each iteration's race, its elites, and the sampling distributions its
/// new configurations were drawn from.
fn iterations(s: &mut String, search: &crate::iterate::SearchSummary) {
    let _ = writeln!(
        s,
        "### Iterated search\n\nA space of {}; {} iterations planned, at most {} elites kept, {} race trials.\n",
        search.space, search.planned, search.elites, search.race_budget
    );
    for it in &search.iterations {
        let _ = writeln!(s, "- {}", super::iteration_line(it));
        if !it.sampling.is_empty() {
            let spread: Vec<String> = it
                .sampling
                .iter()
                .map(|p| format!("{}: {}", p.parameter, p.spread))
                .collect();
            let _ = writeln!(s, "  - sampled from: {}", spread.join("; "));
        }
        for (k, m) in &it.elites {
            let _ = writeln!(s, "  - elite {k}: mean {}", super::figure(*m));
        }
    }
    let _ = writeln!(s);
}

/// The report as Markdown.
pub fn to_markdown(r: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# Study {:?}, run {} ({})\n", r.name, r.run, r.state);
    let machine: Vec<String> = super::machine_rows(&r.host)
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    let _ = writeln!(
        s,
        "Study file: `{}`. Machine: {}.\n",
        r.file,
        if machine.is_empty() {
            "not recorded".to_string()
        } else {
            machine.join(", ")
        }
    );
    if let Some(sum) = &r.summary {
        best_section(&mut s, r, sum);
    }
    if let Some(sc) = &r.scaling {
        load_sweep_section(&mut s, sc);
    }
    scaling_section(&mut s, r);
    effects_section(&mut s, r);
    super::jobs::sections(&mut s, &r.batch, &r.jobs);
    for (phase, title) in [
        (TrialPhase::Race, "Race trials"),
        (TrialPhase::Confirm, "Confirmation trials"),
        (TrialPhase::Scale, "Load sweep trials"),
    ] {
        let rows: Vec<&TrialRow> = r.trials.iter().filter(|t| t.phase == phase).collect();
        if !rows.is_empty() {
            trial_table(&mut s, title, &rows);
        }
    }
    if let Some(a) = &r.apply {
        let _ = writeln!(
            s,
            "## Apply script ({})\n\n```sh\n{}```\n",
            a.config, a.shell
        );
        for (p, d) in &a.dropins {
            let _ = writeln!(s, "`{p}`:\n\n```ini\n{d}```\n");
        }
    }
    s
}

/// "Best configuration": the winner, its figures against the baseline, what left the race,
/// warnings and notes, and the per-configuration tables.
fn best_section(s: &mut String, r: &Report, sum: &Summary) {
    let _ = writeln!(s, "## Best configuration\n");
    let _ = writeln!(s, "Objective: {}.\n", sum.goal);
    match &sum.winner {
        Some(w) => {
            let _ = writeln!(s, "**{w}** — {}.\n", sum.verdict);
        }
        None => {
            let _ = writeln!(s, "No winner: {}.\n", sum.verdict);
        }
    }
    let _ = writeln!(s, "Baseline: {}.", sum.baseline);
    if let Some(line) = figures_line(sum) {
        let _ = writeln!(s, "{}.", capitalized(&line));
    }
    if let Some(g) = &sum.gain {
        let _ = writeln!(
            s,
            "Gain over the baseline: ×{:.3}, 95 % CI {:.3}–{:.3} over {} paired rounds (Wilcoxon p = {}).",
            g.ratio,
            g.low,
            g.high,
            g.pairs,
            f(sum.gain_p_value, 4)
        );
    }
    if !sum.indistinguishable.is_empty() {
        let _ = writeln!(
            s,
            "Not significantly different from the winner, or equivalent to it within the effect sought: {}.",
            sum.indistinguishable.join("; ")
        );
    }
    if let Some(line) = chance_best_line(&sum.chance_best) {
        let _ = writeln!(s, "{line}.");
    }
    if let Some(note) = &r.apply_note {
        let _ = writeln!(s, "\n{}.", capitalized(note));
    }
    let _ = writeln!(
        s,
        "\n{} trials in {} rounds, {:.0} s{}.\n",
        sum.trials_run,
        sum.rounds,
        sum.elapsed_s,
        if sum.racing {
            ", racing on"
        } else {
            ", racing off (exhaustive)"
        }
    );
    if let Some(search) = &sum.search {
        iterations(s, search);
    }
    // An iterated search's hundreds of departures are its iterations' story.
    if !sum.eliminated.is_empty() && sum.search.is_none() {
        let _ = writeln!(s, "### Left the race\n");
        for e in &sum.eliminated {
            let _ = writeln!(s, "- {} after round {}: {}", e.config, e.round, e.reason);
        }
        let _ = writeln!(s);
    }
    for (title, lines) in [("Warnings", &sum.warnings), ("Notes", &sum.notes)] {
        if !lines.is_empty() {
            let _ = writeln!(s, "### {title}\n");
            for w in lines {
                let _ = writeln!(s, "- {w}");
            }
            let _ = writeln!(s);
        }
    }
    let _ = writeln!(s, "### Configurations in the race (race trials only)\n");
    config_table(s, &sum.unit, &sum.configurations, Some(&sum.eliminated));
    if !sum.confirmation.is_empty() {
        let _ = writeln!(
            s,
            "### Confirmation (paired rounds of the winner and the baseline after the race)\n"
        );
        config_table(s, &sum.unit, &sum.confirmation, None);
    }
}

/// "Load sweep": each load point, the saturation and knee, and the points for `model fit`.
fn load_sweep_section(s: &mut String, sc: &Scaling) {
    let _ = writeln!(s, "## Load sweep of {}\n", sc.config);
    let mut t = MarkdownTable::new(&[
        "users",
        "throughput",
        "mean response (ms)",
        "p99 (ms)",
        "errors",
        "CPU cores",
    ]);
    for p in &sc.points {
        t.row(&[
            p.users.to_string(),
            format!("{:.1}", p.throughput),
            f(p.response_time_s.map(|v| v * 1000.0), 2),
            f(p.p99_ms, 2),
            p.errors.to_string(),
            f(p.cpu.get("app").copied(), 2),
        ]);
    }
    s.push_str(&t.render());
    let _ = writeln!(
        s,
        "\nSaturation (95 % of the peak throughput) at {} users; knee (highest throughput / response time) at {} users.\n",
        sc.saturation_users.map_or("–".into(), |u| u.to_string()),
        sc.knee_users.map_or("–".into(), |u| u.to_string())
    );
    let _ = writeln!(
        s,
        "Points for `perfpilot model fit`:\n\n```toml\n{}```\n",
        sc.model_toml(0.0)
    );
}

/// "Scaling": per instance count, the best configuration's throughput and CPU.
fn scaling_section(s: &mut String, r: &Report) {
    if !r.scaling_view.is_empty() {
        let _ = writeln!(s, "## Scaling: throughput and CPU vs instances\n");
        let mut t = MarkdownTable::new(&[
            "instances",
            "best configuration",
            "throughput",
            "CPU cores",
            "per core",
        ]);
        for v in &r.scaling_view {
            t.row(&[
                v.instances.to_string(),
                v.config.clone(),
                format!("{:.1}", v.throughput),
                f(v.cpu_cores, 2),
                f(v.per_core, 1),
            ]);
        }
        let _ = writeln!(s, "{}", t.render());
    }
}

/// "Effect of each factor": per level, the mean objective and its ratio to the overall mean.
fn effects_section(s: &mut String, r: &Report) {
    if !r.effects.is_empty() {
        let _ = writeln!(
            s,
            "## Effect of each factor (mean objective over successful race trials)\n"
        );
        for e in &r.effects {
            let parts: Vec<String> = e
                .levels
                .iter()
                .map(|(l, m, n, rel)| format!("{l}: {m:.2} (×{rel:.3}, {n} trials)"))
                .collect();
            let _ = writeln!(s, "- **{}** — {}", e.factor, parts.join("; "));
        }
        let _ = writeln!(s);
    }
}

/// A table of per-configuration figures; `eliminated` adds the column of when each left the
/// race.
fn config_table(
    s: &mut String,
    unit: &str,
    rows: &[ConfigSummary],
    eliminated: Option<&[Elimination]>,
) {
    let mut header: Vec<String> = [
        "configuration".to_string(),
        "trials".into(),
        "ok".into(),
        format!("mean ({unit})"),
        "stdev".into(),
        "throughput".into(),
        "CPU cores".into(),
    ]
    .into();
    if eliminated.is_some() {
        header.push("left the race".into());
    }
    let mut t = MarkdownTable::new(&header);
    for c in rows {
        let mut row = vec![
            c.config.clone(),
            c.trials.to_string(),
            c.ok.to_string(),
            f(c.mean, 2),
            f(c.stdev, 2),
            f(c.throughput, 1),
            f(c.cpu_cores, 2),
        ];
        if let Some(elim) = eliminated {
            row.push(match elim.iter().find(|e| e.config == c.config) {
                Some(e) => format!("round {} ({})", e.round, left_word(e.kind)),
                None => "–".into(),
            });
        }
        t.row(&row);
    }
    let _ = writeln!(s, "{}", t.render());
}

/// A section of trials: one row each.
fn trial_table(s: &mut String, title: &str, rows: &[&TrialRow]) {
    let _ = writeln!(s, "## {title}\n");
    let mut table = MarkdownTable::new(&[
        "id",
        "round",
        "configuration",
        "status",
        "value",
        "throughput",
        "p99 ms",
        "errors",
        "CPU cores",
        "reason",
    ]);
    for t in rows {
        table.row(&[
            t.id.to_string(),
            t.round.to_string(),
            t.config.clone(),
            t.status.to_string(),
            f(t.value, 2),
            f(t.throughput, 1),
            f(t.p99_ms, 2),
            t.errors.map_or("–".into(), |e| e.to_string()),
            f(t.cpu_cores, 2),
            t.reason.clone(),
        ]);
    }
    let _ = writeln!(s, "{}", table.render());
}

/// `line` with its first letter in upper case, to open a sentence.
fn capitalized(line: &str) -> String {
    let mut c = line.chars();
    match c.next() {
        Some(first) => first.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

/// A figure with `digits` decimals, or `–` when there is none.
pub(super) fn f(v: Option<f64>, digits: usize) -> String {
    match v {
        Some(x) if x.is_finite() => format!("{x:.digits$}"),
        _ => "–".into(),
    }
}
