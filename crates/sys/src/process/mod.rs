//! Per-process and per-thread readings from `/proc/<pid>/…`.
//!
//! [`ProcReader`] keeps its buffers between calls, so a sampler reading tens of thousands of
//! `stat` files allocates little. A process that exits mid-read gives [`Error::Vanished`].
//! The parsers are public and pure, one file per concern: [`stat`](parse_stat),
//! [`status` and `io`](parse_status), [`maps`](parse_maps), and the page-table walks
//! [`smaps_rollup` and `numa_maps`](parse_numa_maps).
//!
//! [`Error::Vanished`]: crate::Error::Vanished

mod kept;
mod maps;
mod memory;
mod reader;
mod stat;
mod status;
pub mod tuning;

pub use maps::{MapRange, MappingKind, ShmAttach, classify_path, parse_maps, parse_maps_shm};
pub use memory::{NumaRange, SmapsRollup, huge_in_ranges, parse_numa_maps, parse_smaps_rollup};
pub use reader::ProcReader;
pub use stat::{TaskStat, parse_stat, parse_stat_into};
pub use status::{ProcIo, ProcStatus, parse_io, parse_status};
