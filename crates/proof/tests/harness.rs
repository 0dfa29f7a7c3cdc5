//! The harness's logic without servers: the plan of rounds, the summary's math on a fixed results
//! file, the doc writer between markers, the restore guard on a fixture sysfs tree, and the
//! daemon status reader. One real smoke (nginx, one round) is `#[ignore]`d: it needs root,
//! nginx, wrk and a release build.

use std::path::Path;

use perfpilot_proof::daemon::parse_status;
use perfpilot_proof::doc::{self, BEGIN, END};
use perfpilot_proof::options::{CellName, ServerName};
use perfpilot_proof::record::{self, Line, Outcome};
use perfpilot_proof::schedule::plan;
use perfpilot_proof::settings::{SettingsGuard, THP_ENABLED, ThpState};
use perfpilot_proof::summary::{self, Accord, agreement, summarize, targets};
use perfpilot_sys::Fs;

#[test]
fn the_plan_gives_the_expert_cell_to_postgres_only() {
    let steps = plan(
        &[ServerName::Postgres, ServerName::Redis],
        &CellName::ALL,
        2,
        7,
    );
    let count = |s: ServerName| steps.iter().filter(|x| x.server == s).count();
    assert_eq!(count(ServerName::Postgres), 12);
    assert_eq!(count(ServerName::Redis), 10);
    assert!(
        !steps
            .iter()
            .any(|s| s.server == ServerName::Redis && s.cell == CellName::Expert)
    );
    assert!(
        steps.iter().take(11).all(|s| s.round == 1),
        "rounds are outermost"
    );
}

const RESULTS: &str = r#"{"kind":"run","command":"perfpilot-proof run --servers redis,nginx","seed":1,"started":"2026-11-23T17:00:00Z","machine":{"cpus":2,"cpu_model":"AMD EPYC","numa_nodes":1,"memory_bytes":25000000000,"kernel":"6.1.0","thp":{"enabled":"madvise","defrag":"madvise","shmem_enabled":"never"}}}
{"kind":"cell","round":1,"server":"redis","cell":"untuned","outcome":"ok","started":"x","throughput":100.0,"unit":"req/s","p99_ms":1.0,"thp":{"enabled":"madvise","defrag":"madvise","shmem_enabled":"never"}}
{"kind":"cell","round":1,"server":"redis","cell":"thp-always","outcome":"ok","started":"x","throughput":120.0,"unit":"req/s","p99_ms":0.8,"thp":{"enabled":"always","defrag":"madvise","shmem_enabled":"never"},"restored":["restored /sys/kernel/mm/transparent_hugepage/enabled: always → madvise"]}
{"kind":"cell","round":1,"server":"redis","cell":"perfpilot","outcome":"ok","started":"x","throughput":118.0,"unit":"req/s","p99_ms":0.9,"thp":{"enabled":"madvise","defrag":"madvise","shmem_enabled":"never"},"perfpilot":{"first_kept_s":40.0,"cpu_pct":1.5,"actions":[{"id":1,"strategy":"large_pages","workload":"redis-server","state":"kept","decision":"keep","signal":"redis total_commands_processed","gain":{"ratio":1.15,"ci_low":1.05,"ci_high":1.25},"shadow":[{"signal":"syscalls per CPU-second","gain":{"ratio":1.02,"ci_low":0.95,"ci_high":1.09}}]}]}}
{"kind":"cell","round":2,"server":"redis","cell":"untuned","outcome":"ok","started":"x","throughput":104.0,"unit":"req/s","p99_ms":1.2,"thp":{"enabled":"madvise","defrag":"madvise","shmem_enabled":"never"}}
{"kind":"cell","round":2,"server":"redis","cell":"thp-always","outcome":"ok","started":"x","throughput":124.0,"unit":"req/s","p99_ms":0.8,"thp":{"enabled":"always","defrag":"madvise","shmem_enabled":"never"}}
{"kind":"cell","round":2,"server":"redis","cell":"perfpilot","outcome":"ok","started":"x","throughput":122.0,"unit":"req/s","thp":{"enabled":"madvise","defrag":"madvise","shmem_enabled":"never"},"perfpilot":{"first_kept_s":50.0,"cpu_pct":2.5,"actions":[]}}
{"kind":"cell","round":1,"server":"nginx","cell":"untuned","outcome":"ok","started":"x","throughput":5000.0,"unit":"req/s","thp":{"enabled":"madvise","defrag":"madvise","shmem_enabled":"never"}}
{"kind":"cell","round":1,"server":"nginx","cell":"numad","outcome":"not_installed","error":"numad (package numad) missing; run with --install","started":"x","thp":{"enabled":"madvise","defrag":"madvise","shmem_enabled":"never"}}
{"kind":"cell","round":1,"server":"nginx","cell":"perfpilot","outcome":"ok","started":"x","throughput":4900.0,"unit":"req/s","thp":{"enabled":"madvise","defrag":"madvise","shmem_enabled":"never"}}
{"kind":"cell","round":2,"server":"nginx","cell":"perfpilot","outcome":"ok","started":"x","throughput":4900.0,"unit":"req/s","thp":{"enabled":"madvise","defrag":"madvise","shmem_enacut
"#;

fn records() -> Vec<record::CellRecord> {
    record::parse(RESULTS, "fixture")
        .into_iter()
        .filter_map(|l| match l {
            Line::Cell(c) => Some(*c),
            Line::Run(_) => None,
        })
        .collect()
}

#[test]
fn a_cut_off_line_is_skipped_and_the_rest_is_read() {
    let lines = record::parse(RESULTS, "fixture");
    assert_eq!(
        lines.len(),
        10,
        "the header and 9 whole cell lines; the cut-off one is skipped"
    );
    assert!(matches!(&lines[0], Line::Run(h) if h.seed == 1));
}

#[test]
fn the_summary_gives_ratios_to_untuned_paired_by_round() {
    let rows = summarize(&records());
    let row = |s: &str, c: &str| {
        rows.iter()
            .find(|r| r.server == s && r.cell == c)
            .unwrap()
            .clone()
    };
    let untuned = row("redis", "untuned");
    assert!(untuned.ratio.is_none());
    let thp = row("redis", "thp-always");
    let r = thp.ratio.unwrap();
    // The geometric mean of 120 / 100 and 124 / 104.
    assert!(r.paired);
    assert!(
        (r.ratio - (1.2_f64 * 124.0 / 104.0).sqrt()).abs() < 1e-12,
        "{r:?}"
    );
    let (lo, hi) = r.ci.unwrap();
    assert!(
        lo < r.ratio && r.ratio < hi && lo > 1.0,
        "a clear gain's interval lies above 1: {lo} {hi}"
    );
    assert_eq!(thp.p99_ms, Some(0.8));
    let pp = row("redis", "perfpilot");
    assert_eq!(pp.first_kept_s, vec![40.0, 50.0]);
    assert_eq!(pp.cpu_pct, Some(2.0));
    assert_eq!(
        pp.p99_ms,
        Some(0.9),
        "runs without a p99 do not count as zero"
    );
    // Two perfpilot runs against one untuned: round 2 has no partner, so the ratio of means,
    // and one run a side gives no interval.
    let n = row("nginx", "perfpilot").ratio.unwrap();
    assert!((n.ratio - 0.98).abs() < 1e-12 && n.ci.is_none() && !n.paired);
    assert_eq!(row("nginx", "numad").not_measured.unwrap().0, 1);
    let t = targets(&rows);
    let redis = t.iter().find(|c| c.server == "redis").unwrap();
    assert_eq!(redis.best_peer.as_ref().unwrap().0, "thp-always");
    assert_eq!(redis.near_best, Some(true));
    assert_eq!(redis.no_loss, Some(true));
    let nginx = t.iter().find(|c| c.server == "nginx").unwrap();
    assert_eq!(
        nginx.no_loss, None,
        "one run a side proves nothing either way"
    );
}

#[test]
fn a_drift_from_round_to_round_falls_out_of_the_paired_ratio() {
    use perfpilot_proof::summary::ratio_to_untuned;
    // The machine ran 30 % slower in round 2, for both cells alike: each round's ratio is 1.1.
    let untuned = [(1, 100.0), (2, 70.0), (3, 100.0)];
    let cell = [(1, 110.0), (2, 77.0), (3, 110.0)];
    let r = ratio_to_untuned(&cell, &untuned).unwrap();
    assert!(r.paired && (r.ratio - 1.1).abs() < 1e-9, "{r:?}");
    let (lo, hi) = r.ci.unwrap();
    assert!(lo > 1.09 && hi < 1.11, "{lo} {hi}");
    // Unpaired (a run of the cell in a round untuned missed), Welch's interval holds 1.
    let cell = [(1, 110.0), (2, 77.0), (4, 110.0)];
    let w = ratio_to_untuned(&cell, &untuned).unwrap();
    assert!(!w.paired);
    let (lo, hi) = w.ci.unwrap();
    assert!(lo < 1.0 && hi > 1.1, "{lo} {hi}");
    assert!(w.describe().ends_with("unpaired"), "{}", w.describe());
}

#[test]
fn the_agreement_table_compares_the_judging_signal_with_the_proxy() {
    let a = agreement(&records());
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].proxy, "syscalls per CPU-second");
    assert_eq!(
        a[0].accord,
        Accord::Disagrees,
        "×1.15 [1.05, 1.25] by the preset, ×1.02 [0.95, 1.09] by the proxy"
    );
    let md = summary::markdown(&records());
    assert!(md.contains("| redis | thp-always | 2 |"), "{md}");
    assert!(md.contains("not installed"), "{md}");
    assert!(md.contains("| **no** |"), "{md}");
    assert!(
        md.contains("#1 large_pages on redis-server: kept, keep ×1.15 [1.05, 1.25] by redis total_commands_processed"),
        "{md}"
    );
}

#[test]
fn the_daemon_is_deciding_while_a_trial_runs_or_a_workload_waits_for_its_signal() {
    use perfpilot_proof::daemon::deciding;
    let trial = serde_json::json!({"actions": [{"state": "kept"}, {"state": "trial"}]});
    assert!(deciding(&trial));
    let waiting = serde_json::json!({"actions": [{"state": "kept"}], "daemon": {"workloads": [
        {"state": "would try large_pages: waiting for a steady signal: 1 of 3 readings so far"}]}});
    assert!(deciding(&waiting));
    let done = serde_json::json!({"actions": [{"state": "ended"}], "daemon": {"workloads": [
        {"state": "large_pages backed off for 3566 s: no clear effect"}]}});
    assert!(!deciding(&done));
}

#[test]
fn a_proxy_agrees_only_with_an_interval_narrow_enough_to_tell() {
    let g = |ratio, ci_low, ci_high| perfpilot_proof::record::GainCi {
        ratio,
        ci_low,
        ci_high,
    };
    // The JVM's large pages: the same effect, tightly.
    assert_eq!(
        Accord::of(&g(1.36, 1.29, 1.43), &g(1.36, 1.30, 1.43)),
        Accord::Agrees
    );
    // PostgreSQL's proxy, 73 counted calls: its interval overlaps anything and proves nothing.
    assert_eq!(
        Accord::of(&g(1.13, 0.99, 1.29), &g(1.07, 0.08, 14.33)),
        Accord::TooWide
    );
    // The judging signal itself too wide (a baseline taken while the server loaded).
    assert_eq!(
        Accord::of(&g(3.46, 0.68, 17.62), &g(3.10, 0.79, 12.14)),
        Accord::TooWide
    );
    // Both narrow, both neutral, but the proxy sees a loss the signal does not.
    assert_eq!(
        Accord::of(&g(1.00, 0.97, 1.03), &g(0.90, 0.88, 0.92)),
        Accord::Disagrees
    );
    let md_row = Accord::TooWide.text();
    assert!(md_row.starts_with("cannot tell"), "{md_row}");
}

#[test]
fn the_doc_writer_replaces_only_what_lies_between_the_markers() {
    let text = format!("# Proofs\n\nintro\n\n{BEGIN}\nold table\n{END}\n\nafter\n");
    let new = doc::replace_between(&text, "new table\n").unwrap();
    assert_eq!(
        new,
        format!("# Proofs\n\nintro\n\n{BEGIN}\nnew table\n{END}\n\nafter\n")
    );
    // Again: the same result (the markers are kept).
    assert_eq!(doc::replace_between(&new, "new table").unwrap(), new);
    // No markers: appended with them.
    let appended = doc::replace_between("# Proofs\n", "t").unwrap();
    assert_eq!(appended, format!("# Proofs\n\n{BEGIN}\nt\n{END}\n"));
    // One marker alone is refused, not guessed.
    assert!(doc::replace_between(&format!("x\n{END}\n"), "t").is_err());
}

fn fixture(root: &Path) {
    let thp = root.join("sys/kernel/mm/transparent_hugepage");
    std::fs::create_dir_all(thp.join("khugepaged")).unwrap();
    std::fs::write(thp.join("enabled"), "always [madvise] never\n").unwrap();
    std::fs::write(
        thp.join("defrag"),
        "always defer defer+madvise [madvise] never\n",
    )
    .unwrap();
    std::fs::write(
        thp.join("shmem_enabled"),
        "always within_size advise [never] deny force\n",
    )
    .unwrap();
    std::fs::write(thp.join("khugepaged/scan_sleep_millisecs"), "10000\n").unwrap();
    std::fs::create_dir_all(root.join("proc/sys/vm")).unwrap();
    std::fs::write(root.join("proc/sys/vm/nr_hugepages"), "0\n").unwrap();
    std::fs::create_dir_all(root.join("sys/block/vda/queue")).unwrap();
    std::fs::write(root.join("sys/block/vda/queue/read_ahead_kb"), "128\n").unwrap();
}

#[test]
fn the_guard_restores_what_a_cell_and_its_tools_changed() {
    let dir = tempfile::tempdir().unwrap();
    fixture(dir.path());
    let fs = Fs::at(dir.path());
    let guard = SettingsGuard::take(&fs);
    guard.set(THP_ENABLED, "always").unwrap();
    assert_eq!(ThpState::read(&fs).enabled, "always");
    // What numad and tuned change behind the harness's back.
    std::fs::write(
        dir.path()
            .join("sys/kernel/mm/transparent_hugepage/khugepaged/scan_sleep_millisecs"),
        "1000",
    )
    .unwrap();
    std::fs::write(dir.path().join("sys/block/vda/queue/read_ahead_kb"), "4096").unwrap();
    let lines = guard.finish();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("enabled: always → madvise")),
        "{lines:?}"
    );
    let read = |rel: &str| std::fs::read_to_string(dir.path().join(rel)).unwrap();
    assert_eq!(ThpState::read(&fs).enabled, "madvise");
    assert_eq!(
        read("sys/kernel/mm/transparent_hugepage/khugepaged/scan_sleep_millisecs"),
        "10000"
    );
    assert_eq!(read("sys/block/vda/queue/read_ahead_kb"), "128");
}

#[test]
fn the_guard_restores_on_a_panic_too() {
    let dir = tempfile::tempdir().unwrap();
    fixture(dir.path());
    let fs = Fs::at(dir.path());
    let fs2 = fs.clone();
    let r = std::panic::catch_unwind(move || {
        let guard = SettingsGuard::take(&fs2);
        guard.set("proc/sys/vm/nr_hugepages", "1100").unwrap();
        panic!("a cell failed half way");
    });
    assert!(r.is_err());
    assert_eq!(
        std::fs::read_to_string(dir.path().join("proc/sys/vm/nr_hugepages")).unwrap(),
        "0"
    );
    assert_eq!(ThpState::read(&fs).shmem_enabled, "never");
}

#[test]
fn the_status_reader_takes_what_is_there_and_ignores_what_is_not() {
    let status = serde_json::json!({
        "running": false,
        "daemon": {"own_cpu_pct": 0.8, "notes": ["no PMU counters"], "workloads": [{"name": "postgres", "state": "needs a signal"}]},
        "actions": [
            {"id": 3, "strategy": "large_pages", "workload": "postgres", "state": "kept",
             "verdict": {"signal": "postgres xact_commit", "decision": "keep",
                         "gain": {"ratio": 1.1, "ci_low": 1.02, "ci_high": 1.2, "confidence": 0.95},
                         "shadow": [{"signal": "syscr+syscw per CPU-s", "gain": {"ratio": 1.08, "ci_low": 1.01, "ci_high": 1.15}}]}},
            {"id": 4, "strategy": "read_ahead", "workload": "x", "state": "trial", "verdict": null}
        ]
    });
    let r = parse_status(&status);
    assert_eq!(r.own_cpu_pct, Some(0.8));
    assert_eq!(r.notes, vec!["no PMU counters".to_string()]);
    assert_eq!(r.workloads[0].name, "postgres");
    assert_eq!(r.workloads[0].state, "needs a signal");
    assert_eq!(r.workloads[0].signal, None);
    assert_eq!(r.actions.len(), 2);
    assert_eq!(r.actions[0].shadow.len(), 1);
    assert_eq!(r.actions[0].gain.unwrap().ci_low, 1.02);
    assert!(r.actions[1].gain.is_none() && r.actions[1].shadow.is_empty());
    assert!(parse_status(&serde_json::Value::Null).actions.is_empty());
}

#[test]
fn an_outcome_reads_as_snake_case() {
    let o: Outcome = serde_json::from_str("\"not_installed\"").unwrap();
    assert_eq!(o, Outcome::NotInstalled);
}

/// One round of nginx in two cells, 5 s each, through the real binary. Needs root, nginx-light,
/// wrk and a perfpilot binary: `PERFPILOT=target/release/perfpilot`, or one built next to this
/// test's (`cargo build -p perfpilot`).
#[test]
#[ignore]
fn a_real_round_on_nginx_measures_both_cells() {
    let exe = Path::new(env!("CARGO_BIN_EXE_perfpilot-proof"));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.jsonl");
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("run");
    if let Ok(p) = std::env::var("PERFPILOT") {
        cmd.arg("--perfpilot").arg(p);
    }
    let status = cmd
        .args([
            "--servers",
            "nginx",
            "--cells",
            "untuned,thp-always",
            "--rounds",
            "1",
        ])
        .args([
            "--warmup",
            "0s",
            "--measure",
            "5s",
            "--settle",
            "1s",
            "--out",
        ])
        .arg(&out)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .unwrap();
    assert!(status.success());
    let ok = record::read(&out)
        .unwrap()
        .into_iter()
        .filter(|l| matches!(l, Line::Cell(c) if c.outcome == Outcome::Ok && c.throughput.unwrap_or(0.0) > 0.0))
        .count();
    assert_eq!(ok, 2);
}
