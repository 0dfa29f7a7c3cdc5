//! SMT-aware CPU accounting on the 2-socket SMT8 POWER fixture with synthetic sibling-busy
//! profiles: a thread whose siblings idle keeps its CPU time as core time, one whose siblings
//! are all busy gets the SMT mode's factor (configured, or an even share), partly busy
//! siblings something between; and the calibration on this machine.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use perfpilot_observe::rates::{CpuRate, ThreadRate};
use perfpilot_observe::smt::{
    CalibrationError, FactorSource, SmtFactors, calibrate, core_equivalent, mean_weight,
};
use perfpilot_observe::{Fs, Topology};

fn smt8() -> Topology {
    let root =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/power-2socket-smt8");
    Topology::read(&Fs::at(root)).unwrap()
}

fn cpu(c: u32, busy: f64) -> CpuRate {
    CpuRate {
        time_ms: 0,
        cpu: Some(c),
        busy,
        user: busy,
        system: 0.0,
        irq: 0.0,
        steal: 0.0,
        iowait: 0.0,
        idle: 100.0 - busy,
        ctxt_per_s: None,
    }
}

fn thread(pid: i32, tid: i32, on: u32, pct: f64) -> ThreadRate {
    ThreadRate {
        time_ms: 0,
        pid,
        tid,
        comm: "job".into(),
        cpu: pct,
        user: pct,
        system: 0.0,
        processor: Some(on),
        state: 'R',
    }
}

/// CPUs 0-7 (one core of the fixture): CPU 0 at 100 %, its siblings at `siblings` %.
fn profile(siblings: f64) -> Vec<CpuRate> {
    (0..8)
        .map(|c| cpu(c, if c == 0 { 100.0 } else { siblings }))
        .collect()
}

#[test]
fn the_fixture_is_smt8() {
    assert_eq!(smt8().smt_width(), 8);
}

#[test]
fn a_thread_alone_on_its_core_uses_the_whole_core() {
    let t = smt8();
    let mut f = SmtFactors::default();
    f.set(8, 0.56, FactorSource::Configured).unwrap();
    let r = core_equivalent(&[thread(10, 10, 0, 100.0)], &profile(0.0), &t, &f);
    assert_eq!(r.len(), 1);
    assert!((r[0].core - 100.0).abs() < 1e-9, "{r:?}");
}

#[test]
fn with_every_sibling_busy_a_thread_gets_the_smt_modes_factor() {
    let t = smt8();
    let mut f = SmtFactors::default();
    f.set(8, 0.56, FactorSource::Configured).unwrap();
    // The seed's example: 180 CPU-seconds of a job in SMT8 with busy siblings.
    let r = core_equivalent(&[thread(10, 10, 0, 180.0)], &profile(100.0), &t, &f);
    assert!((r[0].core - 180.0 * 0.56).abs() < 1e-9, "{r:?}");
    assert_eq!(r[0].cpu, 180.0);
    // Without a configured or measured factor the core is shared evenly by its 8 threads.
    let even = core_equivalent(
        &[thread(10, 10, 0, 100.0)],
        &profile(100.0),
        &t,
        &SmtFactors::default(),
    );
    assert!((even[0].core - 12.5).abs() < 1e-9, "{even:?}");
}

#[test]
fn partly_busy_siblings_give_a_weight_between_and_threads_add_up_per_process() {
    let t = smt8();
    let mut f = SmtFactors::default();
    f.set(8, 0.5, FactorSource::Configured).unwrap();
    // Siblings 10 % busy each: some sibling busy 1 - 0.9^7 of the time.
    let some = 1.0 - 0.9f64.powi(7);
    let w = (1.0 - some) + some * 0.5;
    // CPU 8 is on another core, idle around it.
    let mut cpus = profile(10.0);
    cpus.extend((8..16).map(|c| cpu(c, if c == 8 { 100.0 } else { 0.0 })));
    let threads = [
        thread(10, 10, 0, 100.0),
        thread(10, 11, 8, 100.0),
        thread(20, 20, 3, 10.0),
    ];
    let r = core_equivalent(&threads, &cpus, &t, &f);
    let p10 = r.iter().find(|x| x.pid == 10).unwrap();
    assert!((p10.cpu - 200.0).abs() < 1e-9);
    assert!(
        (p10.core - (100.0 * w + 100.0)).abs() < 1e-9,
        "{p10:?} vs weight {w}"
    );
    let p20 = r.iter().find(|x| x.pid == 20).unwrap();
    assert!(p20.core < p20.cpu, "{p20:?}");
    // The mean weight over a trial's CPUs leans on the busy ones.
    let busy: BTreeMap<u32, f64> = cpus.iter().map(|c| (c.cpu.unwrap(), c.busy)).collect();
    let m = mean_weight(&t, &busy, &f, 0..16);
    assert!(m < 1.0 && m > 0.5, "{m}");
}

#[test]
fn calibration_measures_a_share_of_a_core_or_says_there_is_no_smt() {
    let topo = Topology::read(&Fs::live()).unwrap();
    match calibrate(&topo, Duration::from_millis(150)) {
        Ok(c) => {
            assert!(c.factor > 0.0 && c.factor <= 1.0, "{c:?}");
            assert_eq!(c.width, topo.smt_width());
        }
        Err(CalibrationError::NoSmt) => assert_eq!(topo.smt_width(), 1),
        Err(e) => panic!("{e}"),
    }
}
