//! perfpilot's view of a machine, built on the raw readings of `perfpilot-sys`.
//!
//! - [`topology`]: nodes → LLC domains → cores → logical CPUs (the `lssrad -av` view);
//! - [`sample`]: the [`Sampler`] and its timestamped [`Sample`]s,
//!   with cheap readings every time and expensive memory readings for the top processes at a
//!   lower rate;
//! - [`rates`]: [`Rates`] between two samples (the `mpstat`, `top`, `iostat` and
//!   `sar -n DEV` views), as flat rows ready to print, store or export;
//! - [`workload`]: workloads, what the optimizer reasons about: a process, or the processes
//!   sharing a shared-memory segment, named by a signature that outlives process ids;
//! - [`smt`]: SMT-aware CPU accounting: core-equivalent CPU from the share of a core a thread
//!   gets while its siblings are busy, configured or calibrated per SMT mode;
//! - [`pmu`]: per-process performance counters (cycles, instructions, cache and TLB misses
//!   where the machine has a PMU), summed over threads as they come and go.

pub mod pmu;
pub mod rates;
pub mod report;
pub mod sample;
pub mod smt;
pub mod topology;
pub mod workload;

pub use perfpilot_sys::{CpuSet, Fs};
pub use rates::Rates;
pub use sample::{Sample, Sampler, SamplerConfig};
pub use topology::Topology;
