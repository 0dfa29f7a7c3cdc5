//! Which processes attach which shared memory, remembered across scans, so that a server's
//! workload keeps its identity while its busy processes come and go.
//!
//! Reading every process's maps each scan is too dear, so only processes big or busy enough
//! to matter are read. That alone let a server's group fall apart: PostgreSQL's backends are
//! the busy ones, and when the clients disconnected (a benchmark's run ending, a pool being
//! recycled), the postmaster and its helpers were too small and idle to be read, the group
//! vanished for a scan, and a trial on it ended with "its workload exited" (the proof's
//! PostgreSQL cells, 2026-11-25). Now the quiet processes of the same program and user as an
//! attacher are read once and remembered while they live: the postmaster joins the group,
//! which is then named after it, and stays. A big or busy process is read again only every
//! [`REREAD_SCANS`] scans: a server's attachments are made at its start, and reading the maps of
//! fifty busy backends every scan was most of the daemon's own CPU beside a starting PostgreSQL
//! (docs/reliability.md, "The daemon beside a starting server").

use std::collections::{HashMap, HashSet};

use perfpilot_observe::sample::ProcSample;
use perfpilot_sys::process::ShmAttach;

/// How many scans a big or busy process's attachments are kept before its maps are read again.
const REREAD_SCANS: u64 = 6;

/// Shared-memory attachments of the processes read so far, by (pid, start time), with the scan
/// that read them.
#[derive(Debug, Default)]
pub(super) struct Attachments {
    known: HashMap<(i32, u64), (Vec<ShmAttach>, u64)>,
    /// Scans so far.
    scans: u64,
}

impl Attachments {
    /// This scan's attachments, by pid. `procs` are the scan's processes (no kernel threads);
    /// those `matters` says are big or busy enough are read with `read` when first seen and
    /// every [`REREAD_SCANS`] scans after; a process with
    /// the same command name and user as an attacher is read the first time it is seen; every
    /// other process shows what it showed when last read (a quiet process's maps are not read
    /// again: a segment it attaches later is seen once it is busy).
    pub(super) fn scan<E>(
        &mut self,
        procs: &[&ProcSample],
        matters: impl Fn(&ProcSample) -> bool,
        mut read: impl FnMut(i32) -> Result<Vec<ShmAttach>, E>,
    ) -> HashMap<i32, Vec<ShmAttach>> {
        let scan = self.scans;
        self.scans += 1;
        let live: HashSet<(i32, u64)> = procs.iter().map(|p| (p.pid, p.starttime)).collect();
        self.known.retain(|k, _| live.contains(k));
        for p in procs.iter().filter(|p| matters(p)) {
            let key = (p.pid, p.starttime);
            if self
                .known
                .get(&key)
                .is_some_and(|(_, at)| scan - at < REREAD_SCANS)
            {
                continue;
            }
            if let Ok(s) = read(p.pid) {
                self.known.insert(key, (s, scan));
            }
        }
        let attachers: HashSet<(&str, u32)> = procs
            .iter()
            .filter(|p| self.attaches(p))
            .map(|p| (p.comm.as_str(), p.uid))
            .collect();
        for p in procs {
            let key = (p.pid, p.starttime);
            if self.known.contains_key(&key) || !attachers.contains(&(p.comm.as_str(), p.uid)) {
                continue;
            }
            // A process that cannot be read (exited, not permitted) is remembered as attaching
            // nothing, so that it is not tried on every scan.
            let s = read(p.pid).unwrap_or_default();
            self.known.insert(key, (s, scan));
        }
        procs
            .iter()
            .filter_map(|p| {
                let (s, _) = self.known.get(&(p.pid, p.starttime))?;
                (!s.is_empty()).then(|| (p.pid, s.clone()))
            })
            .collect()
    }

    fn attaches(&self, p: &ProcSample) -> bool {
        self.known
            .get(&(p.pid, p.starttime))
            .is_some_and(|(s, _)| !s.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::collections::{BTreeSet, HashMap};

    use perfpilot_observe::sample::ProcSample;
    use perfpilot_sys::process::ShmAttach;

    use super::Attachments;

    const BIG: u64 = 1 << 30;

    fn proc(pid: i32, starttime: u64, comm: &str, uid: u32, rss: u64) -> ProcSample {
        ProcSample {
            pid,
            starttime,
            comm: comm.into(),
            uid,
            rss,
            ..ProcSample::default()
        }
    }

    fn pool() -> Vec<ShmAttach> {
        vec![ShmAttach::Posix {
            path: "/dev/shm/pool".into(),
        }]
    }

    /// A fake /proc: what each pid's maps attach, and how often each was read.
    struct Maps {
        attach: HashMap<i32, Vec<ShmAttach>>,
        reads: RefCell<HashMap<i32, u32>>,
    }

    impl Maps {
        fn read(&self, pid: i32) -> Result<Vec<ShmAttach>, String> {
            *self.reads.borrow_mut().entry(pid).or_default() += 1;
            self.attach
                .get(&pid)
                .cloned()
                .ok_or_else(|| format!("pid {pid} exited"))
        }

        fn reads(&self, pid: i32) -> u32 {
            self.reads.borrow().get(&pid).copied().unwrap_or(0)
        }
    }

    fn pids(m: &HashMap<i32, Vec<ShmAttach>>) -> BTreeSet<i32> {
        m.keys().copied().collect()
    }

    #[test]
    fn a_servers_quiet_processes_stay_with_its_shared_memory_after_its_busy_clients_leave() {
        // A postmaster (10) and its checkpointer (11), small and idle; two backends (20, 21)
        // that touched the pool; an unrelated small process (30) of another program.
        let maps = Maps {
            attach: [
                (10, pool()),
                (11, pool()),
                (20, pool()),
                (21, pool()),
                (30, vec![]),
            ]
            .into(),
            reads: RefCell::new(HashMap::new()),
        };
        let all = [
            proc(10, 100, "postgres", 105, 1 << 20),
            proc(11, 101, "postgres", 105, 1 << 20),
            proc(20, 500, "postgres", 105, BIG),
            proc(21, 501, "postgres", 105, BIG),
            proc(30, 50, "sshd", 0, 1 << 20),
        ];
        let big = |p: &ProcSample| p.rss >= BIG;
        let mut a = Attachments::default();
        let with_clients: Vec<&ProcSample> = all.iter().collect();
        let seen = a.scan(&with_clients, big, |pid| maps.read(pid));
        assert_eq!(pids(&seen), BTreeSet::from([10, 11, 20, 21]));
        // The clients leave: the postmaster and its helper still share the pool, without being
        // read again.
        let without: Vec<&ProcSample> = all.iter().filter(|p| p.rss < BIG).collect();
        for _ in 0..3 {
            let seen = a.scan(&without, big, |pid| maps.read(pid));
            assert_eq!(pids(&seen), BTreeSet::from([10, 11]));
        }
        assert_eq!(maps.reads(10), 1);
        assert_eq!(maps.reads(11), 1);
        // Another program's quiet process is never read.
        assert_eq!(maps.reads(30), 0);
    }

    #[test]
    fn a_reused_pid_is_read_again_and_an_exited_process_is_forgotten() {
        let maps = Maps {
            attach: [(20, pool()), (21, pool())].into(),
            reads: RefCell::new(HashMap::new()),
        };
        let big = |p: &ProcSample| p.rss >= BIG;
        let mut a = Attachments::default();
        let first = [proc(20, 500, "redis", 7, BIG), proc(21, 501, "redis", 7, 0)];
        let seen = a.scan(&first.iter().collect::<Vec<_>>(), big, |pid| maps.read(pid));
        assert_eq!(pids(&seen), BTreeSet::from([20, 21]));
        // Pid 21 now belongs to a new, quiet process of the same program: its maps are read
        // afresh (the old entry is not carried over), and they attach nothing.
        let maps2 = Maps {
            attach: [(20, pool()), (21, vec![])].into(),
            reads: RefCell::new(HashMap::new()),
        };
        let second = [proc(20, 500, "redis", 7, BIG), proc(21, 900, "redis", 7, 0)];
        let seen = a.scan(&second.iter().collect::<Vec<_>>(), big, |pid| {
            maps2.read(pid)
        });
        assert_eq!(pids(&seen), BTreeSet::from([20]));
        assert_eq!(maps2.reads(21), 1);
        // Everything exits: nothing is remembered.
        let seen = a.scan(&[], big, |pid| maps2.read(pid));
        assert!(seen.is_empty());
        assert!(a.known.is_empty());
    }

    #[test]
    fn a_busy_process_is_read_when_first_seen_and_again_only_every_six_scans() {
        let maps = Maps {
            attach: [(20, pool())].into(),
            reads: RefCell::new(HashMap::new()),
        };
        let busy = [proc(20, 500, "postgres", 105, BIG)];
        let big = |p: &ProcSample| p.rss >= BIG;
        let mut a = Attachments::default();
        for _ in 0..13 {
            let seen = a.scan(&busy.iter().collect::<Vec<_>>(), big, |pid| maps.read(pid));
            // Between its reads, it keeps showing what it attached.
            assert_eq!(pids(&seen), BTreeSet::from([20]));
        }
        // Scans 0, 6 and 12.
        assert_eq!(maps.reads(20), 3);
    }
}
