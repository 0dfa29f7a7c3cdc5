//! Sampling stays in the space, follows the conditions and forbidden rules, moves toward the
//! elites, and a seed reproduces its draws.

use std::collections::BTreeSet;
use std::path::Path;

use super::*;
use crate::spec::Study;

const SPACE: &str = r#"
[deployment]
command = "app {threads} {ratio} {gc} {gc_threads} {level}"

[load]
command = "echo 1"

[parameters]
threads = { integer = [1, 64], log = true }
ratio = { real = [0.01, 10.0], log = true, digits = 3 }
gc = { categorical = ["serial", "parallel", "g1"] }
gc_threads = { integer = [1, 8], when = "gc != 'serial'" }
level = { ordinal = ["low", "mid", "high", "max"] }

[search]
method = "iterated"
forbidden = ["threads * gc_threads > 64", "gc == 'g1' && level == 'low'"]

[run]
budget = 400
baseline = { threads = 4, ratio = 1, gc = "serial", level = "mid" }
"#;

fn study() -> Study {
    Study::parse(SPACE, Path::new("s.toml")).unwrap()
}

fn runnable(_: &Config) -> Option<String> {
    None
}

#[test]
fn uniform_draws_stay_in_the_space_and_honour_conditions_and_rules() {
    let s = study();
    let space = s.space();
    let mut sampler = Sampler::new(&space, 5);
    let mut seen = BTreeSet::new();
    let d = sampler.first(&[], 300, &runnable, &mut seen, &mut Rng::new(3));
    assert_eq!(d.configs.len(), 300);
    for c in &d.configs {
        assert_eq!(space.check(c), Ok(()), "{c}");
        let serial = c.get("gc") == Some(&Level::Str("serial".into()));
        assert_eq!(c.get("gc_threads").is_none(), serial, "{c}");
    }
    // Both rules forbade draws, which were drawn again.
    assert!(d.redrawn.forbidden > 0, "{:?}", d.redrawn);
    // Log scale: about as many threads below 8 as from 8 up (uniform in log 1..65).
    let low = d
        .configs
        .iter()
        .filter(|c| matches!(c.get("threads"), Some(Level::Int(t)) if *t < 8))
        .count();
    assert!((100..200).contains(&low), "{low} of 300 below 8");
}

#[test]
fn draws_around_elites_stay_in_the_space_and_move_toward_them() {
    let s = study();
    let space = s.space();
    let mut sampler = Sampler::new(&space, 5);
    let mut seen = BTreeSet::new();
    let mut rng = Rng::new(5);
    let first = sampler.first(&[], 20, &runnable, &mut seen, &mut rng);
    let elite = first
        .configs
        .iter()
        .find(|c| c.get("gc") == Some(&Level::Str("parallel".into())))
        .cloned()
        .unwrap();
    let elites = vec![elite.clone()];
    sampler.keep(&elites);
    let mut near_gc = Vec::new();
    for j in 2..=4 {
        sampler.update(&elites, j, 4, 30);
        let d = sampler.around(&elites, 30, 31, &runnable, &mut seen, &mut rng);
        for c in &d.configs {
            assert_eq!(space.check(c), Ok(()), "{c}");
            assert_ne!(c, &elite);
        }
        let same = d
            .configs
            .iter()
            .filter(|c| c.get("gc") == elite.get("gc"))
            .count();
        near_gc.push(same as f64 / d.configs.len().max(1) as f64);
    }
    // The elite's gc level grows likelier each iteration (1/3 at first); irace's cap
    // (0.2^(1/5) before renormalizing) keeps the other levels drawn.
    assert!(near_gc[2] > 0.5, "{near_gc:?}");
    assert!(near_gc[2] >= near_gc[0], "{near_gc:?}");
    assert!(near_gc.iter().all(|p| *p < 1.0), "{near_gc:?}");
}

#[test]
fn a_seed_reproduces_its_draws() {
    let s = study();
    let space = s.space();
    let run = |seed: u64| {
        let mut sampler = Sampler::new(&space, 5);
        let mut seen = BTreeSet::new();
        let mut rng = Rng::new(seed);
        let first = sampler
            .first(&[], 10, &runnable, &mut seen, &mut rng)
            .configs;
        sampler.keep(&first[..3]);
        sampler.update(&first[..3], 2, 4, 10);
        let next = sampler.around(&first[..3], 10, 13, &runnable, &mut seen, &mut rng);
        (first, next.configs)
    };
    assert_eq!(run(9), run(9));
    assert_ne!(run(9), run(10));
}

#[test]
fn draws_this_machine_cannot_run_are_drawn_again() {
    let s = study();
    let space = s.space();
    let mut sampler = Sampler::new(&space, 5);
    let mut seen = BTreeSet::new();
    let no_big = |c: &Config| match c.get("threads") {
        Some(Level::Int(t)) if *t > 16 => Some("too many threads here".to_string()),
        _ => None,
    };
    let d = sampler.first(&[], 50, &no_big, &mut seen, &mut Rng::new(1));
    assert_eq!(d.configs.len(), 50);
    assert!(d.configs.iter().all(|c| no_big(c).is_none()));
    assert!(d.redrawn.cannot_run > 0);
    assert!(d.redrawn.example.unwrap().contains("too many threads here"));
}

#[test]
fn a_collapsed_model_is_soft_restarted_when_draws_repeat() {
    // Two tiny parameters: 2 × 3 configurations, so draws around one elite soon repeat.
    let text = SPACE
        .replace(
            "threads = { integer = [1, 64], log = true }",
            "threads = { integer = [1, 3] }",
        )
        .replace(
            "ratio = { real = [0.01, 10.0], log = true, digits = 3 }\n",
            "",
        )
        .replace(
            "gc = { categorical = [\"serial\", \"parallel\", \"g1\"] }\n",
            "",
        )
        .replace(
            "gc_threads = { integer = [1, 8], when = \"gc != 'serial'\" }\n",
            "",
        )
        .replace(
            "level = { ordinal = [\"low\", \"mid\", \"high\", \"max\"] }",
            "level = { ordinal = [\"low\", \"mid\"] }",
        )
        .replace(
            "forbidden = [\"threads * gc_threads > 64\", \"gc == 'g1' && level == 'low'\"]",
            "",
        )
        .replace("{ratio} {gc} {gc_threads} ", "")
        .replace("budget = 400", "budget = 200")
        .replace("threads = 4, ratio = 1, gc = \"serial\"", "threads = 2");
    let s = Study::parse(&text, Path::new("s.toml")).unwrap();
    let space = s.space();
    let mut sampler = Sampler::new(&space, 2);
    let mut seen = BTreeSet::new();
    let mut rng = Rng::new(2);
    let first = sampler
        .first(&[], 2, &runnable, &mut seen, &mut rng)
        .configs;
    sampler.keep(&first[..1]);
    sampler.update(&first[..1], 3, 3, 4);
    let d = sampler.around(&first[..1], 4, 5, &runnable, &mut seen, &mut rng);
    assert!(d.restarted, "{:?}", d.redrawn);
    assert!(d.redrawn.repeated > 0);
    // No configuration is drawn twice, nor one raced before.
    let keys: BTreeSet<String> = d.configs.iter().map(Config::key).collect();
    assert_eq!(keys.len(), d.configs.len());
    assert!(d.configs.iter().all(|c| !first.contains(c)));
    assert!(d.configs.len() >= 2, "{:?}", d.configs);
}

#[test]
fn a_truncated_normal_stays_within_its_bounds_even_far_in_a_tail() {
    let mut rng = Rng::new(4);
    for (mean, sd, lo, hi) in [
        (0.0, 1.0, -1.0, 1.0),
        (50.0, 1.0, 0.0, 1.0),
        (-3.0, 0.5, 10.0, 11.0),
    ] {
        for _ in 0..200 {
            let x = truncated_normal(mean, sd, lo, hi, &mut rng);
            assert!((lo..=hi).contains(&x), "{x} outside {lo}..{hi}");
        }
    }
    // Centred: the mean of many draws near the centre.
    let xs: Vec<f64> = (0..2000)
        .map(|_| truncated_normal(5.0, 1.0, 0.0, 10.0, &mut rng))
        .collect();
    let m = crate::stats::mean(&xs);
    assert!((m - 5.0).abs() < 0.1, "{m}");
    assert_eq!(truncated_normal(3.0, 0.0, 0.0, 10.0, &mut rng), 3.0);
}
