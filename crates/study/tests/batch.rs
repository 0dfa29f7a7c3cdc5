//! Batch studies (`[load] kind = "batch"`): a trial runs the command to completion and is
//! measured by its elapsed time, CPU time and job logs; a batch that fails or hangs fails its
//! trial with its output's tail and the run goes on; the study file's batch rules are checked.

use std::path::Path;

use perfpilot_observe::{Fs, Topology};
use perfpilot_store::{Store, TrialStatus};
use perfpilot_study::report::{build, to_markdown};
use perfpilot_study::{RunOptions, Study, run_study};

/// A batch script: `MODE` ok (busy for a moment, then a job log line per job), fail, or hang.
const SCRIPT: &str = r#"
mode=$1; log=$2; naps=$3
case $mode in
  fail) echo "step 1 done"; echo "ERROR: table WORK.SALES not found" >&2; exit 3 ;;
  hang) echo "waiting for a lock"; sleep 60 ;;
esac
i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done
sleep "$naps"
printf '{"session":0,"job":"sort","status":"ok","real_s":%s,"user_s":0.2,"sys_s":0.05,"read_bytes":1048576,"written_bytes":2097152}\n' "$naps" > "$log"
printf '{"session":0,"job":"fit","status":"ok","real_s":0.3,"user_s":0.3,"sys_s":0.0,"read_bytes":0,"written_bytes":0}\n' >> "$log"
"#;

fn study(dir: &Path, factors: &str, goal: &str) -> Study {
    let script = dir.join("batch.sh");
    std::fs::write(&script, SCRIPT).unwrap();
    let text = format!(
        r#"
[deployment]
command = "sh {script} {{mode}} {dir}/jobs-{{instance}}-{{mode}}.jsonl {{naps}}"
[load]
kind = "batch"
timeout = "2s"
jobs = "{dir}/jobs-{{instance}}-{{mode}}.jsonl"
[objective]
goal = "{goal}"
[factors]
{factors}
[run]
repetitions = 2
min_rounds = 2
racing = false
cooldown = "0s"
confirm_rounds = 1
"#,
        script = script.display(),
        dir = dir.display(),
    );
    Study::parse(&text, Path::new("batch.toml")).unwrap()
}

#[test]
fn a_batch_study_ranks_configurations_by_elapsed_time_and_reports_each_job() {
    let dir = tempfile::tempdir().unwrap();
    let s = study(
        dir.path(),
        "mode = [\"ok\"]\nnaps = [\"0.6\", \"0.05\"]",
        "minimize elapsed",
    );
    let topo = Topology::read(&Fs::live()).unwrap();
    let opts = RunOptions::new(dir.path().join("s.db"));
    let out = run_study(&s, &topo, &opts).unwrap();
    assert_eq!(
        out.summary.winner.as_deref(),
        Some("mode=ok naps=0.05"),
        "{:?}",
        out.summary
    );
    let store = Store::open(&opts.store).unwrap();
    let trials = store.trials(out.run).unwrap();
    assert!(
        trials.iter().all(|t| t.status == TrialStatus::Ok),
        "{trials:?}"
    );
    for t in &trials {
        let m = perfpilot_drive::Measurement::from_json(t.measurement.as_deref().unwrap()).unwrap();
        let elapsed = m.extra["elapsed_s"];
        let naps: f64 = if t.config.contains("0.6") { 0.6 } else { 0.05 };
        assert!(elapsed >= naps, "{} took {elapsed} s", t.config);
        assert_eq!(t.value, Some(elapsed));
        // The shell's loop used CPU, counted from the batch's own processes.
        assert!(m.extra["cpu_s"] > 0.0, "{:?}", m.extra);
        // Core-equivalent CPU is at most the plain CPU (equal without SMT).
        assert!(
            m.extra["core_cpu_s"] <= m.extra["cpu_s"] + 1e-9,
            "{:?}",
            m.extra
        );
        assert_eq!(m.ok, 2, "two jobs in the log");
        assert!((m.extra["read_mib"] - 1.0).abs() < 1e-9);
    }
    let md = to_markdown(&build(&store, out.run).unwrap());
    assert!(md.contains("## Job times"), "{md}");
    assert!(md.contains("## Batch totals"), "{md}");
    assert!(md.contains("| mode=ok naps=0.6 | 2 |"), "{md}");
    assert!(md.contains("| mode=ok naps=0.6 | sort |"), "{md}");
    assert!(md.contains("| 0.60 | 0.20 | 0.05 | 1.0 | 2.0 |"), "{md}");
}

#[test]
fn a_failing_or_hanging_batch_fails_its_trial_with_its_output_and_the_run_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let s = study(
        dir.path(),
        "mode = [\"ok\", \"fail\", \"hang\"]\nnaps = [\"0.05\"]",
        "minimize cpu time",
    );
    let topo = Topology::read(&Fs::live()).unwrap();
    let opts = RunOptions::new(dir.path().join("s.db"));
    let out = run_study(&s, &topo, &opts).unwrap();
    assert_eq!(out.summary.winner.as_deref(), Some("mode=ok naps=0.05"));
    let store = Store::open(&opts.store).unwrap();
    let trials = store.trials(out.run).unwrap();
    let fail = trials
        .iter()
        .find(|t| t.config.contains("mode=fail"))
        .unwrap();
    assert_eq!(fail.status, TrialStatus::Failed);
    assert!(
        fail.reason.contains("exited with exit status: 3")
            && fail.reason.contains("ERROR: table WORK.SALES not found"),
        "{}",
        fail.reason
    );
    let hang = trials
        .iter()
        .find(|t| t.config.contains("mode=hang"))
        .unwrap();
    assert_eq!(hang.status, TrialStatus::Failed);
    assert!(
        hang.reason
            .contains("did not finish within its timeout of 2")
            && hang.reason.contains("waiting for a lock"),
        "{}",
        hang.reason
    );
    // The hanging batch's shell and its sleep were killed with their process group.
    let ps = std::process::Command::new("pgrep")
        .args(["-f", &format!("{}/batch.sh hang", dir.path().display())])
        .output()
        .unwrap();
    assert!(ps.stdout.is_empty(), "left running: {:?}", ps);
}

fn parse_err(body: &str) -> String {
    let text = format!("[deployment]\ncommand = \"batchmix --dir /tmp/x\"\n{body}");
    Study::parse(&text, Path::new("bad.toml"))
        .unwrap_err()
        .to_string()
}

#[test]
fn batch_rules_of_the_study_file_are_checked_with_the_line_and_field() {
    let e = parse_err("[load]\nkind = \"batch\"\nurl = \"http://127.0.0.1:{port}/\"\n");
    assert!(e.contains("load.url") && e.contains("to completion"), "{e}");
    let e = parse_err("[load]\nkind = \"batch\"\n[objective]\ngoal = \"maximize mb/s\"\n");
    assert!(
        e.contains("objective.goal") && e.contains("load.jobs"),
        "{e}"
    );
    let e = parse_err("[load]\nkind = \"batch\"\n[objective]\ngoal = \"maximize throughput\"\n");
    assert!(e.contains("minimize elapsed"), "{e}");
    let e = parse_err(
        "[load]\nurl = \"http://127.0.0.1:{port}/\"\n[objective]\ngoal = \"minimize elapsed\"\n",
    );
    assert!(e.contains("add kind = \"batch\""), "{e}");
    let e = parse_err("[load]\nkind = \"batches\"\n");
    assert!(e.contains("load.kind") && e.contains("\"batches\""), "{e}");
    let e = parse_err("[load]\nkind = \"batch\"\njobs = \"{mount}/logs/jobs.jsonl\"\n");
    assert!(e.contains("add a [storage] section"), "{e}");
    let ok = Study::parse(
        "[deployment]\ncommand = \"batchmix --dir /tmp/x\"\n[load]\nkind = \"batch\"\n",
        Path::new("ok.toml"),
    )
    .unwrap();
    assert_eq!(ok.objective.goal, perfpilot_study::Goal::MinElapsed);
}
