//! Solvers: exact MVA (single- and multi-class, with numerically stable load-dependent
//! stations), Seidmann's multi-server approximation, and Bard–Schweitzer approximate MVA.
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

use serde::{Deserialize, Serialize};

use crate::error::ModelError;
use crate::network::{Network, StationKind};

/// Which algorithm to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// Exact MVA over every population vector (whole curve 1..N for one class).
    #[default]
    Exact,
    /// Bard–Schweitzer approximate MVA at the final population only.
    Schweitzer,
}

/// How multi-server stations are treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MultiServerMethod {
    /// Exact load-dependent MVA (stable formulation).
    #[default]
    Exact,
    /// Seidmann et al.: an m-server station with demand D becomes a queue with D/m followed
    /// by a delay of D(m-1)/m.
    Seidmann,
}

/// Solver options.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SolveOptions {
    pub method: Method,
    pub multiserver: MultiServerMethod,
    /// Bard–Schweitzer stops when no queue length moves by more than `tolerance × N_c`.
    pub tolerance: f64,
    /// Bard–Schweitzer iteration cap; reaching it is reported as `converged = false`.
    pub max_iterations: u32,
    /// Single-class exact solves: build the whole curve 1..N (default). The recursion visits
    /// every population either way; `false` only skips the per-point output.
    pub curve: bool,
}

impl Default for SolveOptions {
    fn default() -> Self {
        SolveOptions {
            method: Method::Exact,
            multiserver: MultiServerMethod::Exact,
            tolerance: 1e-10,
            max_iterations: 10_000,
            curve: true,
        }
    }
}

/// Asymptotic bounds for one class (Lazowska et al., QSP ch. 5), computed from the network.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Bounds {
    /// Σ of the shortest time one customer can spend at each station (ΣD for plain queues).
    pub demand_total: f64,
    /// Largest demand per unit of capacity, D_k / servers_k (the bottleneck's).
    pub demand_max: f64,
    pub think_time: f64,
    /// N* = (D + Z) / Dmax: population where the two asymptotes cross.
    pub n_star: f64,
    /// X ≤ min(N / (D + Z), 1 / Dmax).
    pub throughput_upper: f64,
    /// X ≥ N / (R_upper + Z) (single-class networks only).
    pub throughput_lower: Option<f64>,
    /// R ≥ max(D, N·Dmax − Z).
    pub response_lower: f64,
    /// R ≤ N·D (pessimistic; single-class networks only).
    pub response_upper: Option<f64>,
}

/// Results for one class.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClassResult {
    pub name: String,
    pub population: u32,
    pub think_time: f64,
    /// Requests per second.
    pub throughput: f64,
    /// Seconds per request spent at the stations (delay stations included, think time not).
    pub response_time: f64,
    pub bounds: Bounds,
}

/// Results for one station (as declared in the network; Seidmann parts are merged back).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StationResult {
    pub name: String,
    pub kind: String,
    pub servers: Option<u32>,
    pub demand: Vec<f64>,
    /// Mean number of busy servers, Σ_c X_c D_kc (busy cores for a multi-core tier).
    pub busy: f64,
    /// Fraction of capacity in use (busy / servers; 1 − P(idle) for a load-dependent station;
    /// none for a delay station).
    pub utilization: Option<f64>,
    /// Mean number of customers present.
    pub queue: f64,
    /// Residence time per class (seconds per request).
    pub residence: Vec<f64>,
    /// Mean number of customers of each class present.
    pub queue_per_class: Vec<f64>,
}

/// One point of the single-class curve.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CurvePoint {
    pub population: u32,
    pub throughput: f64,
    pub response_time: f64,
    /// Per station, like [`StationResult::utilization`].
    pub utilization: Vec<Option<f64>>,
    /// Per station mean queue length.
    pub queue: Vec<f64>,
    pub bounds: Bounds,
}

/// A solved network.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Solution {
    pub method: String,
    pub exact: bool,
    pub converged: bool,
    pub iterations: u32,
    pub classes: Vec<ClassResult>,
    pub stations: Vec<StationResult>,
    /// Station with the highest busy / capacity.
    pub bottleneck: String,
    /// Single-class networks: the whole curve 1..N (exact) or the final point (approximate).
    pub curve: Vec<CurvePoint>,
}

/// Upper limit on population vectors visited by the exact solver.
const STATE_LIMIT: u128 = 50_000_000;
/// Upper limit on stored marginal probabilities in exact multi-class load-dependent MVA.
const MARGINAL_LIMIT: u128 = 50_000_000;
/// Upper limit on load-dependent stations in one exact solve.
const LD_LIMIT: usize = 60;
/// Upper limit on the estimated inner-loop steps of one exact load-dependent solve.
const WORK_LIMIT: u128 = 5_000_000_000;

#[derive(Debug, Clone)]
enum IKind {
    Delay,
    Queue,
    /// 1/α(j) for j = 0..=Ntot (index 0 unused).
    Ld(Vec<f64>),
}

#[derive(Debug, Clone)]
struct Internal {
    /// Declared station each internal station comes from.
    orig: Vec<usize>,
    kind: Vec<IKind>,
    /// demand[k][c]
    demand: Vec<Vec<f64>>,
    think: Vec<f64>,
    pops: Vec<u32>,
}

fn internal(net: &Network, opts: &SolveOptions) -> Result<Internal, ModelError> {
    let ntot = net.total_population();
    let mut it = Internal {
        orig: Vec::new(),
        kind: Vec::new(),
        demand: Vec::new(),
        think: net.classes.iter().map(|c| c.think_time).collect(),
        pops: net.classes.iter().map(|c| c.population).collect(),
    };
    let ld = |kind: &StationKind| {
        let mut inv = vec![0.0; ntot as usize + 1];
        for (j, v) in inv.iter_mut().enumerate().skip(1) {
            *v = 1.0 / kind.rate(j as u32);
        }
        IKind::Ld(inv)
    };
    for (k, s) in net.stations.iter().enumerate() {
        match (&s.kind, opts.multiserver, opts.method) {
            (StationKind::Delay, _, _) => {
                it.push(k, IKind::Delay, s.demand.clone());
            }
            (StationKind::Queue, _, _) | (StationKind::MultiServer(1), _, _) => {
                it.push(k, IKind::Queue, s.demand.clone());
            }
            (StationKind::MultiServer(m), MultiServerMethod::Seidmann, _)
            | (StationKind::MultiServer(m), _, Method::Schweitzer) => {
                let m = f64::from(*m);
                it.push(k, IKind::Queue, s.demand.iter().map(|d| d / m).collect());
                it.push(
                    k,
                    IKind::Delay,
                    s.demand.iter().map(|d| d * (m - 1.0) / m).collect(),
                );
            }
            (StationKind::MultiServer(_), MultiServerMethod::Exact, Method::Exact) => {
                it.push(k, ld(&s.kind), s.demand.clone());
            }
            (StationKind::LoadDependent(_), _, Method::Exact) => {
                it.push(k, ld(&s.kind), s.demand.clone());
            }
            (StationKind::LoadDependent(_), _, Method::Schweitzer) => {
                return Err(ModelError::Unsupported {
                    method: "Bard-Schweitzer approximate MVA",
                    station: s.name.clone(),
                    reason: "it handles delay, queue and multi-server (via Seidmann) stations, not general load-dependent rates; use the exact method".into(),
                });
            }
        }
    }
    Ok(it)
}

impl Internal {
    fn push(&mut self, orig: usize, kind: IKind, demand: Vec<f64>) {
        self.orig.push(orig);
        self.kind.push(kind);
        self.demand.push(demand);
    }
}

/// Solves a network. Single-class exact solves return the whole curve 1..N.
pub fn solve(net: &Network, opts: &SolveOptions) -> Result<Solution, ModelError> {
    net.check()?;
    if net.classes.iter().any(|c| c.is_open()) {
        return mixed(net, opts);
    }
    let it = internal(net, opts)?;
    match opts.method {
        Method::Exact => exact(net, &it, opts),
        Method::Schweitzer => schweitzer(net, &it, opts),
    }
}

/// Bounds of class `c` computed from the declared network.
pub fn bounds(net: &Network, c: usize, population: u32) -> Bounds {
    BoundsBase::new(net, c).at(population)
}

/// The population-independent parts of the bounds of one class.
struct BoundsBase {
    d_total: f64,
    d_max: f64,
    z: f64,
    r_upper_fixed: f64,
    r_upper_per_n: f64,
    single: bool,
}

impl BoundsBase {
    fn new(net: &Network, c: usize) -> BoundsBase {
        let mut b = BoundsBase {
            d_total: 0.0,
            d_max: 0.0,
            z: net.classes[c].think_time,
            r_upper_fixed: 0.0,
            r_upper_per_n: 0.0,
            single: net.classes.len() == 1,
        };
        for s in &net.stations {
            let d = s.demand[c];
            if d == 0.0 {
                continue;
            }
            if s.kind == StationKind::Delay {
                b.d_total += d;
                b.r_upper_fixed += d;
            } else {
                b.d_total += d * s.kind.fastest_per_customer();
                b.d_max = b.d_max.max(d / s.kind.max_rate());
                b.r_upper_per_n += d / s.kind.min_rate();
            }
        }
        b
    }

    fn at(&self, population: u32) -> Bounds {
        let n = f64::from(population);
        let (d_total, d_max, z) = (self.d_total, self.d_max, self.z);
        let x_opt = n / (d_total + z);
        let throughput_upper = if d_max > 0.0 {
            x_opt.min(1.0 / d_max)
        } else {
            x_opt
        };
        let response_upper = self.r_upper_fixed + n * self.r_upper_per_n;
        Bounds {
            demand_total: d_total,
            demand_max: d_max,
            think_time: z,
            n_star: if d_max > 0.0 {
                (d_total + z) / d_max
            } else {
                f64::INFINITY
            },
            throughput_upper,
            throughput_lower: self.single.then(|| n / (response_upper + z)),
            response_lower: d_total.max(n * d_max - z),
            response_upper: self.single.then_some(response_upper),
        }
    }
}

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
                (IKind::Delay, IKind::Delay) | (IKind::Queue, IKind::Queue) => true,
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

impl Exact<'_> {
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
        let active: Vec<usize> = (0..it.kind.len()).filter(|k| mask >> k & 1 == 1).collect();
        let ka = active.len();
        let ld: Vec<usize> = (0..ka)
            .filter(|&a| matches!(it.kind[active[a]], IKind::Ld(_)))
            .collect();
        // Complements first (recursively memoised).
        let mut comps = Vec::with_capacity(ld.len());
        for &a in &ld {
            comps.push(self.tables(mask & !(1u64 << active[a]), false)?);
        }
        let alive: Vec<bool> = (0..nc)
            .map(|c| it.think[c] > 0.0 || active.iter().any(|&k| it.demand[k][c] > 0.0))
            .collect();
        let states = self.states;
        let strides = &self.strides;
        let mut x = vec![0.0; states * nc];
        let mut q = vec![0.0; states * ka];
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
            // Advance the population vector (mixed radix, class 0 fastest).
            for c in 0..nc {
                if n[c] < it.pops[c] {
                    n[c] += 1;
                    break;
                }
                n[c] = 0;
            }
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
                            IKind::Ld(inv) => {
                                let l = ld.iter().position(|&b| b == a).unwrap_or(0);
                                let pm = &marg[l][prev];
                                let mut acc = 0.0;
                                for j in 1..=tot as usize {
                                    acc += j as f64 * inv[j] * pm[j - 1];
                                }
                                d * acc
                            }
                        }
                    };
                    sum += r[a];
                }
                let xc = f64::from(n[c]) / sum;
                x[s * nc + c] = xc;
                for a in 0..ka {
                    q[s * ka + a] += xc * r[a];
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
                let mut p = vec![0.0; tot as usize + 1];
                for c in 0..nc {
                    if n[c] == 0 || it.demand[k][c] == 0.0 {
                        continue;
                    }
                    let f = it.demand[k][c] * x[s * nc + c];
                    let pm = &marg[l][s - strides[c]];
                    for j in 1..=tot as usize {
                        p[j] += f * pm[j - 1];
                    }
                }
                for (j, v) in p.iter_mut().enumerate().skip(1) {
                    *v *= inv[j];
                }
                let comp = &comps[l];
                p[0] = if comp.dead[s] {
                    0.0
                } else {
                    // Any class with customers gives the same value; take the first.
                    let c = (0..nc).find(|&c| n[c] > 0).unwrap_or(0);
                    marg[l][s - strides[c]][0] * x[s * nc + c] / comp.x[s * nc + c]
                };
                let total: f64 = p.iter().sum();
                if total > 0.0 && total.is_finite() {
                    for v in &mut p {
                        *v /= total;
                    }
                }
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

fn exact(net: &Network, it: &Internal, opts: &SolveOptions) -> Result<Solution, ModelError> {
    let nc = it.pops.len();
    let states: u128 = it.pops.iter().map(|&p| u128::from(p) + 1).product();
    if states > STATE_LIMIT {
        return Err(ModelError::TooLarge {
            states,
            limit: STATE_LIMIT,
        });
    }
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
    let mut strides = vec![1usize; nc];
    for c in 1..nc {
        strides[c] = strides[c - 1] * (it.pops[c - 1] as usize + 1);
    }
    // Work estimate: one table per distinct multiset of load-dependent station types, each
    // O(states × Ntot × L). Refuse what would take minutes rather than hang.
    let type_of = station_types(it);
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
    let mut curve = Vec::new();
    if nc == 1 && opts.curve {
        curve.reserve(ex.states - 1);
        let base = BoundsBase::new(net, 0);
        for s in 1..ex.states {
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
    }
    let method = match opts.multiserver {
        MultiServerMethod::Seidmann
            if net
                .stations
                .iter()
                .any(|s| matches!(s.kind, StationKind::MultiServer(m) if m > 1)) =>
        {
            "exact MVA, Seidmann approximation for multi-server stations"
        }
        _ => "exact MVA",
    };
    Ok(finish(net, method, true, true, 0, &x_last, stations, curve))
}

fn utilization(kind: &StationKind, busy: f64, p0: Option<f64>) -> Option<f64> {
    match kind {
        StationKind::Delay => None,
        StationKind::Queue => Some(busy),
        StationKind::MultiServer(m) => Some(busy / f64::from(*m)),
        StationKind::LoadDependent(_) => p0.map(|p| 1.0 - p),
    }
}

fn station_results(
    net: &Network,
    x: &[f64],
    residence: &[Vec<f64>],
    p0: impl Fn(usize) -> Option<f64>,
) -> Vec<StationResult> {
    net.stations
        .iter()
        .enumerate()
        .map(|(k, s)| {
            let busy: f64 = s.demand.iter().zip(x).map(|(d, x)| d * x).sum();
            let queue_per_class: Vec<f64> =
                residence[k].iter().zip(x).map(|(r, x)| r * x).collect();
            StationResult {
                name: s.name.clone(),
                kind: s.kind.label(),
                servers: s.kind.servers(),
                demand: s.demand.clone(),
                busy,
                utilization: utilization(&s.kind, busy, p0(k)),
                queue: queue_per_class.iter().sum(),
                residence: residence[k].clone(),
                queue_per_class,
            }
        })
        .collect()
}

#[allow(clippy::too_many_arguments)]
fn finish(
    net: &Network,
    method: &str,
    exact: bool,
    converged: bool,
    iterations: u32,
    x: &[f64],
    stations: Vec<StationResult>,
    curve: Vec<CurvePoint>,
) -> Solution {
    let classes = net
        .classes
        .iter()
        .enumerate()
        .map(|(c, cl)| ClassResult {
            name: cl.name.clone(),
            population: cl.population,
            think_time: cl.think_time,
            throughput: x[c],
            response_time: stations.iter().map(|s| s.residence[c]).sum(),
            bounds: bounds(net, c, cl.population),
        })
        .collect();
    let bottleneck = net
        .stations
        .iter()
        .zip(&stations)
        .filter(|(s, _)| s.kind != StationKind::Delay)
        .map(|(s, r)| (r.busy / s.kind.max_rate(), &s.name))
        .fold(None::<(f64, &String)>, |best, cur| match best {
            Some(b) if b.0 >= cur.0 => Some(b),
            _ => Some(cur),
        })
        .map(|(_, n)| n.clone())
        .unwrap_or_default();
    Solution {
        method: method.to_string(),
        exact,
        converged,
        iterations,
        classes,
        stations,
        bottleneck,
        curve,
    }
}

fn schweitzer(net: &Network, it: &Internal, opts: &SolveOptions) -> Result<Solution, ModelError> {
    let nc = it.pops.len();
    let ka = it.kind.len();
    let pops: Vec<f64> = it.pops.iter().map(|&p| f64::from(p)).collect();
    // Start with each class spread evenly over the stations it visits.
    let mut q = vec![vec![0.0; nc]; ka];
    for c in 0..nc {
        let visited = (0..ka).filter(|&k| it.demand[k][c] > 0.0).count().max(1);
        for qk in q.iter_mut() {
            qk[c] = pops[c] / visited as f64;
        }
        for k in 0..ka {
            if it.demand[k][c] == 0.0 {
                q[k][c] = 0.0;
            }
        }
    }
    let mut r = vec![vec![0.0; nc]; ka];
    let mut x = vec![0.0; nc];
    let mut converged = false;
    let mut iterations = 0;
    while iterations < opts.max_iterations {
        iterations += 1;
        for c in 0..nc {
            let mut sum = it.think[c];
            for k in 0..ka {
                let d = it.demand[k][c];
                r[k][c] = match it.kind[k] {
                    IKind::Delay => d,
                    _ => {
                        let qk: f64 = q[k].iter().sum();
                        d * (1.0 + qk - q[k][c] / pops[c])
                    }
                };
                sum += r[k][c];
            }
            x[c] = pops[c] / sum;
        }
        let mut delta: f64 = 0.0;
        for k in 0..ka {
            for c in 0..nc {
                let new = x[c] * r[k][c];
                delta = delta.max((new - q[k][c]).abs() / pops[c]);
                q[k][c] = new;
            }
        }
        if delta < opts.tolerance {
            converged = true;
            break;
        }
    }
    let mut residence = vec![vec![0.0; nc]; net.stations.len()];
    for k in 0..ka {
        for c in 0..nc {
            residence[it.orig[k]][c] += r[k][c];
        }
    }
    let stations = station_results(net, &x, &residence, |_| None);
    let mut curve = Vec::new();
    if nc == 1 {
        curve.push(CurvePoint {
            population: it.pops[0],
            throughput: x[0],
            response_time: stations.iter().map(|s| s.residence[0]).sum(),
            utilization: stations.iter().map(|s| s.utilization).collect(),
            queue: stations.iter().map(|s| s.queue).collect(),
            bounds: bounds(net, 0, it.pops[0]),
        });
    }
    Ok(finish(
        net,
        "Bard-Schweitzer approximate MVA (Seidmann for multi-server stations)",
        false,
        converged,
        iterations,
        &x,
        stations,
        curve,
    ))
}

/// Mixed networks (Lazowska et al., QSP § 7.4): open classes take a share `U_k^o = Σ λ_c D_kc`
/// of each queueing station; the closed classes are solved (by the chosen method) with their
/// demands inflated to `D / (1 − U_k^o)`; an open class then resides
/// `D_kc (1 + Q_k^closed) / (1 − U_k^o)` at a queue and `D_kc` at a delay. Exact for delay and
/// single-server queueing stations; open load on multi-server or load-dependent stations is
/// refused.
fn mixed(net: &Network, opts: &SolveOptions) -> Result<Solution, ModelError> {
    let nc = net.classes.len();
    let open: Vec<bool> = net.classes.iter().map(|c| c.is_open()).collect();
    let closed: Vec<usize> = (0..nc).filter(|&c| !open[c]).collect();
    let mut u_open = vec![0.0; net.stations.len()];
    for (k, s) in net.stations.iter().enumerate() {
        u_open[k] = (0..nc)
            .filter_map(|c| net.classes[c].arrival_rate.map(|l| l * s.demand[c]))
            .sum();
        if u_open[k] == 0.0 {
            continue;
        }
        match s.kind {
            StationKind::Delay => {}
            StationKind::Queue | StationKind::MultiServer(1) => {
                if u_open[k] >= 1.0 {
                    return Err(ModelError::OpenSaturated {
                        station: s.name.clone(),
                        utilization: u_open[k],
                    });
                }
            }
            _ => {
                return Err(ModelError::Unsupported {
                    method: "mixed open/closed MVA",
                    station: s.name.clone(),
                    reason: "open classes may visit delay and single-server queueing stations only"
                        .into(),
                });
            }
        }
    }
    let inflate = |k: usize| match net.stations[k].kind {
        StationKind::Delay => 1.0,
        _ => 1.0 / (1.0 - u_open[k]),
    };
    // The closed sub-network (stations no closed class visits are left out).
    let mut closed_sol = None;
    let mut kept: Vec<usize> = Vec::new();
    if !closed.is_empty() {
        let mut stations = Vec::new();
        for (k, s) in net.stations.iter().enumerate() {
            let demand: Vec<f64> = closed.iter().map(|&c| s.demand[c] * inflate(k)).collect();
            if demand.iter().any(|&d| d > 0.0) {
                kept.push(k);
                stations.push(crate::network::Station {
                    demand,
                    ..s.clone()
                });
            }
        }
        let classes = closed.iter().map(|&c| net.classes[c].clone()).collect();
        let sub = Network { stations, classes };
        sub.check()?;
        closed_sol = Some(solve(&sub, opts)?);
    }
    let mut x = vec![0.0; nc];
    let mut residence = vec![vec![0.0; nc]; net.stations.len()];
    let mut q_closed = vec![0.0; net.stations.len()];
    let mut ld_util = vec![None; net.stations.len()];
    if let Some(sol) = &closed_sol {
        for (i, &c) in closed.iter().enumerate() {
            x[c] = sol.classes[i].throughput;
        }
        for (j, &k) in kept.iter().enumerate() {
            q_closed[k] = sol.stations[j].queue;
            ld_util[k] = sol.stations[j].utilization;
            for (i, &c) in closed.iter().enumerate() {
                residence[k][c] = sol.stations[j].residence[i];
            }
        }
    }
    for c in (0..nc).filter(|&c| open[c]) {
        x[c] = net.classes[c].arrival_rate.unwrap_or(0.0);
        for (k, s) in net.stations.iter().enumerate() {
            let d = s.demand[c];
            residence[k][c] = match s.kind {
                StationKind::Delay => d,
                _ => d * (1.0 + q_closed[k]) * inflate(k),
            };
        }
    }
    let mut stations = station_results(net, &x, &residence, |_| None);
    for (k, s) in stations.iter_mut().enumerate() {
        if matches!(net.stations[k].kind, StationKind::LoadDependent(_)) {
            s.utilization = ld_util[k];
        }
    }
    let (exact, converged, iterations, method) = match &closed_sol {
        Some(sol) => (
            sol.exact,
            sol.converged,
            sol.iterations,
            format!(
                "mixed open/closed MVA ({} for the closed classes)",
                sol.method
            ),
        ),
        None => (true, true, 0, "open network (product form)".to_string()),
    };
    let mut out = finish(
        net,
        &method,
        exact,
        converged,
        iterations,
        &x,
        stations,
        Vec::new(),
    );
    for (c, cl) in out.classes.iter_mut().enumerate() {
        if open[c] {
            let b = BoundsBase::new(net, c);
            cl.bounds = Bounds {
                demand_total: b.d_total,
                demand_max: b.d_max,
                think_time: 0.0,
                n_star: f64::INFINITY,
                throughput_upper: if b.d_max > 0.0 {
                    1.0 / b.d_max
                } else {
                    f64::INFINITY
                },
                throughput_lower: None,
                response_lower: b.d_total,
                response_upper: None,
            };
        }
    }
    Ok(out)
}
