//! A run whose command does not exist: every trial fails, so the run fails — an error naming
//! the first failure, the run marked failed in the store, and nothing said to be "not
//! significantly different" from a winner there is not.

use std::path::Path;

use perfpilot_observe::{Fs, Topology};
use perfpilot_store::{RunState, Store, TrialStatus};
use perfpilot_study::{RunOptions, Study, StudyError, Summary, run_study};

#[test]
fn a_run_whose_command_does_not_exist_fails_and_is_stored_as_failed() {
    let dir = tempfile::tempdir().unwrap();
    let port = 30000 + (std::process::id() % 20000) as u16;
    let text = format!(
        r#"
[deployment]
command = "{missing} --port {{port}} --x {{x}}"
base_port = {port}
[load]
url = "http://127.0.0.1:{{port}}/"
[factors]
x = [1, 2, 3]
[run]
warmup = "1s"
measure = "1s"
repetitions = 3
min_rounds = 3
cooldown = "0s"
"#,
        missing = dir.path().join("not-built/app").display()
    );
    let study = Study::parse(&text, Path::new("missing.toml")).unwrap();
    let topo = Topology::read(&Fs::live()).unwrap();
    let opts = RunOptions::new(dir.path().join("s.db"));

    let e = run_study(&study, &topo, &opts).unwrap_err();
    let StudyError::NoTrialCompleted { run, why, .. } = &e else {
        panic!("a run without a completed trial is an error of its own: {e}");
    };
    let msg = e.to_string();
    // x=2 and x=3 leave after failing in rounds 1 and 2, which ends the race: 6 trials.
    assert!(
        why.starts_with("none of its 6 trials completed (6 failed, 0 broke a constraint"),
        "{msg}"
    );
    assert!(
        msg.contains("the first, race round 1 of x=")
            && msg.contains("cannot start")
            && msg.contains("not-built/app"),
        "the first failure's reason: {msg}"
    );
    assert!(
        msg.contains("perfpilot study validate"),
        "what to do: {msg}"
    );

    let store = Store::open(&opts.store).unwrap();
    let rec = store.study(*run).unwrap().unwrap();
    assert_eq!(rec.state, RunState::Failed);
    assert!(
        store
            .trials(*run)
            .unwrap()
            .iter()
            .all(|t| t.status == TrialStatus::Failed)
    );
    // What it saw is kept, without a winner and without anything "not different" from one.
    let summary: Summary = serde_json::from_str(rec.summary.as_deref().unwrap()).unwrap();
    assert_eq!(summary.winner, None);
    assert!(summary.indistinguishable.is_empty(), "{summary:?}");
    assert!(
        summary
            .verdict
            .starts_with("none of its 6 trials completed")
    );
}
