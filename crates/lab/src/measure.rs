//! The CPU side of measuring a point: marks taken at the start and the end of the measured
//! window, and what the window used, in cores: each process's (the instances), this process's
//! own (the load driver, when it runs in-process) and the whole machine's (so the rest of the
//! machine is what neither accounts for). Read through `perfpilot-sys` (`/proc/PID/stat`,
//! `getrusage`, `/proc/stat`).

use std::time::{Duration, Instant};

use perfpilot_sys::Fs;

/// CPU counters at one moment.
#[derive(Clone, Debug)]
pub struct CpuMark {
    at: Instant,
    /// CPU seconds of each watched process (`None`: gone or unreadable).
    procs: Vec<Option<f64>>,
    /// This process's own CPU time.
    own: Duration,
    /// The machine's busy and total ticks (`None`: `/proc/stat` unreadable).
    machine: Option<(u64, u64)>,
}

/// What a window between two marks used.
#[derive(Clone, Debug, PartialEq)]
pub struct CpuWindow {
    /// The window's length, seconds.
    pub secs: f64,
    /// Each watched process's CPU seconds in the window (`None` where a mark lacked it).
    pub proc_seconds: Vec<Option<f64>>,
    /// This process's cores.
    pub own_cores: f64,
    /// The machine's busy cores (`None` where a mark lacked them).
    pub machine_cores: Option<f64>,
}

impl CpuMark {
    /// The counters now, of the processes `pids`, this process and the machine under `fs`.
    pub fn now(fs: &Fs, pids: &[u32]) -> CpuMark {
        CpuMark {
            at: Instant::now(),
            procs: pids
                .iter()
                .map(|&p| crate::process::cpu_seconds(p))
                .collect(),
            own: perfpilot_sys::self_cpu_time(),
            machine: machine_ticks(fs),
        }
    }

    /// The window from `start` to this mark, on a machine of `cores` CPUs.
    pub fn since(&self, start: &CpuMark, cores: f64) -> CpuWindow {
        let secs = self.at.duration_since(start.at).as_secs_f64().max(1e-3);
        let proc_seconds = start
            .procs
            .iter()
            .zip(&self.procs)
            .map(|(a, b)| Some((b.as_ref()? - a.as_ref()?).max(0.0)))
            .collect();
        let machine_cores = match (start.machine, self.machine) {
            (Some((b0, t0)), Some((b1, t1))) if t1 > t0 => {
                Some(b1.saturating_sub(b0) as f64 / (t1 - t0) as f64 * cores)
            }
            _ => None,
        };
        CpuWindow {
            secs,
            proc_seconds,
            own_cores: self.own.saturating_sub(start.own).as_secs_f64() / secs,
            machine_cores,
        }
    }
}

/// The machine's busy ticks (all but idle and I/O wait) and total ticks.
fn machine_ticks(fs: &Fs) -> Option<(u64, u64)> {
    let s = perfpilot_sys::stat::read_kernel_stat(fs).ok()?;
    let t = s.total;
    Some((t.total() - t.idle - t.iowait, t.total()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_counts_a_busy_child_its_own_cpu_and_the_machine() {
        let fs = Fs::live();
        let mut child = std::process::Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .expect("sh");
        let start = CpuMark::now(&fs, &[child.id(), u32::MAX]);
        let spin = Instant::now();
        while spin.elapsed() < Duration::from_millis(300) {
            std::hint::black_box(spin.elapsed());
        }
        let end = CpuMark::now(&fs, &[child.id(), u32::MAX]);
        let _ = child.kill();
        let _ = child.wait();
        let w = end.since(&start, 2.0);
        assert!(w.secs >= 0.3, "{w:?}");
        assert!(w.proc_seconds[0].is_some_and(|s| s >= 0.0), "{w:?}");
        assert_eq!(w.proc_seconds[1], None, "no such process");
        assert!(w.own_cores > 0.1, "this thread spun: {w:?}");
        assert!(
            w.machine_cores.is_some_and(|c| c > 0.0 && c <= 2.0),
            "{w:?}"
        );
    }
}
