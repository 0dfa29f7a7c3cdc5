//! Lowering: the declared stations become the solver's internal stations. A multi-server
//! station is load-dependent for the exact method, or (Seidmann's approximation, and always
//! for Bard–Schweitzer) a queue with demand `D/m` followed by a delay of `D(m-1)/m`.

use crate::error::ModelError;
use crate::network::{Discipline, Network, Station, StationKind};

use super::{Method, MultiServerMethod, SolveOptions};

/// How an internal station serves.
#[derive(Debug, Clone)]
pub(super) enum IKind {
    /// Infinite server.
    Delay,
    /// One server, processor sharing (or FCFS with the same demand for every class: the same
    /// mean values).
    Queue,
    /// One server, first come first served, with class-dependent demands: not product form.
    /// An arriving request waits for the work of those ahead of it, each at its own class's
    /// demand (the arrival-instant heuristic of approximate MVA for FCFS; one visit per
    /// request, so a demand is a service time).
    Fcfs,
    /// 1/α(j) for j = 0..=Ntot (index 0 unused).
    Ld(Vec<f64>),
}

/// The network as the solvers see it: internal stations in parallel arrays.
#[derive(Debug, Clone)]
pub(super) struct Internal {
    /// Declared station each internal station comes from.
    pub(super) orig: Vec<usize>,
    /// How each internal station serves.
    pub(super) kind: Vec<IKind>,
    /// demand[k][c]
    pub(super) demand: Vec<Vec<f64>>,
    /// Think time per class.
    pub(super) think: Vec<f64>,
    /// Population per class.
    pub(super) pops: Vec<u32>,
}

/// Lowers `net` for the method and multi-server treatment in `opts`; refuses what the method
/// cannot solve.
pub(super) fn internal(net: &Network, opts: &SolveOptions) -> Result<Internal, ModelError> {
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
                it.push(k, queue_kind(s), s.demand.clone());
            }
            (StationKind::MultiServer(m), MultiServerMethod::Seidmann, _)
            | (StationKind::MultiServer(m), _, Method::Schweitzer) => {
                let m = f64::from(*m);
                it.push(k, queue_kind(s), s.demand.iter().map(|d| d / m).collect());
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

/// A single-server station's kind: FCFS where its discipline is FCFS and the classes that
/// visit it have different demands (else PS gives the same mean values, exactly).
fn queue_kind(s: &Station) -> IKind {
    let mut visiting = s.demand.iter().filter(|d| **d > 0.0);
    let first = visiting.next().copied();
    let differ = first.is_some_and(|f| visiting.any(|d| (d - f).abs() > 1e-12 * f));
    if s.discipline == Discipline::Fcfs && differ {
        IKind::Fcfs
    } else {
        IKind::Queue
    }
}

impl Internal {
    fn push(&mut self, orig: usize, kind: IKind, demand: Vec<f64>) {
        self.orig.push(orig);
        self.kind.push(kind);
        self.demand.push(demand);
    }
}
