//! perfpilot's one home for chart drawing: standalone inline SVG (no scripts, no fonts or
//! other network resources) for the HTML reports of studies, load sweeps and capacity runs.
//!
//! * [`LineChart`]: one or more panels stacked over a shared x axis (linear, or logarithmic
//!   for user counts, so that the low loads do not crowd together), each panel with its own
//!   y axis, scale and unit — throughput and response time never share an axis. Series are
//!   lines (a model's curve), markers (measured points) or both; the legend is a row above
//!   the plot, laid out left to right so that labels never overprint.
//! * [`BarChart`]: grouped bars (per-tier utilisation per configuration) on a 0-based axis.
//!
//! Titles belong to the page (an `<h2>` above the chart); the SVG carries `role="img"` and a
//! `<title>` for screen readers.

use std::fmt::Write as _;

/// How a series is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// A line through the points (a model's curve).
    Line,
    /// A dashed line (a bound or a second model).
    Dashed,
    /// Markers only (measured points).
    Markers,
    /// A line with markers.
    LineMarkers,
}

/// One series of a panel.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Its name in the legend.
    pub name: String,
    /// A CSS colour.
    pub colour: String,
    /// How it is drawn.
    pub style: Style,
    /// `(x, y)` points.
    pub points: Vec<(f64, f64)>,
}

impl Series {
    /// A series.
    pub fn new(name: &str, colour: &str, style: Style, points: Vec<(f64, f64)>) -> Series {
        Series {
            name: name.to_string(),
            colour: colour.to_string(),
            style,
            points,
        }
    }
}

/// One panel: its y axis and series.
#[derive(Debug, Clone, PartialEq)]
pub struct Panel {
    /// The y axis's label with its unit (`throughput (req/s)`).
    pub y_label: String,
    /// The series.
    pub series: Vec<Series>,
}

/// Panels stacked over one x axis.
#[derive(Debug, Clone, PartialEq)]
pub struct LineChart {
    /// Read by screen readers (the page shows its own heading).
    pub title: String,
    /// The x axis's label.
    pub x_label: String,
    /// Logarithmic x axis (all x must be > 0).
    pub x_log: bool,
    /// The panels, top to bottom.
    pub panels: Vec<Panel>,
}

/// Grouped bars.
#[derive(Debug, Clone, PartialEq)]
pub struct BarChart {
    /// Read by screen readers.
    pub title: String,
    /// The y axis's label with its unit.
    pub y_label: String,
    /// Series names and colours, in bar order within a group.
    pub series: Vec<(String, String)>,
    /// Groups: a label and one value per series.
    pub groups: Vec<(String, Vec<f64>)>,
    /// A horizontal reference line (e.g. 100 %), if any.
    pub reference: Option<f64>,
}

const WIDTH: f64 = 680.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const PANEL_H: f64 = 190.0;
const GAP: f64 = 34.0;
const LEGEND_ROW: f64 = 18.0;
const CHAR_W: f64 = 6.6;

/// `s` escaped for SVG/HTML text and attributes.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A tick label: up to three significant digits, no trailing zeros.
pub fn tick_label(v: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    let a = v.abs();
    let s = if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        let digits = (-a.log10().floor()) as usize + 2;
        format!("{v:.digits$}")
    };
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// Draws a panel's horizontal grid and y tick labels from 0 to a round top above `max`,
/// between `py0` (top) and `py1` (bottom); returns the mapping from a value to its y.
fn y_axis(body: &mut String, max: f64, py0: f64, py1: f64) -> impl Fn(f64) -> f64 + use<> {
    let ticks = nice_ticks(max);
    let ytop = ticks.last().copied().unwrap_or(1.0).max(1e-12);
    let ty = move |y: f64| py1 - y / ytop * (py1 - py0);
    for t in &ticks {
        let y = ty(*t);
        let _ = write!(
            body,
            "<path d=\"M{LEFT},{y:.1} H{:.1}\" stroke=\"#e4e4e4\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            WIDTH - RIGHT,
            LEFT - 6.0,
            y + 4.0,
            tick_label(*t)
        );
    }
    ty
}

/// "Nice" ticks (1, 2, 5 × 10^k) from 0 to at least `max`.
pub fn nice_ticks(max: f64) -> Vec<f64> {
    if !(max.is_finite() && max > 0.0) {
        return vec![0.0, 1.0];
    }
    let raw = max / 4.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    let n = (max / step).ceil() as usize;
    (0..=n.max(1)).map(|i| i as f64 * step).collect()
}

/// Ticks of a logarithmic axis from `lo` to `hi`: powers of two when the span is under
/// 10×100, else 1-2-5 decades.
fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let mut out = Vec::new();
    if hi / lo <= 1000.0 {
        let mut t = 2f64.powf(lo.log2().floor());
        while t <= hi * 1.0001 {
            if t >= lo * 0.9999 {
                out.push(t);
            }
            t *= 2.0;
        }
    } else {
        let mut d = 10f64.powf(lo.log10().floor());
        while d <= hi * 1.0001 {
            for m in [1.0, 2.0, 5.0] {
                let t = d * m;
                if t >= lo * 0.9999 && t <= hi * 1.0001 {
                    out.push(t);
                }
            }
            d *= 10.0;
        }
    }
    out
}

/// Lays out legend entries left to right in rows of `width`; returns (x, row) per entry.
fn legend_layout(names: &[&str], width: f64) -> (Vec<(f64, usize)>, usize) {
    let mut out = Vec::with_capacity(names.len());
    let (mut x, mut row) = (0.0, 0usize);
    for n in names {
        let w = 28.0 + n.chars().count() as f64 * CHAR_W + 16.0;
        if x > 0.0 && x + w > width {
            x = 0.0;
            row += 1;
        }
        out.push((x, row));
        x += w;
    }
    (out, if names.is_empty() { 0 } else { row + 1 })
}

fn marker(s: &mut String, x: f64, y: f64, colour: &str, tip: &str) {
    let _ = write!(
        s,
        "<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"3.5\" fill=\"{colour}\" stroke=\"#fff\" stroke-width=\"1\"><title>{}</title></circle>",
        esc(tip)
    );
}

/// The x axis every panel of a line chart shares: its range, scale and ticks.
struct XAxis {
    x0: f64,
    x1: f64,
    log: bool,
    ticks: Vec<f64>,
}

impl XAxis {
    /// The axis over every finite x of the chart's series (positive ones only on a log scale).
    fn of(chart: &LineChart) -> XAxis {
        let xs: Vec<f64> = chart
            .panels
            .iter()
            .flat_map(|p| p.series.iter().flat_map(|s| s.points.iter().map(|q| q.0)))
            .filter(|x| x.is_finite() && (!chart.x_log || *x > 0.0))
            .collect();
        let (mut x0, mut x1) = (
            xs.iter().copied().fold(f64::INFINITY, f64::min),
            xs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        );
        if !x0.is_finite() {
            (x0, x1) = (1.0, 2.0);
        }
        if x1 <= x0 {
            x1 = x0 * 2.0 + 1.0;
        }
        if !chart.x_log {
            x0 = x0.min(0.0);
        }
        // Counts (users, instances) get whole-number ticks only.
        let whole = xs.iter().all(|x| x.fract() == 0.0);
        let ticks: Vec<f64> = if chart.x_log {
            log_ticks(x0, x1)
        } else {
            nice_ticks(x1)
                .into_iter()
                .filter(|t| !whole || t.fract() == 0.0)
                .collect()
        };
        XAxis {
            x0,
            x1,
            log: chart.x_log,
            ticks,
        }
    }

    /// The horizontal position of `x`.
    fn tx(&self, x: f64) -> f64 {
        let f = if self.log {
            (x.ln() - self.x0.ln()) / (self.x1.ln() - self.x0.ln())
        } else {
            (x - self.x0) / (self.x1 - self.x0)
        };
        LEFT + f * (WIDTH - LEFT - RIGHT)
    }
}

/// The stroke-dasharray attribute of a dashed series (empty for any other).
fn dash(style: Style) -> &'static str {
    if style == Style::Dashed {
        " stroke-dasharray=\"5 3\""
    } else {
        ""
    }
}

/// Draws a panel's legend from `top` (series with no points have no entry); returns the top
/// of the panel's plot below it.
fn line_legend(body: &mut String, panel: &Panel, top: f64) -> f64 {
    let shown: Vec<&Series> = panel
        .series
        .iter()
        .filter(|x| !x.points.is_empty())
        .collect();
    let names: Vec<&str> = shown.iter().map(|x| x.name.as_str()).collect();
    let (legend, rows) = legend_layout(&names, WIDTH - LEFT - RIGHT);
    for ((lx, row), ser) in legend.iter().zip(shown) {
        let y = top + *row as f64 * LEGEND_ROW + 10.0;
        let x = LEFT + lx;
        match ser.style {
            Style::Markers => marker(body, x + 10.0, y - 4.0, &ser.colour, &ser.name),
            _ => {
                let _ = write!(
                    body,
                    "<path d=\"M{x:.1},{:.1} h20\" stroke=\"{}\" stroke-width=\"2\"{}/>",
                    y - 4.0,
                    ser.colour,
                    dash(ser.style)
                );
                if ser.style == Style::LineMarkers {
                    marker(body, x + 10.0, y - 4.0, &ser.colour, &ser.name);
                }
            }
        }
        let _ = write!(
            body,
            "<text x=\"{:.1}\" y=\"{y:.1}\">{}</text>",
            x + 26.0,
            esc(&ser.name)
        );
    }
    top + rows as f64 * LEGEND_ROW + 6.0
}

/// Draws a panel's frame between `py0` and `py1`: the x grid lines, the axes and the y label.
fn panel_frame(body: &mut String, panel: &Panel, xa: &XAxis, py0: f64, py1: f64) {
    for t in &xa.ticks {
        let x = xa.tx(*t);
        let _ = write!(
            body,
            "<path d=\"M{x:.1},{py0:.1} V{py1:.1}\" stroke=\"#f0f0f0\"/>"
        );
    }
    let _ = write!(
        body,
        "<path d=\"M{LEFT},{py0:.1} V{py1:.1} H{:.1}\" fill=\"none\" stroke=\"#444\"/>",
        WIDTH - RIGHT
    );
    let mid = (py0 + py1) / 2.0;
    let _ = write!(
        body,
        "<text transform=\"translate(14,{mid:.1}) rotate(-90)\" text-anchor=\"middle\">{}</text>",
        esc(&panel.y_label)
    );
}

/// Draws one series: its line and, for marker styles, a marker with a tip per point.
fn draw_series(body: &mut String, ser: &Series, xa: &XAxis, ty: &dyn Fn(f64) -> f64) {
    let pts: Vec<(f64, f64)> = ser
        .points
        .iter()
        .copied()
        .filter(|(x, y)| x.is_finite() && y.is_finite() && (!xa.log || *x > 0.0))
        .collect();
    if pts.is_empty() {
        return;
    }
    if ser.style != Style::Markers && pts.len() > 1 {
        let d: Vec<String> = pts
            .iter()
            .enumerate()
            .map(|(i, (x, y))| {
                format!(
                    "{}{:.1},{:.1}",
                    if i == 0 { "M" } else { "L" },
                    xa.tx(*x),
                    ty(*y)
                )
            })
            .collect();
        let _ = write!(
            body,
            "<path d=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"{}/>",
            d.join(" "),
            ser.colour,
            dash(ser.style)
        );
    }
    if matches!(ser.style, Style::Markers | Style::LineMarkers) {
        for (x, y) in &pts {
            let tip = format!("{}: {} at {}", ser.name, tick_label(*y), tick_label(*x));
            marker(body, xa.tx(*x), ty(*y), &ser.colour, &tip);
        }
    }
}

impl LineChart {
    /// The chart as an `<svg>` element.
    pub fn svg(&self) -> String {
        let xa = XAxis::of(self);
        let plot_w = WIDTH - LEFT - RIGHT;
        let mut top = 8.0;
        let mut body = String::new();
        for (pi, panel) in self.panels.iter().enumerate() {
            top = line_legend(&mut body, panel, top);
            let ymax = panel
                .series
                .iter()
                .flat_map(|x| x.points.iter().map(|q| q.1))
                .filter(|y| y.is_finite())
                .fold(0.0, f64::max);
            let (py0, py1) = (top, top + PANEL_H);
            let ty = y_axis(&mut body, ymax, py0, py1);
            panel_frame(&mut body, panel, &xa, py0, py1);
            for ser in &panel.series {
                draw_series(&mut body, ser, &xa, &ty);
            }
            // x tick labels under the last panel only; the others share them.
            if pi + 1 == self.panels.len() {
                for t in &xa.ticks {
                    let _ = write!(
                        body,
                        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
                        xa.tx(*t),
                        py1 + 15.0,
                        tick_label(*t)
                    );
                }
                let _ = write!(
                    body,
                    "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}{}</text>",
                    LEFT + plot_w / 2.0,
                    py1 + 32.0,
                    esc(&self.x_label),
                    if self.x_log { " (log scale)" } else { "" }
                );
                top = py1 + 40.0;
            } else {
                top = py1 + GAP;
            }
        }
        let h = top.ceil();
        let mut s = String::new();
        let _ = write!(
            s,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" role=\"img\" width=\"{WIDTH}\" height=\"{h}\" viewBox=\"0 0 {WIDTH} {h}\" font-family=\"sans-serif\" font-size=\"11\"><title>{}</title>",
            esc(&self.title)
        );
        s.push_str(&body);
        s.push_str("</svg>\n");
        s
    }
}

impl BarChart {
    /// The chart as an `<svg>` element.
    pub fn svg(&self) -> String {
        let names: Vec<&str> = self.series.iter().map(|x| x.0.as_str()).collect();
        let plot_w = WIDTH - LEFT - RIGHT;
        let (legend, rows) = legend_layout(&names, plot_w);
        let mut body = String::new();
        for ((lx, row), (name, colour)) in legend.iter().zip(&self.series) {
            let y = 8.0 + *row as f64 * LEGEND_ROW + 10.0;
            let _ = write!(
                body,
                "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"14\" height=\"10\" fill=\"{colour}\"/><text x=\"{:.1}\" y=\"{y:.1}\">{}</text>",
                LEFT + lx,
                y - 9.0,
                LEFT + lx + 20.0,
                esc(name)
            );
        }
        let py0 = 8.0 + rows as f64 * LEGEND_ROW + 6.0;
        let py1 = py0 + PANEL_H;
        let max = self
            .groups
            .iter()
            .flat_map(|g| g.1.iter().copied())
            .chain(self.reference)
            .fold(0.0, f64::max);
        let ty = y_axis(&mut body, max, py0, py1);
        let ng = self.groups.len().max(1) as f64;
        let gw = plot_w / ng;
        let bw = (gw * 0.8 / self.series.len().max(1) as f64).min(40.0);
        for (gi, (label, values)) in self.groups.iter().enumerate() {
            let gx = LEFT + gi as f64 * gw + (gw - bw * values.len() as f64) / 2.0;
            for (si, v) in values.iter().enumerate() {
                let colour = self.series.get(si).map_or("#888", |x| x.1.as_str());
                let (x, y) = (gx + si as f64 * bw, ty(v.max(0.0)));
                let _ = write!(
                    body,
                    "<path d=\"M{x:.1},{py1:.1} V{y:.1} h{:.1} V{py1:.1} Z\" fill=\"{colour}\"><title>{}: {}</title></path>",
                    bw - 2.0,
                    esc(&format!(
                        "{label}, {}",
                        self.series.get(si).map_or("", |x| x.0.as_str())
                    )),
                    tick_label(*v)
                );
            }
            let _ = write!(
                body,
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
                LEFT + gi as f64 * gw + gw / 2.0,
                py1 + 15.0,
                esc(label)
            );
        }
        if let Some(r) = self.reference {
            let y = ty(r);
            let _ = write!(
                body,
                "<path d=\"M{LEFT},{y:.1} H{:.1}\" stroke=\"#d62728\" stroke-dasharray=\"4 3\"/>",
                WIDTH - RIGHT
            );
        }
        let _ = write!(
            body,
            "<path d=\"M{LEFT},{py0:.1} V{py1:.1} H{:.1}\" fill=\"none\" stroke=\"#444\"/><text transform=\"translate(14,{:.1}) rotate(-90)\" text-anchor=\"middle\">{}</text>",
            WIDTH - RIGHT,
            (py0 + py1) / 2.0,
            esc(&self.y_label)
        );
        let h = (py1 + 26.0).ceil();
        format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" role=\"img\" width=\"{WIDTH}\" height=\"{h}\" viewBox=\"0 0 {WIDTH} {h}\" font-family=\"sans-serif\" font-size=\"11\"><title>{}</title>{body}</svg>\n",
            esc(&self.title)
        )
    }
}

/// A standalone HTML page: `<title>`, an embedded style sheet, and `body` (no scripts, no
/// network resources).
pub fn page(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title>\n<style>body{{font-family:sans-serif;max-width:1000px;margin:1.5em auto;padding:0 1em;color:#222}}table{{border-collapse:collapse;margin:.5em 0 1em}}td,th{{border:1px solid #ccc;padding:2px 8px;font-size:13px;text-align:left}}th{{background:#f4f4f4}}td.num{{text-align:right}}code{{background:#f4f4f4;padding:0 3px}}pre{{background:#f4f4f4;padding:8px;overflow:auto}}figure{{margin:0 0 1em}}</style></head><body>\n{body}</body></html>\n",
        esc(title)
    )
}

/// Inline Markdown of one line as HTML: `code` spans and **bold**, the rest escaped, so no
/// literal backticks or asterisks reach the page.
pub fn inline(md: &str) -> String {
    let mut out = String::new();
    let mut code = false;
    let mut bold = false;
    let mut rest = md;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('`') {
            out.push_str(if code { "</code>" } else { "<code>" });
            code = !code;
            rest = r;
        } else if !code && rest.starts_with("**") {
            out.push_str(if bold { "</strong>" } else { "<strong>" });
            bold = !bold;
            rest = &rest[2..];
        } else {
            let next = rest
                .char_indices()
                .skip(1)
                .find(|(_, c)| *c == '`' || *c == '*')
                .map_or(rest.len(), |(i, _)| i);
            out.push_str(&esc(&rest[..next]));
            rest = &rest[next..];
        }
    }
    if code {
        out.push_str("</code>");
    }
    if bold {
        out.push_str("</strong>");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_ticks_cover_the_maximum_in_round_steps() {
        assert_eq!(nice_ticks(9.3), vec![0.0, 2.5, 5.0, 7.5, 10.0]);
        assert_eq!(nice_ticks(430.0), vec![0.0, 200.0, 400.0, 600.0]);
        assert_eq!(tick_label(0.0025), "0.0025");
        assert_eq!(tick_label(12.5), "12.5");
    }

    #[test]
    fn a_log_axis_of_users_gets_powers_of_two() {
        assert_eq!(log_ticks(1.0, 32.0), vec![1.0, 2.0, 4.0, 8.0, 16.0, 32.0]);
    }

    #[test]
    fn legend_entries_that_do_not_fit_go_to_the_next_row() {
        let (pos, rows) = legend_layout(
            &["a long series name here", "another long one", "third"],
            400.0,
        );
        assert_eq!(rows, 2);
        assert_eq!(pos[1].1, 0);
        assert_eq!(pos[2], (0.0, 1));
    }

    #[test]
    fn throughput_and_response_time_get_separate_axes_and_drawn_paths() {
        let c = LineChart {
            title: "t".into(),
            x_label: "users".into(),
            x_log: true,
            panels: vec![
                Panel {
                    y_label: "throughput (req/s)".into(),
                    series: vec![Series::new(
                        "model",
                        "#1f77b4",
                        Style::Line,
                        vec![(1.0, 10.0), (8.0, 80.0)],
                    )],
                },
                Panel {
                    y_label: "response time (ms)".into(),
                    series: vec![Series::new(
                        "measured",
                        "#d62728",
                        Style::Markers,
                        vec![(1.0, 1.0), (8.0, 3.0)],
                    )],
                },
            ],
        };
        let svg = c.svg();
        assert!(svg.contains("throughput (req/s)") && svg.contains("response time (ms)"));
        assert!(svg.contains("<path d=\"M70.0,"), "{svg}");
        assert_eq!(
            svg.matches("<circle").count(),
            3,
            "two markers and one legend marker"
        );
        assert!(svg.contains("(log scale)"));
    }

    #[test]
    fn inline_markdown_leaves_no_backticks() {
        assert_eq!(
            inline("run `perfpilot x` **now** <b>"),
            "run <code>perfpilot x</code> <strong>now</strong> &lt;b&gt;"
        );
    }
}
