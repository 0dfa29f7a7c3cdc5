//! Performance counters through `perf_event_open(2)`: hardware events (cycles, instructions,
//! LLC and dTLB misses) where the machine has a PMU, and software events (context switches,
//! task clock) everywhere.
//!
//! Nothing here invents a number: when the kernel refuses a hardware event (no PMU, as in most
//! virtual machines), [`hardware_support`] says so with the kernel's reason.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// The events perfpilot counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Event {
    /// CPU cycles.
    Cycles,
    /// Instructions retired.
    Instructions,
    /// Last-level cache read misses.
    LlcMisses,
    /// Data-TLB read misses.
    DtlbMisses,
    /// Software: context switches.
    ContextSwitches,
    /// Software: nanoseconds the task ran.
    TaskClock,
}

impl Event {
    /// The hardware events, in display order.
    pub const HARDWARE: [Event; 4] = [
        Event::Cycles,
        Event::Instructions,
        Event::LlcMisses,
        Event::DtlbMisses,
    ];

    /// True for events that need a hardware PMU.
    pub fn is_hardware(self) -> bool {
        Self::HARDWARE.contains(&self)
    }

    fn type_and_config(self) -> (u32, u64) {
        const HW: u32 = 0; // PERF_TYPE_HARDWARE
        const SW: u32 = 1; // PERF_TYPE_SOFTWARE
        const CACHE: u32 = 3; // PERF_TYPE_HW_CACHE
        // HW_CACHE config = id | (op << 8) | (result << 16); op READ = 0, result MISS = 1.
        const LL: u64 = 2;
        const DTLB: u64 = 3;
        match self {
            Event::Cycles => (HW, 0),
            Event::Instructions => (HW, 1),
            Event::LlcMisses => (CACHE, LL | (1 << 16)),
            Event::DtlbMisses => (CACHE, DTLB | (1 << 16)),
            Event::ContextSwitches => (SW, 3),
            Event::TaskClock => (SW, 1),
        }
    }
}

/// What a counter counts: one thread on any CPU, or everything on one CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// One thread (by tid), on whatever CPU it runs.
    Thread(i32),
    /// Everything that runs on one CPU.
    Cpu(u32),
}

/// `struct perf_event_attr`, first published size (PERF_ATTR_SIZE_VER0 = 64 bytes).
#[repr(C)]
#[derive(Default)]
struct Attr {
    kind: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
}

const READ_FORMAT_TOTAL_TIME_ENABLED: u64 = 1;
const READ_FORMAT_TOTAL_TIME_RUNNING: u64 = 2;
const FLAG_EXCLUDE_HV: u64 = 1 << 6;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;

/// An open counter.
#[derive(Debug)]
pub struct Counter {
    fd: OwnedFd,
    event: Event,
}

/// One reading of a counter, scaled for multiplexing.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Reading {
    /// The count, scaled up by `time_enabled / time_running` when multiplexed.
    pub value: u64,
    /// Nanoseconds the counter was enabled.
    pub time_enabled_ns: u64,
    /// Nanoseconds it was actually counting on the PMU.
    pub time_running_ns: u64,
}

impl Counter {
    /// Opens a counting (not sampling) counter that starts at once.
    pub fn open(event: Event, target: Target) -> Result<Counter> {
        let (kind, config) = event.type_and_config();
        let attr = Attr {
            kind,
            size: std::mem::size_of::<Attr>() as u32,
            config,
            read_format: READ_FORMAT_TOTAL_TIME_ENABLED | READ_FORMAT_TOTAL_TIME_RUNNING,
            flags: FLAG_EXCLUDE_HV,
            ..Attr::default()
        };
        let (pid, cpu) = match target {
            Target::Thread(t) => (t, -1),
            Target::Cpu(c) => (-1, c as i32),
        };
        // SAFETY: attr is a valid perf_event_attr of the size it declares; the other arguments are
        // plain integers. The returned fd is checked before use.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_perf_event_open,
                &attr as *const Attr,
                pid,
                cpu,
                -1i32,
                PERF_FLAG_FD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(Error::Syscall {
                call: "perf_event_open",
                target: format!("{event:?} on {target:?}"),
                source: io::Error::last_os_error(),
            });
        }
        // SAFETY: fd is a new descriptor owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        Ok(Counter { fd, event })
    }

    /// The event counted.
    pub fn event(&self) -> Event {
        self.event
    }

    /// Reads the counter. The value is scaled up when the kernel multiplexed it.
    pub fn read(&self) -> Result<Reading> {
        let mut buf = [0u64; 3];
        // SAFETY: buf is valid for 24 bytes of writes.
        let n = unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                std::mem::size_of_val(&buf),
            )
        };
        if n != std::mem::size_of_val(&buf) as isize {
            return Err(Error::Syscall {
                call: "read(perf counter)",
                target: format!("{:?}", self.event),
                source: if n < 0 {
                    io::Error::last_os_error()
                } else {
                    io::Error::from(io::ErrorKind::UnexpectedEof)
                },
            });
        }
        let [raw, enabled, running] = buf;
        let value = if running > 0 && running < enabled {
            (raw as f64 * enabled as f64 / running as f64) as u64
        } else {
            raw
        };
        Ok(Reading {
            value,
            time_enabled_ns: enabled,
            time_running_ns: running,
        })
    }
}

/// Whether hardware counters can be opened here: `Ok(())`, or the reason they cannot (the
/// kernel's error for `instructions` on the calling thread).
pub fn hardware_support() -> std::result::Result<(), String> {
    match Counter::open(Event::Instructions, Target::Thread(0)) {
        Ok(_) => Ok(()),
        Err(Error::Syscall { source, .. }) => Err(match source.raw_os_error() {
            Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) | Some(libc::ENODEV) => {
                format!("no hardware PMU counters on this machine ({source})")
            }
            Some(libc::EACCES) | Some(libc::EPERM) => {
                format!(
                    "hardware counters not permitted ({source}); run as root or lower kernel.perf_event_paranoid"
                )
            }
            _ => format!("hardware counters unavailable: {source}"),
        }),
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_clock_of_this_thread_advances() {
        // Software events exist on every kernel with perf support; skip only where perf itself is
        // disabled (the error says so, so a real failure still shows).
        let c = match Counter::open(Event::TaskClock, Target::Thread(0)) {
            Ok(c) => c,
            Err(e) if e.is_permission() => {
                eprintln!("skipped: {e}");
                return;
            }
            Err(e) => panic!("{e}"),
        };
        let a = c.read().unwrap();
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let b = c.read().unwrap();
        assert!(
            b.value > a.value,
            "task clock did not advance: {a:?} -> {b:?}"
        );
        assert!(b.time_enabled_ns >= a.time_enabled_ns);
    }

    #[test]
    fn hardware_support_is_consistent() {
        match hardware_support() {
            Ok(()) => {
                let c = Counter::open(Event::Instructions, Target::Thread(0)).unwrap();
                std::hint::black_box((0..100_000u64).sum::<u64>());
                assert!(c.read().unwrap().value > 0);
            }
            Err(reason) => {
                assert!(Counter::open(Event::Instructions, Target::Thread(0)).is_err());
                assert!(!reason.is_empty());
            }
        }
    }
}
