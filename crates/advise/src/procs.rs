//! The processes the checks look at, read once: `status` and `cmdline` of every user process
//! (kernel threads left out). The expensive readings (`smaps_rollup`, `maps`, `fd`) are made
//! by the checks that need them, for the few processes that qualify.

use std::collections::HashMap;

use perfpilot_sys::Fs;
use perfpilot_sys::process::{ProcReader, ProcStatus};

use crate::finding::Skipped;

/// One user process.
#[derive(Debug, Clone)]
pub(crate) struct Proc {
    /// Its id.
    pub pid: i32,
    /// `/proc/PID/status`.
    pub status: ProcStatus,
    /// `/proc/PID/cmdline`, split at NULs.
    pub cmdline: Vec<String>,
}

impl Proc {
    /// `pid 1234 (java)`.
    pub fn subject(&self) -> String {
        format!("pid {} ({})", self.pid, self.status.name)
    }

    /// The command line joined by spaces (as the daemon's workload signatures are made), or
    /// the command name when it has none.
    pub fn cmdline_joined(&self) -> String {
        if self.cmdline.is_empty() {
            self.status.name.clone()
        } else {
            self.cmdline.join(" ")
        }
    }
}

/// The process table, and what could not be read of it.
#[derive(Debug, Default)]
pub(crate) struct Procs {
    /// Readable user processes, by pid.
    pub list: Vec<Proc>,
    /// Processes whose `status` could not be read (not the ones that exited meanwhile).
    pub unreadable: Vec<Skipped>,
    /// Index into `list` by pid.
    by_pid: HashMap<i32, usize>,
}

impl Procs {
    /// Whether `p`'s parent is a process of the same name: then `p` is part of the parent's
    /// instance (a PostgreSQL backend, an nginx worker), not an instance of its own, and what
    /// is said of the instance is said once, of the parent.
    pub fn is_part_of_parent(&self, p: &Proc) -> bool {
        self.by_pid
            .get(&p.status.ppid)
            .is_some_and(|&i| self.list[i].status.name == p.status.name)
    }
}

/// Reads the process table of `fs`: every process, or only `only`.
pub(crate) fn read(fs: &Fs, only: Option<i32>) -> Result<Procs, perfpilot_sys::Error> {
    let mut reader = ProcReader::new(fs);
    let pids = match only {
        Some(p) => vec![p],
        None => reader.pids()?,
    };
    let mut out = Procs::default();
    for pid in pids {
        let status = match reader.status(pid) {
            Ok(s) => s,
            // Exited between the listing and the read: not a finding, not a skip.
            Err(e) if e.is_vanished() && only.is_none() => continue,
            Err(e) => {
                out.unreadable.push(Skipped::from_error("processes", &e));
                continue;
            }
        };
        if status.kernel_thread {
            continue;
        }
        // An unreadable cmdline (rare) leaves the name to stand for it.
        let cmdline = reader.cmdline(pid).unwrap_or_default();
        out.by_pid.insert(pid, out.list.len());
        out.list.push(Proc {
            pid,
            status,
            cmdline,
        });
    }
    Ok(out)
}
