//! What a capacity run shows people: the validation table as Markdown (printed, and kept in
//! `docs/`), and one standalone HTML page — per sweep the model's curve over the measured
//! points (throughput and response time in separate panels, users on a log axis), per-tier
//! utilisation, the bottleneck and the knee, the scale-out predictions ranked by cost, the
//! fitted model, and the machine as a table.

use std::fmt::Write as _;

use perfpilot_chart::{BarChart, LineChart, Panel, Series, Style, esc, inline, page};
use perfpilot_units::MarkdownTable;

use crate::rounds;
use crate::run::CapacityRun;
use crate::variation::{self, WITHIN_PCT};

const COLOURS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
];

fn ms(s: f64) -> String {
    format!("{:.2}", s * 1e3)
}

fn pct(v: f64) -> String {
    format!("{v:+.1} %")
}

/// A point's error predicted at its own CPU per request, or an empty cell.
fn own(c: &perfpilot_model::TierCheck, f: impl Fn(&perfpilot_model::OwnDemand) -> f64) -> String {
    c.at_own_demand
        .as_ref()
        .map(|o| pct(f(o)))
        .unwrap_or_default()
}

/// The scale-out table's columns, in the Markdown and the HTML report alike.
const SCALE_OUT_COLUMNS: [&str; 6] = [
    "instances",
    "throughput (req/s)",
    "response (ms)",
    "bottleneck",
    "price",
    "req/s per price",
];

/// The scale-out predictions as table rows, best throughput per price first.
fn scale_out_rows(r: &CapacityRun) -> Vec<Vec<String>> {
    r.scale_out
        .iter()
        .map(|x| {
            vec![
                x.instances.to_string(),
                format!("{:.1}", x.throughput),
                ms(x.response_time),
                x.bottleneck.clone(),
                format!("{:.1}", x.cost),
                format!("{:.1}", x.per_cost),
            ]
        })
        .collect()
}

/// How many held-out points the throughput prediction met within ±[`WITHIN_PCT`], in words.
fn within_target(r: &CapacityRun) -> String {
    let held: Vec<f64> = r
        .checks
        .iter()
        .filter(|c| !c.fitted)
        .map(|c| c.throughput_error_pct)
        .collect();
    let mut s = format!(
        "Throughput within ±{WITHIN_PCT:.0} % at {} of {} held-out points.",
        held.iter().filter(|e| e.abs() <= WITHIN_PCT).count(),
        held.len()
    );
    let groups = variation::saturated_groups(&r.checks, &r.model);
    for sp in &groups {
        let _ = write!(
            s,
            " At {} of them ({}) the {} tier was saturated, measured and in the model, which predicts one throughput, {:.1} req/s; they measured {:.1} … {:.1} req/s, so any single prediction misses one of them by at least {:.1} %.",
            sp.labels.len(),
            sp.labels.join(", "),
            sp.tier,
            sp.predicted,
            sp.min,
            sp.max,
            sp.least_error_pct(),
        );
    }
    if groups
        .first()
        .is_some_and(|g| g.least_error_pct() > WITHIN_PCT)
    {
        let _ = write!(
            s,
            " No model of this run meets ±{WITHIN_PCT:.0} % at every held-out point."
        );
    }
    s
}

/// The repeated point's spread in words (Markdown inline), when the run measured one.
fn repeatability(r: &CapacityRun) -> Option<String> {
    let rep = r.repeats.as_ref()?;
    let Some(sp) = rep.spread() else {
        return Some(format!(
            "`{}` was to be measured again, but fewer than two of its repeats worked.",
            rep.label
        ));
    };
    let own = point(r, &rep.label).map(|p| p.throughput() / sp.mean);
    let cpu: Vec<String> = sp
        .cpu_per_request
        .iter()
        .map(|(t, (d, cv))| format!("{t} {d:.2} ms (cv {cv:.1} %)"))
        .collect();
    Some(format!(
        "`{}` measured {} more times in a row on its deployment, after its points: {:.1} req/s on average, cv {:.1} %, {:.1} … {:.1} req/s{}. {} of {} single measurements lie within ±{WITHIN_PCT:.0} % of their mean: a model exact about the mean would meet ±{WITHIN_PCT:.0} % at about that share of single points at this load, whatever its queueing.{} CPU per request over the repeats: {}.",
        rep.label,
        sp.n,
        sp.mean,
        sp.cv_pct,
        sp.min,
        sp.max,
        sp.lag1
            .map_or(String::new(), |l| format!(", lag-1 correlation {l:.2}")),
        sp.within,
        sp.n,
        own.map_or(String::new(), |o| format!(
            " The sweep's own measurement of the point was ×{o:.3} of their mean."
        )),
        cpu.join(", ")
    ))
}

/// The run's point labelled `label`.
fn point<'a>(r: &'a CapacityRun, label: &str) -> Option<&'a crate::sweep::Point> {
    r.sweeps
        .iter()
        .flat_map(|w| &w.points)
        .find(|p| p.label == label)
}

/// A point's throughput in each of its rounds, or an empty cell for a point measured once.
fn per_round(r: &CapacityRun, label: &str) -> String {
    point(r, label).map_or(String::new(), |p| {
        p.rounds
            .iter()
            .map(|x| format!("{:.1}", x.throughput()))
            .collect::<Vec<_>>()
            .join(", ")
    })
}

/// How far apart the rounds of each point measured, in words, when the points had several.
fn rounds_spread(r: &CapacityRun) -> Option<String> {
    let mut spread: Vec<(f64, &str)> = r
        .sweeps
        .iter()
        .flat_map(|w| &w.points)
        .filter_map(|p| rounds::half_range_pct(p).map(|h| (h, p.label.as_str())))
        .collect();
    let n = r
        .sweeps
        .iter()
        .flat_map(|w| &w.points)
        .map(|p| p.rounds.len())
        .max()?;
    spread.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (most, at) = *spread.last()?;
    let median = spread[spread.len() / 2].0;
    Some(format!(
        "Every point is the mean of up to {n} rounds, measured in alternating order on its deployment (the sweeps with the same instances share one), so that a drift of the machine reaches the fitted and the held-out points alike. Half the range of a point's rounds over their mean: {median:.1} % at the median point, {most:.1} % at most ({at})."
    ))
}

/// The measured-vs-predicted table, one row a point, in the Markdown and the HTML report alike:
/// its header and rows; `per_tier` adds each tier's busy cores, measured and predicted.
fn checks_table(r: &CapacityRun, per_tier: bool) -> (Vec<String>, Vec<Vec<String>>) {
    let with_rounds = rounds_spread(r).is_some();
    let tiers: Vec<&str> = if per_tier {
        r.tiers.iter().map(|t| t.name.as_str()).collect()
    } else {
        Vec::new()
    };
    let mut header: Vec<String> = [
        "point",
        "fitted",
        "X measured (req/s)",
        "X predicted",
        "X error",
        "R measured (ms)",
        "R predicted (ms)",
        "R error",
        "X error, own CPU",
        "R error, own CPU",
        "bottleneck",
    ]
    .map(String::from)
    .into();
    if with_rounds {
        header.insert(3, "X per round".into());
    }
    header.extend(
        tiers
            .iter()
            .map(|t| format!("{t} busy cores (meas / pred)")),
    );
    let rows = r
        .checks
        .iter()
        .map(|c| {
            let mut row = vec![
                c.label.clone(),
                if c.fitted { "yes" } else { "" }.to_string(),
                format!("{:.1}", c.measured_throughput),
                format!("{:.1}", c.predicted_throughput),
                pct(c.throughput_error_pct),
                ms(c.measured_response),
                ms(c.predicted_response),
                pct(c.response_error_pct),
                own(c, |o| o.throughput_error_pct),
                own(c, |o| o.response_error_pct),
                c.bottleneck.clone(),
            ];
            if with_rounds {
                row.insert(3, per_round(r, &c.label));
            }
            for t in &tiers {
                let (m, p) = c.busy.get(*t).copied().unwrap_or((0.0, 0.0));
                row.push(format!("{m:.3} / {p:.3}"));
            }
            row
        })
        .collect();
    (header, rows)
}

/// The measured-vs-predicted table and the fitted demands, as Markdown.
pub fn to_markdown(r: &CapacityRun) -> String {
    let mut s = String::new();
    let (ex, er) = r.held_out_errors();
    let _ = writeln!(s, "# Capacity run: {}\n", r.name);
    let _ = writeln!(
        s,
        "Fitted from {} ({} point{}); held-out points: largest throughput error {:.1} %, largest response-time error {:.1} %. The run took {:.0} s.\n",
        r.model.fitted_from.join(", "),
        r.model.fitted_from.len(),
        if r.model.fitted_from.len() == 1 {
            ""
        } else {
            "s"
        },
        ex,
        er,
        r.elapsed_s
    );
    let _ = writeln!(s, "{}\n", within_target(r));
    if let Some(text) = rounds_spread(r) {
        let _ = writeln!(s, "{text}\n");
    }
    if let Some(text) = repeatability(r) {
        let _ = writeln!(s, "Repeatability: {text}\n");
    }
    if let Some((ox, or)) = r.held_out_errors_at_own_demand() {
        let _ = writeln!(
            s,
            "Predicted again at each point's own CPU per request (\"own CPU\" columns: the queueing model's own error, without the change of the tiers' demands since the fit): largest throughput error {ox:.1} %, largest response-time error {or:.1} %. Where the bottleneck was saturated, the utilization law makes this prediction the measured throughput; read these columns below saturation.\n"
        );
    }
    let (header, rows) = checks_table(r, true);
    let mut checks = MarkdownTable::new(&header);
    for row in &rows {
        checks.row(row);
    }
    s.push_str(&checks.render());
    let _ = writeln!(s, "\n## Fitted model\n");
    let mut fitted =
        MarkdownTable::new(&["tier", "cores per instance", "demand (ms CPU per request)"]);
    for t in &r.model.tiers {
        let d: Vec<String> = r
            .model
            .classes
            .iter()
            .zip(&t.demand)
            .map(|(c, d)| format!("{c} {:.4}", d * 1e3))
            .collect();
        fitted.row(&[t.name.clone(), t.cores.to_string(), d.join(", ")]);
    }
    s.push_str(&fitted.render());
    let _ = writeln!(
        s,
        "\nClient and network path (a delay station): {:.4} ms per request. Cycle time outside the driver's latency window: {}.\n",
        r.model.path_delay * 1e3,
        r.model
            .classes
            .iter()
            .zip(&r.model.outside_latency)
            .map(|(c, v)| format!("{c} {:.4} ms", v * 1e3))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if !r.model.residuals.is_empty() {
        let _ = writeln!(
            s,
            "Utilization-law residuals at the fitted points (busy cores):\n"
        );
        let mut t = MarkdownTable::new(&["point", "tier", "measured", "fitted", "residual"]);
        for x in &r.model.residuals {
            t.row(&[
                x.label.clone(),
                x.tier.clone(),
                format!("{:.4}", x.measured),
                format!("{:.4}", x.fitted),
                format!("{:+.4}", x.measured - x.fitted),
            ]);
        }
        let _ = writeln!(s, "{}", t.render());
    }
    if !r.scale_out.is_empty() {
        let _ = writeln!(
            s,
            "## Scale-out of {} (predicted at {} users), best throughput per price first\n",
            r.scaled_tier,
            r.scale_out.first().map_or(0, |x| x.users)
        );
        let mut t = MarkdownTable::new(&SCALE_OUT_COLUMNS);
        for row in scale_out_rows(r) {
            t.row(&row);
        }
        let _ = writeln!(s, "{}", t.render());
    }
    let noise: Vec<f64> = r
        .sweeps
        .iter()
        .flat_map(|w| w.points.iter().filter_map(|p| p.other_busy))
        .collect();
    if !noise.is_empty() {
        let mean = noise.iter().sum::<f64>() / noise.len() as f64;
        let max = noise.iter().copied().fold(0.0, f64::max);
        let _ = writeln!(
            s,
            "Other processes on the machine during the measured windows: {mean:.2} busy cores on average, {max:.2} at most.\n"
        );
    }
    for n in r.notes.iter().chain(&r.model.notes) {
        let _ = writeln!(s, "- {n}");
    }
    s
}

fn table(head: &[&str], rows: &[Vec<String>]) -> String {
    let mut s = String::from("<table>\n<tr>");
    for h in head {
        let _ = write!(s, "<th>{}</th>", esc(h));
    }
    s.push_str("</tr>\n");
    for r in rows {
        s.push_str("<tr>");
        for c in r {
            let _ = write!(s, "<td>{}</td>", inline(c));
        }
        s.push_str("</tr>\n");
    }
    s.push_str("</table>\n");
    s
}

/// The run as a standalone HTML page.
pub fn to_html(r: &CapacityRun) -> String {
    let mut s = String::new();
    html_summary(&mut s, r);
    for (i, w) in r.sweeps.iter().enumerate() {
        html_sweep(&mut s, r, i, w);
    }
    if !r.scale_out.is_empty() {
        html_scale_out(&mut s, r);
    }
    html_model(&mut s, r);
    page(&format!("Capacity run: {}", r.name), &s)
}

/// The run's headline: the held-out errors, the target, the rounds' spread and repeatability.
fn html_summary(s: &mut String, r: &CapacityRun) {
    let (ex, er) = r.held_out_errors();
    let _ = writeln!(s, "<h1>Capacity run: {}</h1>", esc(&r.name));
    let _ = writeln!(
        s,
        "<p>Capacity file <code>{}</code>. The model was fitted from {} only; at every other point it predicted throughput within {:.1} % and response time within {:.1} % of what was measured. The run took {:.0} s.</p>",
        esc(&r.file),
        esc(&r.model.fitted_from.join(", ")),
        ex,
        er,
        r.elapsed_s
    );
    let _ = writeln!(s, "<p>{}</p>", esc(&within_target(r)));
    if let Some(text) = rounds_spread(r) {
        let _ = writeln!(s, "<p>{}</p>", esc(&text));
    }
    if let Some(text) = repeatability(r) {
        let _ = writeln!(s, "<p>Repeatability: {}</p>", inline(&text));
    }
    if let Some((ox, or)) = r.held_out_errors_at_own_demand() {
        let _ = writeln!(
            s,
            "<p>Predicted again at each point's own CPU per request (the columns \"own CPU\"), which leaves out how far the tiers' demands moved since the fit: throughput within {ox:.1} % and response time within {or:.1} %. The difference between the two is the system's change, not the queueing model's. Where the bottleneck was saturated, the utilization law makes this prediction the measured throughput: the columns say something below saturation.</p>"
        );
    }
}

/// A sweep's throughput and response-time chart against the model, and its tiers' utilisation.
fn html_sweep(s: &mut String, r: &CapacityRun, i: usize, w: &crate::run::SweepResult) {
    let fitted = |label: &str| r.model.fitted_from.iter().any(|f| f == label);
    let pts = |f: &dyn Fn(&crate::sweep::Point) -> f64, fit: bool| -> Vec<(f64, f64)> {
        w.points
            .iter()
            .filter(|p| fitted(&p.label) == fit)
            .map(|p| (f64::from(p.users), f(p)))
            .collect()
    };
    let x = |p: &crate::sweep::Point| p.throughput();
    let rt = |p: &crate::sweep::Point| p.response_time() * 1e3;
    let model_x: Vec<(f64, f64)> = w.curve.iter().map(|c| (f64::from(c.0), c.1)).collect();
    let model_r: Vec<(f64, f64)> = w
        .curve
        .iter()
        .map(|c| (f64::from(c.0), c.2 * 1e3))
        .collect();
    let colour = COLOURS[i % COLOURS.len()];
    let chart = LineChart {
        title: format!("Sweep {}: throughput and response time vs users", w.name),
        x_label: "users".into(),
        x_log: true,
        panels: vec![
            Panel {
                y_label: "throughput (req/s)".into(),
                series: vec![
                    Series::new("model", colour, Style::Line, model_x),
                    Series::new("measured, held out", "#222", Style::Markers, pts(&x, false)),
                    Series::new(
                        "measured, fitted from",
                        "#ff7f0e",
                        Style::Markers,
                        pts(&x, true),
                    ),
                ],
            },
            Panel {
                y_label: "mean response time (ms)".into(),
                series: vec![
                    Series::new("model", colour, Style::Line, model_r),
                    Series::new(
                        "measured, held out",
                        "#222",
                        Style::Markers,
                        pts(&rt, false),
                    ),
                    Series::new(
                        "measured, fitted from",
                        "#ff7f0e",
                        Style::Markers,
                        pts(&rt, true),
                    ),
                ],
            },
        ],
    };
    let inst: Vec<String> = w
        .instances
        .iter()
        .map(|(k, v)| format!("{k} ×{v}"))
        .collect();
    let _ = writeln!(
        s,
        "<h2>Sweep {}: throughput and response time vs users</h2>\n<p>Think time {:.0} ms{}{}. Knee (highest throughput / response time, measured): {}. Bottleneck (model, at the largest load): {}.</p>\n<figure>{}</figure>",
        esc(&w.name),
        w.think_time * 1e3,
        if inst.is_empty() {
            String::new()
        } else {
            format!("; instances {}", esc(&inst.join(", ")))
        },
        w.second_host.as_ref().map_or(String::new(), |h| format!(
            "; {} instances from the second in a network namespace (a second host)",
            esc(h)
        )),
        w.knee_users.map_or("–".into(), |u| {
            perfpilot_units::counted(u64::from(u), "user", "users")
        }),
        esc(&w.bottleneck),
        chart.svg()
    );
    // Per-tier utilisation at each point: busy share of the tier's capacity.
    let series: Vec<(String, String)> = r
        .tiers
        .iter()
        .enumerate()
        .map(|(k, t)| (t.name.clone(), COLOURS[k % COLOURS.len()].to_string()))
        .collect();
    let groups: Vec<(String, Vec<f64>)> = w
        .points
        .iter()
        .map(|p| {
            (
                perfpilot_units::counted(u64::from(p.users), "user", "users"),
                r.tiers
                    .iter()
                    .map(|t| {
                        let m = f64::from(w.instances.get(&t.name).copied().unwrap_or(1));
                        p.busy.get(&t.name).copied().unwrap_or(0.0) / (t.cores * m) * 100.0
                    })
                    .collect(),
            )
        })
        .collect();
    let bars = BarChart {
        title: format!("Sweep {}: per-tier utilisation", w.name),
        y_label: "busy share of capacity (%)".into(),
        series,
        groups,
        reference: Some(100.0),
    };
    let _ = writeln!(
        s,
        "<h3>Per-tier utilisation, measured (busy cores / cores × instances)</h3>\n<figure>{}</figure>",
        bars.svg()
    );
}

/// The scale-out predictions and their cost ranking.
fn html_scale_out(s: &mut String, r: &CapacityRun) {
    let mut ordered = r.scale_out.clone();
    ordered.sort_by_key(|x| x.instances);
    let chart = BarChart {
        title: "Scale-out predictions".into(),
        y_label: "predicted throughput (req/s)".into(),
        series: vec![("throughput".into(), "#1f77b4".into())],
        groups: ordered
            .iter()
            .map(|x| {
                (
                    format!("{} ×{}", r.scaled_tier, x.instances),
                    vec![x.throughput],
                )
            })
            .collect(),
        reference: None,
    };
    let _ = writeln!(
        s,
        "<h2>Scale-out of {} and cost ranking</h2>\n<p>Predicted at {} users. The ranking is by throughput per price, best first.</p>\n<figure>{}</figure>",
        esc(&r.scaled_tier),
        r.scale_out.first().map_or(0, |x| x.users),
        chart.svg()
    );
    s.push_str(&table(&SCALE_OUT_COLUMNS, &scale_out_rows(r)));
}

/// Measured against predicted, the fitted demands, the notes and the machine.
fn html_model(s: &mut String, r: &CapacityRun) {
    s.push_str("<h2>Measured vs predicted</h2>\n");
    let (head, rows) = checks_table(r, false);
    let head: Vec<&str> = head.iter().map(String::as_str).collect();
    s.push_str(&table(&head, &rows));
    s.push_str("<h2>Fitted model</h2>\n");
    let rows: Vec<Vec<String>> = r
        .model
        .tiers
        .iter()
        .map(|t| {
            vec![
                t.name.clone(),
                format!("{}", t.cores),
                r.model
                    .classes
                    .iter()
                    .zip(&t.demand)
                    .map(|(c, d)| format!("{c} {:.4}", d * 1e3))
                    .collect::<Vec<_>>()
                    .join(", "),
            ]
        })
        .collect();
    s.push_str(&table(
        &["tier", "cores per instance", "CPU demand (ms per request)"],
        &rows,
    ));
    let _ = writeln!(
        s,
        "<p>Client and network path (a delay station): {:.4} ms per request.</p>",
        r.model.path_delay * 1e3
    );
    let notes: Vec<&String> = r.notes.iter().chain(&r.model.notes).collect();
    if !notes.is_empty() {
        s.push_str("<ul>\n");
        for n in notes {
            let _ = writeln!(s, "<li>{}</li>", inline(n));
        }
        s.push_str("</ul>\n");
    }
    s.push_str("<h2>Machine</h2>\n<table>\n");
    for (k, v) in &r.machine {
        let _ = writeln!(s, "<tr><th>{}</th><td>{}</td></tr>", esc(k), esc(v));
    }
    s.push_str("</table>\n");
}
