//! An end-to-end study on the scoring service (`workloads/scoring`) with tiny durations:
//! interrupted before its first trial, resumed, finished, reported with an apply script; a
//! knob (under a temporary tree) set per trial and restored.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use perfpilot_observe::{Fs, Topology};
use perfpilot_store::{RunState, Store, TrialPhase};
use perfpilot_study::{Budget, RunOptions, Study, StudyError, report, run_scaling, run_study};
use perfpilot_sys::knob::read_knob;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The `scoring` binary of this build.
fn scoring() -> PathBuf {
    perfpilot_testkit::workspace_bin("scoring", "perfpilot-scoring")
}

#[test]
fn a_tiny_study_on_the_scoring_service() {
    let dir = tempfile::tempdir().unwrap();
    let knobs = dir.path().join("root");
    let rel = "proc/sys/vm/swappiness";
    std::fs::create_dir_all(knobs.join("proc/sys/vm")).unwrap();
    std::fs::write(knobs.join(rel), "60\n").unwrap();
    let repo = repo().canonicalize().unwrap();
    let port = 20000 + (std::process::id() % 20000) as u16;
    let text = format!(
        r#"
name = "tiny"

[deployment]
command = "{bin} --listen 127.0.0.1:{{port}} --models {models} --threads {{cpus}} --cache-size {{cache}}"
ready = {{ http = "http://127.0.0.1:{{port}}/health", timeout = "30s" }}
base_port = {port}
[[deployment.knobs]]
path = "{rel}"
value = "{{cache}}"

[load]
url = "http://127.0.0.1:{{port}}/score/iris-forest"
method = "POST"
headers = {{ "content-type" = "application/json" }}
body_file = "{body}"
data = "{data}"
users_per_instance = 2

[objective]
goal = "maximize throughput"
constraints = ["errors < 1%"]

[factors]
instances = [1, 2]
cache = [2, 300]

[run]
warmup = "1s"
measure = "2s"
repetitions = 2
min_rounds = 2
confirm_rounds = 1
cooldown = "0s"

[scaling]
users = [1, 4]
config = {{ instances = 1, cache = 300 }}
"#,
        bin = scoring().display(),
        models = repo.join("examples/scoring/models").display(),
        body = repo.join("examples/scoring/request.json").display(),
        data = repo.join("examples/scoring/requests.csv").display(),
    );
    let file = dir.path().join("tiny.toml");
    std::fs::write(&file, &text).unwrap();
    let study = Study::load(&file).unwrap();
    let topo = Topology::read(&Fs::live()).unwrap();
    let mut opts = RunOptions::new(dir.path().join("study.db"));
    opts.knob_fs = Fs::at(&knobs);

    // Interrupted before the first trial: the run is marked so, nothing is left changed.
    opts.stop.store(true, Ordering::SeqCst);
    let e = run_study(&study, &topo, &opts).unwrap_err();
    assert!(matches!(e, StudyError::Interrupted), "{e}");
    let run = {
        let s = Store::open(&opts.store).unwrap();
        let runs = s.studies().unwrap();
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0].state, RunState::Interrupted);
        assert!(s.trials(runs[0].id).unwrap().is_empty());
        runs[0].id
    };

    // Resumed: every trial runs.
    opts.stop.store(false, Ordering::SeqCst);
    opts.resume = Some(run);
    let out = run_study(&study, &topo, &opts).unwrap();
    assert_eq!(out.run, run);
    let s = &out.summary;
    assert_eq!(s.rounds, 2);
    assert_eq!(s.configurations.len(), 4);
    let winner = s.winner.clone().expect("a winner");
    let confirm = if winner == s.baseline { 0 } else { 2 };
    assert_eq!(s.trials_run, 8 + confirm);
    for c in &s.configurations {
        assert_eq!(c.ok, c.trials, "{}: every trial succeeds", c.config);
        assert!(c.throughput.unwrap() > 0.0);
        assert!(c.cpu_cores.unwrap() > 0.0, "CPU per instance was sampled");
    }
    if winner != s.baseline {
        let g = s.gain.expect("a gain with a CI");
        assert!(g.low <= g.ratio && g.ratio <= g.high);
        assert_eq!(g.pairs, 3, "2 race rounds + 1 confirmation round");
    }
    // The knob was set per trial and restored.
    assert_eq!(read_knob(&Fs::at(&knobs), rel).unwrap(), "60");

    // Every trial is in the store, with CPU per instance.
    let store = Store::open(&opts.store).unwrap();
    let trials = store.trials(run).unwrap();
    assert_eq!(trials.len(), 8 + confirm);
    let two = trials
        .iter()
        .find(|t| t.config.starts_with("instances=2"))
        .unwrap();
    let m = perfpilot_drive::Measurement::from_json(two.measurement.as_deref().unwrap()).unwrap();
    assert_eq!(
        m.cpu.as_ref().unwrap().len(),
        2,
        "one CPU figure per instance"
    );
    assert_eq!(m.targets.len(), 2);
    // The built-in driver's own CPU is measured per trial.
    for t in &trials {
        let d: perfpilot_study::trial::TrialDetail = serde_json::from_str(&t.detail).unwrap();
        let cores = d.driver_cores.expect("the driver's cores");
        assert!(
            cores > 0.0 && cores < 1.2,
            "{}: driver {cores} cores of 1 thread",
            t.config
        );
    }

    // Resuming a finished run runs nothing more and reaches the same winner.
    let again = run_study(&study, &topo, &opts).unwrap();
    assert_eq!(again.summary.trials_run, 0);
    assert_eq!(again.summary.winner, Some(winner.clone()));

    // The report and the apply script.
    let r = report::build(&store, run).unwrap();
    assert_eq!(r.trials.len(), trials.len());
    assert_eq!(r.scaling_view.len(), 2, "throughput vs 1 and 2 instances");
    assert_eq!(r.effects.len(), 2);
    let md = report::to_markdown(&r);
    assert!(md.contains(&format!("**{winner}**")), "{md}");
    assert!(md.contains("## Apply script"));
    let html = report::to_html(&r);
    assert!(html.contains("<svg") && html.contains("<path d=\"M"));
    let json: serde_json::Value = serde_json::from_str(&report::to_json(&r)).unwrap();
    assert_eq!(
        json["summary"]["winner"],
        serde_json::Value::String(winner.clone())
    );
    let apply = r.apply.expect("an apply script");
    // The winner's script, or the baseline's when the winner is not shown better than it.
    let deployed = if s.winner_shown_better() {
        winner.clone()
    } else {
        s.baseline.clone()
    };
    assert_eq!(apply.config, deployed);
    let instances = if deployed.starts_with("instances=2") {
        2
    } else {
        1
    };
    assert_eq!(
        apply.shell.matches(" &\n").count(),
        instances,
        "{}",
        apply.shell
    );
    assert!(apply.shell.contains("--listen 127.0.0.1:"));
    assert!(apply.shell.contains("echo "), "the knob is in the script");
    assert_eq!(apply.dropins.len(), instances);
    assert!(apply.dropins[0].1.contains("[Service]"));

    // A new run with a budget of 6 trials: 4 race trials and the confirmation's 2 fit, a
    // second round would not, so the race ends after round 1 and says so.
    let mut budgeted = RunOptions::new(opts.store.clone());
    budgeted.knob_fs = Fs::at(&knobs);
    budgeted.budget = Some(Budget::Trials(6));
    let b = run_study(&study, &topo, &budgeted).unwrap();
    assert_eq!(b.summary.rounds, 1, "{:?}", b.summary);
    let race = store
        .trials(b.run)
        .unwrap()
        .iter()
        .filter(|t| t.phase == TrialPhase::Race)
        .count();
    assert_eq!(race, 4);
    assert!(b.summary.trials_run <= 6, "{:?}", b.summary);
    assert!(
        b.summary
            .warnings
            .iter()
            .any(|w| w.contains("ended at its budget (run.budget 6 trials")
                && w.contains("after round 1")),
        "{:?}",
        b.summary.warnings
    );
    assert_eq!(read_knob(&Fs::at(&knobs), rel).unwrap(), "60");

    // The scaling mode: a sweep of users with the points a capacity model takes.
    let sc = run_scaling(&study, &topo, &opts, &study.scaling.users).unwrap();
    assert_eq!(sc.points.len(), 2, "{:?}", sc.failed);
    assert_eq!(sc.points[1].users, 4);
    assert!(
        sc.points
            .iter()
            .all(|p| p.throughput > 0.0 && p.response_time_s.is_some())
    );
    assert!(sc.saturation_users.is_some() && sc.knee_users.is_some());
    let toml = sc.model_toml(0.0);
    assert_eq!(toml.matches("[[measurements]]").count(), 2);
    assert!(toml.contains("clients = 4"));
    assert_eq!(read_knob(&Fs::at(&knobs), rel).unwrap(), "60");
}

#[test]
fn saturation_and_knee_on_a_known_curve() {
    use perfpilot_study::scale::{ScalePoint, saturation_and_knee};
    // X = min(N, 10) per second (1 s demand... saturating at 10), R = N / X.
    let points: Vec<ScalePoint> = [1usize, 2, 5, 10, 20, 40]
        .iter()
        .map(|&n| {
            let x = (n as f64).min(10.0);
            ScalePoint {
                users: n,
                throughput: x,
                response_time_s: Some(n as f64 / x),
                p99_ms: None,
                errors: 0,
                cpu: Default::default(),
                driver_cores: None,
            }
        })
        .collect();
    let (sat, knee) = saturation_and_knee(&points);
    assert_eq!(sat, Some(10));
    // Power X/R = N for N ≤ 10 and 100/N after: the knee is at 10.
    assert_eq!(knee, Some(10));
}

#[test]
fn the_driver_counts_as_saturated_from_90_percent_of_its_threads() {
    use perfpilot_study::trial::{TrialDetail, driver_saturation};
    let study = |load: &str| {
        Study::parse(
            &format!(
                r#"
[deployment]
command = "app --port {{port}}"
[load]
{load}
[factors]
instances = [1]
"#
            ),
            Path::new("t.toml"),
        )
        .unwrap()
    };
    let detail = |cores: Option<f64>| TrialDetail {
        driver_cores: cores,
        ..TrialDetail::default()
    };
    let one = study(r#"url = "http://127.0.0.1:{port}/""#);
    let two = study("url = \"http://127.0.0.1:{port}/\"\nthreads = 2");
    let why = driver_saturation(&one, &detail(Some(0.95))).expect("0.95 of 1 thread");
    assert!(
        why.contains("0.95 cores") && why.contains("load.threads"),
        "{why}"
    );
    assert_eq!(driver_saturation(&one, &detail(Some(0.85))), None);
    assert_eq!(
        driver_saturation(&two, &detail(Some(0.95))),
        None,
        "2 threads have room"
    );
    assert!(driver_saturation(&two, &detail(Some(1.9))).is_some());
    assert_eq!(driver_saturation(&one, &detail(None)), None, "not measured");
    // An adapter's driver is another program: nothing is judged.
    let adapter = study(r#"command = "wrk -c {users} {targets}""#);
    assert_eq!(driver_saturation(&adapter, &detail(Some(1.0))), None);
}
