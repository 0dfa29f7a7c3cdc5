//! The proof's table: per server and cell, the throughput ratio to untuned with its 95 %
//! interval (paired by round: see [`ratio_to_untuned`]), p99, and the
//! daemon's time to its first kept action and own CPU; then the targets per server and the
//! agreement between the signal that judged each action and the kernel-visible proxy.

use std::collections::BTreeMap;

use perfpilot_stats::{mean, paired_ratio_ci, ratio_of_means_ci};
use perfpilot_units as units;
use perfpilot_units::MarkdownTable;

use crate::options::{CellName, ServerName};
use crate::record::{CellRecord, GainCi, Outcome};

/// The interval level of every ratio.
pub const LEVEL: f64 = 0.95;

/// A ratio to untuned with its interval (`None` ends with fewer than two runs a side).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ratio {
    /// The geometric mean of the per-round ratios when paired, else mean(cell) / mean(untuned).
    pub ratio: f64,
    /// The interval, when both sides have two runs or more.
    pub ci: Option<(f64, f64)>,
    /// Whether the runs were paired by round.
    pub paired: bool,
}

/// The ratio of a cell's runs to untuned's, each run given with its round. Paired by round
/// when every run of the cell has an untuned run in its round and there are two or more:
/// the geometric mean of the per-round ratios with a t interval on their logs. A round runs
/// every cell once, close in time and in a rotated order, so a drift of the machine from one
/// round to the next (a 2-core VM's neighbours: untuned PostgreSQL ran 19,564, 19,171 and
/// 13,944 tps in the three rounds of 2026-11-25) falls out of each round's ratio instead of
/// widening the interval. Otherwise the ratio of means with Welch's interval.
pub fn ratio_to_untuned(cell: &[(u32, f64)], untuned: &[(u32, f64)]) -> Option<Ratio> {
    if cell.is_empty() || untuned.is_empty() {
        return None;
    }
    let partner = |round: u32| untuned.iter().find(|(r, _)| *r == round).map(|(_, x)| *x);
    let pairs: Option<(Vec<f64>, Vec<f64>)> = cell
        .iter()
        .map(|(r, x)| Some((*x, partner(*r)?)))
        .collect::<Option<Vec<_>>>()
        .map(|v| v.into_iter().unzip());
    if let Some((xs, bs)) = pairs
        && xs.len() >= 2
        && let Some(ci) = paired_ratio_ci(&xs, &bs, LEVEL)
    {
        return Some(Ratio {
            ratio: ci.ratio,
            ci: Some((ci.low, ci.high)),
            paired: true,
        });
    }
    let xs: Vec<f64> = cell.iter().map(|(_, x)| *x).collect();
    let bs: Vec<f64> = untuned.iter().map(|(_, x)| *x).collect();
    Some(Ratio {
        ratio: mean(&xs) / mean(&bs),
        ci: ratio_of_means_ci(&xs, &bs, LEVEL).map(|c| (c.low.exp(), c.high.exp())),
        paired: false,
    })
}

impl Ratio {
    /// `×1.04 [0.98, 1.10]`, `×1.04 [0.98, 1.10] unpaired` (Welch's, some run without an
    /// untuned run in its round), or `×1.04` without an interval.
    pub fn describe(&self) -> String {
        match self.ci {
            Some((lo, hi)) if self.paired => format!("×{:.2} [{lo:.2}, {hi:.2}]", self.ratio),
            Some((lo, hi)) => format!("×{:.2} [{lo:.2}, {hi:.2}] unpaired", self.ratio),
            None => format!("×{:.2}", self.ratio),
        }
    }

    /// Whether the interval lies wholly below 1 (a loss beyond noise).
    pub fn below_one(&self) -> bool {
        match self.ci {
            Some((_, hi)) => hi < 1.0,
            None => false,
        }
    }
}

/// One row of the table: a server in one cell over every round.
#[derive(Clone, Debug, PartialEq)]
pub struct CellSummary {
    /// Server name.
    pub server: String,
    /// Cell name.
    pub cell: String,
    /// Throughputs of the measured runs.
    pub throughputs: Vec<f64>,
    /// Unit of the throughput.
    pub unit: String,
    /// Ratio to untuned (`None` for untuned itself or without an untuned run).
    pub ratio: Option<Ratio>,
    /// Mean p99 over the runs that had one, ms.
    pub p99_ms: Option<f64>,
    /// Runs that did not measure, with the first reason.
    pub not_measured: Option<(usize, String)>,
    /// Seconds to the first kept action, per run that kept one.
    pub first_kept_s: Vec<f64>,
    /// Runs of the daemon (perfpilot cell).
    pub daemon_runs: usize,
    /// The daemon's mean CPU, % of one CPU.
    pub cpu_pct: Option<f64>,
}

fn server_rank(name: &str) -> usize {
    ServerName::ALL
        .iter()
        .position(|s| s.name() == name)
        .unwrap_or(usize::MAX)
}

fn cell_rank(name: &str) -> usize {
    CellName::ALL
        .iter()
        .position(|c| c.name() == name)
        .unwrap_or(usize::MAX)
}

/// The rows, servers and cells in the harness's order.
pub fn summarize(records: &[CellRecord]) -> Vec<CellSummary> {
    let mut groups: BTreeMap<(usize, String, usize, String), Vec<&CellRecord>> = BTreeMap::new();
    for r in records {
        let key = (
            server_rank(&r.server),
            r.server.clone(),
            cell_rank(&r.cell),
            r.cell.clone(),
        );
        groups.entry(key).or_default().push(r);
    }
    let throughputs = |rs: &[&CellRecord]| -> Vec<(u32, f64)> {
        rs.iter()
            .filter(|r| r.outcome == Outcome::Ok)
            .filter_map(|r| Some((r.round, r.throughput?)))
            .filter(|(_, t)| t.is_finite() && *t > 0.0)
            .collect()
    };
    let mut out = Vec::new();
    for ((_, server, _, cell), rs) in &groups {
        let runs = throughputs(rs);
        let baseline: Vec<(u32, f64)> = groups
            .iter()
            .find(|((_, s, _, c), _)| s == server && c == CellName::Untuned.name())
            .map(|(_, b)| throughputs(b))
            .unwrap_or_default();
        let ratio = if cell == CellName::Untuned.name() {
            None
        } else {
            ratio_to_untuned(&runs, &baseline)
        };
        let xs: Vec<f64> = runs.iter().map(|(_, x)| *x).collect();
        let p99s: Vec<f64> = rs
            .iter()
            .filter(|r| r.outcome == Outcome::Ok)
            .filter_map(|r| r.p99_ms)
            .collect();
        let failed: Vec<&&CellRecord> = rs.iter().filter(|r| r.outcome != Outcome::Ok).collect();
        let not_measured = failed.first().map(|f| {
            let why = match f.outcome {
                Outcome::NotInstalled => {
                    format!("not installed: {}", f.error.clone().unwrap_or_default())
                }
                _ => f.error.clone().unwrap_or_else(|| "failed".to_string()),
            };
            (failed.len(), why)
        });
        let daemons: Vec<_> = rs.iter().filter_map(|r| r.perfpilot.as_ref()).collect();
        let cpus: Vec<f64> = daemons
            .iter()
            .filter_map(|d| d.cpu_pct.or(d.own_cpu_pct))
            .collect();
        out.push(CellSummary {
            server: server.clone(),
            cell: cell.clone(),
            unit: rs
                .iter()
                .map(|r| r.unit.clone())
                .find(|u| !u.is_empty())
                .unwrap_or_default(),
            ratio,
            p99_ms: (!p99s.is_empty()).then(|| mean(&p99s)),
            not_measured,
            first_kept_s: daemons.iter().filter_map(|d| d.first_kept_s).collect(),
            daemon_runs: daemons.len(),
            cpu_pct: (!cpus.is_empty()).then(|| mean(&cpus)),
            throughputs: xs,
        });
    }
    out
}

/// The targets of issue 14 for one server: perfpilot ≥ 0.95 × the best peer, and never below
/// untuned beyond noise.
#[derive(Clone, Debug, PartialEq)]
pub struct TargetCheck {
    /// Server name.
    pub server: String,
    /// The best peer cell and its ratio.
    pub best_peer: Option<(String, f64)>,
    /// perfpilot's ratio.
    pub perfpilot: Option<Ratio>,
    /// perfpilot ≥ 0.95 × the best peer (`None` when either is missing).
    pub near_best: Option<bool>,
    /// perfpilot's interval holds 1 or lies above it (`None` without an interval).
    pub no_loss: Option<bool>,
}

/// The target checks, one per server that ran the perfpilot cell.
pub fn targets(rows: &[CellSummary]) -> Vec<TargetCheck> {
    let mut servers: Vec<&str> = rows.iter().map(|r| r.server.as_str()).collect();
    servers.dedup();
    let mut out = Vec::new();
    for s in servers {
        let of = |c: &str| rows.iter().find(|r| r.server == s && r.cell == c);
        let Some(pp) = of(CellName::Perfpilot.name()) else {
            continue;
        };
        // Untuned is a peer too (ratio 1): doing nothing is a configuration perfpilot must match.
        let best_peer = rows
            .iter()
            .filter(|r| r.server == s && r.cell != CellName::Perfpilot.name())
            .filter_map(|r| {
                match (
                    &r.ratio,
                    r.cell == CellName::Untuned.name() && !r.throughputs.is_empty(),
                ) {
                    (Some(x), _) => Some((r.cell.clone(), x.ratio)),
                    (None, true) => Some((r.cell.clone(), 1.0)),
                    _ => None,
                }
            })
            .max_by(|a, b| a.1.total_cmp(&b.1));
        let near_best = match (&best_peer, &pp.ratio) {
            (Some((_, best)), Some(p)) => Some(p.ratio >= 0.95 * best),
            _ => None,
        };
        out.push(TargetCheck {
            server: s.to_string(),
            best_peer,
            perfpilot: pp.ratio,
            near_best,
            // One run a side gives no interval: unknown, not a pass.
            no_loss: pp.ratio.and_then(|r| r.ci.map(|_| !r.below_one())),
        });
    }
    out
}

/// One row of the agreement table.
#[derive(Clone, Debug, PartialEq)]
pub struct Agreement {
    /// Server.
    pub server: String,
    /// Round.
    pub round: u32,
    /// `#id strategy`.
    pub action: String,
    /// The judging signal.
    pub signal: String,
    /// Its gain.
    pub gain: GainCi,
    /// The proxy's name.
    pub proxy: String,
    /// The proxy's gain.
    pub proxy_gain: GainCi,
    /// Whether the proxy saw the same effect.
    pub accord: Accord,
}

/// Whether a proxy's gain agrees with the judging signal's on the same windows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accord {
    /// Both intervals are narrow enough to tell, and each ratio lies in the other's interval.
    Agrees,
    /// Both are narrow enough to tell, and a ratio lies outside the other's interval.
    Disagrees,
    /// An interval is wider than [`MAX_TELLING_WIDTH`]: it overlaps almost anything, so it
    /// proves no agreement (PostgreSQL's proxy at ×0.08–14.3 "agreed" by overlap before).
    TooWide,
}

/// The widest interval (high over low) that still tells one effect from another.
pub const MAX_TELLING_WIDTH: f64 = 1.5;

impl Accord {
    /// The accord of a proxy's gain with the judging signal's.
    pub fn of(signal: &GainCi, proxy: &GainCi) -> Accord {
        let width = |g: &GainCi| {
            if g.ci_low > 0.0 {
                g.ci_high / g.ci_low
            } else {
                f64::INFINITY
            }
        };
        if width(signal) > MAX_TELLING_WIDTH || width(proxy) > MAX_TELLING_WIDTH {
            return Accord::TooWide;
        }
        let inside = |r: f64, g: &GainCi| g.ci_low <= r && r <= g.ci_high;
        if inside(proxy.ratio, signal) && inside(signal.ratio, proxy) {
            Accord::Agrees
        } else {
            Accord::Disagrees
        }
    }

    /// As the agreement table shows it.
    pub fn text(self) -> &'static str {
        match self {
            Accord::Agrees => "yes",
            Accord::Disagrees => "**no**",
            Accord::TooWide => "cannot tell (an interval wider than ×1.5)",
        }
    }
}

/// Every (action, proxy) pair the daemon's verdicts carried.
pub fn agreement(records: &[CellRecord]) -> Vec<Agreement> {
    let mut out = Vec::new();
    for r in records {
        let Some(d) = &r.perfpilot else { continue };
        for a in &d.actions {
            let Some(gain) = a.gain else { continue };
            for s in &a.shadow {
                out.push(Agreement {
                    server: r.server.clone(),
                    round: r.round,
                    action: format!("#{} {}", a.id, a.strategy),
                    signal: a.signal.clone().unwrap_or_default(),
                    gain,
                    proxy: s.signal.clone(),
                    proxy_gain: s.gain,
                    accord: Accord::of(&gain, &s.gain),
                });
            }
        }
    }
    out
}

fn gain_text(g: &GainCi) -> String {
    format!("×{:.2} [{:.2}, {:.2}]", g.ratio, g.ci_low, g.ci_high)
}

fn throughput_text(r: &CellSummary) -> String {
    if r.throughputs.is_empty() {
        return "—".to_string();
    }
    format!("{} {}", units::number(mean(&r.throughputs)), r.unit)
}

/// The Markdown tables: cells, targets, agreement.
pub fn markdown(records: &[CellRecord]) -> String {
    let rows = summarize(records);
    let mut cells = MarkdownTable::new(&[
        "server",
        "cell",
        "runs",
        "throughput",
        "ratio to untuned (95 % CI)",
        "p99",
        "first kept action",
        "perfpilot CPU",
        "notes",
    ]);
    for r in &rows {
        let ratio = match (&r.ratio, r.cell == CellName::Untuned.name()) {
            (_, true) if !r.throughputs.is_empty() => "1 (baseline)".to_string(),
            (Some(x), _) => x.describe(),
            _ => "—".to_string(),
        };
        let kept = if r.daemon_runs == 0 {
            String::new()
        } else if r.first_kept_s.is_empty() {
            format!(
                "none kept in {}",
                units::counted(r.daemon_runs as u64, "run", "runs")
            )
        } else {
            format!(
                "{} ({} of {})",
                units::duration_secs(mean(&r.first_kept_s)),
                r.first_kept_s.len(),
                r.daemon_runs
            )
        };
        let cpu = r.cpu_pct.map(units::percent).unwrap_or_default();
        let notes = r
            .not_measured
            .as_ref()
            .map(|(n, why)| format!("{n} not measured: {why}"))
            .unwrap_or_default();
        cells.row(&[
            r.server.clone(),
            r.cell.clone(),
            r.throughputs.len().to_string(),
            throughput_text(r),
            ratio,
            r.p99_ms
                .map(units::duration_ms)
                .unwrap_or_else(|| "—".to_string()),
            kept,
            cpu,
            notes,
        ]);
    }
    let mut s = cells.render();
    s.push_str(
        "\nRatios are paired by round: the geometric mean of each round's ratio to untuned, with a t interval on their logs (\"unpaired\": the ratio of means with Welch's interval, where a run had no untuned run in its round).\n",
    );
    let checks = targets(&rows);
    if !checks.is_empty() {
        s.push_str(
            "\nTargets (perfpilot ≥ 0.95 × the best peer; never below untuned beyond noise):\n\n",
        );
        let mut t = MarkdownTable::new(&[
            "server",
            "best peer",
            "perfpilot",
            "≥ 0.95 × best",
            "not below untuned",
        ]);
        let yn = |b: Option<bool>| match b {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "—",
        };
        for c in &checks {
            t.row(&[
                c.server.clone(),
                c.best_peer
                    .as_ref()
                    .map(|(n, r)| format!("{n} ×{r:.2}"))
                    .unwrap_or_else(|| "—".to_string()),
                c.perfpilot
                    .map(|r| r.describe())
                    .unwrap_or_else(|| "—".to_string()),
                yn(c.near_best).to_string(),
                yn(c.no_loss).to_string(),
            ]);
        }
        s.push_str(&t.render());
    }
    s.push_str(&actions_section(records));
    let agree = agreement(records);
    s.push_str("\nProxy agreement (the daemon's judging signal against the kernel-visible proxy on the same windows):\n\n");
    if agree.is_empty() {
        s.push_str("no verdict carried a proxy gain (`shadow`) in this run.\n");
    } else {
        let mut t = MarkdownTable::new(&[
            "server",
            "round",
            "action",
            "judged by",
            "gain",
            "proxy",
            "proxy gain",
            "agree",
        ]);
        for a in &agree {
            t.row(&[
                a.server.clone(),
                a.round.to_string(),
                a.action.clone(),
                a.signal.clone(),
                gain_text(&a.gain),
                a.proxy.clone(),
                gain_text(&a.proxy_gain),
                a.accord.text().to_string(),
            ]);
        }
        s.push_str(&t.render());
    }
    s
}

/// The daemon's view of the server in each perfpilot run: its workload's signal and state, and
/// every action on the machine with its verdict.
fn actions_section(records: &[CellRecord]) -> String {
    let runs: Vec<&CellRecord> = records.iter().filter(|r| r.perfpilot.is_some()).collect();
    if runs.is_empty() {
        return String::new();
    }
    let mut t = MarkdownTable::new(&[
        "server",
        "round",
        "the server's signal",
        "its state",
        "actions (state, verdict, judged by)",
    ]);
    for r in runs {
        let Some(d) = &r.perfpilot else { continue };
        let process = ServerName::ALL
            .iter()
            .find(|s| s.name() == r.server)
            .map(|s| s.process())
            .unwrap_or_default();
        let w = d
            .workloads
            .iter()
            .find(|w| w.name == process || w.name.starts_with(&format!("{process} ")));
        let actions: Vec<String> = d
            .actions
            .iter()
            .map(|a| {
                format!(
                    "#{} {} on {}: {}{}{}",
                    a.id,
                    a.strategy,
                    a.workload,
                    a.state,
                    a.gain
                        .as_ref()
                        .map(|g| format!(
                            ", {} {}",
                            a.decision.clone().unwrap_or_default(),
                            gain_text(g)
                        ))
                        .unwrap_or_default(),
                    a.signal
                        .as_ref()
                        .map(|x| format!(" by {x}"))
                        .unwrap_or_default()
                )
            })
            .collect();
        t.row(&[
            r.server.clone(),
            r.round.to_string(),
            w.and_then(|w| w.signal.clone())
                .unwrap_or_else(|| "none".into()),
            w.map(|w| w.state.clone())
                .unwrap_or_else(|| "not seen in the last scan".into()),
            if actions.is_empty() {
                "none".to_string()
            } else {
                actions.join("; ")
            },
        ]);
    }
    format!(
        "\nThe daemon (empty configuration) at the end of each perfpilot run:\n\n{}",
        t.render()
    )
}
