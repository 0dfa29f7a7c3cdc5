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

/// A planted surface over [`SPACE`]: best near threads = 16, ratio = 1, gc = parallel with
/// 2 threads, level high.
fn planted(c: &Config) -> f64 {
    let num = |n: &str| match c.get(n) {
        Some(Level::Int(i)) => *i as f64,
        Some(Level::Float(f)) => *f,
        _ => 1.0,
    };
    let gc = match c.get("gc") {
        Some(Level::Str(s)) if s == "parallel" => 0.1 - 0.05 * (num("gc_threads") - 2.0).abs(),
        _ => 0.0,
    };
    let level = match c.get("level") {
        Some(Level::Str(s)) if s == "high" => 0.05,
        _ => 0.0,
    };
    -0.1 * (num("threads") / 16.0).ln().powi(2) - 0.05 * num("ratio").ln().powi(2) + gc + level
}

/// The proposal over `SPACE` after observing `first`, with `picks` wanted.
fn propose(seed: u64, first: usize, picks: usize) -> (Vec<Config>, Vec<Config>) {
    let s = study();
    let space = s.space();
    let mut sampler = Sampler::new(&space, 5);
    let mut seen = BTreeSet::new();
    let mut rng = Rng::new(seed);
    let raced = sampler
        .first(&[], first, &runnable, &mut seen, &mut rng)
        .configs;
    let observed: Vec<(Config, f64, f64)> = raced
        .iter()
        .map(|c| (c.clone(), planted(c), 1e-4))
        .collect();
    let mut ranked = raced.clone();
    ranked.sort_by(|a, b| planted(b).total_cmp(&planted(a)));
    sampler.keep(&ranked[..3]);
    let p = sampler.proposed(
        &observed,
        &ranked[..3],
        picks,
        &runnable,
        &mut seen,
        &mut rng,
    );
    (raced, p)
}

#[test]
fn the_models_proposals_stay_in_the_space_and_are_new() {
    let (raced, p) = propose(7, 60, 20);
    assert_eq!(p.len(), 20);
    let s = study();
    let space = s.space();
    for c in &p {
        // In the space: domains, conditions (gc_threads only when gc is not serial) and
        // both forbidden rules.
        assert_eq!(space.check(c), Ok(()), "{c}");
        assert!(!raced.contains(c), "{c} was raced already");
    }
    let keys: BTreeSet<String> = p.iter().map(Config::key).collect();
    assert_eq!(keys.len(), p.len());
}

#[test]
fn the_models_proposals_lie_above_the_configurations_it_was_fitted_to() {
    let (raced, p) = propose(11, 80, 10);
    let mean = |cs: &[Config]| cs.iter().map(planted).sum::<f64>() / cs.len() as f64;
    let mut values: Vec<f64> = raced.iter().map(planted).collect();
    values.sort_by(f64::total_cmp);
    let quartile = values[values.len() * 3 / 4];
    // The picks, on average, beat the raced configurations' average by far, and most lie
    // in the raced configurations' top quarter.
    assert!(
        mean(&p) > mean(&raced) + 0.1,
        "{} vs {}",
        mean(&p),
        mean(&raced)
    );
    let above = p.iter().filter(|c| planted(c) > quartile).count();
    assert!(
        above * 2 > p.len(),
        "{above} of {} above {quartile}",
        p.len()
    );
}

#[test]
fn a_seed_reproduces_the_models_proposals() {
    assert_eq!(propose(3, 40, 8), propose(3, 40, 8));
    assert_ne!(propose(3, 40, 8).1, propose(4, 40, 8).1);
}

#[test]
fn configurations_this_machine_cannot_run_are_never_proposed() {
    let s = study();
    let space = s.space();
    let mut sampler = Sampler::new(&space, 5);
    let mut seen = BTreeSet::new();
    let mut rng = Rng::new(1);
    let raced = sampler
        .first(&[], 40, &runnable, &mut seen, &mut rng)
        .configs;
    let observed: Vec<(Config, f64, f64)> = raced
        .iter()
        .map(|c| (c.clone(), planted(c), 1e-4))
        .collect();
    // The planted best has 16 threads: refuse more than 8 here.
    let few = |c: &Config| match c.get("threads") {
        Some(Level::Int(t)) if *t > 8 => Some("too many threads here".to_string()),
        _ => None,
    };
    let p = sampler.proposed(&observed, &raced[..2], 15, &few, &mut seen, &mut rng);
    assert_eq!(p.len(), 15);
    assert!(p.iter().all(|c| few(c).is_none()), "{p:?}");
}
