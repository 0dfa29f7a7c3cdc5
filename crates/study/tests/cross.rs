//! Two runs across machines on synthetic trial records with known answers: a configuration
//! 20 % faster on b, per core and per instance, a lower-is-better goal turned round, different
//! goals refused, configurations only one run measured, and the machines read back.

use perfpilot_drive::{CpuUsage, LoadShape, Measurement};
use perfpilot_store::{TrialPhase, TrialRecord, TrialStatus};
use perfpilot_study::Summary;
use perfpilot_study::cross::{CrossRatio, cross_system};

fn summary(goal: &str, unit: &str, higher: bool) -> Summary {
    Summary {
        goal: goal.into(),
        unit: unit.into(),
        higher_is_better: higher,
        baseline: "instances=1".into(),
        rounds: 5,
        ..Summary::default()
    }
}

fn throughput() -> Summary {
    summary("maximize throughput (requests/s)", "req/s", true)
}

fn latency() -> Summary {
    summary("minimize p99 latency (ms)", "ms", false)
}

/// A successful trial of `instances=N` with objective `value`, `rps` requests/s on `cores`
/// busy cores.
fn trial(phase: TrialPhase, instances: i64, value: f64, rps: f64, cores: f64) -> TrialRecord {
    let mut m = Measurement::empty(
        "perfpilot-drive",
        LoadShape::External {
            description: "synthetic".into(),
        },
    );
    m.throughput_rps = rps;
    m.cpu = Some(vec![CpuUsage {
        name: "app".into(),
        pid: None,
        tier: None,
        cpu_s: cores * 10.0,
        cores,
    }]);
    TrialRecord {
        id: 0,
        study: 1,
        phase,
        round: 1,
        config: format!("instances={instances}"),
        factors: format!(r#"[["instances",{instances}]]"#),
        status: TrialStatus::Ok,
        reason: String::new(),
        value: Some(value),
        measurement: Some(m.to_json()),
        detail: "{}".into(),
        created_ms: 0,
    }
}

/// The noise both machines see, trial by trial.
const NOISE: [f64; 5] = [0.98, 1.01, 1.0, 1.02, 0.99];

fn holds(r: &CrossRatio, x: f64) -> bool {
    r.low.is_some_and(|l| l <= x) && r.high.is_some_and(|h| x <= h)
}

#[test]
fn a_configuration_twenty_percent_faster_on_b_gives_1_2_per_core_and_per_instance() {
    // a: 1,000 req/s on 2 busy cores; b: 1,200 req/s on 4 (a wider, slower-per-core machine).
    // Race trials and a confirmation trial both count.
    let mut ta: Vec<TrialRecord> = NOISE
        .iter()
        .map(|n| trial(TrialPhase::Race, 2, 1000.0 * n, 1000.0 * n, 2.0))
        .collect();
    let mut tb: Vec<TrialRecord> = NOISE
        .iter()
        .rev()
        .map(|n| trial(TrialPhase::Race, 2, 1200.0 * n, 1200.0 * n, 4.0))
        .collect();
    ta.push(trial(TrialPhase::Confirm, 2, 1000.0, 1000.0, 2.0));
    tb.push(trial(TrialPhase::Confirm, 2, 1200.0, 1200.0, 4.0));
    let x = cross_system((&throughput(), &ta, "{}"), (&throughput(), &tb, "{}"));
    assert!(x.refused.is_none());
    assert_eq!(x.rate_unit, "req/s");
    let [r] = x.configs.as_slice() else {
        panic!("one configuration: {x:?}")
    };
    assert_eq!((r.trials_a, r.trials_b), (6, 6));
    let res = r.result.expect("a ratio");
    assert!((res.ratio - 1.2).abs() < 1e-9, "{res:?}");
    assert!(holds(&res, 1.2) && res.low.unwrap() > 1.0, "{res:?}");
    // Per busy core b does 600 to a's 500: b is 0.6× as good per core.
    let core = r.per_core.expect("a per-core ratio");
    assert!(
        (core.ratio - 0.6).abs() < 1e-9 && holds(&core, 0.6),
        "{core:?}"
    );
    assert!(core.high.unwrap() < 1.0, "{core:?}");
    // Two instances on both: per instance is the result's ratio.
    let inst = r.per_instance.expect("a per-instance ratio");
    assert!(
        (inst.ratio - 1.2).abs() < 1e-9 && holds(&inst, 1.2),
        "{inst:?}"
    );
}

#[test]
fn a_lower_is_better_goal_turns_the_ratio_round() {
    // b's p99 is 12 ms to a's 10: b is worse, 10/12 = 0.833. At the same 1,000 req/s b uses
    // one busy core to a's two: per core b is twice as good.
    let ta: Vec<TrialRecord> = NOISE
        .iter()
        .map(|n| trial(TrialPhase::Race, 1, 10.0 * n, 1000.0, 2.0))
        .collect();
    let tb: Vec<TrialRecord> = NOISE
        .iter()
        .map(|n| trial(TrialPhase::Race, 1, 12.0 * n, 1000.0, 1.0))
        .collect();
    let x = cross_system((&latency(), &ta, "{}"), (&latency(), &tb, "{}"));
    assert_eq!(x.rate_unit, "req/s");
    let r = &x.configs[0];
    let res = r.result.unwrap();
    assert!((res.ratio - 10.0 / 12.0).abs() < 1e-9, "{res:?}");
    assert!(
        holds(&res, 10.0 / 12.0) && res.high.unwrap() < 1.0,
        "{res:?}"
    );
    let core = r.per_core.unwrap();
    assert!((core.ratio - 2.0).abs() < 1e-9, "{core:?}");
}

#[test]
fn different_goals_are_refused_with_the_reason() {
    let ta = vec![trial(TrialPhase::Race, 1, 10.0, 1000.0, 1.0); 3];
    let x = cross_system((&throughput(), &ta, "{}"), (&latency(), &ta, "{}"));
    assert!(x.configs.is_empty());
    let why = x.refused.expect("refused");
    assert!(
        why.contains("different goals") && why.contains("req/s") && why.contains("ms"),
        "{why}"
    );
}

#[test]
fn configurations_one_run_measured_are_listed_and_failed_trials_do_not_count() {
    let mut ta = vec![
        trial(TrialPhase::Race, 1, 100.0, 100.0, 1.0),
        trial(TrialPhase::Race, 1, 102.0, 102.0, 1.0),
        trial(TrialPhase::Race, 2, 150.0, 150.0, 2.0),
    ];
    let mut failed = trial(TrialPhase::Race, 4, 1.0, 1.0, 1.0);
    failed.status = TrialStatus::Failed;
    ta.push(failed.clone());
    // A load-sweep point is not a race or confirmation trial.
    ta.push(trial(TrialPhase::Scale, 8, 10.0, 10.0, 1.0));
    let mut tb = vec![
        trial(TrialPhase::Race, 1, 110.0, 110.0, 1.0),
        trial(TrialPhase::Race, 4, 300.0, 300.0, 4.0),
    ];
    // A trial without CPU figures leaves its configuration without a per-core ratio.
    tb[0].measurement = None;
    tb.push(failed);
    let x = cross_system((&throughput(), &ta, "{}"), (&throughput(), &tb, "{}"));
    assert_eq!(x.configs.len(), 1, "{x:?}");
    let r = &x.configs[0];
    assert_eq!(r.config, "instances=1");
    assert_eq!((r.trials_a, r.trials_b), (2, 1));
    // One trial in b: the ratio without an interval.
    let res = r.result.unwrap();
    assert!((res.ratio - 110.0 / 101.0).abs() < 1e-9 && res.low.is_none());
    assert!(r.per_core.is_none());
    assert_eq!(x.only_a, vec!["instances=2".to_string()]);
    assert_eq!(x.only_b, vec!["instances=4".to_string()]);
}
