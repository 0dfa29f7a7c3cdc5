//! `cargo bench -p perfpilot-model`: prints solver timings (no assertions).

use std::hint::black_box;
use std::time::{Duration, Instant};

use perfpilot_model::{
    Class, Method, MultiServerMethod, Network, SolveOptions, Station, StationKind, solve,
};

fn net(n: u32, kinds: &[StationKind]) -> Network {
    let stations = kinds
        .iter()
        .enumerate()
        .map(|(k, kind)| Station {
            name: format!("s{k}"),
            kind: kind.clone(),
            discipline: Default::default(),
            demand: vec![0.001 * (k as f64 + 1.0)],
        })
        .collect();
    let class = Class::closed("c", n, 1.0);
    Network::new(stations, vec![class]).expect("benchmark network is valid")
}

/// `cargo bench -p perfpilot-model -- WORD` runs only the cases whose label contains WORD.
fn selected(label: &str) -> bool {
    match std::env::args().skip(1).find(|a| !a.starts_with("--")) {
        Some(word) => label.contains(&word),
        None => true,
    }
}

fn time(label: &str, runs: usize, f: impl Fn()) {
    if !selected(label) {
        return;
    }
    f();
    let mut t: Vec<Duration> = (0..runs)
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed()
        })
        .collect();
    t.sort();
    println!(
        "{label:<62} median {:>10.3?}  min {:>10.3?}  ({runs} runs)",
        t[runs / 2],
        t[0]
    );
}

fn main() {
    let exact = SolveOptions::default();
    let queues = net(10_000, &vec![StationKind::Queue; 10]);
    time(
        "exact MVA, N = 10,000, 10 queue stations, whole curve",
        50,
        || {
            black_box(solve(black_box(&queues), &exact).expect("solves"));
        },
    );
    let final_only = SolveOptions {
        curve: false,
        ..SolveOptions::default()
    };
    time(
        "exact MVA, N = 10,000, 10 queue stations, final point",
        50,
        || {
            black_box(solve(black_box(&queues), &final_only).expect("solves"));
        },
    );
    let schweitzer = SolveOptions {
        method: Method::Schweitzer,
        ..SolveOptions::default()
    };
    time("Bard-Schweitzer, N = 10,000, 10 queue stations", 50, || {
        black_box(solve(black_box(&queues), &schweitzer).expect("solves"));
    });
    let mut kinds = vec![StationKind::Queue; 9];
    kinds.push(StationKind::MultiServer(64));
    let ms = net(1_000, &kinds);
    time(
        "exact load-dependent MVA, N = 1,000, 9 queues + 64-server",
        10,
        || {
            black_box(solve(black_box(&ms), &exact).expect("solves"));
        },
    );
    let seid = SolveOptions {
        multiserver: MultiServerMethod::Seidmann,
        ..SolveOptions::default()
    };
    time(
        "exact MVA + Seidmann, N = 1,000, 9 queues + 64-server",
        10,
        || {
            black_box(solve(black_box(&ms), &seid).expect("solves"));
        },
    );
}
