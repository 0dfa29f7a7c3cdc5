//! A whole capacity run: the sweeps on their deployments (one for the sweeps alike), the model
//! fitted from the lowest load points only, every point predicted and compared, the model's
//! curves, the scale-out predictions and the cost ranking — one [`CapacityRun`], saved as JSON
//! and rendered.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use perfpilot_lab::MachineFacts;
use perfpilot_model::{
    ClassLoad, Discipline, TierCheck, TierModel, TierPoint, TierSpec, fit_tiers,
};
use serde::{Deserialize, Serialize};

use crate::deploy::{self, machine_cores};
use crate::error::{CapacityError, Result};
use crate::rounds;
use crate::spec::{Capacity, TierKind};
use crate::sweep::{self, DRIVER, Point};
use crate::variation::{self, Repeats};

/// A tier as run.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct TierInfo {
    /// Its name.
    pub name: String,
    /// What ran it (`postgres`, `nginx`, `command`, or `driver`).
    pub kind: String,
    /// Cores per instance in the model.
    pub cores: f64,
    /// Its CPU quota per instance, if any.
    pub quota: Option<f64>,
    /// Price per instance for the cost ranking (1 when not given).
    pub price: f64,
    /// How an instance takes requests (PS unless the file says `fcfs`).
    #[serde(default)]
    pub discipline: Discipline,
}

/// One sweep as measured.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct SweepResult {
    /// Its name.
    pub name: String,
    /// Think time, seconds.
    pub think_time: f64,
    /// Instances per tier (when not 1).
    pub instances: BTreeMap<String, u32>,
    /// The tier whose instances from the second run in a network namespace.
    pub second_host: Option<String>,
    /// The points that measured.
    pub points: Vec<Point>,
    /// Measurements that failed (users, why; `round K of N: …` when the point had several),
    /// said in the run's notes.
    pub failed: Vec<(u32, String)>,
    /// The model's throughput and response time (s) for 1..=max users.
    pub curve: Vec<(u32, f64, f64)>,
    /// The users with the highest measured power (throughput / response time).
    pub knee_users: Option<u32>,
    /// The model's bottleneck at the sweep's largest load.
    pub bottleneck: String,
}

/// A scale-out configuration predicted (and priced).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ScaleRow {
    /// Instances of the scaled tier.
    pub instances: u32,
    /// Users it was predicted at.
    pub users: u32,
    /// Requests per second.
    pub throughput: f64,
    /// Response time, seconds.
    pub response_time: f64,
    /// The bottleneck tier.
    pub bottleneck: String,
    /// Busy share per tier.
    pub utilization: BTreeMap<String, f64>,
    /// Total price of the deployment.
    pub cost: f64,
    /// Requests per second per unit of price.
    pub per_cost: f64,
}

/// The whole run.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct CapacityRun {
    /// The study's name.
    pub name: String,
    /// The file it came from.
    pub file: String,
    /// The machine: (what, value) rows.
    pub machine: Vec<(String, String)>,
    /// The tiers (the driver last).
    pub tiers: Vec<TierInfo>,
    /// The sweeps.
    pub sweeps: Vec<SweepResult>,
    /// The fitted model.
    pub model: TierModel,
    /// Measured vs predicted, every point (fitted ones marked).
    pub checks: Vec<TierCheck>,
    /// The tier scaled out in the predictions.
    pub scaled_tier: String,
    /// Scale-out predictions, ranked by throughput per price (best first).
    pub scale_out: Vec<ScaleRow>,
    /// Points left out of fitting, and why.
    pub notes: Vec<String>,
    /// Wall time of the run, seconds.
    pub elapsed_s: f64,
    /// The first fit point measured again and again (`[capacity] repeat`).
    #[serde(default)]
    pub repeats: Option<Repeats>,
}

impl CapacityRun {
    /// Largest |error %| of throughput and of response time over held-out points.
    pub fn held_out_errors(&self) -> (f64, f64) {
        self.checks
            .iter()
            .filter(|c| !c.fitted)
            .fold((0.0, 0.0), |(x, r), c| {
                (
                    f64::max(x, c.throughput_error_pct.abs()),
                    f64::max(r, c.response_error_pct.abs()),
                )
            })
    }

    /// As [`held_out_errors`](Self::held_out_errors), with each point predicted at the CPU
    /// per request it measured: the queueing model's own error (`None` when no held-out point
    /// has a measured CPU).
    pub fn held_out_errors_at_own_demand(&self) -> Option<(f64, f64)> {
        self.checks
            .iter()
            .filter(|c| !c.fitted)
            .filter_map(|c| c.at_own_demand)
            .map(|o| (o.throughput_error_pct.abs(), o.response_error_pct.abs()))
            .reduce(|a, b| (a.0.max(b.0), a.1.max(b.1)))
    }
}

/// The report's machine rows: the machine's facts ([`MachineFacts`]), the CPUs this process
/// may use and the load when the run started.
fn machine_rows() -> Vec<(String, String)> {
    let fs = perfpilot_sys::Fs::live();
    let facts = MachineFacts::read(&fs);
    let mut rows = Vec::new();
    if let Some(m) = facts.cpu_model {
        rows.push(("CPU".into(), m));
    }
    rows.push(("logical CPUs".into(), format!("{}", machine_cores())));
    if let Some(k) = facts.kernel {
        rows.push(("kernel".into(), k));
    }
    if let Some(b) = facts.memory_bytes {
        rows.push(("memory".into(), perfpilot_units::bytes(b)));
    }
    if let Ok(l) = perfpilot_sys::stat::read_loadavg(&fs) {
        rows.push((
            "load average at start (1, 5, 15 min)".into(),
            format!("{:.2}, {:.2}, {:.2}", l.one, l.five, l.fifteen),
        ));
    }
    rows
}

/// The model's tiers: the deployment's and the driver's (its threads' cores).
pub fn tier_infos(cap: &Capacity) -> Vec<TierInfo> {
    let mut tiers: Vec<TierInfo> = cap
        .file
        .tier
        .iter()
        .map(|t| TierInfo {
            name: t.name.clone(),
            kind: match t.kind {
                TierKind::Postgres => "postgres",
                TierKind::Nginx => "nginx",
                TierKind::Command => "command",
            }
            .into(),
            cores: t.cpu_quota.or(t.cores).unwrap_or_else(machine_cores),
            quota: t.cpu_quota,
            price: t.price.unwrap_or(1.0),
            discipline: t.discipline.unwrap_or_default(),
        })
        .collect();
    tiers.push(TierInfo {
        name: DRIVER.into(),
        kind: "driver".into(),
        cores: (cap.driver_threads as f64).min(machine_cores()),
        quota: None,
        price: 0.0,
        discipline: Discipline::Ps,
    });
    tiers
}

/// A measured point as the model reads it.
pub fn tier_point(p: &Point, instances: &BTreeMap<String, u32>) -> TierPoint {
    TierPoint {
        label: p.label.clone(),
        classes: p
            .classes
            .iter()
            .map(|c| ClassLoad {
                class: c.class.clone(),
                users: c.users,
                think_time: c.think_time,
                throughput: c.throughput,
                response_time: c.response_time,
            })
            .collect(),
        busy: p.busy.clone(),
        instances: instances.clone(),
    }
}

/// Drives a fresh deployment at the sweep's largest users for `deploy_warmup`, unmeasured: the
/// first point of each sweep was otherwise measured cold (31 req/s against 51 at the next point,
/// docs/capacity.md). A failure here is the first point's to report, so it is only printed.
fn warm_up(
    cap: &Capacity,
    dep: &mut deploy::Deployed,
    s: &crate::spec::SweepFile,
    stop: &AtomicBool,
    progress: &dyn Fn(&str),
) -> Result<()> {
    let Some(&users) = s.users.iter().max() else {
        return Ok(());
    };
    if cap.deploy_warmup.is_zero() {
        return Ok(());
    }
    progress(&format!(
        "  warming up: {users} users for {:.0} s, not measured",
        cap.deploy_warmup.as_secs_f64()
    ));
    let warm = Capacity {
        warmup: cap.deploy_warmup,
        measure: Duration::from_secs(1),
        ..cap.clone()
    };
    match sweep::measure(&warm, dep, s, users, stop) {
        Err(CapacityError::Interrupted) => Err(CapacityError::Interrupted),
        Err(e) => {
            progress(&format!("  warm-up failed: {e}"));
            Ok(())
        }
        Ok(_) => Ok(()),
    }
}

/// What a run measured, before any fitting: saved first, so that a fit that fails does not
/// lose the measurements (`perfpilot capacity --from-saved` reads it back, also from a full
/// [`CapacityRun`]'s file).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Measured {
    /// The machine: (what, value) rows.
    pub machine: Vec<(String, String)>,
    /// The sweeps as measured.
    pub sweeps: Vec<SweepResult>,
    /// Wall time of the measurements, seconds.
    pub elapsed_s: f64,
    /// The first fit point measured again and again (`[capacity] repeat`).
    #[serde(default)]
    pub repeats: Option<Repeats>,
}

/// Runs every sweep of `cap` and analyses them, printing progress lines through `progress`.
pub fn run(cap: &Capacity, stop: &AtomicBool, progress: &dyn Fn(&str)) -> Result<CapacityRun> {
    analyse_measured(cap, measure(cap, stop, progress)?)
}

/// [`analyse`]s a run's measurements and keeps their repeats and wall time.
pub fn analyse_measured(cap: &Capacity, m: Measured) -> Result<CapacityRun> {
    let mut out = analyse(cap, m.sweeps, m.machine)?;
    out.elapsed_s = m.elapsed_s;
    out.repeats = m.repeats;
    Ok(out)
}

/// Runs every sweep of `cap`, printing progress lines through `progress`: the sweeps that
/// share a deployment on one, their points in `[capacity] rounds` rounds of alternating order
/// ([`rounds`]), each point the mean of its rounds.
pub fn measure(cap: &Capacity, stop: &AtomicBool, progress: &dyn Fn(&str)) -> Result<Measured> {
    let started = Instant::now();
    let machine = machine_rows();
    let tag = format!("{}", std::process::id());
    let mut sweeps: Vec<(usize, SweepResult)> = Vec::new();
    let mut repeats = None;
    let again = cap.repeat_point();
    let files = &cap.file.sweep;
    for group in rounds::deployments(files) {
        let first = &files[group[0]];
        let names: Vec<&str> = group.iter().map(|&i| files[i].name.as_str()).collect();
        progress(&format!("sweep {}: deploying", names.join(", ")));
        let mut dep = deploy::deploy(cap, first, &tag)?;
        warm_up(cap, &mut dep, first, stop, progress)?;
        let plan: Vec<(usize, u32)> = group
            .iter()
            .flat_map(|&i| files[i].users.iter().map(move |&u| (i, u)))
            .collect();
        let mut got = rounds::measure(cap, &mut dep, &plan, stop, progress)?;
        if let Some((at, users)) = again.filter(|(at, _)| group.contains(at))
            && dep.exited().is_none()
        {
            repeats = Some(variation::measure_again(
                cap, &mut dep, &files[at], users, stop, progress,
            )?);
        }
        drop(dep);
        for &i in &group {
            let s = &files[i];
            let points = s
                .users
                .iter()
                .filter_map(|&u| rounds::combine(got.points.remove(&(i, u)).unwrap_or_default()))
                .collect();
            sweeps.push((
                i,
                SweepResult {
                    name: s.name.clone(),
                    think_time: perfpilot_drive::ThinkTime::parse(&s.think_time)
                        .map(|t| t.mean().as_secs_f64())
                        .unwrap_or(0.0),
                    instances: s.instances.clone(),
                    second_host: s.second_host.clone(),
                    points,
                    failed: got.failed.remove(&i).unwrap_or_default(),
                    curve: Vec::new(),
                    knee_users: None,
                    bottleneck: String::new(),
                },
            ));
        }
    }
    sweeps.sort_by_key(|(i, _)| *i);
    Ok(Measured {
        machine,
        sweeps: sweeps.into_iter().map(|(_, s)| s).collect(),
        elapsed_s: started.elapsed().as_secs_f64(),
        repeats,
    })
}

/// The point labelled `label` and its sweep.
fn point_labelled<'a>(
    sweeps: &'a [SweepResult],
    label: &str,
) -> Option<(&'a SweepResult, &'a Point)> {
    sweeps
        .iter()
        .find_map(|s| s.points.iter().find(|p| p.label == label).map(|p| (s, p)))
}

/// Why a point cannot be fitted from, if it cannot.
fn unusable(p: &Point) -> Option<String> {
    if p.steady == Some(false) {
        Some("the throughput did not reach a steady state (MSER)".into())
    } else if p.errors() > 0 {
        Some(format!("{} requests failed", p.errors()))
    } else {
        None
    }
}

/// Fits, validates and predicts from measured sweeps (also for a stored run's sweeps).
pub fn analyse(
    cap: &Capacity,
    mut sweeps: Vec<SweepResult>,
    machine: Vec<(String, String)>,
) -> Result<CapacityRun> {
    let tiers = tier_infos(cap);
    let specs: Vec<TierSpec> = tiers
        .iter()
        .map(|t| TierSpec {
            name: t.name.clone(),
            cores: t.cores,
            discipline: t.discipline,
        })
        .collect();
    combine_rounds(&mut sweeps);
    let (mut notes, all_points) = points_and_failures(&sweeps);
    let fit_points = fit_points(cap, &sweeps, &mut notes)?;
    let model = fit_tiers(&specs, &fit_points)?;
    let predictable = predictable(&model, all_points, &mut notes);
    let checks = model.validate(&predictable)?;
    notes.extend(variation::demand_drift(&checks));
    for s in &mut sweeps {
        describe_sweep(cap, &model, s)?;
    }
    let (scaled_tier, scale_out) = scale_out(cap, &tiers, &model, &sweeps)?;
    Ok(CapacityRun {
        name: cap.name.clone(),
        file: cap.path.display().to_string(),
        machine,
        tiers,
        sweeps,
        model,
        checks,
        scaled_tier,
        scale_out,
        notes,
        elapsed_s: 0.0,
        repeats: None,
    })
}

/// A point measured in rounds is their mean by today's rule, also in a saved run.
fn combine_rounds(sweeps: &mut [SweepResult]) {
    for p in sweeps.iter_mut().flat_map(|s| s.points.iter_mut()) {
        if p.rounds.len() > 1
            && let Some(c) = rounds::combine(std::mem::take(&mut p.rounds))
        {
            *p = c;
        }
    }
}

/// Notes on the measurements that failed and the points whose requests did, and every point
/// as the model sees it, by label.
fn points_and_failures(sweeps: &[SweepResult]) -> (Vec<String>, Vec<(String, TierPoint)>) {
    let mut notes = Vec::new();
    let mut all_points = Vec::new();
    for s in sweeps {
        for (u, why) in &s.failed {
            notes.push(format!(
                "{}: a measurement failed: {why}",
                Capacity::label(&s.name, *u)
            ));
        }
        for p in &s.points {
            if p.errors() > 0 {
                notes.push(format!(
                    "{}: {} of its requests failed (first: {})",
                    p.label,
                    p.errors(),
                    p.classes
                        .iter()
                        .find_map(|c| c.first_error.clone())
                        .unwrap_or_default()
                ));
            }
            all_points.push((p.label.clone(), tier_point(p, &s.instances)));
        }
    }
    (notes, all_points)
}

/// The points the model is fitted from: those the file names, a usable higher load of the same
/// sweep standing in for one that is not, and where none is usable the ones without failed
/// requests, each substitution noted. An error when nothing is left.
fn fit_points(
    cap: &Capacity,
    sweeps: &[SweepResult],
    notes: &mut Vec<String>,
) -> Result<Vec<TierPoint>> {
    let wanted = cap.fit_labels();
    let mut fit_points = Vec::new();
    let mut used: Vec<String> = Vec::new();
    for label in &wanted {
        let Some((s, p)) = point_labelled(sweeps, label) else {
            continue;
        };
        let Some(why) = unusable(p) else {
            fit_points.push(tier_point(p, &s.instances));
            used.push(p.label.clone());
            continue;
        };
        // The next load of the same sweep that measured usably stands in, so that the class
        // it measures still gets its demands.
        let mut higher: Vec<&Point> = s.points.iter().filter(|q| q.users > p.users).collect();
        higher.sort_by_key(|q| q.users);
        match higher.into_iter().find(|q| {
            unusable(q).is_none() && !wanted.contains(&q.label) && !used.contains(&q.label)
        }) {
            Some(q) => {
                notes.push(format!(
                    "{}: not used for fitting: {why}; fitted from {} instead",
                    p.label, q.label
                ));
                fit_points.push(tier_point(q, &s.instances));
                used.push(q.label.clone());
            }
            None => notes.push(format!("{}: not used for fitting: {why}", p.label)),
        }
    }
    if fit_points.is_empty() {
        // Nothing settled (a short window on a busy machine): fit from the wanted points that
        // had no failed requests rather than throw the run away, and say so.
        for (s, p) in wanted.iter().filter_map(|l| point_labelled(sweeps, l)) {
            if p.errors() == 0 {
                notes.push(format!(
                    "{}: fitted from although it did not settle (no point to fit from did): read the predictions with care, or measure longer",
                    p.label
                ));
                fit_points.push(tier_point(p, &s.instances));
            }
        }
    }
    if fit_points.is_empty() {
        return Err(CapacityError::Model(
            perfpilot_model::ModelError::BadMeasurement {
                label: wanted.join(", "),
                field: "fit".into(),
                message: "none of the points to fit from measured usably; see the notes".into(),
            },
        ));
    }
    Ok(fit_points)
}

/// The points the model can predict: one with a class no fit point measured cannot be
/// predicted, which is noted, not failed.
fn predictable(
    model: &TierModel,
    all_points: Vec<(String, TierPoint)>,
    notes: &mut Vec<String>,
) -> Vec<TierPoint> {
    let mut out = Vec::new();
    for (label, tp) in all_points {
        match tp
            .classes
            .iter()
            .find(|c| c.users > 0 && !model.classes.contains(&c.class))
        {
            Some(c) => notes.push(format!(
                "{label}: not predicted: class `{}` has no fitted demand (no point it was measured at was used for fitting)",
                c.class
            )),
            None => out.push(tp),
        }
    }
    out
}

/// A sweep's model curve (single-class sweeps), its knee and its predicted bottleneck.
fn describe_sweep(cap: &Capacity, model: &TierModel, s: &mut SweepResult) -> Result<()> {
    let max = s.points.iter().map(|p| p.users).max().unwrap_or(1);
    let inst: BTreeMap<String, u32> = s.instances.clone();
    let Some(file) = cap.file.sweep.iter().find(|f| f.name == s.name) else {
        return Ok(());
    };
    let load: Vec<(String, u32, f64)> = cap
        .class_users(file, max)
        .into_iter()
        .map(|(c, n)| (c, n, s.think_time))
        .collect();
    // A single-class sweep gets the model's curve; a mixed one its points' predictions.
    if let [(class, _, _)] = load.as_slice()
        && model.classes.contains(class)
    {
        s.curve = model.curve(class, max.saturating_mul(2).max(2), s.think_time, &inst)?;
    }
    s.knee_users = s
        .points
        .iter()
        .filter(|p| p.response_time() > 0.0)
        .max_by(|a, b| {
            (a.throughput() / a.response_time()).total_cmp(&(b.throughput() / b.response_time()))
        })
        .map(|p| p.users);
    s.bottleneck = model
        .predict(&load, &inst)
        .map(|p| p.bottleneck)
        .unwrap_or_default();
    Ok(())
}

/// Scale-out: the tier a sweep scales, else the first command tier; 1..=4 instances at the
/// largest load measured, with the first sweep's think time, best throughput per cost first.
fn scale_out(
    cap: &Capacity,
    tiers: &[TierInfo],
    model: &TierModel,
    sweeps: &[SweepResult],
) -> Result<(String, Vec<ScaleRow>)> {
    let scaled_tier = cap
        .file
        .sweep
        .iter()
        .flat_map(|s| {
            s.instances
                .iter()
                .filter(|(_, n)| **n > 1)
                .map(|(k, _)| k.clone())
        })
        .next()
        .or_else(|| {
            cap.file
                .tier
                .iter()
                .find(|t| t.kind == TierKind::Command)
                .map(|t| t.name.clone())
        })
        .unwrap_or_default();
    let users = sweeps
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.users))
        .max()
        .unwrap_or(1);
    let think = sweeps.first().map_or(0.0, |s| s.think_time);
    let class = model.classes.first().cloned().unwrap_or_default();
    let mut rows = Vec::new();
    if scaled_tier.is_empty() {
        return Ok((scaled_tier, rows));
    }
    for m in 1..=4u32 {
        let inst: BTreeMap<String, u32> = [(scaled_tier.clone(), m)].into();
        let p = model.predict(&[(class.clone(), users, think)], &inst)?;
        let cost: f64 = tiers
            .iter()
            .map(|t| t.price * f64::from(if t.name == scaled_tier { m } else { 1 }))
            .sum();
        rows.push(ScaleRow {
            instances: m,
            users,
            throughput: p.throughput(),
            response_time: p.response_time(),
            bottleneck: p.bottleneck.clone(),
            utilization: p.utilization.clone(),
            cost,
            per_cost: if cost > 0.0 {
                p.throughput() / cost
            } else {
                0.0
            },
        });
    }
    rows.sort_by(|a, b| b.per_cost.total_cmp(&a.per_cost));
    Ok((scaled_tier, rows))
}
