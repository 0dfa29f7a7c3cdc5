//! Measuring one load point on a running deployment: one closed-loop driver per request
//! class through the front tier, and over the measured window each tier's busy cores (from its
//! CPU groups), the driver's own (this process), and what the rest of the machine used (the
//! noise), with a steady-state check on the per-second throughput.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use perfpilot_drive::{BodyTemplate, DriveSpec, Load, Measurement, RunControl, ThinkTime};
use perfpilot_lab::measure::Watch;
use perfpilot_sys::Fs;
use serde::{Deserialize, Serialize};

use crate::deploy::Deployed;
use crate::error::{CapacityError, Result};
use crate::spec::{Capacity, SweepFile};

/// The name of the load driver's tier.
pub const DRIVER: &str = "driver";

/// What one class did at a point.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ClassResult {
    /// The class.
    pub class: String,
    /// Its users.
    pub users: u32,
    /// Mean think time, seconds: the pauses the users actually took in the window (the
    /// driver's `think_mean_ms`), else the sweep's asked mean.
    pub think_time: f64,
    /// Requests per second (successful and failed).
    pub throughput: f64,
    /// Mean response time, seconds.
    pub response_time: f64,
    /// 99th percentile, seconds.
    pub p99: Option<f64>,
    /// Requests that failed.
    pub errors: u64,
    /// The first error, in words.
    pub first_error: Option<String>,
}

/// One measured point.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Point {
    /// `SWEEP: USERS`.
    pub label: String,
    /// The sweep's users value (per unit of the mix).
    pub users: u32,
    /// Per class.
    pub classes: Vec<ClassResult>,
    /// Busy cores per tier (all instances) and of the driver.
    pub busy: BTreeMap<String, f64>,
    /// Busy cores of everything else on the machine over the window (the noise).
    pub other_busy: Option<f64>,
    /// Quota periods throttled per tier in the window.
    pub throttled: BTreeMap<String, u64>,
    /// Whether the per-second throughput reached a steady state (MSER on 1 s windows).
    pub steady: Option<bool>,
    /// Seconds MSER drops from the start.
    pub truncate_s: usize,
    /// Each round's measurement, in measuring order, when the point is the mean of several
    /// (`[capacity] rounds`, [`crate::rounds::combine`]); empty for a point measured once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rounds: Vec<Point>,
}

impl Point {
    /// Total requests per second.
    pub fn throughput(&self) -> f64 {
        self.classes.iter().map(|c| c.throughput).sum()
    }

    /// Throughput-weighted mean response time, seconds.
    pub fn response_time(&self) -> f64 {
        let x = self.throughput();
        if x > 0.0 {
            self.classes
                .iter()
                .map(|c| c.throughput * c.response_time)
                .sum::<f64>()
                / x
        } else {
            0.0
        }
    }

    /// Failed requests over the classes.
    pub fn errors(&self) -> u64 {
        self.classes.iter().map(|c| c.errors).sum()
    }
}

/// Measures `users` (per unit of the mix) of `sweep` on `dep`.
pub fn measure(
    cap: &Capacity,
    dep: &mut Deployed,
    sweep: &SweepFile,
    users: u32,
    stop: &AtomicBool,
) -> Result<Point> {
    let label = Capacity::label(&sweep.name, users);
    let drive_err = |message: String| CapacityError::Drive {
        point: label.clone(),
        message,
    };
    let think = ThinkTime::parse(&sweep.think_time).map_err(|e| drive_err(e.to_string()))?;
    let specs = drive_specs(cap, dep, sweep, users, think).map_err(drive_err)?;
    let (results, window) = drive_and_watch(cap, dep, &specs, stop);
    // A window of a set length is missing only when the run was stopped.
    let Some(window) = window.filter(|_| !stop.load(Ordering::SeqCst)) else {
        return Err(CapacityError::Interrupted);
    };
    if let Some(why) = dep.exited() {
        return Err(drive_err(format!("{why} during the measurement")));
    }
    let mut classes = Vec::new();
    let mut series: Vec<f64> = Vec::new();
    for ((class, n, _), r) in specs.iter().zip(results) {
        let m = r.map_err(|e| drive_err(format!("class {class}: {e}")))?;
        for (i, p) in m.series.iter().enumerate() {
            if series.len() <= i {
                series.push(0.0);
            }
            series[i] += p.requests as f64;
        }
        let lat = m.latency.as_ref();
        classes.push(ClassResult {
            class: class.clone(),
            users: *n,
            think_time: realised_think(&m).unwrap_or(think.mean().as_secs_f64()),
            throughput: m.throughput_rps,
            response_time: lat.and_then(|l| l.mean_ms).unwrap_or(0.0) / 1000.0,
            p99: lat.and_then(|l| l.p99_ms).map(|v| v / 1000.0),
            errors: m.errors,
            first_error: m.first_error.clone(),
        });
    }
    let mser = if series.len() >= 20 {
        perfpilot_stats::warmup::mser5(&series)
    } else {
        perfpilot_stats::warmup::mser(&series, 1)
    };
    Ok(Point {
        label,
        users,
        classes,
        busy: window.busy,
        other_busy: window.other,
        throttled: window.throttled,
        steady: mser.map(|m| m.steady),
        truncate_s: mser.map_or(0, |m| m.truncate),
        rounds: Vec::new(),
    })
}

/// One load driver per class of the mix with users at this point: `(class, users, spec)`. An
/// error names the body file that cannot be read or compiled.
fn drive_specs(
    cap: &Capacity,
    dep: &Deployed,
    sweep: &SweepFile,
    users: u32,
    think: ThinkTime,
) -> std::result::Result<Vec<(String, u32, DriveSpec)>, String> {
    let mut specs = Vec::new();
    for (class, n) in cap.class_users(sweep, users) {
        if n == 0 {
            continue;
        }
        let Some(c) = cap.file.class.iter().find(|c| c.name == class) else {
            continue;
        };
        let mut spec = DriveSpec::new(
            vec![format!("{}{}", dep.front, c.path)],
            Load::Closed {
                users: n as usize,
                think,
            },
        );
        spec.method = c.method.clone();
        spec.headers = c
            .headers
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if let Some(b) = &c.body_file {
            let text = std::fs::read_to_string(b).map_err(|e| format!("{}: {e}", b.display()))?;
            spec.body = Some(BodyTemplate::compile(&text, None).map_err(|e| e.to_string())?);
        }
        spec.warmup = cap.warmup;
        spec.duration = cap.measure;
        spec.threads = cap.driver_threads;
        specs.push((class, n, spec));
    }
    Ok(specs)
}

/// What the tiers used over a point's measured window: busy cores by tier (the driver's own
/// under [`DRIVER`]), CPU-throttled periods by tier, and the rest of the machine's busy cores.
struct Window {
    busy: BTreeMap<String, f64>,
    throttled: BTreeMap<String, u64>,
    other: Option<f64>,
}

/// Runs the drivers of `specs` at once and reads the deployment's CPU over their measured
/// window (after their warm-up): each driver's result, and the window (`None`: stopped).
fn drive_and_watch(
    cap: &Capacity,
    dep: &Deployed,
    specs: &[(String, u32, DriveSpec)],
    stop: &AtomicBool,
) -> (
    Vec<std::result::Result<Measurement, String>>,
    Option<Window>,
) {
    let fs = Fs::live();
    let watch = Watch {
        fs: &fs,
        pids: &[],
        warmup: cap.warmup,
        // The window ends a little before the drivers do, so that it holds no teardown.
        length: Some(cap.measure.saturating_sub(Duration::from_millis(50))),
        cores: crate::deploy::machine_cores(),
        stop,
    };
    // The tiers' CPU and throttling are read from their CPU groups at the window's ends.
    let (results, watched) = watch.run(|| (dep.cpu_seconds(), dep.throttled()), || drive(specs));
    let window = watched.map(|w| {
        let ((cpu0, thr0), (cpu1, thr1)) = (w.start, w.end);
        let secs = w.cpu.secs;
        let mut busy: BTreeMap<String, f64> = cpu1
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    (v - cpu0.get(k).copied().unwrap_or(0.0)).max(0.0) / secs,
                )
            })
            .collect();
        busy.insert(DRIVER.to_string(), w.cpu.own_cores);
        let throttled = thr1
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    v.saturating_sub(thr0.get(k).copied().unwrap_or(0)),
                )
            })
            .collect();
        let other = w
            .cpu
            .machine_cores
            .map(|machine| (machine - busy.values().sum::<f64>()).max(0.0));
        Window {
            busy,
            throttled,
            other,
        }
    });
    (results, window)
}

/// Runs the drivers of `specs` at once, one thread each: each driver's result.
fn drive(specs: &[(String, u32, DriveSpec)]) -> Vec<std::result::Result<Measurement, String>> {
    std::thread::scope(|s| {
        let handles: Vec<_> = specs
            .iter()
            .map(|(_, _, spec)| {
                s.spawn(move || {
                    perfpilot_drive::run(
                        spec,
                        &RunControl {
                            progress: false,
                            ctrl_c: false,
                            ..Default::default()
                        },
                    )
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| match h.join() {
                Ok(r) => r.map_err(|e| e.to_string()),
                Err(_) => Err("the load driver panicked".to_string()),
            })
            .collect()
    })
}

/// The mean think time the users of `m` actually paused, seconds.
fn realised_think(m: &Measurement) -> Option<f64> {
    m.extra
        .get(perfpilot_drive::THINK_MEAN_MS)
        .filter(|v| v.is_finite() && **v >= 0.0)
        .map(|ms| ms / 1e3)
}

#[cfg(test)]
mod tests {
    use perfpilot_drive::LoadShape;

    use super::*;

    #[test]
    fn a_point_takes_the_think_time_the_users_paused_when_the_driver_reports_it() {
        let mut m = Measurement::empty(
            "perfpilot-drive",
            LoadShape::Closed {
                users: 1,
                think_time: "exp:20ms".into(),
            },
        );
        assert_eq!(realised_think(&m), None);
        m.extra.insert(perfpilot_drive::THINK_MEAN_MS.into(), 24.7);
        assert_eq!(realised_think(&m), Some(0.0247));
        m.extra
            .insert(perfpilot_drive::THINK_MEAN_MS.into(), f64::NAN);
        assert_eq!(realised_think(&m), None);
    }
}
