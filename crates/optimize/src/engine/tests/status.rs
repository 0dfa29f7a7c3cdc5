//! What status says of workloads and trials.

use super::super::status::{TrialStatus, workload_status};
use super::{app_rate, engine, rates, trial, two_threads};
use crate::config::ProbeSpec;
use crate::signal::choose::{PresetOffer, Sources, choose_signal};
use crate::signal::proxy::proxy_offer;
use crate::signal::{SignalKind, SignalSource};
use crate::tunables::Level;

#[test]
fn a_saturated_workload_without_a_probe_or_counters_needs_a_signal_and_status_says_so() {
    let (_tmp, mut e) = engine("");
    e.tun.affinity_level = Level::Core;
    let w = two_threads(1.0);
    let r = rates(2, 100.0);
    let states = e.propose_workloads(std::slice::from_ref(&w), &r).unwrap();
    e.update_status(std::slice::from_ref(&w), &r, states);
    let ws = &e.status.workloads;
    assert_eq!(ws.len(), 1);
    assert!(
        ws[0].state.starts_with(
            "needs a signal: it is CPU-saturated (2.00 of 2 cores), this machine has no PMU counters, no built-in preset answered and no probe is configured"
        ),
        "{}",
        ws[0].state
    );
    assert!(ws[0].state.contains("allow_unverified"), "{}", ws[0].state);
    assert_eq!(ws[0].signal, None);
    assert_eq!(ws[0].signal_source, None);
    assert!(
        ws[0]
            .signal_passed_over
            .iter()
            .any(|p| p.starts_with("proxy: it listens on no socket")),
        "{:?}",
        ws[0].signal_passed_over
    );
    assert!(e.actions.trials.is_empty());
    assert_eq!(e.status.scans, 1);
}

#[test]
fn a_configured_probe_is_the_signal_status_shows() {
    let (_tmp, mut e) = engine(
        "[[workload]]\nmatch = { comm = \"app\" }\nsignal = { command = \"echo 1\", kind = \"gauge\" }\n",
    );
    let w = two_threads(1.0);
    let r = rates(2, 100.0);
    let states = e.propose_workloads(std::slice::from_ref(&w), &r).unwrap();
    e.update_status(std::slice::from_ref(&w), &r, states);
    assert_eq!(
        e.status.workloads[0].signal.as_deref(),
        Some("command `echo 1`")
    );
    assert_eq!(
        e.status.workloads[0].signal_source,
        Some(SignalSource::Probe)
    );
    assert!(!e.status.workloads[0].state.contains("needs a signal"));
}

/// Sources with nothing better than what the workload itself shows.
fn none_better(pmu: bool) -> Sources<'static> {
    Sources {
        probe: None,
        preset: PresetOffer::Absent,
        pmu,
        proxy: Err("it listens on no socket".into()),
    }
}

fn postgres_preset() -> SignalKind {
    SignalKind::Preset {
        preset: "postgresql".into(),
        endpoint: "/run/postgresql/.s.PGSQL.5432".into(),
        counter: "xact_commit + xact_rollback".into(),
    }
}

#[test]
fn the_signal_is_a_probe_then_a_preset_then_counters_then_the_proxy_then_io_then_cpu() {
    let probe = ProbeSpec::Command {
        command: "echo 1".into(),
        kind: None,
        higher_is_better: true,
        per_cpu: false,
    };
    let calm = two_threads(0.3);
    let idle = rates(2, 10.0);
    let all = Sources {
        probe: Some(&probe),
        preset: PresetOffer::Ready(postgres_preset()),
        pmu: true,
        proxy: Ok(()),
    };
    let c = choose_signal(&calm, &all, &idle, 2);
    assert!(matches!(c.signal, Ok(SignalKind::Probe { .. })));
    assert!(c.passed_over.is_empty());
    let c = choose_signal(&calm, &Sources { probe: None, ..all }, &idle, 2);
    assert_eq!(c.signal, Ok(postgres_preset()));
    assert_eq!(c.source(), Some(SignalSource::Preset));
    assert_eq!(c.passed_over, vec!["probe: none configured".to_string()]);
    assert_eq!(
        choose_signal(&calm, &none_better(true), &idle, 2).signal,
        Ok(SignalKind::Cpi)
    );
    let proxy = Sources {
        proxy: Ok(()),
        ..none_better(false)
    };
    assert_eq!(
        choose_signal(&calm, &proxy, &idle, 2).signal,
        Ok(SignalKind::Syscalls)
    );
    assert_eq!(
        choose_signal(&calm, &none_better(false), &idle, 2).signal,
        Ok(SignalKind::Cpu)
    );
    let mut busy_io = rates(2, 10.0);
    busy_io.processes.push(app_rate(60.0, 1e6, 2000.0));
    assert_eq!(
        choose_signal(&calm, &none_better(false), &busy_io, 2).signal,
        Ok(SignalKind::Io)
    );
    // The machine is saturated: CPU consumed says more about the others.
    assert!(
        choose_signal(&calm, &none_better(false), &rates(2, 95.0), 2)
            .signal
            .is_err()
    );
    // The workload does almost nothing.
    assert!(
        choose_signal(&two_threads(0.01), &none_better(false), &idle, 2)
            .signal
            .is_err()
    );
}

#[test]
fn the_proxy_is_offered_for_a_busy_server_but_never_for_postgresql_whose_work_it_cannot_see() {
    let w = two_threads(1.0);
    let mut r = rates(2, 100.0);
    r.processes.push(app_rate(60.0, 1e6, 50_000.0));
    assert_eq!(proxy_offer(&w, &r, Some("redis")), Ok(()));
    let why = proxy_offer(&w, &r, Some("postgresql")).unwrap_err();
    assert!(
        why.starts_with("it is postgresql, where the proxy does not follow the work"),
        "{why}"
    );
    assert!(why.contains("recv/send"), "{why}");
    assert!(
        proxy_offer(&w, &r, None)
            .unwrap_err()
            .contains("listens on no socket")
    );
}

#[test]
fn a_preset_that_did_not_answer_falls_back_and_says_why() {
    let sources = Sources {
        preset: PresetOffer::Failed(
            "postgresql at /run/postgresql/.s.PGSQL.5432: password authentication failed; set password in [[preset]]".into(),
        ),
        proxy: Ok(()),
        ..none_better(false)
    };
    let c = choose_signal(&two_threads(1.0), &sources, &rates(2, 100.0), 2);
    assert_eq!(c.signal, Ok(SignalKind::Syscalls));
    assert_eq!(c.source(), Some(SignalSource::Proxy));
    assert_eq!(c.passed_over.len(), 3, "{:?}", c.passed_over);
    assert!(c.passed_over[1].starts_with("preset: postgresql at"));
    assert!(c.passed_over[1].contains("set password"));
    assert_eq!(c.passed_over[2], "pmu: this machine has no PMU counters");
}

#[test]
fn a_workloads_kept_actions_come_before_what_happens_to_it_now() {
    let w = two_threads(0.3);
    let s = workload_status(&w, "optimized: nothing more to do".into(), &[], None);
    assert_eq!(s.state, "optimized: nothing more to do");
    assert_eq!((s.pids.as_slice(), s.threads), ([100].as_slice(), 2));
    let held = ["cache_affinity kept (action 3)".to_string()];
    let s = workload_status(&w, "large_pages: holds 1 MiB".into(), &held, None);
    assert_eq!(
        s.state,
        "cache_affinity kept (action 3); large_pages: holds 1 MiB"
    );
}

#[test]
fn a_trial_shows_its_phase_windows_and_signal() {
    let mut t = trial(4, None, crate::design::DesignKind::BeforeAfter, vec![]);
    let s = TrialStatus::of(&t);
    assert_eq!(
        (s.phase.as_str(), s.signal.as_str()),
        ("applying (off)", "none (unverified)")
    );
    t.signal = Some(SignalKind::Cpi);
    t.phase = super::super::trial::Phase::Measuring;
    t.on = true;
    let w = super::seq_mut(&mut t);
    (w.off, w.on) = (vec![1.0, 1.1], vec![0.9]);
    let s = TrialStatus::of(&t);
    assert_eq!(s.phase, "measuring (on)");
    assert_eq!((s.windows_off, s.windows_on, s.windows_needed), (2, 1, 6));
    assert_eq!(s.signal, "cycles per instruction");
    assert_eq!(s.design, crate::design::DesignKind::BeforeAfter);
}
