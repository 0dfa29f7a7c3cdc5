//! Study-file validation: every bad input is named by file, line and field.

use std::path::Path;

use perfpilot_study::{Binding, Level, Study, StudyError};

const GOOD: &str = r#"
name = "t"

[deployment]
command = "app --port {port} --threads {cpus} --cache {cache}"
env = { MALLOC_ARENA_MAX = "{arenas}" }
ready = { http = "http://127.0.0.1:{port}/health", timeout = "5s" }

[load]
url = "http://127.0.0.1:{port}/"
users_per_instance = 2

[objective]
goal = "minimize latency p95"
constraints = ["errors < 0.1%"]

[factors]
instances = [1, 2]
binding = ["none", "cores"]
cache = [2, 100]
arenas = [1, 4]

[run]
warmup = "1s"
measure = "2s"
repetitions = 3
baseline = { binding = "cores" }
"#;

fn parse(text: &str) -> Result<Study, StudyError> {
    Study::parse(text, Path::new("bad.toml"))
}

/// The error's message, which must name the file.
fn error(text: &str) -> String {
    let e = parse(text).expect_err("the study should be rejected");
    let s = e.to_string();
    assert!(s.starts_with("bad.toml"), "{s}");
    s
}

#[test]
fn a_good_study_parses() {
    let s = parse(GOOD).unwrap();
    assert_eq!(s.name, "t");
    let names: Vec<&str> = s.factors.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["instances", "binding", "cache", "arenas"]);
    assert_eq!(s.configurations().len(), 16);
    assert_eq!(s.run.baseline.binding(), Binding::Cores);
    assert_eq!(s.run.baseline.get("cache"), Some(&Level::Int(2)));
    assert_eq!(s.run.repetitions, 3);
    assert_eq!(
        s.objective.goal,
        perfpilot_study::Goal::MinLatency("p95".into())
    );
}

#[test]
fn unknown_placeholder_names_line_and_field() {
    let bad = GOOD.replace("--cache {cache}", "--cache {cahce}");
    let e = error(&bad);
    assert!(e.starts_with("bad.toml:5: deployment.command:"), "{e}");
    assert!(e.contains("unknown placeholder {cahce}"), "{e}");
    assert!(
        e.contains("{cache}"),
        "the known placeholders are listed: {e}"
    );
}

#[test]
fn unknown_placeholder_in_env_and_url() {
    let e = error(&GOOD.replace("\"{arenas}\"", "\"{arena}\""));
    assert!(e.contains(":6: deployment.env.MALLOC_ARENA_MAX"), "{e}");
    let e = error(&GOOD.replace(
        "url = \"http://127.0.0.1:{port}/\"",
        "url = \"http://127.0.0.1:{prot}/\"",
    ));
    assert!(e.contains(":10: load.url"), "{e}");
}

#[test]
fn level_of_the_wrong_type() {
    let e = error(&GOOD.replace("instances = [1, 2]", "instances = [1, \"two\"]"));
    assert!(
        e.contains(":18: factors.instances: level 2 (\"two\")"),
        "{e}"
    );
    assert!(e.contains("positive integers"), "{e}");
    let e = error(&GOOD.replace("cache = [2, 100]", "cache = [2, \"big\"]"));
    assert!(e.contains(":20: factors.cache"), "{e}");
    assert!(
        e.contains("is a string but the first level is an integer"),
        "{e}"
    );
    let e = error(&GOOD.replace(
        "binding = [\"none\", \"cores\"]",
        "binding = [\"none\", \"socket\"]",
    ));
    assert!(e.contains(":19: factors.binding"), "{e}");
    let e = error(&GOOD.replace("instances = [1, 2]", "instances = [0, 2]"));
    assert!(e.contains("must be at least 1"), "{e}");
}

#[test]
fn unknown_allocator_and_missing_library() {
    let with = GOOD.replace(
        "arenas = [1, 4]",
        "arenas = [1, 4]\nallocator = [\"system\", \"hoard\"]",
    );
    let e = error(&with);
    assert!(e.contains("factors.allocator"), "{e}");
    assert!(e.contains("no library for allocator \"hoard\""), "{e}");
    let with = GOOD.replace("arenas = [1, 4]", "arenas = [1, 4]\nallocator = [\"system\", \"mine\"]\n[allocators]\nmine = \"/nonexistent/libmine.so\"");
    let e = error(&with);
    assert!(e.contains("/nonexistent/libmine.so does not exist"), "{e}");
}

#[test]
fn baseline_must_name_levels() {
    let e = error(&GOOD.replace(
        "baseline = { binding = \"cores\" }",
        "baseline = { binding = \"llc\" }",
    ));
    assert!(e.contains(":27: run.baseline.binding"), "{e}");
    let e = error(&GOOD.replace(
        "baseline = { binding = \"cores\" }",
        "baseline = { threads = 4 }",
    ));
    assert!(e.contains("\"threads\" is not a factor"), "{e}");
}

#[test]
fn bad_objective_constraint_and_durations() {
    let e = error(&GOOD.replace("minimize latency p95", "minimize latency p42"));
    assert!(e.contains(":14: objective.goal"), "{e}");
    let e = error(&GOOD.replace("errors < 0.1%", "errors << 0.1%"));
    assert!(e.contains(":15: objective.constraints"), "{e}");
    let e = error(&GOOD.replace("measure = \"2s\"", "measure = \"soon\""));
    assert!(e.contains(":25: run.measure"), "{e}");
    let e = error(&GOOD.replace("repetitions = 3", "repetitions = 0"));
    assert!(e.contains(":26: run.repetitions"), "{e}");
}

#[test]
fn syntax_and_unknown_fields_carry_toml_positions() {
    let e = error(&GOOD.replace("users_per_instance = 2", "users_per_instance = 2\nuser = 3"));
    assert!(e.contains("unknown field `user`"), "{e}");
    assert!(e.contains("line 12"), "{e}");
    let e = error(&GOOD.replace("users_per_instance = 2", "users_per_instance = \"two\""));
    assert!(e.contains("line 11"), "{e}");
}

#[test]
fn knob_paths_and_load_choice() {
    let e = error(&GOOD.replace(
        "[load]",
        "[[deployment.knobs]]\npath = \"/etc/passwd\"\nvalue = \"x\"\n\n[load]",
    ));
    assert!(e.contains("deployment.knobs[0]"), "{e}");
    assert!(e.contains("under /sys or /proc"), "{e}");
    let e = error(&GOOD.replace(
        "users_per_instance = 2",
        "users_per_instance = 2\ncommand = \"wrk {targets}\"",
    ));
    assert!(e.contains("either url"), "{e}");
    let e = error(&GOOD.replace("command = \"app", "command = \"'app"));
    assert!(
        e.contains("deployment.command: a quote is not closed"),
        "{e}"
    );
}

#[test]
fn read_errors_name_the_file() {
    let e = Study::load(Path::new("/nonexistent/study.toml")).unwrap_err();
    assert!(e.to_string().contains("/nonexistent/study.toml"), "{e}");
}

#[test]
fn the_examples_are_valid() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    // Relative paths in the examples (body_file, data) are relative to the repository root.
    std::env::set_current_dir(&root).unwrap();
    for f in [
        "examples/studies/scoring-quick.toml",
        "examples/studies/scoring-spss.toml",
        "examples/studies/filestore-users.toml",
    ] {
        match Study::load(Path::new(f)) {
            Ok(s) => assert!(!s.configurations().is_empty()),
            // jemalloc may be missing on a machine without libjemalloc2.
            Err(e) => assert!(e.to_string().contains("libjemalloc"), "{f}: {e}"),
        }
    }
}

#[test]
fn templates_render_with_escapes_and_name_their_placeholders() {
    use perfpilot_study::spec::{placeholders, render};
    let mut v = std::collections::BTreeMap::new();
    v.insert("port".to_string(), "8080".to_string());
    assert_eq!(render("a:{port} {{x}} {other}", &v), "a:8080 {x} {other}");
    assert_eq!(placeholders("{a} {{b}} { c }").unwrap(), ["a", "c"]);
    assert!(placeholders("{a").is_err());
}

#[test]
fn racing_shares_default_and_are_range_checked() {
    let s = parse(GOOD).unwrap();
    assert_eq!(s.run.far_behind, perfpilot_study::spec::DEFAULT_FAR_BEHIND);
    assert_eq!(s.run.min_chance, perfpilot_study::spec::DEFAULT_MIN_CHANCE);
    assert_eq!(s.run.futility, 0.0);
    assert_eq!(s.run.stop_loss, perfpilot_study::spec::DEFAULT_STOP_LOSS);
    let with = |line: &str| GOOD.replace("repetitions = 3", &format!("repetitions = 3\n{line}"));
    let s = parse(&with("far_behind = 0")).unwrap();
    assert_eq!(s.run.far_behind, 0.0);
    let s = parse(&with("stop_loss = 0.01")).unwrap();
    assert_eq!(s.run.stop_loss, 0.01);
    assert_eq!(s.run.budget, None);
    let s = parse(&with("budget = 120")).unwrap();
    assert_eq!(s.run.budget, Some(perfpilot_study::Budget::Trials(120)));
    let s = parse(&with("budget = \"50%\"")).unwrap();
    assert_eq!(s.run.budget, Some(perfpilot_study::Budget::Share(0.5)));
    assert_eq!(s.run.budget.unwrap().trials(230), 115);
    for line in [
        "budget = 0",
        "budget = -3",
        "budget = \"150%\"",
        "budget = \"half\"",
        "budget = true",
    ] {
        let e = error(&with(line));
        assert!(
            e.contains(":27: run.budget") && e.contains("a share of an exhaustive run"),
            "{line}: {e}"
        );
    }
    for (line, field) in [
        ("stop_loss = 0.5", "run.stop_loss"),
        ("far_behind = 1.0", "run.far_behind"),
        ("far_behind = -0.1", "run.far_behind"),
        ("min_chance = 0.5", "run.min_chance"),
        ("futility = 1.5", "run.futility"),
    ] {
        let e = error(&with(line));
        assert!(
            e.contains(&format!(":27: {field}")) && e.contains("below"),
            "{line}: {e}"
        );
    }
}
