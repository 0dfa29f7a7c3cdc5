//! `[objective]`: the goal, the constraints a trial must meet, and the smallest effect worth
//! finding.

use perfpilot_drive::Threshold;
use serde::{Deserialize, Serialize};
use toml::Spanned;

use super::load::{LoadKind, LoadSpec};
use super::raw::RawObjective;
use super::source::Source;
use crate::error::Result;

/// `objective.min_effect` must stay below this.
pub(crate) const MIN_EFFECT_BELOW: f64 = 10.0;

/// `objective.min_effect` when the file leaves it out (5 %).
const DEFAULT_MIN_EFFECT: f64 = 0.05;

/// The latency statistics a `minimize latency` goal may name.
const LATENCY_STATISTICS: [&str; 8] = ["mean", "p50", "p75", "p90", "p95", "p99", "p99.9", "max"];

/// What the study optimizes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Goal {
    /// Requests per second, higher is better.
    MaxThroughput,
    /// A latency statistic (`p99`, `p50`, `mean`), lower is better.
    MinLatency(String),
    /// CPU milliseconds per request over all instances, lower is better.
    MinCpuPerRequest,
    /// A batch's elapsed seconds (start to the last instance's exit), lower is better.
    MinElapsed,
    /// A batch's CPU seconds (user + system of its processes), lower is better.
    MinCpuTime,
    /// A batch's MiB read and written per elapsed second, higher is better.
    MaxMbPerSec,
}

impl Goal {
    /// How the goal reads in reports.
    pub fn describe(&self) -> String {
        match self {
            Goal::MaxThroughput => "maximize throughput (requests/s)".into(),
            Goal::MinLatency(p) => format!("minimize {p} latency (ms)"),
            Goal::MinCpuPerRequest => "minimize CPU per request (ms)".into(),
            Goal::MinElapsed => "minimize elapsed time (s)".into(),
            Goal::MinCpuTime => "minimize CPU time (s)".into(),
            Goal::MaxMbPerSec => "maximize I/O throughput (MiB/s)".into(),
        }
    }

    /// Whether larger values are better.
    pub fn higher_is_better(&self) -> bool {
        matches!(self, Goal::MaxThroughput | Goal::MaxMbPerSec)
    }

    /// Whether the goal is a batch's (elapsed, CPU time, MiB/s).
    pub fn is_batch(&self) -> bool {
        matches!(
            self,
            Goal::MinElapsed | Goal::MinCpuTime | Goal::MaxMbPerSec
        )
    }

    /// The unit of the objective value.
    pub fn unit(&self) -> &'static str {
        match self {
            Goal::MaxThroughput => "req/s",
            Goal::MinLatency(_) => "ms",
            Goal::MinCpuPerRequest => "CPU ms/req",
            Goal::MinElapsed => "s",
            Goal::MinCpuTime => "CPU s",
            Goal::MaxMbPerSec => "MiB/s",
        }
    }
}

/// The objective and its constraints.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Objective {
    /// What is optimized.
    pub goal: Goal,
    /// Constraints as written (`p99 < 50ms`, `errors < 0.1%`).
    pub constraints: Vec<String>,
    /// The smallest relative effect worth finding (0.05 = 5 %): the baseline's run-to-run
    /// variation is compared to it.
    pub min_effect: f64,
}

impl Objective {
    /// The parsed constraints (validated when the study was loaded).
    pub fn thresholds(&self) -> Vec<Threshold> {
        self.constraints
            .iter()
            .filter_map(|c| Threshold::parse(c).ok())
            .collect()
    }
}

/// Checks `[objective]`; CPU per request needs the built-in driver's request counts.
pub(super) fn objective(source: &Source, o: &RawObjective, load: &LoadSpec) -> Result<Objective> {
    let batch = matches!(load.kind, LoadKind::Batch { .. });
    let goal = match &o.goal {
        None if batch => Goal::MinElapsed,
        None => Goal::MaxThroughput,
        Some(g) => {
            let goal = goal(source, g)?;
            if batch != goal.is_batch() {
                let why = if batch {
                    "a batch study's goal is \"minimize elapsed\", \"minimize cpu time\" or \"maximize mb/s\""
                } else {
                    "elapsed, CPU time and MiB/s are goals of batch studies: add kind = \"batch\" to [load]"
                };
                return Err(source.bad(g, "objective.goal", why));
            }
            if matches!(goal, Goal::MaxMbPerSec)
                && matches!(&load.kind, LoadKind::Batch { jobs: None, .. })
            {
                return Err(source.bad(
                    g,
                    "objective.goal",
                    "MiB/s is summed from the job logs' bytes: set load.jobs to the batch's job log (batchmix writes DIR/logs/jobs.jsonl)",
                ));
            }
            if matches!(goal, Goal::MinCpuPerRequest)
                && matches!(load.kind, LoadKind::Command { .. })
            {
                return Err(source.bad(
                    g,
                    "objective.goal",
                    "CPU per request needs request counts: use the built-in driver (load.url)",
                ));
            }
            goal
        }
    };
    for c in &o.constraints {
        Threshold::parse(c.get_ref())
            .map_err(|e| source.bad(c, "objective.constraints", e.to_string()))?;
    }
    let min_effect = match &o.min_effect {
        None => DEFAULT_MIN_EFFECT,
        Some(m) if *m.get_ref() > 0.0 && *m.get_ref() < MIN_EFFECT_BELOW => *m.get_ref(),
        Some(m) => {
            return Err(source.bad(
                m,
                "objective.min_effect",
                "must be a positive fraction such as 0.05 (5 %)",
            ));
        }
    };
    Ok(Objective {
        goal,
        constraints: o.constraints.iter().map(|c| c.get_ref().clone()).collect(),
        min_effect,
    })
}

/// Parses `objective.goal` (case and surrounding blanks do not matter).
fn goal(source: &Source, written: &Spanned<String>) -> Result<Goal> {
    let g = written.get_ref().trim().to_ascii_lowercase();
    if g == "maximize throughput" {
        return Ok(Goal::MaxThroughput);
    }
    if g == "minimize cpu per request" || g == "minimize cpu_per_request" {
        return Ok(Goal::MinCpuPerRequest);
    }
    match g.as_str() {
        "minimize elapsed" | "minimize elapsed time" => return Ok(Goal::MinElapsed),
        "minimize cpu time" | "minimize cpu" => return Ok(Goal::MinCpuTime),
        "maximize mb/s" | "maximize mib/s" | "maximize io throughput" => {
            return Ok(Goal::MaxMbPerSec);
        }
        _ => {}
    }
    if let Some(p) = g.strip_prefix("minimize latency") {
        let p = p.trim();
        let p = if p.is_empty() { "p99" } else { p };
        if !LATENCY_STATISTICS.contains(&p) {
            return Err(source.bad(
                written,
                "objective.goal",
                format!(
                    "latency statistic {p:?}: expected mean, p50, p75, p90, p95, p99, p99.9 or max"
                ),
            ));
        }
        return Ok(Goal::MinLatency(p.to_string()));
    }
    Err(source.bad(
        written,
        "objective.goal",
        format!(
            "{:?}: expected \"maximize throughput\", \"minimize latency p99\" (any of mean, p50…p99.9, max) \"minimize cpu per request\", or for batch studies \"minimize elapsed\", \"minimize cpu time\" or \"maximize mb/s\"",
            written.get_ref()
        ),
    ))
}
