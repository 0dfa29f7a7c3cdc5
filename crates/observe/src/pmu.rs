//! Per-process performance counters: one counter per event per thread, summed, with threads
//! caught as they appear and the counts of exited threads kept.
//!
//! Hardware events (cycles, instructions, LLC and dTLB misses) work only where the machine has
//! a PMU; [`perfpilot_sys::perf::hardware_support`] says whether it does. The same code counts
//! software events everywhere, which is how it is tested on machines without a PMU.

use std::collections::{BTreeMap, HashMap};

use perfpilot_sys::perf::{Counter, Event, Target};

struct Tracked {
    starttime: u64,
    threads: HashMap<i32, Vec<(Counter, u64)>>,
    /// Final counts of threads that exited, per event.
    retired: Vec<u64>,
}

/// Counters for a set of processes.
pub struct PmuSet {
    events: Vec<Event>,
    procs: HashMap<i32, Tracked>,
    /// Threads whose counters could not be opened (other than because they exited).
    pub open_failures: u64,
}

impl PmuSet {
    /// Counts `events` for the processes given to [`PmuSet::track`].
    pub fn new(events: &[Event]) -> PmuSet {
        PmuSet {
            events: events.to_vec(),
            procs: HashMap::new(),
            open_failures: 0,
        }
    }

    /// The events counted.
    pub fn events(&self) -> &[Event] {
        &self.events
    }

    /// Starts or continues counting `pid`, whose current threads are `tids`: opens counters for
    /// new threads and retires the counters of threads that are gone. A process whose start time
    /// changed (pid reused) starts over.
    pub fn track(&mut self, pid: i32, starttime: u64, tids: &[i32]) {
        let n = self.events.len();
        let t = self.procs.entry(pid).or_insert_with(|| Tracked {
            starttime,
            threads: HashMap::new(),
            retired: vec![0; n],
        });
        if t.starttime != starttime {
            *t = Tracked {
                starttime,
                threads: HashMap::new(),
                retired: vec![0; n],
            };
        }
        let gone: Vec<i32> = t
            .threads
            .keys()
            .filter(|k| !tids.contains(k))
            .copied()
            .collect();
        for tid in gone {
            if let Some(counters) = t.threads.remove(&tid) {
                for (i, (_, last)) in counters.iter().enumerate() {
                    t.retired[i] += last;
                }
            }
        }
        for &tid in tids {
            if t.threads.contains_key(&tid) {
                continue;
            }
            let mut counters = Vec::with_capacity(n);
            for &ev in &self.events {
                match Counter::open(ev, Target::Thread(tid)) {
                    Ok(c) => counters.push((c, 0)),
                    Err(e) => {
                        if !e.is_vanished() {
                            self.open_failures += 1;
                        }
                        break;
                    }
                }
            }
            if counters.len() == n {
                t.threads.insert(tid, counters);
            }
        }
    }

    /// Stops counting processes not in `live`.
    pub fn retain(&mut self, live: &[i32]) {
        self.procs.retain(|pid, _| live.contains(pid));
    }

    /// Total counts of `pid` since tracking began (live threads plus exited ones).
    pub fn read(&mut self, pid: i32) -> Option<BTreeMap<Event, u64>> {
        let t = self.procs.get_mut(&pid)?;
        let mut totals = t.retired.clone();
        for counters in t.threads.values_mut() {
            for (i, (c, last)) in counters.iter_mut().enumerate() {
                if let Ok(r) = c.read() {
                    *last = r.value;
                }
                totals[i] += *last;
            }
        }
        Some(self.events.iter().copied().zip(totals).collect())
    }
}
