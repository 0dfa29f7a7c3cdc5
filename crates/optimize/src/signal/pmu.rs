//! Cycles per instruction of a workload from the PMU's counters, where the machine has them.

use std::collections::HashMap;

use perfpilot_observe::pmu::PmuSet;
use perfpilot_observe::workload::Workload;
use perfpilot_sys::perf::Event;

/// Cycles and instructions counted per workload, every thread followed.
pub struct Cpi {
    set: PmuSet,
    /// Last (cycles, instructions) totals per workload signature.
    last: HashMap<String, (u64, u64)>,
}

impl Cpi {
    /// The counters, or `None` where this machine has no PMU.
    pub fn available() -> Option<Cpi> {
        perfpilot_sys::perf::hardware_support()
            .is_ok()
            .then(|| Cpi {
                set: PmuSet::new(&[Event::Cycles, Event::Instructions]),
                last: HashMap::new(),
            })
    }

    /// Cycles per instruction of `w` since its previous window (every thread counted; new
    /// threads are caught, exited ones keep their counts). `None` on the first window.
    pub fn of(&mut self, w: &Workload) -> Option<f64> {
        let (mut cycles, mut instructions) = (0u64, 0u64);
        for m in &w.members {
            self.set.track(m.pid, m.starttime, &m.tids);
            let totals = self.set.read(m.pid)?;
            cycles += totals.get(&Event::Cycles).copied().unwrap_or(0);
            instructions += totals.get(&Event::Instructions).copied().unwrap_or(0);
        }
        let prev = self
            .last
            .insert(w.signature.clone(), (cycles, instructions))?;
        let di = instructions.saturating_sub(prev.1);
        (di > 0).then(|| cycles.saturating_sub(prev.0) as f64 / di as f64)
    }
}
