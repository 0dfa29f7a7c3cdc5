//! Driving the load against a running deployment and measuring it: the built-in driver or the
//! study's load command, CPU per instance over the measured window, and the cores the built-in
//! driver (this process) used.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use perfpilot_drive::{
    BodyTemplate, CpuUsage, DataSource, DriveSpec, Load, Measurement, RunControl, ThinkTime,
};
use perfpilot_lab::measure::Watch;

use crate::deploy::{self, Deployed};
use crate::error::TrialError;
use crate::layout::Layout;
use crate::spec::{Config, LoadKind, Study, render};
use crate::trial::TrialContext;

/// Drives the load against a running deployment and samples CPU per instance over the
/// measured window, and the cores the built-in driver (this process) used in it.
pub(crate) fn measure(
    ctx: &TrialContext<'_>,
    config: &Config,
    layout: &Layout,
    dep: &mut Deployed,
    users: usize,
) -> std::result::Result<(Measurement, Option<f64>), TrialError> {
    let study = ctx.study;
    let run = &study.run;
    let pids: Vec<u32> = dep.instances.iter().map(|i| i.pid).collect();
    // The built-in driver runs in this process; its CPU is read with the instances'.
    let builtin = matches!(study.load.kind, LoadKind::Builtin { .. });
    let n = layout.instances.len();
    let targets: Vec<String> = dep
        .instances
        .iter()
        .zip(&layout.instances)
        .map(|(inst, il)| {
            let url = match &study.load.kind {
                LoadKind::Builtin { url, .. } => url.clone(),
                LoadKind::Command { .. } | LoadKind::Batch { .. } => {
                    "http://127.0.0.1:{port}".into()
                }
            };
            render(&url, &deploy::values_for(config, n, Some((il, inst.port))))
        })
        .collect();
    let stop = ctx.stop;
    let warmup = match &study.load.kind {
        LoadKind::Builtin { .. } => run.warmup,
        LoadKind::Command { .. } | LoadKind::Batch { .. } => Duration::ZERO,
    };
    let fs = perfpilot_sys::Fs::live();
    let watch = Watch {
        fs: &fs,
        pids: &pids,
        warmup,
        length: None,
        // Cores of the machine do not matter here: only the processes' and our own are used.
        cores: 1.0,
        stop,
    };
    let (result, window) = watch.run(|| (), || drive(study, config, &targets, users, stop));
    let driver = window.as_ref().map(|w| w.cpu.own_cores).filter(|_| builtin);
    let cpu = window.map(|w| {
        w.cpu
            .proc_seconds
            .iter()
            .zip(&pids)
            .enumerate()
            .filter_map(|(i, (cpu_s, pid))| {
                let cpu_s = (*cpu_s)?;
                Some(CpuUsage {
                    name: format!("instance-{i}"),
                    pid: Some(*pid),
                    tier: Some("app".into()),
                    cpu_s,
                    cores: cpu_s / w.cpu.secs,
                })
            })
            .collect::<Vec<_>>()
    });
    if stop.load(Ordering::SeqCst) {
        return Err(TrialError::Interrupted);
    }
    let mut m = result?;
    if let Some(exit) = dep.exited() {
        return Err(TrialError::Exited {
            exit,
            when: "during the measurement",
        });
    }
    m.cpu = cpu;
    Ok((m, driver))
}

/// Drives the load of `study` against `targets` (one URL per instance) with `users` users:
/// the built-in driver, or the study's load command with its placeholders filled in.
fn drive(
    study: &Study,
    config: &Config,
    targets: &[String],
    users: usize,
    stop: &AtomicBool,
) -> std::result::Result<Measurement, TrialError> {
    let run = &study.run;
    match &study.load.kind {
        LoadKind::Builtin {
            method,
            headers,
            body,
            data,
            think_time,
            timeout,
            threads,
            ..
        } => {
            let think = ThinkTime::parse(think_time).map_err(TrialError::LoadSpec)?;
            let mut spec = DriveSpec::new(targets.to_vec(), Load::Closed { users, think });
            spec.method = method.clone();
            spec.headers = headers.clone();
            if let Some(b) = body {
                let ds = match data {
                    Some(p) => Some(DataSource::from_csv(p).map_err(TrialError::LoadSpec)?),
                    None => None,
                };
                spec.body =
                    Some(BodyTemplate::compile(b, ds.as_ref()).map_err(TrialError::LoadSpec)?);
            }
            spec.timeout = *timeout;
            spec.warmup = run.warmup;
            spec.duration = run.measure;
            spec.threads = *threads;
            // Ctrl-C ends the drive early; the stop flag (set by the caller's handler) then
            // stops the study.
            let control = RunControl {
                progress: false,
                ctrl_c: true,
                ..Default::default()
            };
            let _ = stop;
            perfpilot_drive::run(&spec, &control).map_err(TrialError::Driver)
        }
        LoadKind::Batch { .. } => Err(TrialError::NotDriven),
        LoadKind::Command { command, meaning } => {
            let mut values = deploy::values_for(config, targets.len(), None);
            values.insert("targets".into(), targets.join(","));
            values.insert("users".into(), users.to_string());
            values.insert("duration_s".into(), run.measure.as_secs().to_string());
            values.insert("warmup_s".into(), run.warmup.as_secs().to_string());
            values.insert(
                "ports".into(),
                targets
                    .iter()
                    .filter_map(|t| t.rsplit(':').next())
                    .collect::<Vec<_>>()
                    .join(","),
            );
            let line = render(command, &values);
            let argv = vec!["sh".to_string(), "-c".to_string(), line];
            let meaning = if meaning == "latency_ms" {
                perfpilot_drive::adapters::NumberMeaning::LatencyMs
            } else {
                perfpilot_drive::adapters::NumberMeaning::Throughput
            };
            perfpilot_drive::adapters::run_command(&argv, meaning).map_err(TrialError::LoadCommand)
        }
    }
}
