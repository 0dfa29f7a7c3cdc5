//! Points measured in rounds (`[capacity] rounds`). The sweeps that share a deployment (the same
//! instances and second host) are deployed once, and all their points are measured once per
//! round, each round in the other direction (forward, backward, …): with two rounds every point's
//! mean time is the middle of the block, so a steady drift of the machine reaches every point
//! alike and the fit points stand in the same conditions as the held-out ones. A point is the
//! mean of its rounds; the rounds are kept, for their spread and to combine them again.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};

use perfpilot_lab::schedule::alternating;
use perfpilot_stats::describe;

use crate::deploy::Deployed;
use crate::error::{CapacityError, Result};
use crate::spec::{Capacity, SweepFile};
use crate::sweep::{self, ClassResult, Point};

/// What a deployment's rounds measured: per (sweep index, users) each round's point, in
/// measuring order; per sweep index the loads whose measurement failed, with why.
#[derive(Debug, Default)]
pub struct Measurements {
    /// Each round's point.
    pub points: BTreeMap<(usize, u32), Vec<Point>>,
    /// Failed measurements: (users, why), `round K of N: …` with several rounds.
    pub failed: BTreeMap<usize, Vec<(u32, String)>>,
}

/// Measures `plan` (sweep index into `cap`'s sweeps, users) on `dep` in `cap.rounds` rounds of
/// alternating order, printing each point. A failed measurement is kept with why; a tier that
/// exited ends the rounds; an interruption ends the run.
pub fn measure(
    cap: &Capacity,
    dep: &mut Deployed,
    plan: &[(usize, u32)],
    stop: &AtomicBool,
    progress: &dyn Fn(&str),
) -> Result<Measurements> {
    let files = &cap.file.sweep;
    let mut out = Measurements::default();
    for r in 0..cap.rounds {
        if cap.rounds > 1 {
            progress(&format!("  round {} of {}", r + 1, cap.rounds));
        }
        for (i, u) in alternating(plan, r) {
            if stop.load(Ordering::SeqCst) {
                return Err(CapacityError::Interrupted);
            }
            match sweep::measure(cap, dep, &files[i], u, stop) {
                Ok(p) => {
                    progress(&format!(
                        "  {}: {:.1} req/s, {:.2} ms, busy {}",
                        p.label,
                        p.throughput(),
                        p.response_time() * 1e3,
                        p.busy
                            .iter()
                            .map(|(k, v)| format!("{k} {v:.2}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                    out.points.entry((i, u)).or_default().push(p);
                }
                Err(CapacityError::Interrupted) => return Err(CapacityError::Interrupted),
                Err(e) => {
                    let label = Capacity::label(&files[i].name, u);
                    progress(&format!("  {label}: failed: {e}"));
                    let why = if cap.rounds > 1 {
                        format!("round {} of {}: {e}", r + 1, cap.rounds)
                    } else {
                        e.to_string()
                    };
                    out.failed.entry(i).or_default().push((u, why));
                    if dep.exited().is_some() {
                        return Ok(out);
                    }
                }
            }
        }
    }
    Ok(out)
}

/// The sweeps (indices into `sweeps`) that share one deployment, in the order their first sweep
/// is declared: the same `instances` and `second_host`.
pub fn deployments(sweeps: &[SweepFile]) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (i, s) in sweeps.iter().enumerate() {
        let same = |g: &Vec<usize>| {
            let f = &sweeps[g[0]];
            f.instances == s.instances && f.second_host == s.second_host
        };
        match groups.iter_mut().find(|g| same(g)) {
            Some(g) => g.push(i),
            None => groups.push(vec![i]),
        }
    }
    groups
}

fn failed(p: &Point) -> bool {
    p.errors() > 0
}

fn mean(v: impl Iterator<Item = f64>) -> f64 {
    describe::mean(&v.collect::<Vec<f64>>())
}

/// One point from its rounds: the mean of the rounds without failed requests (of all when every
/// round had some), whether or not each settled, since keeping only the settled ones would pick
/// rounds by their luck; the point settled when at least half its rounds did. Failed requests
/// are summed over every round. The rounds are kept as measured. `None` without a round; one
/// round is returned as it is.
pub fn combine(rounds: Vec<Point>) -> Option<Point> {
    let mut rounds: Vec<Point> = rounds
        .into_iter()
        .map(|mut p| {
            p.rounds.clear();
            p
        })
        .collect();
    if rounds.len() <= 1 {
        return rounds.pop();
    }
    let all_failed = rounds.iter().all(failed);
    let used: Vec<&Point> = rounds.iter().filter(|p| all_failed || !failed(p)).collect();
    let first = used[0];
    let classes = first
        .classes
        .iter()
        .map(|c0| {
            let same: Vec<&ClassResult> = used
                .iter()
                .filter_map(|p| p.classes.iter().find(|c| c.class == c0.class))
                .collect();
            let every = || {
                rounds
                    .iter()
                    .flat_map(|p| p.classes.iter().filter(|c| c.class == c0.class))
            };
            let weighted: f64 = same.iter().map(|c| c.throughput * c.response_time).sum();
            let total: f64 = same.iter().map(|c| c.throughput).sum();
            let p99: Vec<f64> = same.iter().filter_map(|c| c.p99).collect();
            ClassResult {
                class: c0.class.clone(),
                users: c0.users,
                think_time: mean(same.iter().map(|c| c.think_time)),
                throughput: mean(same.iter().map(|c| c.throughput)),
                response_time: if total > 0.0 {
                    weighted / total
                } else {
                    mean(same.iter().map(|c| c.response_time))
                },
                p99: (!p99.is_empty()).then(|| mean(p99.into_iter())),
                errors: every().map(|c| c.errors).sum(),
                first_error: every().find_map(|c| c.first_error.clone()),
            }
        })
        .collect();
    let busy = first
        .busy
        .keys()
        .map(|k| {
            let v = mean(used.iter().map(|p| p.busy.get(k).copied().unwrap_or(0.0)));
            (k.clone(), v)
        })
        .collect();
    let others: Vec<f64> = used.iter().filter_map(|p| p.other_busy).collect();
    let mut throttled: BTreeMap<String, u64> = BTreeMap::new();
    for p in &used {
        for (k, v) in &p.throttled {
            *throttled.entry(k.clone()).or_default() += v;
        }
    }
    let judged = used.iter().filter(|p| p.steady.is_some()).count();
    let settled = used.iter().filter(|p| p.steady == Some(true)).count();
    let point = Point {
        label: first.label.clone(),
        users: first.users,
        classes,
        busy,
        other_busy: (!others.is_empty()).then(|| mean(others.into_iter())),
        throttled,
        steady: (judged > 0).then_some(2 * settled >= judged),
        truncate_s: used.iter().map(|p| p.truncate_s).max().unwrap_or(0),
        rounds: Vec::new(),
    };
    Some(Point { rounds, ..point })
}

/// How far apart a point's rounds measured: half their throughput range over their mean, %.
/// `None` for a point of one round.
pub fn half_range_pct(p: &Point) -> Option<f64> {
    let xs: Vec<f64> = p.rounds.iter().map(|r| r.throughput()).collect();
    if xs.len() < 2 {
        return None;
    }
    let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = xs.iter().copied().fold(0.0, f64::max);
    let m = mean(xs.into_iter());
    (m > 0.0).then(|| 50.0 * (hi - lo) / m)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sweep(name: &str, app: u32, second: bool) -> SweepFile {
        SweepFile {
            name: name.into(),
            users: vec![1, 2],
            think_time: "0".into(),
            mix: BTreeMap::new(),
            instances: if app > 1 {
                [("app".to_string(), app)].into()
            } else {
                BTreeMap::new()
            },
            second_host: second.then(|| "app".to_string()),
        }
    }

    fn point(x: f64, r_ms: f64, app: f64, steady: bool, errors: u64) -> Point {
        Point {
            label: "s: 1".into(),
            users: 1,
            classes: vec![ClassResult {
                class: "score".into(),
                users: 1,
                think_time: 0.0,
                throughput: x,
                response_time: r_ms / 1e3,
                p99: Some(2.0 * r_ms / 1e3),
                errors,
                first_error: (errors > 0).then(|| "HTTP 502".to_string()),
            }],
            busy: [("app".to_string(), app)].into(),
            other_busy: Some(0.1),
            throttled: [("app".to_string(), 10)].into(),
            steady: Some(steady),
            truncate_s: 0,
            rounds: Vec::new(),
        }
    }

    #[test]
    fn sweeps_with_the_same_instances_and_host_share_one_deployment_in_declared_order() {
        let sweeps = [
            sweep("no think", 1, false),
            sweep("two hosts", 2, true),
            sweep("think", 1, false),
            sweep("two here", 2, false),
        ];
        assert_eq!(deployments(&sweeps), vec![vec![0, 2], vec![1], vec![3]]);
    }

    #[test]
    fn a_point_is_the_mean_of_its_rounds_settled_or_not_and_keeps_every_round() {
        let p = combine(vec![
            point(50.0, 20.0, 0.38, true, 0),
            point(60.0, 16.0, 0.40, true, 0),
            point(10.0, 90.0, 0.10, false, 0),
        ])
        .unwrap();
        assert_eq!(p.rounds.len(), 3);
        assert!((p.throughput() - 40.0).abs() < 1e-9, "{}", p.throughput());
        // Response time weighted by each round's throughput: (50·20 + 60·16 + 10·90) / 120 ms.
        assert!((p.response_time() * 1e3 - 2860.0 / 120.0).abs() < 1e-9);
        assert!((p.busy["app"] - 0.88 / 3.0).abs() < 1e-9);
        assert_eq!(p.throttled["app"], 30);
        // Two of three settled: the point did.
        assert_eq!(p.steady, Some(true));
        let hr = half_range_pct(&p).unwrap();
        // 10 … 60 around 40.
        assert!((hr - 62.5).abs() < 1e-9, "{hr}");
        // Combining the kept rounds again gives the same point (as `--from-saved` does).
        assert_eq!(combine(p.rounds.clone()), Some(p));
    }

    #[test]
    fn a_point_most_of_whose_rounds_did_not_settle_says_so() {
        let p = combine(vec![
            point(40.0, 25.0, 0.3, false, 0),
            point(50.0, 20.0, 0.4, false, 0),
            point(45.0, 22.0, 0.4, true, 0),
        ])
        .unwrap();
        assert_eq!(p.steady, Some(false));
        assert!((p.throughput() - 45.0).abs() < 1e-9);
    }

    #[test]
    fn failed_requests_of_any_round_stay_on_the_point() {
        let p = combine(vec![
            point(50.0, 20.0, 0.4, true, 0),
            point(48.0, 21.0, 0.4, true, 3),
        ])
        .unwrap();
        // The round with failures is left out of the mean, but its failures are said.
        assert!((p.throughput() - 50.0).abs() < 1e-9);
        assert_eq!(p.errors(), 3);
        assert_eq!(p.classes[0].first_error.as_deref(), Some("HTTP 502"));
    }

    #[test]
    fn one_round_is_the_point_as_measured() {
        let one = point(50.0, 20.0, 0.4, true, 0);
        assert_eq!(combine(vec![one.clone()]), Some(one));
        assert_eq!(combine(Vec::new()), None);
        assert_eq!(half_range_pct(&point(50.0, 20.0, 0.4, true, 0)), None);
    }
}
