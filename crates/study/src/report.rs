//! The report of a stored study run: the trial table, the scaling view (throughput and CPU vs
//! instances), the effect of each factor, the best configuration with its evidence, and the
//! apply script that deploys it. Rendered as JSON, Markdown or HTML (with an inline SVG chart).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use perfpilot_drive::Measurement;
use perfpilot_store::{Store, StudyRecord, TrialRecord};
use serde::Serialize;

use crate::error::{Result, StudyError};
use crate::runner::{Left, Scaling, Summary, TrialDetail};
use crate::spec::{Config, Study, render, split_words};
use crate::stats;

/// One row of the trial table.
#[derive(Clone, Debug, Serialize)]
pub struct TrialRow {
    pub id: i64,
    pub phase: String,
    pub round: i64,
    pub config: String,
    pub status: String,
    pub reason: String,
    pub value: Option<f64>,
    pub throughput: Option<f64>,
    pub p99_ms: Option<f64>,
    pub errors: Option<u64>,
    pub cpu_cores: Option<f64>,
}

/// Throughput and CPU at one instance count (the best configuration with that many instances).
#[derive(Clone, Debug, Serialize)]
pub struct ScalingRow {
    pub instances: usize,
    pub config: String,
    pub throughput: f64,
    pub cpu_cores: Option<f64>,
    /// Throughput per busy core.
    pub per_core: Option<f64>,
}

/// The mean objective at each level of a factor, over every successful trial.
#[derive(Clone, Debug, Serialize)]
pub struct FactorEffect {
    pub factor: String,
    /// `(level, mean value, trials, mean / overall mean)`.
    pub levels: Vec<(String, f64, usize, f64)>,
}

/// The apply script of the best configuration.
#[derive(Clone, Debug, Serialize)]
pub struct Apply {
    /// A POSIX shell script starting every instance with its binding and environment.
    pub shell: String,
    /// systemd drop-ins: `(path, content)`, one per instance of a `NAME@.service` template.
    pub dropins: Vec<(String, String)>,
}

/// A study run's report.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub run: i64,
    pub name: String,
    pub file: String,
    pub state: String,
    pub host: serde_json::Value,
    pub summary: Option<Summary>,
    pub scaling: Option<Scaling>,
    pub trials: Vec<TrialRow>,
    pub scaling_view: Vec<ScalingRow>,
    pub effects: Vec<FactorEffect>,
    pub apply: Option<Apply>,
}

fn decode_summary(run: &StudyRecord) -> (Option<Summary>, Option<Scaling>) {
    let Some(text) = &run.summary else {
        return (None, None);
    };
    if let Ok(s) = serde_json::from_str::<Summary>(text) {
        return (Some(s), None);
    }
    #[derive(serde::Deserialize)]
    struct Wrap {
        scaling: Scaling,
    }
    (
        None,
        serde_json::from_str::<Wrap>(text).ok().map(|w| w.scaling),
    )
}

/// Builds the report of run `run` from `store`.
pub fn build(store: &Store, run: i64) -> Result<Report> {
    let rec = store.study(run)?.ok_or_else(|| StudyError::NoRun {
        store: store.path().to_path_buf(),
        run,
    })?;
    let trials = store.trials(run)?;
    let (summary, scaling) = decode_summary(&rec);
    let measurements: Vec<Option<Measurement>> = trials
        .iter()
        .map(|t| {
            t.measurement
                .as_deref()
                .and_then(|j| Measurement::from_json(j).ok())
        })
        .collect();
    let rows: Vec<TrialRow> = trials
        .iter()
        .zip(&measurements)
        .map(|(t, m)| TrialRow {
            id: t.id,
            phase: t.phase.clone(),
            round: t.round,
            config: t.config.clone(),
            status: t.status.clone(),
            reason: t.reason.clone(),
            value: t.value,
            throughput: m.as_ref().map(|m| m.throughput_rps),
            p99_ms: m
                .as_ref()
                .and_then(|m| m.latency.as_ref())
                .and_then(|l| l.p99_ms),
            errors: m.as_ref().map(|m| m.errors),
            cpu_cores: m
                .as_ref()
                .and_then(|m| m.cpu.as_ref())
                .map(|c| c.iter().map(|u| u.cores).sum()),
        })
        .collect();
    let study = Study::parse(&rec.spec, Path::new(&rec.file)).ok();
    let higher = summary.as_ref().is_none_or(|s| s.higher_is_better);

    // Scaling view: per instance count, the configuration with the best mean objective.
    // Per configuration: its levels, objective values, throughputs, busy cores.
    type Figures = (Config, Vec<f64>, Vec<f64>, Vec<f64>);
    let mut by_config: BTreeMap<String, Figures> = BTreeMap::new();
    for (t, row) in trials.iter().zip(&rows) {
        if t.status != "ok" || t.phase == "scale" {
            continue;
        }
        let Ok(cfg) = serde_json::from_str::<Config>(&t.factors) else {
            continue;
        };
        let e = by_config
            .entry(t.config.clone())
            .or_insert_with(|| (cfg, Vec::new(), Vec::new(), Vec::new()));
        if let Some(v) = t.value {
            e.1.push(v);
        }
        if let Some(x) = row.throughput {
            e.2.push(x);
        }
        if let Some(c) = row.cpu_cores {
            e.3.push(c);
        }
    }
    let mut best_per_n: BTreeMap<usize, (String, f64, f64, Option<f64>)> = BTreeMap::new();
    for (key, (cfg, vals, thr, cpu)) in &by_config {
        if vals.is_empty() || thr.is_empty() {
            continue;
        }
        let m = stats::mean(vals);
        let s = if higher { m } else { -m };
        let cpu = (!cpu.is_empty()).then(|| stats::mean(cpu));
        let n = cfg.instances();
        if best_per_n.get(&n).is_none_or(|b| s > b.1) {
            best_per_n.insert(n, (key.clone(), s, stats::mean(thr), cpu));
        }
    }
    let scaling_view = best_per_n
        .into_iter()
        .map(|(n, (config, _, thr, cpu))| ScalingRow {
            instances: n,
            config,
            throughput: thr,
            cpu_cores: cpu,
            per_core: cpu.filter(|c| *c > 0.0).map(|c| thr / c),
        })
        .collect();

    // Factor effects.
    let mut effects = Vec::new();
    if let Some(study) = &study {
        let all: Vec<f64> = by_config
            .values()
            .flat_map(|e| e.1.iter().copied())
            .collect();
        let overall = stats::mean(&all);
        for f in &study.factors {
            let mut levels = Vec::new();
            for l in &f.levels {
                let v: Vec<f64> = by_config
                    .values()
                    .filter(|e| e.0.get(&f.name) == Some(l))
                    .flat_map(|e| e.1.iter().copied())
                    .collect();
                if !v.is_empty() {
                    let m = stats::mean(&v);
                    levels.push((l.to_string(), m, v.len(), m / overall));
                }
            }
            effects.push(FactorEffect {
                factor: f.name.clone(),
                levels,
            });
        }
    }

    let apply = match (&study, summary.as_ref().and_then(|s| s.winner.clone())) {
        (Some(study), Some(w)) => trials
            .iter()
            .find(|t| t.config == w && t.status == "ok")
            .and_then(|t| apply_script(study, run, t, summary.as_ref()).ok()),
        _ => None,
    };
    Ok(Report {
        run,
        name: rec.name.clone(),
        file: rec.file.clone(),
        state: rec.state.clone(),
        host: serde_json::from_str(&rec.host).unwrap_or(serde_json::Value::Null),
        summary,
        scaling,
        trials: rows,
        scaling_view,
        effects,
        apply,
    })
}

/// Quotes a word for a POSIX shell when it needs it.
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=,@%+".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

fn unit_name(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let s = s.trim_matches('-').to_string();
    if s.is_empty() { "app".into() } else { s }
}

/// The apply script of the configuration of trial `t` (its layout and environment).
pub fn apply_script(
    study: &Study,
    run: i64,
    t: &TrialRecord,
    summary: Option<&Summary>,
) -> std::result::Result<Apply, String> {
    let config: Config = serde_json::from_str(&t.factors).map_err(|e| e.to_string())?;
    let detail: TrialDetail = serde_json::from_str(&t.detail).map_err(|e| e.to_string())?;
    let layout = detail.layout.ok_or("the trial has no layout")?;
    let n = layout.instances.len();
    let mut sh = String::new();
    let _ = writeln!(sh, "#!/bin/sh");
    let _ = writeln!(
        sh,
        "# Deploys the best configuration of study {:?} (perfpilot study run {run}):",
        study.name
    );
    let _ = writeln!(sh, "#   {}", config.key());
    if let Some(s) = summary {
        let _ = writeln!(sh, "# Evidence: {}", s.verdict);
    }
    let _ = writeln!(
        sh,
        "# Generated by `perfpilot study report {run} --apply DIR`."
    );
    let _ = writeln!(sh, "set -eu");
    if let Some(w) = &study.deployment.workdir {
        let _ = writeln!(sh, "cd {}", shell_quote(&w.display().to_string()));
    }
    let base_values = crate::deploy::values_for(&config, n, None);
    for k in &study.deployment.knobs {
        let _ = writeln!(
            sh,
            "echo {} > {}",
            shell_quote(&render(&k.value, &base_values)),
            shell_quote(&format!("/{}", k.path.trim_start_matches('/')))
        );
    }
    for c in &study.deployment.setup {
        let _ = writeln!(sh, "{}", render(c, &base_values));
    }
    let unit = unit_name(&study.name);
    let mut dropins = Vec::new();
    for il in &layout.instances {
        let port = study
            .deployment
            .base_port
            .saturating_add(il.instance as u16);
        let values = crate::deploy::values_for(&config, n, Some((il, port)));
        let words = split_words(&render(&study.deployment.command, &values))?;
        let env = crate::deploy::environment(study, &config, &values);
        let mut line = String::new();
        if !env.is_empty() {
            line.push_str("env ");
            for (k, v) in &env {
                let _ = write!(line, "{}={} ", k, shell_quote(v));
            }
        }
        if il.bound {
            if il.membind.is_empty() {
                let _ = write!(line, "taskset -c {} ", il.cpuset);
            } else {
                let nodes: Vec<String> = il.membind.iter().map(u32::to_string).collect();
                let _ = write!(
                    line,
                    "numactl --physcpubind={} --membind={} ",
                    il.cpuset,
                    nodes.join(",")
                );
            }
        }
        line.push_str(
            &words
                .iter()
                .map(|w| shell_quote(w))
                .collect::<Vec<_>>()
                .join(" "),
        );
        let _ = writeln!(sh, "# instance {} on port {port}", il.instance);
        let _ = writeln!(sh, "{line} &");

        let mut d = String::new();
        let _ = writeln!(
            d,
            "# /etc/systemd/system/{unit}@{}.service.d/perfpilot-study.conf",
            il.instance
        );
        let _ = writeln!(d, "# study {:?}, run {run}: {}", study.name, config.key());
        let _ = writeln!(d, "[Service]");
        if il.bound {
            let _ = writeln!(d, "CPUAffinity={}", il.cpuset.to_string().replace(',', " "));
            if !il.membind.is_empty() {
                let nodes: Vec<String> = il.membind.iter().map(u32::to_string).collect();
                let _ = writeln!(d, "NUMAPolicy=bind");
                let _ = writeln!(d, "NUMAMask={}", nodes.join(","));
            }
        }
        for (k, v) in &env {
            let _ = writeln!(d, "Environment=\"{k}={}\"", v.replace('"', "\\\""));
        }
        dropins.push((
            format!(
                "systemd/{unit}@{}.service.d/perfpilot-study.conf",
                il.instance
            ),
            d,
        ));
    }
    let _ = writeln!(sh, "wait");
    Ok(Apply { shell: sh, dropins })
}

fn f(v: Option<f64>, digits: usize) -> String {
    match v {
        Some(x) if x.is_finite() => format!("{x:.digits$}"),
        _ => "–".into(),
    }
}

/// The report as pretty JSON.
pub fn to_json(r: &Report) -> String {
    serde_json::to_string_pretty(r).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

/// How a configuration left the race, in a word for the table.
/// "Chance of being the best …: A 86 %; B 7 %", the configurations a bootstrap of the rounds
/// ever finds best; `None` when there is no figure (one configuration, or an old summary).
pub fn chance_best_line(chance: &[(String, f64)]) -> Option<String> {
    if chance.is_empty() {
        return None;
    }
    let parts: Vec<String> = chance
        .iter()
        .map(|(k, c)| format!("{k} {:.0} %", c * 100.0))
        .collect();
    Some(format!(
        "Chance of being the best (bootstrap of the rounds; measuring again at another time can differ more): {}",
        parts.join("; ")
    ))
}

fn left_word(kind: Left) -> &'static str {
    match kind {
        Left::Worse => "worse",
        Left::Failed => "failed",
        Left::Equivalent => "equivalent",
        Left::Tied => "tied",
        Left::Unlikely => "unlikely",
        Left::FarBehind => "far behind",
        Left::Settled => "settled",
    }
}

/// The report as Markdown.
pub fn to_markdown(r: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# Study {:?}, run {} ({})\n", r.name, r.run, r.state);
    let _ = writeln!(s, "Study file: `{}`. Machine: {}.\n", r.file, r.host);
    if let Some(sum) = &r.summary {
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
        if !sum.eliminated.is_empty() {
            let _ = writeln!(s, "### Left the race\n");
            for e in &sum.eliminated {
                let _ = writeln!(s, "- {} after round {}: {}", e.config, e.round, e.reason);
            }
            let _ = writeln!(s);
        }
        if !sum.warnings.is_empty() {
            let _ = writeln!(s, "### Warnings\n");
            for w in &sum.warnings {
                let _ = writeln!(s, "- {w}");
            }
            let _ = writeln!(s);
        }
        let _ = writeln!(s, "### Configurations\n");
        let _ = writeln!(
            s,
            "| configuration | trials | ok | mean ({}) | stdev | throughput | CPU cores | left the race |",
            sum.unit
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|---|");
        for c in &sum.configurations {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} | {} |",
                c.config,
                c.trials,
                c.ok,
                f(c.mean, 2),
                f(c.stdev, 2),
                f(c.throughput, 1),
                f(c.cpu_cores, 2),
                match sum.eliminated.iter().find(|e| e.config == c.config) {
                    Some(e) => format!("round {} ({})", e.round, left_word(e.kind)),
                    None => "–".into(),
                }
            );
        }
        let _ = writeln!(s);
    }
    if let Some(sc) = &r.scaling {
        let _ = writeln!(s, "## Load sweep of {}\n", sc.config);
        let _ = writeln!(
            s,
            "| users | throughput | mean response (ms) | p99 (ms) | errors | CPU cores |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|");
        for p in &sc.points {
            let _ = writeln!(
                s,
                "| {} | {:.1} | {} | {} | {} | {} |",
                p.users,
                p.throughput,
                f(p.response_time_s.map(|v| v * 1000.0), 2),
                f(p.p99_ms, 2),
                p.errors,
                f(p.cpu.get("app").copied(), 2)
            );
        }
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
    if !r.scaling_view.is_empty() {
        let _ = writeln!(s, "## Scaling: throughput and CPU vs instances\n");
        let _ = writeln!(
            s,
            "| instances | best configuration | throughput | CPU cores | per core |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|");
        for v in &r.scaling_view {
            let _ = writeln!(
                s,
                "| {} | {} | {:.1} | {} | {} |",
                v.instances,
                v.config,
                v.throughput,
                f(v.cpu_cores, 2),
                f(v.per_core, 1)
            );
        }
        let _ = writeln!(s);
    }
    if !r.effects.is_empty() {
        let _ = writeln!(
            s,
            "## Effect of each factor (mean objective over successful trials)\n"
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
    let _ = writeln!(s, "## Trials\n");
    let _ = writeln!(
        s,
        "| id | phase | round | configuration | status | value | throughput | p99 ms | errors | CPU cores | reason |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|");
    for t in &r.trials {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            t.id,
            t.phase,
            t.round,
            t.config,
            t.status,
            f(t.value, 2),
            f(t.throughput, 1),
            f(t.p99_ms, 2),
            t.errors.map_or("–".into(), |e| e.to_string()),
            f(t.cpu_cores, 2),
            t.reason.replace('|', "/")
        );
    }
    if let Some(a) = &r.apply {
        let _ = writeln!(s, "\n## Apply script\n\n```sh\n{}```\n", a.shell);
        for (p, d) in &a.dropins {
            let _ = writeln!(s, "`{p}`:\n\n```ini\n{d}```\n");
        }
    }
    s
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// One line of a chart: name, colour, `(x, y)` points.
pub type Series<'a> = (&'a str, &'a str, Vec<(f64, f64)>);

/// An SVG line chart of `series` (name, colour, points) over a shared x axis, each series
/// scaled to its own maximum (labelled at the end of its line).
pub fn svg_chart(title: &str, x_label: &str, series: &[Series<'_>]) -> String {
    let (w, h, l, r, t, b) = (560.0, 300.0, 50.0, 150.0, 30.0, 40.0);
    let xs: Vec<f64> = series
        .iter()
        .flat_map(|s| s.2.iter().map(|p| p.0))
        .collect();
    let (x0, x1) = (
        xs.iter().copied().fold(f64::INFINITY, f64::min),
        xs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    );
    let span = if x1 > x0 { x1 - x0 } else { 1.0 };
    let px = |x: f64| l + (x - x0) / span * (w - l - r);
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" font-family=\"sans-serif\" font-size=\"11\">\n<text x=\"{l}\" y=\"18\" font-size=\"13\">{}</text>\n<line x1=\"{l}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#444\"/>\n<line x1=\"{l}\" y1=\"{t}\" x2=\"{l}\" y2=\"{}\" stroke=\"#444\"/>\n<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
        esc(title),
        h - b,
        w - r,
        h - b,
        h - b,
        (l + w - r) / 2.0,
        h - 8.0,
        esc(x_label)
    );
    let mut ticks: Vec<f64> = xs.clone();
    ticks.sort_by(f64::total_cmp);
    ticks.dedup();
    for x in ticks {
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            px(x),
            h - b + 14.0,
            x
        );
    }
    for (name, colour, pts) in series {
        let max = pts.iter().map(|p| p.1).fold(0.0, f64::max);
        if pts.is_empty() || max <= 0.0 {
            continue;
        }
        let py = |y: f64| h - b - y / max * (h - t - b);
        let path: Vec<String> = pts
            .iter()
            .map(|(x, y)| format!("{:.1},{:.1}", px(*x), py(*y)))
            .collect();
        let _ = writeln!(
            s,
            "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\" points=\"{}\"/>",
            path.join(" ")
        );
        for (x, y) in pts {
            let _ = writeln!(
                s,
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{colour}\"><title>{}: {y:.2} at {x}</title></circle>",
                px(*x),
                py(*y),
                esc(name)
            );
        }
        if let Some((x, y)) = pts.last() {
            let _ = writeln!(
                s,
                "<text x=\"{:.1}\" y=\"{:.1}\" fill=\"{colour}\">{} (max {max:.1})</text>",
                px(*x) + 6.0,
                py(*y) + 4.0,
                esc(name)
            );
        }
    }
    s.push_str("</svg>\n");
    s
}

/// The report as a standalone HTML page with inline SVG charts.
pub fn to_html(r: &Report) -> String {
    let md = to_markdown(r);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Study {} run {}</title>\n<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto}}table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:2px 6px;font-size:12px}}pre{{background:#f4f4f4;padding:8px;overflow:auto}}</style></head><body>",
        esc(&r.name),
        r.run
    );
    if !r.scaling_view.is_empty() {
        let thr: Vec<(f64, f64)> = r
            .scaling_view
            .iter()
            .map(|v| (v.instances as f64, v.throughput))
            .collect();
        let cpu: Vec<(f64, f64)> = r
            .scaling_view
            .iter()
            .filter_map(|v| v.cpu_cores.map(|c| (v.instances as f64, c)))
            .collect();
        s.push_str(&svg_chart(
            "Throughput and CPU vs instances (best configuration per instance count)",
            "instances",
            &[
                ("throughput req/s", "#1f77b4", thr),
                ("CPU cores", "#d62728", cpu),
            ],
        ));
    }
    if let Some(sc) = &r.scaling {
        let thr: Vec<(f64, f64)> = sc
            .points
            .iter()
            .map(|p| (p.users as f64, p.throughput))
            .collect();
        let rt: Vec<(f64, f64)> = sc
            .points
            .iter()
            .filter_map(|p| p.response_time_s.map(|v| (p.users as f64, v * 1000.0)))
            .collect();
        s.push_str(&svg_chart(
            "Throughput and response time vs users",
            "users",
            &[
                ("throughput req/s", "#1f77b4", thr),
                ("response ms", "#d62728", rt),
            ],
        ));
    }
    // The Markdown body, converted line by line (headings, tables, lists, code).
    let mut in_table = false;
    let mut in_code = false;
    for line in md.lines() {
        if line.starts_with("```") {
            s.push_str(if in_code { "</pre>\n" } else { "<pre>" });
            in_code = !in_code;
            continue;
        }
        if in_code {
            let _ = writeln!(s, "{}", esc(line));
            continue;
        }
        if line.starts_with('|') {
            if line.starts_with("|---") {
                continue;
            }
            if !in_table {
                s.push_str("<table>\n");
                in_table = true;
            }
            let cells: Vec<String> = line
                .trim_matches('|')
                .split(" | ")
                .map(|c| format!("<td>{}</td>", esc(c.trim())))
                .collect();
            let _ = writeln!(s, "<tr>{}</tr>", cells.join(""));
            continue;
        } else if in_table {
            s.push_str("</table>\n");
            in_table = false;
        }
        let text = esc(line).replace("**", "");
        if let Some(h) = line.strip_prefix("### ") {
            let _ = writeln!(s, "<h3>{}</h3>", esc(h));
        } else if let Some(h) = line.strip_prefix("## ") {
            let _ = writeln!(s, "<h2>{}</h2>", esc(h));
        } else if let Some(h) = line.strip_prefix("# ") {
            let _ = writeln!(s, "<h1>{}</h1>", esc(h));
        } else if let Some(item) = line.strip_prefix("- ") {
            let _ = writeln!(s, "<li>{}</li>", esc(item).replace("**", ""));
        } else if !line.is_empty() {
            let _ = writeln!(s, "<p>{text}</p>");
        }
    }
    if in_table {
        s.push_str("</table>\n");
    }
    s.push_str("</body></html>\n");
    s
}
