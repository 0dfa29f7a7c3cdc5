//! A discrete-event simulation of closed networks with FCFS multi-server stations, against
//! the exact load-dependent MVA and Seidmann's approximation. Deterministic seed; tolerances
//! are statistical (a few standard errors of a long run).

#![allow(clippy::needless_range_loop)]

mod common;

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

use common::{exp_draw, single, st};
use perfpilot_model::{MultiServerMethod, SolveOptions, StationKind, solve};
use perfpilot_stats::Rng;

#[derive(PartialEq)]
struct Event {
    time: f64,
    station: usize,
}
impl Eq for Event {}
impl PartialOrd for Event {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Event {
    fn cmp(&self, other: &Self) -> Ordering {
        other.time.total_cmp(&self.time) // min-heap
    }
}

/// Customers cycle think → station 0 → station 1 → … → think. `servers[k]` = FCFS servers
/// (u32::MAX = delay). Exponential service with mean `mean[k]`. Returns (throughput, mean
/// number at each station) after a warm-up.
fn simulate(
    n: u32,
    think: f64,
    servers: &[u32],
    mean: &[f64],
    completions: u64,
) -> (f64, Vec<f64>) {
    let k = servers.len();
    let mut rng = Rng::new(0x5EED_1234_ABCD_0001);
    let mut heap = BinaryHeap::new();
    let mut busy = vec![0u32; k];
    let mut waiting: Vec<VecDeque<()>> = vec![VecDeque::new(); k];
    let mut present = vec![0u32; k];
    let mut area = vec![0.0; k];
    let think_slot = k;
    for _ in 0..n {
        heap.push(Event {
            time: exp_draw(&mut rng, think),
            station: think_slot,
        });
    }
    let (mut now, mut done, mut t0) = (0.0, 0u64, 0.0);
    let warm = completions / 10;
    let arrive = |s: usize,
                  now: f64,
                  heap: &mut BinaryHeap<Event>,
                  rng: &mut Rng,
                  busy: &mut Vec<u32>,
                  waiting: &mut Vec<VecDeque<()>>,
                  present: &mut Vec<u32>| {
        present[s] += 1;
        if busy[s] < servers[s] {
            busy[s] += 1;
            heap.push(Event {
                time: now + exp_draw(rng, mean[s]),
                station: s,
            });
        } else {
            waiting[s].push_back(());
        }
    };
    while let Some(ev) = heap.pop() {
        if done >= warm {
            for s in 0..k {
                area[s] += f64::from(present[s]) * (ev.time - now);
            }
        }
        now = ev.time;
        let s = ev.station;
        if s == think_slot {
            arrive(
                0,
                now,
                &mut heap,
                &mut rng,
                &mut busy,
                &mut waiting,
                &mut present,
            );
            continue;
        }
        present[s] -= 1;
        if waiting[s].pop_front().is_some() {
            heap.push(Event {
                time: now + exp_draw(&mut rng, mean[s]),
                station: s,
            });
        } else {
            busy[s] -= 1;
        }
        if s + 1 < k {
            arrive(
                s + 1,
                now,
                &mut heap,
                &mut rng,
                &mut busy,
                &mut waiting,
                &mut present,
            );
        } else {
            done += 1;
            if done == warm {
                t0 = now;
            }
            if done >= completions {
                break;
            }
            if think > 0.0 {
                heap.push(Event {
                    time: now + exp_draw(&mut rng, think),
                    station: think_slot,
                });
            } else {
                arrive(
                    0,
                    now,
                    &mut heap,
                    &mut rng,
                    &mut busy,
                    &mut waiting,
                    &mut present,
                );
            }
        }
    }
    let span = now - t0;
    let x = (completions - warm) as f64 / span;
    (x, area.iter().map(|a| a / span).collect())
}

#[test]
fn multiserver_station_matches_simulation() {
    // 4-server app tier near saturation, behind think time, then a single-server database.
    let (n, z) = (24, 2.0);
    let net = single(
        n,
        z,
        vec![
            st("app", StationKind::MultiServer(4), &[0.4]),
            st("db", StationKind::Queue, &[0.06]),
        ],
    );
    let exact = solve(&net, &SolveOptions::default()).unwrap();
    let (x, q) = simulate(n, z, &[4, 1], &[0.4, 0.06], 400_000);
    let xe = exact.classes[0].throughput;
    assert!(
        ((x - xe) / xe).abs() < 0.015,
        "simulated X = {x}, exact MVA X = {xe}"
    );
    for (k, s) in exact.stations.iter().enumerate() {
        assert!(
            (q[k] - s.queue).abs() < 0.04 * s.queue.max(1.0),
            "{}: simulated Q = {}, exact MVA Q = {}",
            s.name,
            q[k],
            s.queue
        );
    }
}

#[test]
fn sixteen_server_station_lightly_and_heavily_loaded() {
    for (n, z) in [(10u32, 1.0), (60, 0.5)] {
        let net = single(
            n,
            z,
            vec![st("cores", StationKind::MultiServer(16), &[0.8])],
        );
        let exact = solve(&net, &SolveOptions::default()).unwrap();
        let seid = solve(
            &net,
            &SolveOptions {
                multiserver: MultiServerMethod::Seidmann,
                ..SolveOptions::default()
            },
        )
        .unwrap();
        let (x, _) = simulate(n, z, &[16], &[0.8], 300_000);
        let xe = exact.classes[0].throughput;
        assert!(
            ((x - xe) / xe).abs() < 0.015,
            "N={n}: simulated {x}, exact {xe}"
        );
        // The exact solver must be at least as close to the simulation as Seidmann's.
        let xs = seid.classes[0].throughput;
        assert!(
            (x - xe).abs() <= (x - xs).abs() + 0.01 * xe,
            "N={n}: sim {x} exact {xe} seidmann {xs}"
        );
    }
}
