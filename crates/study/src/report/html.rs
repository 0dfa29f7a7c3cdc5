//! The report as a standalone HTML page: inline SVG charts of the scaling view and the load
//! sweep, and the Markdown body converted line by line.

use std::fmt::Write as _;

use super::{Report, to_markdown};

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

/// `s` escaped for HTML text and attribute values.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}
