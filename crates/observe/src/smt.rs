//! SMT-aware CPU accounting (the POWER "PURR" correction of the SAS study, seed `001_…`): a
//! thread's CPU time counts wall time on its logical CPU, so while its SMT siblings are busy
//! it overstates the share of the core it got. The core-equivalent CPU weighs each second a
//! thread ran by the share of a core a thread gets in that situation: 1 while its siblings
//! idle, the SMT mode's factor while they are busy.
//!
//! The factor per SMT mode (threads per core) is configured (the study's POWER8 values are
//! SMT2 0.77, SMT4 0.61, SMT8 0.56) or measured by [`calibrate`]: the same spin loop alone on
//! one CPU of a core, then on every CPU of that core at once; the factor is a thread's rate
//! together over its rate alone. Without either, a core is shared evenly among its busy
//! threads (1 / threads per core), which is what PURR reports when every thread is busy.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::rates::{CpuRate, ThreadRate};
use crate::topology::Topology;

/// Where a factor came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FactorSource {
    /// Given by the user.
    Configured,
    /// Measured on this machine by [`calibrate`].
    Measured,
    /// Neither: the core shared evenly among its threads.
    EvenShare,
}

/// The share of a core one thread gets while its siblings are busy, per SMT mode.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SmtFactors {
    /// Threads per core → (factor, where it came from).
    pub by_width: BTreeMap<usize, (f64, FactorSource)>,
}

/// A factor that is not a share of a core.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "SMT factor {value} for {width} threads per core: must be above 0 and at most 1 (a thread's share of a core while its siblings are busy)"
)]
pub struct BadFactor {
    /// Threads per core.
    pub width: usize,
    /// The value given.
    pub value: f64,
}

impl SmtFactors {
    /// Sets the factor of SMT mode `width` (threads per core).
    pub fn set(&mut self, width: usize, value: f64, source: FactorSource) -> Result<(), BadFactor> {
        if !(value > 0.0 && value <= 1.0) || width == 0 {
            return Err(BadFactor { width, value });
        }
        self.by_width.insert(width, (value, source));
        Ok(())
    }

    /// The factor of SMT mode `width`, and where it came from.
    pub fn factor(&self, width: usize) -> (f64, FactorSource) {
        if width <= 1 {
            return (1.0, FactorSource::EvenShare);
        }
        self.by_width
            .get(&width)
            .copied()
            .unwrap_or((1.0 / width as f64, FactorSource::EvenShare))
    }
}

/// One process's CPU, plain and core-equivalent, in percent of one CPU (or core).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CoreEquivalent {
    /// The process id.
    pub pid: i32,
    /// Plain CPU: percent of one logical CPU.
    pub cpu: f64,
    /// Core-equivalent CPU: percent of one core.
    pub core: f64,
}

/// The weight of a second on `cpu`: 1 when its siblings were idle, the factor while any was
/// busy (`busy` is each CPU's busy percent over the interval; siblings are taken as
/// independent, so "some sibling busy" is `1 - Π(1 - busy_s)`).
pub fn weight(topo: &Topology, busy: &BTreeMap<u32, f64>, factors: &SmtFactors, cpu: u32) -> f64 {
    let Some(core) = topo.cores().find(|c| c.cpus.contains(cpu)) else {
        return 1.0;
    };
    let (f, _) = factors.factor(core.cpus.len());
    let idle_all: f64 = core
        .cpus
        .iter()
        .filter(|&c| c != cpu)
        .map(|c| 1.0 - (busy.get(&c).copied().unwrap_or(0.0) / 100.0).clamp(0.0, 1.0))
        .product();
    let some_busy = 1.0 - idle_all;
    (1.0 - some_busy) + some_busy * f
}

/// Per-CPU busy percent from per-CPU rates (the machine-wide row left out).
pub fn busy_by_cpu(cpus: &[CpuRate]) -> BTreeMap<u32, f64> {
    cpus.iter()
        .filter_map(|r| r.cpu.map(|c| (c, r.busy)))
        .collect()
}

/// Core-equivalent CPU per process from its threads' CPU and the CPUs they last ran on.
pub fn core_equivalent(
    threads: &[ThreadRate],
    cpus: &[CpuRate],
    topo: &Topology,
    factors: &SmtFactors,
) -> Vec<CoreEquivalent> {
    let busy = busy_by_cpu(cpus);
    let mut by_pid: BTreeMap<i32, (f64, f64)> = BTreeMap::new();
    for t in threads {
        let w = t.processor.map_or(1.0, |c| weight(topo, &busy, factors, c));
        let e = by_pid.entry(t.pid).or_default();
        e.0 += t.cpu;
        e.1 += t.cpu * w;
    }
    by_pid
        .into_iter()
        .map(|(pid, (cpu, core))| CoreEquivalent { pid, cpu, core })
        .collect()
}

/// The mean weight over `cpus` (each by how busy it was): the factor by which CPU time spread
/// over those CPUs turns into core time, for a process whose per-CPU time is not known (a
/// study trial's instances).
pub fn mean_weight(
    topo: &Topology,
    busy: &BTreeMap<u32, f64>,
    factors: &SmtFactors,
    cpus: impl Iterator<Item = u32>,
) -> f64 {
    let (mut num, mut den) = (0.0, 0.0);
    for c in cpus {
        let b = busy.get(&c).copied().unwrap_or(0.0);
        num += b * weight(topo, busy, factors, c);
        den += b;
    }
    if den > 0.0 { num / den } else { 1.0 }
}

/// What a calibration measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// Threads per core of the core it ran on.
    pub width: usize,
    /// The core's CPUs.
    pub cpus: Vec<u32>,
    /// Spin iterations per second of one thread alone.
    pub alone_per_s: f64,
    /// Spin iterations per second per thread with every sibling spinning.
    pub together_per_s: f64,
    /// `together_per_s / alone_per_s`, capped at 1.
    pub factor: f64,
}

/// A calibration that could not run.
#[derive(Debug, thiserror::Error)]
pub enum CalibrationError {
    /// The machine has no core with more than one thread.
    #[error("no SMT here: every core has one thread, so CPU time is core time (factor 1)")]
    NoSmt,
    /// Pinning a spinning thread failed.
    #[error("cannot pin the calibration thread: {0}")]
    Pin(#[from] perfpilot_sys::Error),
}

/// Spins for `d` and returns the iterations done (a dependent multiply-add chain: it keeps
/// one thread's pipeline busy without touching memory).
fn spin(d: Duration) -> u64 {
    let until = Instant::now() + d;
    let mut x: u64 = 1;
    let mut n = 0u64;
    while Instant::now() < until {
        for _ in 0..4096 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
        }
        n += 4096;
    }
    std::hint::black_box(x);
    n
}

fn pinned_spin(cpu: u32, d: Duration) -> Result<u64, perfpilot_sys::Error> {
    let mut set = perfpilot_sys::CpuSet::new();
    set.insert(cpu);
    // tid 0 is the calling thread: a thread this function started.
    perfpilot_sys::affinity::set_affinity(0, &set)?;
    Ok(spin(d))
}

/// Measures the SMT factor of the first core with the most threads: `d` spinning alone on
/// its first CPU, then `d` on all its CPUs at once (threads this function starts and pins).
pub fn calibrate(topo: &Topology, d: Duration) -> Result<Calibration, CalibrationError> {
    let core = topo
        .cores()
        .filter(|c| c.cpus.len() > 1)
        .max_by_key(|c| c.cpus.len())
        .ok_or(CalibrationError::NoSmt)?;
    let cpus: Vec<u32> = core.cpus.iter().collect();
    let first = cpus[0];
    let alone = std::thread::scope(|s| s.spawn(|| pinned_spin(first, d)).join())
        .map_err(|_| CalibrationError::NoSmt)??;
    let together: Vec<u64> = std::thread::scope(|s| {
        let hs: Vec<_> = cpus
            .iter()
            .map(|&c| s.spawn(move || pinned_spin(c, d)))
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap_or(Ok(0)))
            .collect::<Result<Vec<u64>, _>>()
    })?;
    let secs = d.as_secs_f64().max(1e-9);
    let alone_per_s = alone as f64 / secs;
    let together_per_s = together.iter().sum::<u64>() as f64 / cpus.len() as f64 / secs;
    Ok(Calibration {
        width: cpus.len(),
        cpus,
        alone_per_s,
        together_per_s,
        factor: (together_per_s / alone_per_s.max(1e-9)).min(1.0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn factors_outside_a_share_of_a_core_are_refused_and_the_default_is_an_even_share() {
        let mut f = SmtFactors::default();
        assert_eq!(f.factor(8), (0.125, FactorSource::EvenShare));
        assert_eq!(f.factor(1).0, 1.0);
        f.set(8, 0.56, FactorSource::Configured).unwrap();
        assert_eq!(f.factor(8), (0.56, FactorSource::Configured));
        assert!(f.set(4, 1.5, FactorSource::Configured).is_err());
        assert!(f.set(4, 0.0, FactorSource::Configured).is_err());
        let e = f.set(2, f64::NAN, FactorSource::Measured).unwrap_err();
        assert!(e.to_string().contains("share of a core"), "{e}");
    }
}
