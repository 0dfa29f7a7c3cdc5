//! The metric families, built afresh after each scan from the status, the journal and the
//! daemon's totals, and encoded once (a scrape only copies the text).
//!
//! Cardinality is bounded: the per-workload families (`perfpilot_strategy_outcome`,
//! `perfpilot_strategy_gain_ratio`) carry at most [`TOP_SIGNATURES`] workload signatures, those
//! decided most recently, and `perfpilot_workload_container` the busiest [`TOP_SIGNATURES`]
//! workloads in containers; every other family is labelled only by strategy, decision, state,
//! knob or kind, a handful of values each.

use std::collections::{BTreeMap, HashMap};

use perfpilot_optimize::counters::Totals;
use perfpilot_optimize::cpu::CpuTime;
use perfpilot_optimize::engine::manual::Knob;
use perfpilot_optimize::engine::{Status, WorkloadClass};
use perfpilot_optimize::strategy::StrategyKind;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};
use std::sync::atomic::AtomicU64;

use crate::journal::{Act, Journal};

/// The most workload signatures the per-workload families carry.
pub const TOP_SIGNATURES: usize = 50;

/// The strategies, in label order.
const STRATEGIES: [StrategyKind; 4] = [
    StrategyKind::CacheAffinity,
    StrategyKind::MemoryAffinity,
    StrategyKind::LargePages,
    StrategyKind::ReadAhead,
];

/// The decisions of a verdict.
const DECISIONS: [&str; 3] = ["keep", "revert", "neutral"];

/// The gain buckets (after / before; 1 is no change).
const GAIN_BUCKETS: [f64; 11] = [0.8, 0.9, 0.95, 0.98, 0.99, 1.0, 1.01, 1.02, 1.05, 1.1, 1.25];

/// The scan-duration buckets, seconds.
pub const SCAN_BUCKETS: [f64; 10] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0];

/// A histogram of scan durations, kept across scans.
pub fn scan_histogram() -> Histogram {
    Histogram::new(SCAN_BUCKETS)
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StrategyDecision {
    strategy: String,
    decision: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StrategyLabel {
    strategy: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TierLabels {
    signature: String,
    workload: String,
    tier: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ContainerLabels {
    signature: String,
    workload: String,
    runtime: String,
    container_id: String,
    container: String,
    pod_uid: String,
    namespace: String,
    pod: String,
    qos: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KnobLabel {
    knob: String,
}

/// A knob as a label value (`affinity`, `memory_policy`, `large_pages`, `read_ahead`).
fn knob_label(k: Knob) -> String {
    serde_json::to_value(k)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PurposeLabel {
    purpose: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    signature: String,
    workload: String,
    strategy: String,
    decision: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GainLabels {
    signature: String,
    workload: String,
    strategy: String,
}

type FloatGauge = Gauge<f64, AtomicU64>;
type FloatCounter = Counter<f64, AtomicU64>;

fn gain_histogram() -> Histogram {
    Histogram::new(GAIN_BUCKETS)
}

/// What one scan gives the metrics, besides the journal.
pub struct Figures<'a> {
    /// The engine's status after the scan.
    pub status: &'a Status,
    /// The interval in force (stretched by the CPU budget), seconds.
    pub effective_interval_s: f64,
    /// The interval the tunables ask for, seconds.
    pub configured_interval_s: f64,
    /// The process's CPU time so far.
    pub cpu: CpuTime,
    /// The engine's totals.
    pub totals: Totals,
}

/// Builds every family and encodes them in OpenMetrics text.
pub fn render(f: &Figures, journal: &Journal, scans: &Histogram) -> String {
    let mut r = Registry::with_prefix("perfpilot");
    r.register(
        "build",
        "The perfpilot version that serves these metrics",
        Info::new(vec![("version", env!("CARGO_PKG_VERSION"))]),
    );
    let latest = register_actions(&mut r, journal);
    register_outcomes(&mut r, &latest);
    register_workloads(&mut r, f.status);
    register_containers(&mut r, f.status);
    register_manual_knobs(&mut r, f.status);
    register_tiers(&mut r, f.status);
    register_totals(&mut r, &f.totals);
    register_daemon(&mut r, f, scans);
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, &r);
    out
}

/// The latest decided act per (signature, strategy), with when it was decided.
type Latest<'a> = HashMap<(&'a str, &'a str), (i64, &'a Act)>;

/// Actions and verdicts, from the journal; gives the latest decision per (signature,
/// strategy), for the fleet.
fn register_actions<'a>(r: &mut Registry, journal: &'a Journal) -> Latest<'a> {
    let actions = Family::<StrategyDecision, Counter>::default();
    let open = Family::<StrategyLabel, Gauge>::default();
    let gains =
        Family::<StrategyLabel, Histogram, fn() -> Histogram>::new_with_constructor(gain_histogram);
    // Every strategy and decision is shown, at 0 when nothing is in it: dashboards and alert
    // rules then have a series to read on every host.
    for kind in STRATEGIES {
        let strategy = kind.as_str().to_string();
        for decision in DECISIONS {
            actions
                .get_or_create(&StrategyDecision {
                    strategy: strategy.clone(),
                    decision: decision.to_string(),
                })
                .inc_by(0);
        }
        open.get_or_create(&StrategyLabel {
            strategy: strategy.clone(),
        })
        .set(0);
        let _ = gains.get_or_create(&StrategyLabel { strategy });
    }
    // The latest decision per (signature, strategy), for the fleet.
    let mut latest: Latest = HashMap::new();
    for a in journal.acts.values() {
        if a.open {
            open.get_or_create(&StrategyLabel {
                strategy: a.strategy.clone(),
            })
            .inc();
        }
        let Some(d) = &a.decision else { continue };
        actions
            .get_or_create(&StrategyDecision {
                strategy: a.strategy.clone(),
                decision: d.clone(),
            })
            .inc();
        if let Some(g) = a.gain {
            gains
                .get_or_create(&StrategyLabel {
                    strategy: a.strategy.clone(),
                })
                .observe(g);
        }
        let e = latest
            .entry((&a.signature, &a.strategy))
            .or_insert((a.updated_ms, a));
        if a.updated_ms >= e.0 {
            *e = (a.updated_ms, a);
        }
    }
    r.register(
        "actions",
        "Decided actions by strategy and decision (keep, revert, neutral), from the journal",
        actions,
    );
    r.register(
        "open_actions",
        "Actions that still have something in the system (in trial or kept), by strategy",
        open,
    );
    r.register_with_unit(
        "action_gain",
        "The measured gain of decided actions (after / before, > 1 is better), by strategy",
        Unit::Other("ratio".into()),
        gains,
    );
    latest
}

/// The fleet's view of the latest decisions: the most recently decided signatures only.
fn register_outcomes(r: &mut Registry, latest: &Latest) {
    let mut newest: BTreeMap<&str, i64> = BTreeMap::new();
    for ((sig, _), (ms, _)) in latest {
        let e = newest.entry(sig).or_insert(*ms);
        *e = (*e).max(*ms);
    }
    let mut sigs: Vec<(&str, i64)> = newest.into_iter().collect();
    sigs.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    sigs.truncate(TOP_SIGNATURES);
    let outcome = Family::<OutcomeLabels, Gauge>::default();
    let outcome_gain = Family::<GainLabels, FloatGauge>::default();
    for ((sig, strategy), (_, a)) in latest {
        if !sigs.iter().any(|s| s.0 == *sig) {
            continue;
        }
        outcome
            .get_or_create(&OutcomeLabels {
                signature: sig.to_string(),
                workload: a.workload.clone(),
                strategy: strategy.to_string(),
                decision: a.decision.clone().unwrap_or_default(),
            })
            .set(1);
        if let Some(g) = a.gain {
            outcome_gain
                .get_or_create(&GainLabels {
                    signature: sig.to_string(),
                    workload: a.workload.clone(),
                    strategy: strategy.to_string(),
                })
                .set(g);
        }
    }
    r.register(
        "strategy_outcome",
        "1 for this host's latest decision on a strategy for a workload signature (the most recently decided signatures only)",
        outcome,
    );
    r.register_with_unit(
        "strategy_gain",
        "The gain of that latest decision (after / before)",
        Unit::Other("ratio".into()),
        outcome_gain,
    );
}

/// Listed workloads by state, from the status.
fn register_workloads(r: &mut Registry, status: &Status) {
    let workloads = Family::<StateLabel, Gauge>::default();
    for c in WorkloadClass::ALL {
        // Every state is shown, at 0 when none is in it.
        workloads
            .get_or_create(&StateLabel {
                state: c.as_str().into(),
            })
            .set(0);
    }
    for w in &status.workloads {
        workloads
            .get_or_create(&StateLabel {
                state: w.class.as_str().into(),
            })
            .inc();
    }
    r.register(
        "workloads",
        "Listed workloads by what perfpilot does with them (managed, manual, excluded, needs_signal)",
        workloads,
    );
}

/// Workloads in containers: who they are (the busiest [`TOP_SIGNATURES`], joined to the other
/// per-workload families on `signature`).
fn register_containers(r: &mut Registry, status: &Status) {
    let containers = Family::<ContainerLabels, Gauge>::default();
    let mut listed: Vec<_> = status
        .workloads
        .iter()
        .filter(|w| w.container.is_some())
        .collect();
    listed.sort_by(|a, b| b.cpu_cores.total_cmp(&a.cpu_cores));
    for w in listed.into_iter().take(TOP_SIGNATURES) {
        let Some(c) = &w.container else { continue };
        let pod = c.pod.clone().unwrap_or_default();
        containers
            .get_or_create(&ContainerLabels {
                signature: w.signature.clone(),
                workload: w.name.clone(),
                runtime: c.runtime.clone(),
                container_id: c.id.chars().take(12).collect(),
                container: c.name.clone().unwrap_or_default(),
                pod_uid: pod.uid,
                namespace: pod.namespace.unwrap_or_default(),
                pod: pod.name.unwrap_or_default(),
                qos: pod.qos,
            })
            .set(1);
    }
    r.register(
        "workload_container",
        "1 for a listed workload in a container: its runtime, container and Kubernetes pod (the busiest workloads only; join on signature)",
        containers,
    );
}

/// The knobs found set by someone else, by knob.
fn register_manual_knobs(r: &mut Registry, status: &Status) {
    let knobs = Family::<KnobLabel, Gauge>::default();
    for k in [Knob::Affinity, Knob::MemoryPolicy, Knob::LargePages] {
        knobs
            .get_or_create(&KnobLabel {
                knob: knob_label(k),
            })
            .set(0);
    }
    for w in &status.workloads {
        for m in &w.manual {
            knobs
                .get_or_create(&KnobLabel {
                    knob: knob_label(m.knob),
                })
                .inc();
        }
    }
    for m in &status.devices_left_alone {
        knobs
            .get_or_create(&KnobLabel {
                knob: knob_label(m.knob),
            })
            .inc();
    }
    r.register(
        "manual_knobs",
        "Listed workloads (and devices, for read_ahead) with a knob someone else set, by knob: the strategies it concerns leave them alone",
        knobs,
    );
}

/// Workloads whose configuration names a capacity model: their tier (a few, by config).
fn register_tiers(r: &mut Registry, status: &Status) {
    let busy = Family::<TierLabels, FloatGauge>::default();
    let implied = Family::<TierLabels, FloatGauge>::default();
    let saturates = Family::<TierLabels, FloatGauge>::default();
    for w in &status.workloads {
        let Some(c) = &w.capacity else { continue };
        let labels = TierLabels {
            signature: w.signature.clone(),
            workload: w.name.clone(),
            tier: c.tier.clone(),
        };
        busy.get_or_create(&labels).set(c.utilisation);
        implied.get_or_create(&labels).set(c.throughput);
        saturates.get_or_create(&labels).set(c.max_throughput);
    }
    r.register_with_unit(
        "tier_utilisation",
        "The share of its capacity-model tier's servers a workload's CPU fills",
        Unit::Other("ratio".into()),
        busy,
    );
    r.register(
        "tier_implied_throughput",
        "Requests per second a workload's CPU implies by its capacity model's demand",
        implied,
    );
    r.register(
        "tier_max_throughput",
        "Requests per second at which the workload's capacity model's bottleneck saturates",
        saturates,
    );
}

/// The engine's running totals.
fn register_totals(r: &mut Registry, totals: &Totals) {
    let collapsed = Counter::<u64>::default();
    collapsed.inc_by(totals.collapsed_bytes);
    r.register_with_unit(
        "collapsed",
        "Memory collapsed into huge pages",
        Unit::Bytes,
        collapsed,
    );
    let migrated = Counter::<u64>::default();
    migrated.inc_by(totals.migrated_bytes);
    r.register_with_unit(
        "migrated",
        "Memory moved to another NUMA node",
        Unit::Bytes,
        migrated,
    );
    let by_kind = |pairs: &[(&'static str, u64)]| {
        let fam = Family::<KindLabel, Counter>::default();
        for (k, n) in pairs {
            fam.get_or_create(&KindLabel {
                kind: (*k).to_string(),
            })
            .inc_by(*n);
        }
        fam
    };
    r.register(
        "collapse_failures",
        "Ranges that did not collapse into huge pages, by kind",
        by_kind(&totals.collapse_failures),
    );
    r.register(
        "probe_failures",
        "Signal reads that failed, by kind (timeout, failed, garbage, missing, preset)",
        by_kind(&totals.probe_failures),
    );
    r.register(
        "trials_ended",
        "Trials ended, by why (kind: complete, workload_exited, signal_failed, manual, nothing_applied, not_settled, restarted, rest_moved, control_lost, split_refused)",
        by_kind(&totals.trials_ended),
    );
}

/// The daemon itself: scans, their interval, its own CPU time and budget.
fn register_daemon(r: &mut Registry, f: &Figures, scans: &Histogram) {
    r.register_with_unit(
        "scan_duration",
        "How long each scan took",
        Unit::Seconds,
        scans.clone(),
    );
    let scans_total = Counter::<u64>::default();
    scans_total.inc_by(f.status.scans);
    r.register("scans", "Scans since the daemon started", scans_total);
    let interval = FloatGauge::default();
    interval.set(f.effective_interval_s);
    r.register_with_unit(
        "scan_interval",
        "The scan interval in force (stretched above the configured one to keep the CPU budget)",
        Unit::Seconds,
        interval,
    );
    let configured = FloatGauge::default();
    configured.set(f.configured_interval_s);
    r.register_with_unit(
        "scan_interval_configured",
        "The scan interval the tunables ask for",
        Unit::Seconds,
        configured,
    );
    let cpu = Family::<PurposeLabel, FloatCounter>::default();
    for (purpose, d) in [("monitoring", f.cpu.monitoring), ("changes", f.cpu.changes)] {
        cpu.get_or_create(&PurposeLabel {
            purpose: purpose.into(),
        })
        .inc_by(d.as_secs_f64());
    }
    r.register_with_unit(
        "cpu",
        "The daemon's own CPU time: monitoring (what cpu_budget_pct covers) and making changes",
        Unit::Seconds,
        cpu,
    );
    let budget = FloatGauge::default();
    budget.set(f.status.cpu.cpu_budget_pct / 100.0);
    r.register_with_unit(
        "cpu_budget",
        "The monitoring CPU budget, a share of one CPU",
        Unit::Other("ratio".into()),
        budget,
    );
}

#[cfg(test)]
mod tests {
    use perfpilot_optimize::engine::WorkloadStatus;
    use perfpilot_optimize::engine::manual::ManualSetting;
    use perfpilot_sys::cgroup::container::{Container, Pod};

    use super::*;

    #[test]
    fn a_workload_in_a_pod_is_labelled_with_it_and_knobs_left_alone_are_counted() {
        let w = WorkloadStatus {
            signature: "00000000000000ab".into(),
            name: "postgres (5)".into(),
            pids: vec![1201],
            cpu_cores: 1.5,
            threads: 5,
            rss: 1 << 30,
            age_s: 600.0,
            signal: None,
            signal_source: None,
            signal_passed_over: vec![],
            state: "optimized: nothing more to do".into(),
            class: WorkloadClass::Managed,
            capacity: None,
            cgroup: Some("/kubepods.slice/kubepods-podx.slice/cri-containerd-3f7c.scope".into()),
            container: Some(Container {
                runtime: "containerd".into(),
                id: "3f7c2a9e1b4d6f8a0c2e".into(),
                pod: Some(Pod {
                    uid: "6c1b3f0e-9d2a-4c1e-8f7a-2b5d9e0c1a34".into(),
                    qos: "guaranteed".into(),
                    namespace: Some("databases".into()),
                    name: Some("pg-0".into()),
                }),
                name: Some("postgres".into()),
            }),
            cpuset: None,
            manual: vec![ManualSetting::new(
                Knob::LargePages,
                "pid 1201: HugetlbPages",
            )],
        };
        let status = Status {
            workloads: vec![w],
            ..Status::default()
        };
        let f = Figures {
            status: &status,
            effective_interval_s: 10.0,
            configured_interval_s: 10.0,
            cpu: CpuTime::default(),
            totals: Totals::default(),
        };
        let text = render(&f, &Journal::default(), &scan_histogram());
        let line = text
            .lines()
            .find(|l| l.starts_with("perfpilot_workload_container{"))
            .unwrap_or_else(|| panic!("{text}"));
        for want in [
            "namespace=\"databases\"",
            "pod=\"pg-0\"",
            "container=\"postgres\"",
            "container_id=\"3f7c2a9e1b4d\"",
            "qos=\"guaranteed\"",
            "signature=\"00000000000000ab\"",
        ] {
            assert!(line.contains(want), "{want} in {line}");
        }
        assert!(line.ends_with(" 1"), "{line}");
        assert!(
            text.lines()
                .any(|l| l == "perfpilot_manual_knobs{knob=\"large_pages\"} 1"),
            "{text}"
        );
        assert!(
            text.lines()
                .any(|l| l == "perfpilot_manual_knobs{knob=\"affinity\"} 0"),
            "{text}"
        );
    }
}
