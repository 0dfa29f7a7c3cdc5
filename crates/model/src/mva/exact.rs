//! Exact MVA over every population vector: the whole curve 1..N for one class, exact
//! multi-class MVA for a few small classes, and load-dependent and multi-server stations by a
//! numerically stable recursion.
//!
//! # Stable load-dependent MVA
//!
//! The textbook recursion for a load-dependent station `k` computes the marginal probabilities
//! `p_k(j|n) = D_k X(n) / α_k(j) · p_k(j-1|n-1)` for `j ≥ 1` and then
//! `p_k(0|n) = 1 - Σ_{j≥1} p_k(j|n)`. When the station is saturated the sum is within rounding
//! of 1, the subtraction cancels catastrophically, and the errors are multiplied on through the
//! recursion until probabilities go negative (an 8-server station at N = 200 already fails).
//!
//! Here `p_k(0|n)` is never obtained by subtraction. With normalising constants `G`,
//! `p_k(0|n) = G_{-k}(n) / G(n)` where `G_{-k}` belongs to the network without station `k`, and
//! `X_c(n) = G(n - 1_c) / G(n)`. Hence
//! `p_k(0|n) = p_k(0|n - 1_c) · X_c(n) / X_{-k,c}(n)`: a product of positive numbers, where
//! `X_{-k}` comes from an exact MVA of the complement network (itself solved the same way, so
//! a network with `L` load-dependent stations solves `2^L` sub-networks, memoised). Every
//! quantity stays positive; the vector is finally renormalised to remove rounding drift.

// The recursions index several parallel arrays by station and class; index loops read like
// the formulas they implement.
#![allow(clippy::needless_range_loop)]

use std::collections::HashMap;
use std::rc::Rc;

use crate::error::ModelError;
use crate::network::{Network, StationKind};

use super::asymptotic::BoundsBase;
use super::lower::{IKind, Internal};
use super::results::{finish, station_results, utilization};
use super::{CurvePoint, MultiServerMethod, Solution, SolveOptions};

/// Upper limit on population vectors visited by the exact solver.
const STATE_LIMIT: u128 = 50_000_000;
/// Upper limit on stored marginal probabilities in exact multi-class load-dependent MVA.
const MARGINAL_LIMIT: u128 = 50_000_000;
/// Upper limit on load-dependent stations in one exact solve.
const LD_LIMIT: usize = 60;
/// Upper limit on the estimated inner-loop steps of one exact load-dependent solve.
const WORK_LIMIT: u128 = 5_000_000_000;

/// Exact tables for one set of active internal stations.
struct Tables {
    /// x[s*C + c]
    x: Vec<f64>,
    /// q[s*KA + a] total queue at active station a (top level only, else empty).
    q: Vec<f64>,
    /// p0[s*L + l] probability that LD station l is empty (top level only).
    p0: Vec<f64>,
    /// States where G = 0 (a class with customers cannot be anywhere).
    dead: Vec<bool>,
    /// Residences r[a*C + c] at the final population (top level only).
    r_final: Vec<f64>,
}

struct Exact<'a> {
    it: &'a Internal,
    strides: Vec<usize>,
    states: usize,
    /// Stations with the same kind and demands share a type: sub-networks that hold the same
    /// multiset of types have the same throughputs (replicas make this common).
    type_of: Vec<u16>,
    memo: HashMap<Vec<u16>, Rc<Tables>>,
}

/// Type ids: equal for internal stations with identical kind and demands.
fn station_types(it: &Internal) -> Vec<u16> {
    let same = |a: usize, b: usize| {
        it.demand[a] == it.demand[b]
            && match (&it.kind[a], &it.kind[b]) {
                (IKind::Delay, IKind::Delay)
                | (IKind::Queue, IKind::Queue)
                | (IKind::Fcfs, IKind::Fcfs) => true,
                (IKind::Ld(x), IKind::Ld(y)) => x == y,
                _ => false,
            }
    };
    let mut out: Vec<u16> = Vec::with_capacity(it.kind.len());
    for k in 0..it.kind.len() {
        let t = (0..k).find(|&j| same(j, k)).map_or(k as u16, |j| out[j]);
        out.push(t);
    }
    out
}

/// The stations of a sub-network (see [`Exact::sub_network`]).
struct SubNetwork {
    active: Vec<usize>,
    ld: Vec<usize>,
    comps: Vec<Rc<Tables>>,
}

/// The next population vector after `n` (mixed radix, class 0 fastest).
fn advance(n: &mut [u32], pops: &[u32]) {
    for c in 0..n.len() {
        if n[c] < pops[c] {
            n[c] += 1;
            break;
        }
        n[c] = 0;
    }
}

impl Exact<'_> {
    /// The internal stations of `mask` (active), the positions among them of the
    /// load-dependent ones, and the tables of each one's complement network (recursively
    /// memoised).
    fn sub_network(&mut self, mask: u64) -> Result<SubNetwork, ModelError> {
        let it = self.it;
        let active: Vec<usize> = (0..it.kind.len()).filter(|k| mask >> k & 1 == 1).collect();
        let ld: Vec<usize> = (0..active.len())
            .filter(|&a| matches!(it.kind[active[a]], IKind::Ld(_)))
            .collect();
        let mut comps = Vec::with_capacity(ld.len());
        for &a in &ld {
            comps.push(self.tables(mask & !(1u64 << active[a]), false)?);
        }
        Ok(SubNetwork { active, ld, comps })
    }

    fn key(&self, mask: u64) -> Vec<u16> {
        let mut key: Vec<u16> = (0..self.type_of.len())
            .filter(|k| mask >> k & 1 == 1)
            .map(|k| self.type_of[k])
            .collect();
        key.sort_unstable();
        key
    }

    fn tables(&mut self, mask: u64, top: bool) -> Result<Rc<Tables>, ModelError> {
        let key = self.key(mask);
        if !top && let Some(t) = self.memo.get(&key) {
            return Ok(t.clone());
        }
        let it = self.it;
        let nc = it.pops.len();
        let SubNetwork { active, ld, comps } = self.sub_network(mask)?;
        let ka = active.len();
        let alive: Vec<bool> = (0..nc)
            .map(|c| it.think[c] > 0.0 || active.iter().any(|&k| it.demand[k][c] > 0.0))
            .collect();
        let states = self.states;
        let strides = &self.strides;
        let mut x = vec![0.0; states * nc];
        let mut q = vec![0.0; states * ka];
        // Per class, for FCFS stations only: qc[(s·ka + a)·nc + c].
        let fcfs = active.iter().any(|&k| matches!(it.kind[k], IKind::Fcfs));
        let mut qc = if fcfs {
            vec![0.0; states * ka * nc]
        } else {
            Vec::new()
        };
        let mut dead = vec![false; states];
        let mut p0 = if top {
            vec![0.0; states * ld.len()]
        } else {
            Vec::new()
        };
        let mut r_final = vec![0.0; ka * nc];
        // marg[l][s]: marginal probabilities p_l(j|n), j = 0..=|n|.
        let mut marg: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); states]; ld.len()];
        for m in &mut marg {
            m[0] = vec![1.0];
        }
        if top {
            for l in 0..ld.len() {
                p0[l] = 1.0;
            }
        }
        let mut n = vec![0u32; nc];
        let mut r = vec![0.0; ka];
        for s in 1..states {
            advance(&mut n, &it.pops);
            if (0..nc).any(|c| n[c] > 0 && !alive[c]) {
                dead[s] = true;
                continue;
            }
            let tot: u32 = n.iter().sum();
            let last = s == states - 1;
            for c in 0..nc {
                if n[c] == 0 {
                    continue;
                }
                let prev = s - strides[c];
                let mut sum = it.think[c];
                for (a, &k) in active.iter().enumerate() {
                    let d = it.demand[k][c];
                    r[a] = if d == 0.0 {
                        0.0
                    } else {
                        match &it.kind[k] {
                            IKind::Delay => d,
                            IKind::Queue => d * (1.0 + q[prev * ka + a]),
                            // The work of those ahead, each at its own class's demand.
                            IKind::Fcfs => {
                                d + (0..nc)
                                    .map(|j| it.demand[k][j] * qc[(prev * ka + a) * nc + j])
                                    .sum::<f64>()
                            }
                            IKind::Ld(inv) => {
                                let l = ld.iter().position(|&b| b == a).unwrap_or(0);
                                d * ld_residence_factor(inv, &marg[l][prev], tot)
                            }
                        }
                    };
                    sum += r[a];
                }
                let xc = f64::from(n[c]) / sum;
                x[s * nc + c] = xc;
                for a in 0..ka {
                    q[s * ka + a] += xc * r[a];
                    if fcfs {
                        qc[(s * ka + a) * nc + c] = xc * r[a];
                    }
                    if last {
                        r_final[a * nc + c] = r[a];
                    }
                }
            }
            for (l, &a) in ld.iter().enumerate() {
                let k = active[a];
                let IKind::Ld(inv) = &it.kind[k] else {
                    continue;
                };
                let state = State { s, n: &n, tot };
                let p = self.marginal(k, inv, &state, &x, &marg[l], &comps[l]);
                if top {
                    p0[s * ld.len() + l] = p[0];
                }
                marg[l][s] = p;
            }
            // One class: only the previous population's marginals are needed again.
            if nc == 1 && s >= 1 {
                for m in &mut marg {
                    m[s - 1] = Vec::new();
                }
            }
        }
        let t = Rc::new(Tables {
            x,
            q: if top { q } else { Vec::new() },
            p0,
            dead,
            r_final,
        });
        if !top {
            self.memo.insert(key, t.clone());
        }
        Ok(t)
    }
}

/// The factor of a load-dependent station's demand in its residence time:
/// `Σ_j j/α(j) · p(j-1|n-1)` over the marginals `pm` of the population one customer less.
fn ld_residence_factor(inv: &[f64], pm: &[f64], tot: u32) -> f64 {
    let mut acc = 0.0;
    for j in 1..=tot as usize {
        acc += j as f64 * inv[j] * pm[j - 1];
    }
    acc
}

/// A population vector being visited: its index, the customers of each class and in all.
struct State<'a> {
    s: usize,
    n: &'a [u32],
    tot: u32,
}

impl Exact<'_> {
    /// The marginal probabilities `p_k(j|n)`, j = 0..=|n|, of load-dependent station `k` (its
    /// inverse rates `inv`) at `state`, from the throughputs `x` there and the station's
    /// marginals `marg` at smaller populations; `p_k(0|n)` from the complement network `comp`
    /// (never by subtraction: see the module's comment), then renormalised.
    fn marginal(
        &self,
        k: usize,
        inv: &[f64],
        state: &State,
        x: &[f64],
        marg: &[Vec<f64>],
        comp: &Tables,
    ) -> Vec<f64> {
        let it = self.it;
        let nc = it.pops.len();
        let State { s, n, tot } = *state;
        let strides = &self.strides;
        let mut p = vec![0.0; tot as usize + 1];
        for c in 0..nc {
            if n[c] == 0 || it.demand[k][c] == 0.0 {
                continue;
            }
            let f = it.demand[k][c] * x[s * nc + c];
            let pm = &marg[s - strides[c]];
            for j in 1..=tot as usize {
                p[j] += f * pm[j - 1];
            }
        }
        for (j, v) in p.iter_mut().enumerate().skip(1) {
            *v *= inv[j];
        }
        p[0] = if comp.dead[s] {
            0.0
        } else {
            // Any class with customers gives the same value; take the first.
            let c = (0..nc).find(|&c| n[c] > 0).unwrap_or(0);
            marg[s - strides[c]][0] * x[s * nc + c] / comp.x[s * nc + c]
        };
        let total: f64 = p.iter().sum();
        if total > 0.0 && total.is_finite() {
            for v in &mut p {
                *v /= total;
            }
        }
        p
    }
}

pub(super) fn exact(
    net: &Network,
    it: &Internal,
    opts: &SolveOptions,
) -> Result<Solution, ModelError> {
    let nc = it.pops.len();
    let states: u128 = it.pops.iter().map(|&p| u128::from(p) + 1).product();
    if states > STATE_LIMIT {
        return Err(ModelError::TooLarge {
            states,
            limit: STATE_LIMIT,
        });
    }
    let type_of = station_types(it);
    check_work(net, it, states, &type_of)?;
    let mut strides = vec![1usize; nc];
    for c in 1..nc {
        strides[c] = strides[c - 1] * (it.pops[c - 1] as usize + 1);
    }
    let mut ex = Exact {
        it,
        strides,
        states: states as usize,
        type_of,
        memo: HashMap::new(),
    };
    let all = if it.kind.len() >= 64 {
        return Err(ModelError::Unsupported {
            method: "exact MVA",
            station: net.stations[it.orig[63]].name.clone(),
            reason: "more than 63 internal stations".into(),
        });
    } else {
        (1u64 << it.kind.len()) - 1
    };
    let t = ex.tables(all, true)?;
    let ka = it.kind.len();
    let lds: Vec<usize> = (0..ka)
        .filter(|&k| matches!(it.kind[k], IKind::Ld(_)))
        .collect();
    let s_last = ex.states - 1;
    let x_last: Vec<f64> = (0..nc).map(|c| t.x[s_last * nc + c]).collect();
    let mut residence = vec![vec![0.0; nc]; net.stations.len()];
    for k in 0..ka {
        for c in 0..nc {
            residence[it.orig[k]][c] += t.r_final[k * nc + c];
        }
    }
    let p0_of = |s: usize, orig: usize| -> Option<f64> {
        lds.iter()
            .position(|&k| it.orig[k] == orig)
            .map(|l| t.p0[s * lds.len() + l])
    };
    let stations = station_results(net, &x_last, &residence, |k| p0_of(s_last, k));
    let curve = if nc == 1 && opts.curve {
        population_curve(net, it, &t, ex.states, &p0_of)
    } else {
        Vec::new()
    };
    let (method, fcfs) = method_name(net, it, opts);
    Ok(finish(
        net, method, !fcfs, true, 0, &x_last, stations, curve,
    ))
}

/// Refuses a solve that would not fit: too many load-dependent stations, too many marginal
/// probabilities to store, or too many steps (one table per distinct multiset of
/// load-dependent station types, each O(states × Ntot × L)).
fn check_work(
    net: &Network,
    it: &Internal,
    states: u128,
    type_of: &[u16],
) -> Result<(), ModelError> {
    let nc = it.pops.len();
    let nld = it.kind.iter().filter(|k| matches!(k, IKind::Ld(_))).count();
    if nld > LD_LIMIT {
        return Err(ModelError::Unsupported {
            method: "exact MVA",
            station: net.stations[it.orig[0]].name.clone(),
            reason: format!(
                "the network has {nld} load-dependent or multi-server stations (limit {LD_LIMIT}); use multiserver = seidmann or method = schweitzer"
            ),
        });
    }
    if nc > 1 && nld > 0 {
        let ntot = u128::from(net.total_population());
        if states * (ntot + 1) * nld as u128 > MARGINAL_LIMIT {
            return Err(ModelError::TooLarge {
                states: states * (ntot + 1),
                limit: MARGINAL_LIMIT,
            });
        }
    }
    // Refuse what would take minutes rather than hang.
    let mut ld_types: HashMap<u16, u128> = HashMap::new();
    for (k, kind) in it.kind.iter().enumerate() {
        if matches!(kind, IKind::Ld(_)) {
            *ld_types.entry(type_of[k]).or_default() += 1;
        }
    }
    let tables_needed: u128 = ld_types.values().map(|c| c + 1).product();
    let work = tables_needed * states * (u128::from(net.total_population()) + 1) * nld as u128;
    if work > WORK_LIMIT {
        return Err(ModelError::Unsupported {
            method: "exact MVA",
            station: net.stations[it.orig[it
                .kind
                .iter()
                .position(|k| matches!(k, IKind::Ld(_)))
                .unwrap_or(0)]]
            .name
            .clone(),
            reason: format!(
                "{nld} distinct multi-server/load-dependent stations at this population need about {work} steps; use multiserver = seidmann or method = schweitzer"
            ),
        });
    }
    Ok(())
}

/// The single class's curve at every population 1..N from the top-level tables.
fn population_curve(
    net: &Network,
    it: &Internal,
    t: &Tables,
    states: usize,
    p0_of: &dyn Fn(usize, usize) -> Option<f64>,
) -> Vec<CurvePoint> {
    let ka = it.kind.len();
    let mut curve = Vec::with_capacity(states - 1);
    let base = BoundsBase::new(net, 0);
    for s in 1..states {
        let xs = t.x[s];
        let mut queue = vec![0.0; net.stations.len()];
        for k in 0..ka {
            queue[it.orig[k]] += t.q[s * ka + k];
        }
        let utilization = net
            .stations
            .iter()
            .enumerate()
            .map(|(k, st)| utilization(&st.kind, xs * st.demand[0], p0_of(s, k)))
            .collect();
        curve.push(CurvePoint {
            population: s as u32,
            throughput: xs,
            response_time: queue.iter().sum::<f64>() / xs,
            utilization,
            queue,
            bounds: base.at(s as u32),
        });
    }
    curve
}

/// The method's name for the results, and whether FCFS stations with class-dependent demands
/// (not product form) are in the network.
fn method_name(net: &Network, it: &Internal, opts: &SolveOptions) -> (&'static str, bool) {
    let seidmann = opts.multiserver == MultiServerMethod::Seidmann
        && net
            .stations
            .iter()
            .any(|s| matches!(s.kind, StationKind::MultiServer(m) if m > 1));
    // FCFS with class-dependent demands is not product form: the recursion is exact, the
    // FCFS stations' residence times are the arrival-instant heuristic.
    let fcfs = it.kind.iter().any(|k| matches!(k, IKind::Fcfs));
    let method = match (seidmann, fcfs) {
        (true, false) => "exact MVA, Seidmann approximation for multi-server stations",
        (false, true) => "exact MVA recursion, FCFS heuristic for class-dependent demands",
        (true, true) => {
            "exact MVA recursion, Seidmann approximation for multi-server stations, FCFS heuristic for class-dependent demands"
        }
        (false, false) => "exact MVA",
    };
    (method, fcfs)
}
