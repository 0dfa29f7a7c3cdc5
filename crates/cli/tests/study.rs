//! `perfpilot study validate` on the examples and on a bad study file; what validate and run
//! find missing before a run; a run whose every trial fails.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn perfpilot(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_perfpilot"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

/// A fresh directory under the temporary directory, removed when dropped; `name` tells the
/// tests of one process apart.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let d =
            std::env::temp_dir().join(format!("perfpilot-study-cli-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A directory laid out as the repository for `scoring-quick.toml`: its request files and
/// stand-ins for the two release binaries it runs (validate only looks at them).
fn quick_workspace(name: &str) -> Scratch {
    let dir = Scratch::new(name);
    let scoring = dir.path().join("examples/scoring");
    std::fs::create_dir_all(&scoring).unwrap();
    for f in ["request.json", "requests.csv"] {
        std::fs::copy(repo().join("examples/scoring").join(f), scoring.join(f)).unwrap();
    }
    let bin = dir.path().join("target/release");
    std::fs::create_dir_all(&bin).unwrap();
    for b in ["scoring", "scoring-model"] {
        std::fs::write(bin.join(b), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(bin.join(b), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    dir
}

fn quick_example() -> String {
    repo()
        .join("examples/studies/scoring-quick.toml")
        .canonicalize()
        .unwrap()
        .display()
        .to_string()
}

#[test]
fn validate_prints_trials_and_duration() {
    let ws = quick_workspace("quick");
    let out = perfpilot(&["study", "validate", &quick_example()], ws.path());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("4 configuration(s)"), "{stdout}");
    assert!(stdout.contains("trials: at most 26"), "{stdout}");
    assert!(
        stdout.contains("estimated duration: at most 3m"),
        "{stdout}"
    );
}

#[test]
fn validate_names_file_line_and_field() {
    let dir = std::env::temp_dir().join(format!("perfpilot-study-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("bad.toml");
    std::fs::write(
        &f,
        "[deployment]\ncommand = \"app --port {port} --x {nope}\"\n[load]\nurl = \"http://127.0.0.1:{port}/\"\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_perfpilot"))
        .args(["study", "validate"])
        .arg(&f)
        .env("RUST_BACKTRACE", "1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("bad.toml:2: deployment.command: unknown placeholder {nope}"),
        "{stderr}"
    );
    // An input error is a message, not a backtrace, even with RUST_BACKTRACE set.
    assert!(!stderr.contains("backtrace"), "{stderr}");

    // Comparing runs a store does not hold names the store and the run. (`tunables -o` makes a
    // store without runs; a missing store is refused as nothing there, in tests/nothing_there.rs.)
    let state = dir.join("state");
    let made = Command::new(env!("CARGO_BIN_EXE_perfpilot"))
        .args(["tunables", "-o", "windows=4", "--state-dir"])
        .arg(&state)
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    let store = state.join("perfpilot.db");
    let out = Command::new(env!("CARGO_BIN_EXE_perfpilot"))
        .args(["study", "compare", "1", "2", "--store"])
        .arg(&store)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("perfpilot.db") && stderr.contains("run 1"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn validate_prints_an_iterated_search_s_space_and_plan_and_refuses_a_budget_too_small() {
    let dir = Scratch::new("iterated");
    let study = r#"[deployment]
command = "sh -c 'exec sleep 60' {threads} {gc} {gc_threads}"

[load]
command = "echo 1"

[parameters]
threads = { integer = [1, 64], log = true }
gc = { categorical = ["serial", "parallel"] }
gc_threads = { integer = [1, 8], when = "gc == 'parallel'" }

[search]
method = "iterated"
forbidden = ["threads * gc_threads > 64"]

[run]
budget = 200
baseline = { threads = 4, gc = "serial" }
"#;
    let f = dir.path().join("it.toml");
    std::fs::write(&f, study).unwrap();
    let out = perfpilot(&["study", "validate", "it.toml"], dir.path());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // 64 serial + parallel: 64 × 8 less the forbidden pairs (threads × gc_threads > 64).
    let parallel: usize = (1..=8usize)
        .map(|g| (1..=64usize).filter(|t| t * g <= 64).count())
        .sum();
    assert!(
        stdout.contains(&format!("a space of {} configurations", 64 + parallel)),
        "{stdout}"
    );
    assert!(
        stdout.contains("gc_threads: integer 1–8 when gc == 'parallel'"),
        "{stdout}"
    );
    assert!(
        stdout.contains("forbidden: threads * gc_threads > 64"),
        "{stdout}"
    );
    assert!(stdout.contains("iterations: 3 (elites kept 3"), "{stdout}");
    std::fs::write(&f, study.replace("budget = 200", "budget = 40")).unwrap();
    let out = perfpilot(&["study", "validate", "it.toml"], dir.path());
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("it.toml:17: run.budget: 40 trials are smaller than one iteration"),
        "{stderr}"
    );
}

#[test]
fn validate_fails_naming_each_program_a_run_would_miss() {
    // Run from a directory with the example's request files (read with the study file) but
    // not its binaries.
    let ws = quick_workspace("quick-missing");
    std::fs::remove_dir_all(ws.path().join("target")).unwrap();
    let out = perfpilot(&["study", "validate", &quick_example()], ws.path());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(!stdout.contains("is valid"), "{stdout}");
    assert!(
        stdout.contains("cannot run here as it stands: 2 error(s)"),
        "{stdout}"
    );
    for line in [
        "error: deployment.command: ",
        "target/release/scoring does not exist; build it first: cargo build --release --bin scoring",
        "error: deployment.setup[0]: ",
    ] {
        assert!(stdout.contains(line), "{line}: {stdout}");
    }
    // The plan is still printed: the errors are what this machine lacks, not the file.
    assert!(stdout.contains("trials: at most 26"), "{stdout}");
    assert!(
        stderr.contains("2 error(s) above: a run would fail"),
        "{stderr}"
    );
}

/// A study file in `dir` whose instance runs `command` (placeholders `{port}` and `{x}`).
fn study_file(dir: &Path, command: &str) -> PathBuf {
    let port = 30000 + (std::process::id() % 20000) as u16;
    let f = dir.join("s.toml");
    std::fs::write(
        &f,
        format!(
            r#"
[deployment]
command = "{command}"
base_port = {port}
[load]
url = "http://127.0.0.1:{{port}}/"
[factors]
x = [1, 2]
[run]
warmup = "1s"
measure = "1s"
repetitions = 2
min_rounds = 2
confirm_rounds = 1
cooldown = "0s"
"#
        ),
    )
    .unwrap();
    f
}

#[test]
fn run_refuses_to_start_when_a_program_is_missing() {
    let dir = Scratch::new("missing");
    let f = study_file(dir.path(), "./not-built/app --port {port} --x {x}");
    let store = dir.path().join("s.db");
    let out = perfpilot(
        &[
            "study",
            "run",
            &f.display().to_string(),
            "--store",
            &store.display().to_string(),
        ],
        dir.path(),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("error: deployment.command: ")
            && stderr.contains("not-built/app does not exist"),
        "{stderr}"
    );
    assert!(
        stderr.contains("1 error(s) above: nothing was started"),
        "{stderr}"
    );
    assert!(!store.exists(), "no run was begun in the store");
}

#[test]
fn a_run_whose_every_trial_fails_exits_1_and_is_marked_failed() {
    let dir = Scratch::new("failing");
    // The program exists (preflight passes); every instance exits before it is ready.
    let f = study_file(
        dir.path(),
        "sh -c 'echo cannot load the models {x} >&2; exit 3'",
    );
    let store = dir.path().join("s.db");
    let store_arg = store.display().to_string();
    let out = perfpilot(
        &[
            "study",
            "run",
            &f.display().to_string(),
            "--store",
            &store_arg,
        ],
        dir.path(),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(
        stderr.contains("study run 1 failed: none of its 4 trials completed (4 failed"),
        "{stderr}"
    );
    // The first failure's tail: the instance's own stderr.
    assert!(
        stderr.contains("exited (exit status: 3); its stderr ends: cannot load the models"),
        "{stderr}"
    );
    // Nothing that pretends the run found something.
    for claim in [
        "raced:",
        "not significantly different",
        "best:",
        "no winner",
    ] {
        assert!(!stdout.contains(claim), "{claim}: {stdout}");
    }
    // stderr is not a terminal here: a progress line per round instead of a hidden bar.
    assert!(
        stderr.contains("progress: race round 1 of at most 2 done: 2/")
            && stderr.contains("progress: race round 2 of at most 2 done: 4/"),
        "{stderr}"
    );
    let list = perfpilot(&["study", "list", "--store", &store_arg], dir.path());
    let listed = String::from_utf8_lossy(&list.stdout);
    assert!(listed.contains("failed"), "{listed}");

    // Its report says there is no winner and writes no apply script.
    let apply = dir.path().join("apply");
    let out = perfpilot(
        &[
            "study",
            "report",
            "1",
            "--store",
            &store_arg,
            "--apply",
            &apply.display().to_string(),
        ],
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(!apply.exists());
    // --force only means something with --apply.
    let out = perfpilot(
        &["study", "report", "1", "--store", &store_arg, "--force"],
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(2), "a usage error");
}

#[test]
fn a_load_sweep_whose_every_point_fails_exits_1_and_is_marked_failed() {
    let dir = Scratch::new("failing-scale");
    let f = study_file(
        dir.path(),
        "sh -c 'echo cannot load the models {x} >&2; exit 3'",
    );
    let store = dir.path().join("s.db");
    let store_arg = store.display().to_string();
    let out = perfpilot(
        &[
            "study",
            "scale",
            &f.display().to_string(),
            "--users",
            "1,2",
            "--store",
            &store_arg,
        ],
        dir.path(),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "study run 1 failed: none of its 2 load points completed; the first (1 users) failed"
        ) && stderr.contains("cannot load the models"),
        "{stderr}"
    );
    let list = perfpilot(&["study", "list", "--store", &store_arg], dir.path());
    let listed = String::from_utf8_lossy(&list.stdout);
    assert!(listed.contains("failed"), "{listed}");
}
