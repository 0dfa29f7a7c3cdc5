//! perfpilot's proof harness: real servers from Debian packages under their own benchmark tools
//! (through `perfpilot drive`), each in every configuration ("cell") — untuned, THP `always`,
//! PostgreSQL's own huge pages, numad, tuned, the perfpilot daemon with an empty configuration —
//! in alternating rounds, and a table of throughput ratios to untuned with 95 % intervals.
//!
//! One concern per module:
//!
//! - [`options`]: the command line;
//! - [`servers`]: each server kind (install check, data prepared once, fresh start, load, stop);
//! - [`memload`]: the built-in memcached load;
//! - [`cells`]: each configuration's setup and teardown; [`daemon`]: the perfpilot cell;
//! - [`settings`]: global kernel settings with a guard that restores them (rooted at an `Fs`);
//! - [`schedule`]: the rounds and their orders; [`run`]: running the plan;
//! - [`record`]: the JSON-lines results file (and the machine a proof ran on); [`summary`]: the tables; [`doc`]: docs/proofs.md;
//! - [`install`]: apt-get for missing tools;
//! - [`stop`]: the harness's Ctrl-C: a stop request every wait checks.

pub mod cells;
pub mod daemon;
pub mod doc;
pub mod install;
pub mod memload;
pub mod options;
pub mod record;
pub mod run;
pub mod schedule;
pub mod servers;
pub mod settings;
pub mod stop;
pub mod summary;
