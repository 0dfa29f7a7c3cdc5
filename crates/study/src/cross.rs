//! Two runs across machines (the seeds' POWER8 against Ivy Bridge, blades against a p575): the
//! machines each run recorded, and for every configuration both runs measured the ratio of run
//! `b`'s result to run `a`'s, overall, per busy core and per instance, with 95 % intervals.
//!
//! The runs ran on different machines, so their trials are independent samples, never pairs:
//! each interval is Welch's on the log of the ratio of means (`perfpilot_stats`). Every ratio
//! is oriented so that > 1 means `b` is better. Per core and per instance compare a rate: the
//! objective when higher is better (req/s, MiB/s), else the trial's throughput (requests or
//! jobs per second), since a latency or a time divided by cores means nothing.

use perfpilot_drive::Measurement;
use perfpilot_lab::MachineFacts;
use perfpilot_store::{TrialPhase, TrialRecord, TrialStatus};
use serde::{Deserialize, Serialize};

use crate::spec::Config;
use crate::summary::Summary;

/// The intervals' level.
const LEVEL: f64 = 0.95;

/// `b`'s figure over `a`'s, oriented so that > 1 means `b` is better, with its 95 % interval.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct CrossRatio {
    /// The ratio of the two means.
    pub ratio: f64,
    /// The interval's low end (`None`: a side has fewer than two trials).
    pub low: Option<f64>,
    /// The interval's high end.
    pub high: Option<f64>,
}

/// One configuration both runs measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConfigRatio {
    /// The configuration's key.
    pub config: String,
    /// Successful race and confirmation trials in run `a`.
    pub trials_a: usize,
    /// And in run `b`.
    pub trials_b: usize,
    /// The objective's mean in run `a`.
    pub mean_a: f64,
    /// And in run `b`.
    pub mean_b: f64,
    /// `b`'s objective over `a`'s (> 1: `b` better).
    pub result: Option<CrossRatio>,
    /// `b`'s rate per busy core over `a`'s (`None`: a side recorded no CPU figures).
    pub per_core: Option<CrossRatio>,
    /// `b`'s rate per instance over `a`'s (`None`: the study has no `instances` factor).
    pub per_instance: Option<CrossRatio>,
}

/// Run `b` against run `a` across machines.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CrossSystem {
    /// The machine run `a` ran on.
    pub machine_a: MachineFacts,
    /// The machine run `b` ran on.
    pub machine_b: MachineFacts,
    /// The objective's unit (run `a`'s).
    pub unit: String,
    /// What per core and per instance divide: the objective's unit when higher is better,
    /// else the throughput's (`req/s`, `jobs/s`).
    pub rate_unit: String,
    /// Why there are no per-configuration ratios (the runs have different goals or units).
    pub refused: Option<String>,
    /// The configurations both runs measured, in run `a`'s order.
    pub configs: Vec<ConfigRatio>,
    /// Configurations only run `a` measured.
    pub only_a: Vec<String>,
    /// Configurations only run `b` measured.
    pub only_b: Vec<String>,
}

/// One successful trial's figures.
struct Figures {
    value: f64,
    rate: Option<f64>,
    cores: Option<f64>,
    instances: Option<usize>,
}

/// The successful race and confirmation trials of each configuration, in the order first seen.
fn by_config(trials: &[TrialRecord], higher: bool) -> Vec<(String, Vec<Figures>)> {
    let mut out: Vec<(String, Vec<Figures>)> = Vec::new();
    for t in trials {
        if !matches!(t.phase, TrialPhase::Race | TrialPhase::Confirm) || t.status != TrialStatus::Ok
        {
            continue;
        }
        let Some(value) = t.value.filter(|v| v.is_finite()) else {
            continue;
        };
        let m = t
            .measurement
            .as_deref()
            .and_then(|j| Measurement::from_json(j).ok());
        let rate = if higher {
            Some(value)
        } else {
            m.as_ref().map(|m| m.throughput_rps)
        };
        let cores = m
            .as_ref()
            .and_then(|m| m.cpu.as_ref())
            .map(|c| c.iter().map(|u| u.cores).sum::<f64>());
        let instances = serde_json::from_str::<Config>(&t.factors)
            .ok()
            .filter(|c| c.get("instances").is_some())
            .map(|c| c.instances());
        let f = Figures {
            value,
            rate: rate.filter(|r| r.is_finite() && *r > 0.0),
            cores: cores.filter(|c| c.is_finite() && *c > 0.0),
            instances,
        };
        match out.iter_mut().find(|(k, _)| *k == t.config) {
            Some((_, fs)) => fs.push(f),
            None => out.push((t.config.clone(), vec![f])),
        }
    }
    out
}

/// `b` over `a` for figures where higher is better (`higher`), else `a` over `b`; `None` when
/// a side is empty or its mean is not positive.
fn ratio(a: &[f64], b: &[f64], higher: bool) -> Option<CrossRatio> {
    let (numer, denom) = if higher { (b, a) } else { (a, b) };
    if numer.is_empty() || denom.is_empty() {
        return None;
    }
    let (mn, md) = (perfpilot_stats::mean(numer), perfpilot_stats::mean(denom));
    if !(mn > 0.0 && md > 0.0) {
        return None;
    }
    let ci = perfpilot_stats::ratio_of_means_ci(numer, denom, LEVEL);
    Some(CrossRatio {
        ratio: mn / md,
        low: ci.map(|c| c.low.exp()),
        high: ci.map(|c| c.high.exp()),
    })
}

/// Every figure of `fs` that `f` gives, or nothing when a trial lacks it (a mean over some of
/// the trials would compare other rounds than the result's).
fn all(fs: &[Figures], f: impl Fn(&Figures) -> Option<f64>) -> Vec<f64> {
    let xs: Vec<f64> = fs.iter().filter_map(f).collect();
    if xs.len() == fs.len() { xs } else { Vec::new() }
}

/// Run `b` (`sb`, `tb`, `host_b`: its summary, trials and stored host facts) against run `a`.
pub fn cross_system(
    (sa, ta, host_a): (&Summary, &[TrialRecord], &str),
    (sb, tb, host_b): (&Summary, &[TrialRecord], &str),
) -> CrossSystem {
    let higher = sa.higher_is_better;
    let rate_unit = if higher {
        sa.unit.clone()
    } else {
        sa.rate_unit.clone()
    };
    let mut out = CrossSystem {
        machine_a: MachineFacts::from_json(host_a),
        machine_b: MachineFacts::from_json(host_b),
        unit: sa.unit.clone(),
        rate_unit,
        refused: None,
        configs: Vec::new(),
        only_a: Vec::new(),
        only_b: Vec::new(),
    };
    if sa.goal != sb.goal || sa.unit != sb.unit || sa.higher_is_better != sb.higher_is_better {
        out.refused = Some(format!(
            "the runs have different goals ({} in {}, {} in {}): their results are not the same quantity, so no ratio is given",
            sa.goal, sa.unit, sb.goal, sb.unit
        ));
        return out;
    }
    let (fa, fb) = (by_config(ta, higher), by_config(tb, higher));
    for (k, xs) in &fa {
        let Some((_, ys)) = fb.iter().find(|(kb, _)| kb == k) else {
            out.only_a.push(k.clone());
            continue;
        };
        let per = |f: &dyn Fn(&Figures) -> Option<f64>| ratio(&all(xs, f), &all(ys, f), true);
        out.configs.push(ConfigRatio {
            config: k.clone(),
            trials_a: xs.len(),
            trials_b: ys.len(),
            mean_a: perfpilot_stats::mean(&all(xs, |f| Some(f.value))),
            mean_b: perfpilot_stats::mean(&all(ys, |f| Some(f.value))),
            result: ratio(
                &all(xs, |f| Some(f.value)),
                &all(ys, |f| Some(f.value)),
                higher,
            ),
            per_core: per(&|f| Some(f.rate? / f.cores?)),
            per_instance: per(&|f| Some(f.rate? / f.instances? as f64)),
        });
    }
    out.only_b = fb
        .iter()
        .filter(|(k, _)| !fa.iter().any(|(ka, _)| ka == k))
        .map(|(k, _)| k.clone())
        .collect();
    out
}
