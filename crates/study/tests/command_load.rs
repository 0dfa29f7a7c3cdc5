//! A study whose load is an adapter command: the number it prints is the trial's value, and
//! the trial completes although an adapter reports no request counts.

use perfpilot_observe::{Fs, Topology};
use perfpilot_study::{RunOptions, Study, run_study};

#[test]
fn an_adapter_commands_number_decides_the_race() {
    let dir = tempfile::tempdir().unwrap();
    let port = 21000 + (std::process::id() % 20000) as u16;
    // Any process that listens will do as the deployment; python3's file server is one.
    let text = format!(
        r#"
name = "adapter"

[deployment]
command = "python3 -m http.server {{port}} --bind 127.0.0.1 --directory {dir}"
base_port = {port}

[load]
command = "echo served {{x}}000.5 requests/s"

[objective]
goal = "maximize throughput"

[factors]
x = [1, 3]

[run]
warmup = "0s"
measure = "1s"
repetitions = 2
min_rounds = 2
confirm_rounds = 1
cooldown = "0s"
"#,
        dir = dir.path().display()
    );
    let file = dir.path().join("adapter.toml");
    std::fs::write(&file, &text).unwrap();
    let study = Study::load(&file).unwrap();
    let topo = Topology::read(&Fs::live()).unwrap();
    let opts = RunOptions::new(dir.path().join("study.db"));
    let out = run_study(&study, &topo, &opts).unwrap();
    let s = &out.summary;
    assert_eq!(s.winner.as_deref(), Some("x=3"), "{s:?}");
    let best = s
        .configurations
        .iter()
        .find(|c| c.config == "x=3")
        .expect("x=3 summarized");
    assert_eq!(best.mean, Some(3000.5), "{best:?}");
}
