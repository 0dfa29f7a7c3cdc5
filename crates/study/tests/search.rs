//! Typed parameters, conditions, forbidden rules and iterated racing: bad input is named by
//! line and field, the space's size is counted, a grid lists its configurations under the
//! conditions and rules, and an iterated search runs through the runner within its budget,
//! its configurations in the space, reproducibly for a seed.

use std::path::Path;
use std::sync::Arc;

use perfpilot_observe::{Fs, Topology};
use perfpilot_store::{Store, TrialPhase};
use perfpilot_study::runner::TrialSource;
use perfpilot_study::spec::{Level, NotInSpace, SpaceSize};
use perfpilot_study::surface::{self, Surface};
use perfpilot_study::trial::{TrialDetail, TrialOutcome};
use perfpilot_study::{Config, RunOptions, Study, StudyError, run_study};

const SPACE: &str = r#"name = "s"

[deployment]
command = "app --threads {threads} --ratio {ratio} --gc {gc} --gc-threads {gc_threads}"

[load]
command = "echo 1"

[parameters]
threads = { integer = [1, 64], log = true }
ratio = { real = [0.1, 10.0], log = true, digits = 3 }
gc = { categorical = ["serial", "parallel"] }
gc_threads = { integer = [1, 8], when = "gc == 'parallel'" }

[search]
method = "iterated"
forbidden = ["threads * gc_threads > 128"]
initial = [{ threads = 8, gc = "parallel", gc_threads = 2 }]

[run]
budget = 300
baseline = { threads = 4, ratio = 1.0, gc = "serial" }
"#;

fn parse(text: &str) -> Result<Study, StudyError> {
    Study::parse(text, Path::new("bad.toml"))
}

/// The error's message, which must name the file.
fn error(text: &str) -> String {
    let e = parse(text).expect_err("the study should be rejected");
    let s = e.to_string();
    assert!(s.starts_with("bad.toml:"), "{s}");
    s
}

#[test]
fn a_typed_space_parses_with_its_conditions_rules_and_initial_configurations() {
    let s = parse(SPACE).unwrap();
    let names: Vec<&str> = s.factors.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["threads", "ratio", "gc", "gc_threads"]);
    assert_eq!(s.search.forbidden.len(), 1);
    // The initial configuration takes the baseline's ratio; gc_threads is active.
    assert_eq!(
        s.search.initial[0].key(),
        "threads=8 ratio=1 gc=parallel gc_threads=2"
    );
    // The baseline leaves gc_threads out: its condition is false.
    assert_eq!(s.run.baseline.get("gc_threads"), None);
    assert!(matches!(s.space().size(), SpaceSize::Unbounded { .. }));
    let sched = s.schedule();
    // Four parameters: 2 + log2(4) = 4 iterations, 4 elites.
    assert_eq!(
        (sched.iterations, sched.elites, sched.first_test),
        (4, 4, 5)
    );
}

#[test]
fn bad_ranges_name_their_line_and_field() {
    let e = error(&SPACE.replace("integer = [1, 64], log", "integer = [64, 1], log"));
    assert!(
        e.starts_with("bad.toml:10: parameters.threads.integer: min 64 is above max 1"),
        "{e}"
    );
    let e = error(&SPACE.replace("real = [0.1, 10.0]", "real = [0.0, 10.0]"));
    assert!(
        e.starts_with("bad.toml:11: parameters.ratio.real: a log scale needs a range above 0"),
        "{e}"
    );
    let e = error(&SPACE.replace("real = [0.1, 10.0]", "real = [-1, 10.0]"));
    assert!(e.contains("reaches below 0"), "{e}");
    let e = error(&SPACE.replace("integer = [1, 64], log = true", "integer = [1.5, 64]"));
    assert!(e.contains("an integer range takes integers"), "{e}");
    let e = error(&SPACE.replace("digits = 3", "digits = 0"));
    assert!(
        e.starts_with("bad.toml:11: parameters.ratio.digits:"),
        "{e}"
    );
    let e = error(&SPACE.replace("gc = { categorical", "gc = { ordinal = [1], categorical"));
    assert!(e.contains("gives both"), "{e}");
    let e = error(&SPACE.replace("{ integer = [1, 8], when", "{ when"));
    assert!(
        e.contains("parameters.gc_threads: needs one of integer"),
        "{e}"
    );
    let e = error(&format!("{SPACE}\n[factors]\nthreads = [1, 2]\n"));
    assert!(e.contains("threads is in [factors] too"), "{e}");
    let e = error(&SPACE.replace(
        "threads = { integer = [1, 64], log = true }",
        "instances = { integer = [0, 4] }\nthreads = { integer = [1, 64], log = true }",
    ));
    assert!(
        e.contains("parameters.instances.integer: 0: must be at least 1"),
        "{e}"
    );
}

#[test]
fn bad_conditions_name_the_parameter_and_their_line() {
    let e = error(&SPACE.replace("when = \"gc == 'parallel'\"", "when = \"runtime == 'jvm'\""));
    assert!(
        e.starts_with(
            "bad.toml:13: parameters.gc_threads.when: \"runtime\" is not a parameter of this study; known: gc, gc_threads, ratio, threads"
        ),
        "{e}"
    );
    let e = error(&SPACE.replace("when = \"gc == 'parallel'\"", "when = \"gc > 2\""));
    assert!(e.contains("orders numbers"), "{e}");
    let e = error(&SPACE.replace("when = \"gc == 'parallel'\"", "when = \"gc = 'x'\""));
    assert!(
        e.contains("parameters.gc_threads.when: unexpected '='"),
        "{e}"
    );
    // A cycle: gc waits for gc_threads, which waits for gc.
    let e = error(&SPACE.replace(
        "gc = { categorical = [\"serial\", \"parallel\"] }",
        "gc = { categorical = [\"serial\", \"parallel\"], when = \"gc_threads > 1\" }",
    ));
    assert!(e.contains("form a cycle"), "{e}");
    let e = error(&SPACE.replace("when = \"gc == 'parallel'\"", "when = \"gc_threads > 1\""));
    assert!(e.contains("names gc_threads itself"), "{e}");
}

#[test]
fn forbidden_rules_are_checked_and_one_that_forbids_everything_is_refused() {
    let e = error(&SPACE.replace(
        "forbidden = [\"threads * gc_threads > 128\"]",
        "forbidden = [\"threads * gc_threads > 128\", \"threads >= 1\"]",
    ));
    assert!(
        e.starts_with(
            "bad.toml:17: search.forbidden[1]: `threads >= 1` forbids every configuration of the space"
        ),
        "{e}"
    );
    let e = error(&SPACE.replace("threads * gc_threads > 128", "thread > 1"));
    assert!(
        e.starts_with("bad.toml:17: search.forbidden[0]: \"thread\" is not a parameter"),
        "{e}"
    );
    let e = error(&SPACE.replace("threads * gc_threads > 128", "gc"));
    assert!(e.contains("is a string, not a condition"), "{e}");
}

#[test]
fn a_budget_smaller_than_one_iteration_is_refused_saying_what_it_needs() {
    let e = error(&SPACE.replace("budget = 300", "budget = 50"));
    assert!(
        e.starts_with("bad.toml:21: run.budget: 50 trials are smaller than one iteration"),
        "{e}"
    );
    // 4 iterations × 5 configurations × (5 + 4) rounds + 6 for the confirmation.
    assert!(e.contains("give at least 186 trials"), "{e}");
    let e = error(&SPACE.replace("budget = 300\n", ""));
    assert!(
        e.contains("search.method: an iterated search stops on its budget"),
        "{e}"
    );
    let e = error(&SPACE.replace("budget = 300", "budget = \"10%\""));
    assert!(
        e.contains("a share of an exhaustive run means nothing"),
        "{e}"
    );
}

#[test]
fn initial_configurations_and_the_baseline_outside_the_space_are_refused() {
    let e = error(&SPACE.replace("threads = 8, gc", "threads = 128, gc"));
    assert!(
        e.starts_with(
            "bad.toml:18: search.initial[0].threads: 128 is outside its range (integer 1–64, log scale)"
        ),
        "{e}"
    );
    let e = error(&SPACE.replace(
        "{ threads = 8, gc = \"parallel\", gc_threads = 2 }",
        "{ threads = 8, gc = \"serial\", gc_threads = 2 }",
    ));
    assert!(
        e.contains("search.initial[0].gc_threads: gc_threads is inactive here"),
        "{e}"
    );
    let e = error(&SPACE.replace("gc_threads = 2 }", "gc_threads = 32 }"));
    assert!(
        e.contains("search.initial[0].gc_threads: 32 is outside its range (integer 1–8)"),
        "{e}"
    );
    let e = error(
        &SPACE
            .replace("threads = 8, gc", "threads = 64, gc")
            .replace("gc_threads = 2 }", "gc_threads = 4 }"),
    );
    assert!(
        e.contains("is forbidden by search.forbidden rule `threads * gc_threads > 128`"),
        "{e}"
    );
    let e = error(&SPACE.replace("baseline = { threads = 4, ", "baseline = { "));
    assert!(
        e.contains("run.baseline: give threads a value: a range (integer 1–64, log scale) has no first level"),
        "{e}"
    );
    let e = error(&SPACE.replace("ratio = 1.0", "ratio = 1.2345"));
    assert!(
        e.contains("run.baseline.ratio: 1.2345 is outside its range"),
        "{e}"
    );
}

#[test]
fn a_grid_lists_its_configurations_under_the_conditions_and_rules() {
    let text = SPACE
        .replace("method = \"iterated\"", "method = \"grid\"")
        .replace(
            "initial = [{ threads = 8, gc = \"parallel\", gc_threads = 2 }]\n",
            "",
        )
        .replace(
            "ratio = { real = [0.1, 10.0], log = true, digits = 3 }\n",
            "",
        )
        .replace("--ratio {ratio} ", "")
        .replace(
            "threads = { integer = [1, 64], log = true }",
            "threads = { ordinal = [1, 16, 64] }",
        )
        .replace("threads = 4, ratio = 1.0, ", "threads = 1, ")
        .replace("budget = 300\n", "");
    let s = parse(&text).unwrap();
    let keys: Vec<String> = s.configurations().iter().map(Config::key).collect();
    // 3 thread counts × (serial, or parallel with 1–8 GC threads), less threads × gc_threads
    // above 128: 64 × 3..8 (6 forbidden).
    assert_eq!(keys.len(), 3 * 9 - 6);
    assert_eq!(keys[0], "threads=1 gc=serial");
    assert_eq!(keys[1], "threads=1 gc=parallel gc_threads=1");
    assert!(!keys.contains(&"threads=64 gc=parallel gc_threads=3".to_string()));
    assert!(keys.contains(&"threads=64 gc=parallel gc_threads=2".to_string()));
    assert_eq!(s.space().size(), SpaceSize::Exact(21));
    // Each is in the space; an inactive parameter given is not.
    let space = s.space();
    assert!(s.configurations().iter().all(|c| space.check(c).is_ok()));
    let bad = Config(vec![
        ("threads".into(), Level::Int(1)),
        ("gc".into(), Level::Str("serial".into())),
        ("gc_threads".into(), Level::Int(2)),
    ]);
    let why = space.check(&bad).unwrap_err();
    assert!(
        matches!(&why, NotInSpace::Inactive { name, .. } if name == "gc_threads"),
        "{why:?}"
    );
    assert!(why.to_string().contains("its condition"), "{why}");
    // A grid over a real range cannot be listed.
    let e = error(
        &SPACE
            .replace("method = \"iterated\"", "method = \"grid\"")
            .replace(
                "initial = [{ threads = 8, gc = \"parallel\", gc_threads = 2 }]\n",
                "",
            ),
    );
    assert!(
        e.contains("parameters.ratio: a real range cannot be listed for a grid search"),
        "{e}"
    );
}

#[test]
fn a_large_space_is_counted_following_its_conditions_and_estimated_under_its_rules() {
    let text = SPACE
        .replace(
            "ratio = { real = [0.1, 10.0], log = true, digits = 3 }",
            "ratio = { integer = [1, 5000] }",
        )
        .replace("ratio = 1.0", "ratio = 1");
    let s = parse(&text).unwrap();
    match s.space().size() {
        SpaceSize::About {
            total,
            upper,
            allowed,
        } => {
            // 64 × 5000 × (1 + 8), counted; the rule forbids threads × gc_threads > 128.
            assert_eq!(total, 64 * 5000 * 9);
            assert!(!upper);
            assert!((0.5..1.0).contains(&allowed), "{allowed}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_inactive_parameter_renders_empty_in_templates() {
    let s = parse(SPACE).unwrap();
    let c = s.run.baseline.clone();
    let t = s.for_templates(&c);
    assert_eq!(t.get("gc_threads"), Some(&Level::Str(String::new())));
    let values = perfpilot_study::deploy::values_for(&t, 1, None);
    let line = perfpilot_study::spec::render(&s.deployment.command, &values);
    assert_eq!(line, "app --threads 4 --ratio 1 --gc serial --gc-threads ");
}

/// Trials computed from a smooth surface over `SPACE`: best near threads 16, ratio 2,
/// parallel GC with 4 threads.
#[derive(Debug)]
struct Smooth;

impl TrialSource for Smooth {
    fn trial(&self, c: &Config, _: TrialPhase, round: usize) -> TrialOutcome {
        let num = |n: &str| match c.get(n) {
            Some(Level::Int(i)) => *i as f64,
            Some(Level::Float(x)) => *x,
            _ => 1.0,
        };
        let t = num("threads").ln() - 16f64.ln();
        let r = num("ratio").ln() - 2f64.ln();
        let g = match c.get("gc") {
            Some(Level::Str(s)) if s == "parallel" => 1.0 - 0.02 * (num("gc_threads") - 4.0).abs(),
            _ => 0.9,
        };
        // A little deterministic noise per round and configuration.
        let wiggle = 1.0 + 0.01 * ((c.key().len() + round * 7) % 5) as f64;
        TrialOutcome {
            status: perfpilot_store::TrialStatus::Ok,
            reason: String::new(),
            value: Some(1000.0 * (-0.3 * t * t - 0.3 * r * r).exp() * g * wiggle),
            measurement: None,
            detail: TrialDetail::default(),
        }
    }
}

fn simulated_run(
    study: &Study,
    store: &Path,
    source: Arc<dyn TrialSource>,
) -> perfpilot_study::RunOutcome {
    let topo = Topology::read(&Fs::live()).unwrap();
    let mut opts = RunOptions::new(store.to_path_buf());
    opts.simulated = Some(source);
    run_study(study, &topo, &opts).unwrap()
}

/// The race trials of run 1 in `store`: (round, configuration, value).
fn race_trials(store: &Path) -> Vec<(i64, String, Option<f64>)> {
    Store::open(store)
        .unwrap()
        .trials(1)
        .unwrap()
        .into_iter()
        .filter(|t| t.phase == TrialPhase::Race)
        .map(|t| (t.round, t.config, t.value))
        .collect()
}

#[test]
fn an_iterated_search_runs_within_its_budget_in_the_space_and_a_seed_reproduces_it() {
    let dir = tempfile::tempdir().unwrap();
    let study = parse(SPACE).unwrap();
    let a = simulated_run(&study, &dir.path().join("a.db"), Arc::new(Smooth));
    let s = &a.summary;
    let search = s.search.as_ref().expect("an iterated search's summary");
    assert!(
        search.iterations.len() >= 4,
        "{:?}",
        search.iterations.len()
    );
    // Race and confirmation together within the budget.
    assert!(s.trials_run <= 300, "{}", s.trials_run);
    assert!(!s.confirmation.is_empty());
    // The first iteration races the baseline and the initial configuration.
    let first: Vec<(i64, String, Option<f64>)> = race_trials(&dir.path().join("a.db"));
    let in_round_1: Vec<&String> = first.iter().filter(|t| t.0 == 1).map(|t| &t.1).collect();
    assert!(in_round_1.contains(&&study.run.baseline.key()));
    assert!(in_round_1.contains(&&study.search.initial[0].key()));
    // Every configuration raced is in the space.
    let store = Store::open(dir.path().join("a.db")).unwrap();
    let space = study.space();
    for t in store.trials(1).unwrap() {
        let c: Config = serde_json::from_str(&t.factors).unwrap();
        assert_eq!(space.check(&c), Ok(()), "{c}");
    }
    // Later iterations draw around the elites: the winner is near the planted optimum.
    let w = s.winner.clone().unwrap();
    assert!(w.contains("gc=parallel"), "{w}");
    let threads: i64 = w
        .split(' ')
        .find_map(|p| p.strip_prefix("threads="))
        .and_then(|v| v.parse().ok())
        .unwrap();
    assert!((6..=40).contains(&threads), "{w}");
    // Each later iteration says how its sampling stood.
    assert!(
        search.iterations[1]
            .sampling
            .iter()
            .any(|p| p.parameter == "gc")
    );
    // The same seed: the same trials; another seed: others.
    simulated_run(&study, &dir.path().join("b.db"), Arc::new(Smooth));
    assert_eq!(first, race_trials(&dir.path().join("b.db")));
    let mut other = study.clone();
    other.run.seed = 2;
    simulated_run(&other, &dir.path().join("c.db"), Arc::new(Smooth));
    assert_ne!(first, race_trials(&dir.path().join("c.db")));
}

#[test]
fn the_known_answer_bed_is_a_valid_study_whose_search_gets_near_the_best() {
    let study = Study::parse(surface::STUDY, Path::new("known-answer.toml")).unwrap();
    let all = study.configurations();
    assert_eq!(all.len(), 2500);
    let best = all
        .iter()
        .max_by(|a, b| surface::truth(a).total_cmp(&surface::truth(b)))
        .unwrap();
    assert_eq!(
        best.key(),
        "instances=2 threads=5 cache_mb=512 gc=parallel gc_threads=2 malloc=jemalloc"
    );
    // One seed, through the runner: within 5 % of the best, within the budget.
    let dir = tempfile::tempdir().unwrap();
    let out = simulated_run(&study, &dir.path().join("k.db"), Arc::new(Surface::new(1)));
    let w = all
        .iter()
        .find(|c| Some(c.key()) == out.summary.winner)
        .unwrap();
    let share = surface::truth(w) / surface::truth(best);
    assert!(share > 0.95, "{w}: {share}");
    assert!(out.summary.trials_run <= 1250);
}

#[test]
fn an_iterated_search_ends_by_halving_its_elites_to_one_and_spends_its_budget() {
    let dir = tempfile::tempdir().unwrap();
    let study = parse(SPACE).unwrap();
    let out = simulated_run(&study, &dir.path().join("h.db"), Arc::new(Smooth));
    let s = &out.summary;
    let its = &s.search.as_ref().unwrap().iterations;
    let finals: Vec<_> = its
        .iter()
        .filter(|i| i.ended.starts_with("final selection"))
        .collect();
    assert!(!finals.is_empty(), "{its:?}");
    // The final phases come last, draw nothing new, and halve their candidates down to one:
    // the winner.
    let first = its.len() - finals.len();
    assert!(its[..first].iter().all(|i| !i.ended.starts_with("final")));
    for (a, b) in finals.iter().zip(finals.iter().skip(1)) {
        assert_eq!(b.raced, a.raced.div_ceil(2), "{a:?} then {b:?}");
    }
    for f in &finals {
        assert_eq!(f.new, 0);
        assert_eq!(f.elites.len(), f.raced.div_ceil(2));
        assert!(f.rounds.1 >= f.rounds.0, "{f:?}");
    }
    let last = finals.last().unwrap();
    assert_eq!(last.elites.len(), 1);
    assert_eq!(Some(&last.elites[0].0), s.winner.as_ref());
    // No stop leaves budget unspent: what is left is what the phases' rounds could not
    // divide among their candidates.
    let candidates: usize = finals.iter().map(|f| f.raced).sum();
    assert!(
        s.trials_run + candidates >= 300 && s.trials_run <= 300,
        "{} trials, {candidates} candidates",
        s.trials_run
    );
}

/// `Smooth`, stopping the run (as Ctrl-C does) after `after` trials.
#[derive(Debug)]
struct Stopping {
    stop: Arc<std::sync::atomic::AtomicBool>,
    count: std::sync::atomic::AtomicUsize,
    after: usize,
}

impl TrialSource for Stopping {
    fn trial(&self, c: &Config, phase: TrialPhase, round: usize) -> TrialOutcome {
        use std::sync::atomic::Ordering;
        if self.count.fetch_add(1, Ordering::SeqCst) + 1 >= self.after {
            self.stop.store(true, Ordering::SeqCst);
        }
        Smooth.trial(c, phase, round)
    }
}

#[test]
fn a_stopped_iterated_search_resumes_to_the_run_it_would_have_been() {
    let dir = tempfile::tempdir().unwrap();
    let study = parse(SPACE).unwrap();
    simulated_run(&study, &dir.path().join("whole.db"), Arc::new(Smooth));
    let topo = Topology::read(&Fs::live()).unwrap();
    let store = dir.path().join("stopped.db");
    let mut opts = RunOptions::new(store.clone());
    // Stopped in the second iteration.
    opts.simulated = Some(Arc::new(Stopping {
        stop: opts.stop.clone(),
        count: Default::default(),
        after: 110,
    }));
    let e = run_study(&study, &topo, &opts).unwrap_err();
    assert!(matches!(e, StudyError::Interrupted), "{e}");
    let mut opts = RunOptions::new(store.clone());
    opts.resume = Some(1);
    opts.simulated = Some(Arc::new(Smooth));
    let out = run_study(&study, &topo, &opts).unwrap();
    assert!(out.summary.trials_run > 0);
    assert_eq!(
        race_trials(&store),
        race_trials(&dir.path().join("whole.db"))
    );
}
