//! The engine's decisions on synthetic workloads and rates, over a copy of a captured
//! `/proc` `/sys` tree (`tests/fixtures/vm-1node`: 2 CPUs, one node, one LLC), so that nothing
//! on the machine running the tests is read for a decision or changed.

use std::collections::VecDeque;
use std::path::Path;

use perfpilot_observe::Rates;
use perfpilot_observe::rates::{CpuRate, ProcRate};
use perfpilot_observe::workload::Workload;
use perfpilot_store::Store;
use perfpilot_sys::Fs;
use perfpilot_sys::change::Change;

use super::Engine;
use super::trial::{Design, Phase, SwitchbackTrial, Trial};
use crate::config::DaemonConfig;
use crate::design::{DesignKind, PeriodLimits, Sequential, WindowPlan};
use crate::journal::ActionDoc;
use crate::signal::SignalKind;
use crate::strategy::StrategyKind;
use crate::tunables::Tunables;

mod apply;
mod cpuset;
mod designs;
mod devices;
mod dryrun;
mod fleet;
mod policy;
mod sequential;
mod startup;
mod status;
mod stop;
mod trials;

/// The read-ahead knob of the fixture's `vda` (8192 in the capture).
const VDA_READ_AHEAD: &str = "sys/block/vda/queue/read_ahead_kb";

/// A copy of the `vm-1node` fixture in a temporary directory (a trial may write its knobs).
fn fixture_copy() -> (tempfile::TempDir, Fs) {
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/vm-1node");
    copy_tree(&src, &tmp.path().join("root"));
    let fs = Fs::at(tmp.path().join("root"));
    (tmp, fs)
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("creating a fixture directory");
    for e in std::fs::read_dir(from).expect("reading the fixture") {
        let e = e.expect("a fixture entry");
        let (src, dst) = (e.path(), to.join(e.file_name()));
        let ty = e.file_type().expect("a fixture entry's type");
        if ty.is_dir() {
            copy_tree(&src, &dst);
        } else if ty.is_symlink() {
            let target = std::fs::read_link(&src).expect("a fixture link");
            std::os::unix::fs::symlink(target, &dst).expect("copying a fixture link");
        } else {
            std::fs::copy(&src, &dst).expect("copying a fixture file");
        }
    }
}

/// An engine over a fixture copy with the config `toml`, its store in the same temporary
/// directory, and no PMU (so that signals do not depend on the machine running the tests).
fn engine(toml: &str) -> (tempfile::TempDir, Engine) {
    let (tmp, fs) = fixture_copy();
    let store = Store::open(tmp.path().join("state/perfpilot.db")).expect("a store");
    let config = DaemonConfig::parse(toml, Path::new("test.toml")).expect("a valid config");
    let mut tun = Tunables::default();
    config.apply_tunables(&mut tun);
    let mut e = Engine::new(&fs, store, config, tun).expect("an engine over the fixture");
    e.watch.signals.cpi = None;
    (tmp, e)
}

/// A two-thread workload (pid 100, threads on CPUs 0 and 1) using `cores_each` per thread,
/// running for an hour.
fn two_threads(cores_each: f64) -> Workload {
    crate::strategy::testing::workload(&[(0, cores_each), (1, cores_each)])
}

/// Rates over 1 s of a machine of `cpus` CPUs each `busy_pct` % busy, no process I/O.
fn rates(cpus: u32, busy_pct: f64) -> Rates {
    let cpu = |c: Option<u32>| CpuRate {
        time_ms: 0,
        cpu: c,
        busy: busy_pct,
        user: busy_pct,
        system: 0.0,
        irq: 0.0,
        steal: 0.0,
        iowait: 0.0,
        idle: 100.0 - busy_pct,
        ctxt_per_s: None,
    };
    Rates {
        time_ms: 0,
        interval_s: 1.0,
        total: cpu(None),
        cpus: (0..cpus).map(|c| cpu(Some(c))).collect(),
        processes: vec![],
        threads: vec![],
        disks: vec![],
        nets: vec![],
    }
}

/// The rates of the workload `app` (pid 100): `cpu` % of a CPU, `read` bytes per second read,
/// `syscalls` per second.
fn app_rate(cpu: f64, read: f64, syscalls: f64) -> ProcRate {
    ProcRate {
        time_ms: 0,
        pid: 100,
        comm: "app".into(),
        cmdline: "app --serve".into(),
        uid: 0,
        cpu,
        user: cpu,
        system: 0.0,
        processor: None,
        threads: 2,
        rss: 1 << 30,
        minflt_per_s: 0.0,
        majflt_per_s: 0.0,
        ctxt_per_s: 0.0,
        read_bytes_per_s: Some(read),
        write_bytes_per_s: None,
        syscalls_per_s: Some(syscalls),
        cpus_allowed: None,
        reaped_cpu: 0.0,
    }
}

/// Proposes for `w` over as many scans as the steady-signal gate needs before a trial starts
/// (its signal read once a scan), or until one has; returns the last scan's states.
fn propose_steady(
    e: &mut Engine,
    w: &Workload,
    r: &Rates,
) -> std::collections::HashMap<String, String> {
    let mut states = std::collections::HashMap::new();
    for i in 0..super::steady::STEADY_READINGS {
        e.steady.next_scan(i as f64);
        states = e
            .propose_workloads(std::slice::from_ref(w), r)
            .expect("proposing");
        if !e.actions.trials.is_empty() {
            break;
        }
    }
    states
}

/// A trial of action `id` on the workload `app` in its baseline, judged by its own signal, in
/// `design`: before and after (six windows a side), or switchback (planning its periods from six
/// baseline windows of a second each).
fn trial(id: i64, signal: Option<SignalKind>, design: DesignKind, steps: Vec<Change>) -> Trial {
    trial_planned(id, signal, design, steps, WindowPlan::fixed(6))
}

/// As [`trial`], a before/after trial measured by `plan`.
fn trial_planned(
    id: i64,
    signal: Option<SignalKind>,
    design: DesignKind,
    steps: Vec<Change>,
    plan: WindowPlan,
) -> Trial {
    let state = match design {
        DesignKind::Switchback => Design::Switchback(SwitchbackTrial {
            baseline: vec![],
            limits: PeriodLimits {
                window_s: 1.0,
                settle_s: 0.0,
                period_max_s: 120.0,
                budget_windows: 60,
                pairs_min: 3,
                switch_s: 0.0,
                within_s: 0.0,
                spent_s: 0.0,
            },
            periods: None,
            seed: 1,
            hib: true,
            switch_times: vec![],
            applying_s: 0.0,
        }),
        _ => Design::Sequential(Sequential::new(plan, true, vec![])),
    };
    Trial {
        id,
        signature: "0123456789abcdef".into(),
        name: "app".into(),
        strategy: StrategyKind::ReadAhead,
        doc: ActionDoc {
            members: vec![],
            changes: vec![],
            design,
            irreversible: false,
            signal: signal.clone(),
            bound_to: None,
        },
        undo: vec![],
        steps: VecDeque::from(steps),
        phase: if signal.is_some() {
            Phase::Baseline
        } else {
            Phase::Applying
        },
        on: false,
        shadow_off: vec![],
        shadow_on: vec![],
        judge: "0123456789abcdef".into(),
        signal,
        failures: 0,
        reason: "a test".into(),
        effective: false,
        last_problem: None,
        design: state,
        design_why: "a test".into(),
        control: None,
        started_s: 0.0,
        switches: 0,
        kind: "app".into(),
        recap: None,
        scan_s: 2.0,
    }
}

/// The before/after state of a trial.
fn seq(t: &Trial) -> &Sequential {
    match &t.design {
        Design::Sequential(s) => s,
        Design::Switchback(_) => panic!("a switchback trial"),
    }
}

/// As [`seq`], to change.
fn seq_mut(t: &mut Trial) -> &mut Sequential {
    match &mut t.design {
        Design::Sequential(s) => s,
        Design::Switchback(_) => panic!("a switchback trial"),
    }
}

/// The read-ahead knob's value now.
fn knob(fs: &Fs) -> String {
    fs.read(VDA_READ_AHEAD)
        .expect("the fixture's knob")
        .trim()
        .to_string()
}
