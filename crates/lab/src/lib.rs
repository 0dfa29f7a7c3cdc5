//! perfpilot's experiment core: what `study`, `capacity` and the proof harness share when they
//! run servers under load, so that each piece has one home.
//!
//! - [`machine`]: the machine a run ran on ([`MachineFacts`]), read through `perfpilot-sys`;
//! - [`measure`]: measuring a point: a load run while its measured window is marked, and the
//!   CPU the window used (each instance, the driver, the machine);
//! - [`tool`]: finding the programs an experiment runs;
//! - [`port`]: free loopback ports;
//! - [`user`]: the system users servers run as;
//! - [`process`]: waiting until a started process is ready, stopping it, the processes below
//!   it and the CPU it used;
//! - [`log`]: the end of a started process's log, for error messages;
//! - [`netns`]: hosts as network namespaces (a lab of them joined by a bridge, which this
//!   namespace may join too: capacity's second host);
//! - [`run`]: commands run to completion (captured output, a limit, cut short, given up);
//! - [`server`]: servers started and stopped (a guard, readiness, and one file per kind:
//!   PostgreSQL, Redis, memcached, nginx, a JVM service);
//! - [`schedule`]: the orders of rounds (alternating, seeded shuffles, Latin squares).

pub mod log;
pub mod machine;
pub mod measure;
pub mod netns;
pub mod port;
pub mod process;
pub mod run;
pub mod schedule;
pub mod server;
pub mod tool;
pub mod user;

pub use machine::MachineFacts;
