//! The CPU side of measuring a point: a load run while its measured window is marked
//! ([`Watch`]: from the end of the warm-up to the load's return or a set length), marks taken
//! at the window's start and end, and what the window used, in cores: each process's (the
//! instances), this process's own (the load driver, when it runs in-process) and the whole
//! machine's (so the rest of the machine is what neither accounts for). Read through
//! `perfpilot-sys` (`/proc/PID/stat`, `getrusage`, `/proc/stat`).

use std::sync::atomic::{AtomicBool, Ordering};
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

/// How a load run is watched: its measured window starts when the warm-up ends and ends when
/// the load returns, or `length` later whether or not it has (so that it holds no teardown).
#[derive(Clone, Copy, Debug)]
pub struct Watch<'a> {
    /// Where the machine's counters are read.
    pub fs: &'a Fs,
    /// The processes whose CPU the window counts (the instances).
    pub pids: &'a [u32],
    /// The load's warm-up, not measured.
    pub warmup: Duration,
    /// The window's length; `None`: until the load returns.
    pub length: Option<Duration>,
    /// The machine's CPUs, for its busy cores.
    pub cores: f64,
    /// Set to give up waiting (Ctrl-C): the run then has no window.
    pub stop: &'a AtomicBool,
}

/// The measured window of a watched run, with the caller's own readings at its two ends.
#[derive(Clone, Debug, PartialEq)]
pub struct Watched<M> {
    /// What the window used.
    pub cpu: CpuWindow,
    /// The caller's reading at the window's start (taken just after the CPU mark).
    pub start: M,
    /// The caller's reading at the window's end (taken just before the CPU mark).
    pub end: M,
}

/// Why a wait ended.
#[derive(PartialEq)]
enum Waited {
    Elapsed,
    Stopped,
    LoadEnded,
}

/// How often a wait looks at the stop flag and the load.
const POLL: Duration = Duration::from_millis(20);

impl Watch<'_> {
    /// Runs `load` on a thread of its own and marks its measured window on this one, reading
    /// `mark` (the caller's other counters) at the same two moments. The window is `None` when
    /// the run was stopped while waiting, or when a load measured until it returns returned
    /// within its warm-up (nothing was measured). A panic of `load` is passed on.
    pub fn run<T: Send, M>(
        &self,
        mut mark: impl FnMut() -> M,
        load: impl FnOnce() -> T + Send,
    ) -> (T, Option<Watched<M>>) {
        std::thread::scope(|s| {
            let handle = s.spawn(load);
            let mut start = None;
            let mut end = None;
            // A window of a set length waits it out, so only a window until the load's return
            // gives up when the load has returned.
            let ended = || self.length.is_none() && handle.is_finished();
            if self.wait(Instant::now() + self.warmup, ended) == Waited::Elapsed {
                let cpu = CpuMark::now(self.fs, self.pids);
                start = Some((cpu, mark()));
            }
            if let Some(length) = self.length.filter(|_| start.is_some()) {
                // The length counts from when both readings are done.
                match self.wait(Instant::now() + length, || false) {
                    Waited::Stopped => start = None,
                    Waited::Elapsed | Waited::LoadEnded => {
                        let m1 = mark();
                        end = Some((CpuMark::now(self.fs, self.pids), m1));
                    }
                }
            }
            let result = match handle.join() {
                Ok(r) => r,
                Err(panic) => std::panic::resume_unwind(panic),
            };
            let Some((cpu0, m0)) = start else {
                return (result, None);
            };
            // Until the load returns: the end is marked now that it has.
            let (cpu1, m1) = match end {
                Some(end) => end,
                None => {
                    let m1 = mark();
                    (CpuMark::now(self.fs, self.pids), m1)
                }
            };
            let watched = Watched {
                cpu: cpu1.since(&cpu0, self.cores),
                start: m0,
                end: m1,
            };
            (result, Some(watched))
        })
    }

    /// Sleeps until `until`, the stop flag or the load's return (`ended`), whichever comes
    /// first.
    fn wait(&self, until: Instant, ended: impl Fn() -> bool) -> Waited {
        loop {
            if self.stop.load(Ordering::SeqCst) {
                return Waited::Stopped;
            }
            if ended() {
                return Waited::LoadEnded;
            }
            let now = Instant::now();
            if now >= until {
                return Waited::Elapsed;
            }
            std::thread::sleep((until - now).min(POLL));
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

    /// A watch of no processes, on a machine of 2 CPUs.
    fn watch<'a>(
        fs: &'a Fs,
        stop: &'a AtomicBool,
        warmup: Duration,
        length: Option<Duration>,
    ) -> Watch<'a> {
        Watch {
            fs,
            pids: &[],
            warmup,
            length,
            cores: 2.0,
            stop,
        }
    }

    /// A busy shell loop, killed on drop.
    struct Busy(std::process::Child);

    impl Drop for Busy {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    fn busy() -> Busy {
        Busy(
            std::process::Command::new("sh")
                .args(["-c", "while :; do :; done"])
                .spawn()
                .expect("sh"),
        )
    }

    /// Spins this thread for `d`.
    fn spin(d: Duration) {
        let t = Instant::now();
        while t.elapsed() < d {
            std::hint::black_box(t.elapsed());
        }
    }

    #[test]
    fn a_watched_load_is_measured_from_the_end_of_its_warm_up_to_its_return() {
        let fs = Fs::live();
        let child = busy();
        let stop = AtomicBool::new(false);
        let warmup = Duration::from_millis(300);
        let watch = Watch {
            fs: &fs,
            pids: &[child.0.id()],
            warmup,
            length: None,
            cores: 2.0,
            stop: &stop,
        };
        let begun = Instant::now();
        let (returned, w) = watch.run(Instant::now, || {
            // Idle through the warm-up, then busy: the window sees only the busy part.
            std::thread::sleep(warmup);
            spin(Duration::from_millis(500));
            Instant::now()
        });
        let w = w.expect("a window");
        assert!(w.start >= begun + warmup, "it starts after the warm-up");
        assert!(w.end >= returned, "it ends after the load returned");
        assert!(w.cpu.secs <= begun.elapsed().as_secs_f64() - 0.3, "{w:?}");
        assert!(
            w.cpu.own_cores > 0.0,
            "the load spun in this process: {w:?}"
        );
        assert!(w.cpu.proc_seconds[0].is_some_and(|s| s > 0.0), "{w:?}");
    }

    #[test]
    fn a_window_of_a_set_length_ends_on_time_whether_the_load_outlives_it_or_returns_early() {
        let fs = Fs::live();
        let stop = AtomicBool::new(false);
        let watch = watch(
            &fs,
            &stop,
            Duration::from_millis(100),
            Some(Duration::from_millis(300)),
        );
        let (returned, w) = watch.run(Instant::now, || {
            spin(Duration::from_millis(2500));
            Instant::now()
        });
        let w = w.expect("a window");
        assert!(w.cpu.secs >= 0.3, "{w:?}");
        assert!(w.end < returned, "it ended before the load did: {w:?}");
        assert!(w.cpu.own_cores > 0.0, "{w:?}");
        let (result, w) = watch.run(|| (), || 7);
        assert_eq!(result, 7);
        assert!(
            w.is_some_and(|w| w.cpu.secs >= 0.3),
            "it waited the length out"
        );
    }

    #[test]
    fn a_stop_during_the_warm_up_leaves_the_run_without_a_window() {
        let fs = Fs::live();
        let stop = AtomicBool::new(false);
        let watch = watch(&fs, &stop, Duration::from_millis(300), None);
        let (_, w) = watch.run(
            || (),
            || {
                stop.store(true, Ordering::SeqCst);
                // A load that does not watch the flag runs on past the warm-up.
                std::thread::sleep(Duration::from_millis(800));
            },
        );
        assert!(w.is_none(), "{w:?}");
    }

    #[test]
    fn a_load_that_ends_within_its_warm_up_returns_at_once_without_a_window() {
        let fs = Fs::live();
        let stop = AtomicBool::new(false);
        let watch = watch(&fs, &stop, Duration::from_secs(120), None);
        let begun = Instant::now();
        let (result, w) = watch.run(|| (), || 7);
        assert_eq!(result, 7);
        assert!(w.is_none(), "{w:?}");
        assert!(
            begun.elapsed() < Duration::from_secs(60),
            "it waited out the warm-up"
        );
    }
}
