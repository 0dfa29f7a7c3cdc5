//! The report as a standalone HTML page: the title first, the machine as a table, the charts
//! (drawn by `perfpilot-chart`: throughput and response time in separate panels over a
//! logarithmic users axis, throughput and CPU in separate panels over instances), then the
//! Markdown body converted line by line with its inline code and bold rendered, not shown.

use std::fmt::Write as _;

use perfpilot_chart::{LineChart, Panel, Series, Style, esc, inline, page};

use super::{Report, to_markdown};

/// The machine facts of a report as (what, value) rows, from the stored host JSON.
pub fn machine_rows(host: &serde_json::Value) -> Vec<(String, String)> {
    let label = |k: &str| match k {
        "online" => "CPUs online".to_string(),
        "nodes" => "NUMA nodes".to_string(),
        "llcs" => "last-level caches".to_string(),
        "cores" => "cores".to_string(),
        "smt" => "threads per core".to_string(),
        other => other.replace('_', " "),
    };
    match host {
        serde_json::Value::Object(m) => m
            .iter()
            .map(|(k, v)| {
                let v = match v {
                    serde_json::Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                (label(k), v)
            })
            .collect(),
        serde_json::Value::Null => Vec::new(),
        other => vec![("machine".into(), other.to_string())],
    }
}

/// A two-column table of (what, value) rows.
pub fn facts_table(rows: &[(String, String)]) -> String {
    let mut s = String::from("<table>\n");
    for (k, v) in rows {
        let _ = writeln!(s, "<tr><th>{}</th><td>{}</td></tr>", esc(k), esc(v));
    }
    s.push_str("</table>\n");
    s
}

/// The report as a standalone HTML page with inline SVG charts.
pub fn to_html(r: &Report) -> String {
    let md = to_markdown(r);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<h1>Study {}, run {} ({})</h1>\n<p>Study file: <code>{}</code></p>",
        esc(&r.name),
        r.run,
        r.state,
        esc(&r.file)
    );
    let machine = machine_rows(&r.host);
    if !machine.is_empty() {
        s.push_str("<h2>Machine</h2>\n");
        s.push_str(&facts_table(&machine));
    }
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
        let chart = LineChart {
            title: "Throughput and CPU vs instances".into(),
            x_label: "instances".into(),
            x_log: false,
            panels: vec![
                Panel {
                    y_label: "throughput (req/s)".into(),
                    series: vec![Series::new(
                        "throughput, best configuration per instance count",
                        "#1f77b4",
                        Style::LineMarkers,
                        thr,
                    )],
                },
                Panel {
                    y_label: "CPU (busy cores)".into(),
                    series: vec![Series::new(
                        "CPU of the instances",
                        "#d62728",
                        Style::LineMarkers,
                        cpu,
                    )],
                },
            ],
        };
        let _ = write!(
            s,
            "<h2>Throughput and CPU vs instances</h2>\n<figure>{}</figure>\n",
            chart.svg()
        );
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
        let chart = LineChart {
            title: "Throughput and response time vs users".into(),
            x_label: "users".into(),
            x_log: true,
            panels: vec![
                Panel {
                    y_label: "throughput (req/s)".into(),
                    series: vec![Series::new(
                        "measured throughput",
                        "#1f77b4",
                        Style::LineMarkers,
                        thr,
                    )],
                },
                Panel {
                    y_label: "mean response time (ms)".into(),
                    series: vec![Series::new(
                        "measured response time",
                        "#d62728",
                        Style::LineMarkers,
                        rt,
                    )],
                },
            ],
        };
        let _ = write!(
            s,
            "<h2>Load sweep of {}: throughput and response time vs users</h2>\n<figure>{}</figure>\n",
            esc(&sc.config),
            chart.svg()
        );
    }
    s.push_str(&markdown_body(&md));
    page(&format!("Study {} run {}", r.name, r.run), &s)
}

/// The Markdown body as HTML (headings, tables, lists, code blocks, inline code and bold),
/// without its first heading and the machine line, which the page shows above.
pub fn markdown_body(md: &str) -> String {
    let mut s = String::new();
    let mut in_table = false;
    let mut header = false;
    let mut in_code = false;
    for line in md.lines() {
        if line.starts_with("# ") || line.starts_with("Study file: ") {
            continue;
        }
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
                header = true;
            }
            let tag = if header { "th" } else { "td" };
            header = false;
            let cells: Vec<String> = line
                .trim_matches('|')
                .split(" | ")
                .map(|c| format!("<{tag}>{}</{tag}>", inline(c.trim())))
                .collect();
            let _ = writeln!(s, "<tr>{}</tr>", cells.join(""));
            continue;
        } else if in_table {
            s.push_str("</table>\n");
            in_table = false;
        }
        if let Some(h) = line.strip_prefix("### ") {
            let _ = writeln!(s, "<h3>{}</h3>", inline(h));
        } else if let Some(h) = line.strip_prefix("## ") {
            let _ = writeln!(s, "<h2>{}</h2>", inline(h));
        } else if let Some(item) = line.strip_prefix("- ") {
            let _ = writeln!(s, "<li>{}</li>", inline(item));
        } else if !line.is_empty() {
            let _ = writeln!(s, "<p>{}</p>", inline(line));
        }
    }
    if in_table {
        s.push_str("</table>\n");
    }
    s
}
