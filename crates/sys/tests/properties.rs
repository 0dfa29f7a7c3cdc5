//! Property tests of the change path and of CPU lists: reverting after any prefix of an
//! action's steps (also with the next step journaled but not made, as a crash leaves it)
//! restores the start, replaying the undo records again changes nothing, and a CPU list reads
//! back as it was written.
//!
//! Affinity steps act on a thread this test spawns; knob steps on a temporary `Fs::at` tree.

use std::sync::mpsc;

use perfpilot_sys::change::{self, Change, Undo};
use perfpilot_sys::knob::read_knob;
use perfpilot_sys::{CpuSet, Fs};
use proptest::prelude::*;

const KNOBS: [(&str, &str); 3] = [
    (
        "sys/kernel/mm/transparent_hugepage/enabled",
        "always [madvise] never\n",
    ),
    ("proc/sys/vm/swappiness", "60\n"),
    ("sys/block/vda/queue/read_ahead_kb", "128\n"),
];
const VALUES: [&[&str]; 3] = [
    &["always", "madvise", "never"],
    &["0", "10", "60", "100"],
    &["16", "128", "4096"],
];

/// One step of an action.
#[derive(Debug, Clone)]
enum Step {
    /// Knob `i` to value `j` of [`VALUES`].
    Knob(usize, usize),
    /// The helper thread's mask to the allowed CPUs whose bit is set (an empty pick: the first).
    Mask(u64),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0..KNOBS.len(), 0..4usize).prop_map(|(i, j)| Step::Knob(i, j % VALUES[i].len())),
        any::<u64>().prop_map(Step::Mask),
    ]
}

/// A thread of this process that sleeps until the test ends; its tid.
struct Helper {
    tid: i32,
    _stop: mpsc::Sender<()>,
}

fn helper() -> Helper {
    let (stop, rx) = mpsc::channel::<()>();
    let (ready, started) = mpsc::channel::<i32>();
    std::thread::spawn(move || {
        // `/proc/thread-self` names this thread: `PID/task/TID`.
        let link = std::fs::read_link("/proc/thread-self").unwrap();
        let tid = link.file_name().unwrap().to_string_lossy().parse().unwrap();
        ready.send(tid).unwrap();
        let _ = rx.recv();
    });
    Helper {
        tid: started.recv().unwrap(),
        _stop: stop,
    }
}

static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

struct Rig {
    _dir: tempfile::TempDir,
    tree: Fs,
    live: Fs,
    helper: Helper,
    allowed: Vec<u32>,
}

impl Rig {
    fn new() -> Rig {
        let dir = tempfile::tempdir().unwrap();
        for (rel, text) in KNOBS {
            let p = dir.path().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        let helper = helper();
        let allowed = perfpilot_sys::affinity::get_affinity(helper.tid)
            .unwrap()
            .iter()
            .collect();
        Rig {
            tree: Fs::at(dir.path()),
            _dir: dir,
            live: Fs::live(),
            helper,
            allowed,
        }
    }

    fn change(&self, s: &Step) -> (Change, &Fs) {
        match *s {
            Step::Knob(i, j) => (
                Change::Sysfs {
                    rel: KNOBS[i].0.into(),
                    value: VALUES[i][j].into(),
                },
                &self.tree,
            ),
            Step::Mask(bits) => {
                let mut cpus: CpuSet = self
                    .allowed
                    .iter()
                    .enumerate()
                    .filter(|(k, _)| bits >> (k % 64) & 1 == 1)
                    .map(|(_, c)| *c)
                    .collect();
                if cpus.is_empty() {
                    cpus.insert(self.allowed[0]);
                }
                (
                    Change::Affinity {
                        pid: std::process::id() as i32,
                        tids: vec![self.helper.tid],
                        cpus,
                    },
                    &self.live,
                )
            }
        }
    }

    fn fs_of(&self, u: &Undo) -> &Fs {
        match u {
            Undo::Sysfs { .. } => &self.tree,
            _ => &self.live,
        }
    }

    /// Every knob's value and the helper's mask.
    fn state(&self) -> (Vec<String>, CpuSet) {
        (
            KNOBS
                .iter()
                .map(|(rel, _)| read_knob(&self.tree, rel).unwrap())
                .collect(),
            perfpilot_sys::affinity::get_affinity(self.helper.tid).unwrap(),
        )
    }

    fn undo_all(&self, records: &[Undo]) {
        for u in records.iter().rev() {
            change::undo(self.fs_of(u), u).unwrap();
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn reverting_any_prefix_of_an_action_restores_the_start_and_replaying_changes_nothing(
        steps in prop::collection::vec(step(), 1..8),
        prefix in 0usize..8,
        next_journaled in any::<bool>(),
    ) {
        let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let rig = Rig::new();
        let start = rig.state();
        let prefix = prefix.min(steps.len());
        let mut records = Vec::new();
        for s in &steps[..prefix] {
            let (c, fs) = rig.change(s);
            records.push(change::prepare(fs, &c).unwrap());
            change::apply(fs, &c).unwrap();
        }
        // A crash between journaling the next step and making it.
        if next_journaled && prefix < steps.len() {
            let (c, fs) = rig.change(&steps[prefix]);
            records.push(change::prepare(fs, &c).unwrap());
        }
        rig.undo_all(&records);
        prop_assert_eq!(&rig.state(), &start);
        // A second recovery (the first one crashed after undoing, before closing the journal).
        rig.undo_all(&records);
        prop_assert_eq!(&rig.state(), &start);
        // Or crashed part way through undoing: replay from the start of the list.
        let half = records.len() / 2;
        rig.undo_all(&records[half..]);
        rig.undo_all(&records);
        prop_assert_eq!(rig.state(), start);
    }

    #[test]
    fn a_cpu_list_reads_back_as_it_was_written(cpus in prop::collection::btree_set(0u32..2048, 0..64)) {
        let set: CpuSet = cpus.iter().copied().collect();
        let text = set.to_string();
        let back = CpuSet::parse(&text).unwrap();
        prop_assert_eq!(&back, &set);
        prop_assert_eq!(back.iter().collect::<Vec<u32>>(), cpus.into_iter().collect::<Vec<u32>>());
        // The text is the kernel's normal form: writing what was read gives the same text.
        prop_assert_eq!(back.to_string(), text);
    }

    #[test]
    fn any_kernel_style_list_parses_to_the_cpus_it_names(
        ranges in prop::collection::vec((0u32..1024, 0u32..40), 0..12),
    ) {
        let text: Vec<String> = ranges
            .iter()
            .map(|&(a, n)| if n == 0 { a.to_string() } else { format!("{a}-{}", a + n) })
            .collect();
        let set = CpuSet::parse(&text.join(",")).unwrap();
        for &(a, n) in &ranges {
            for c in a..=a + n {
                prop_assert!(set.contains(c), "{} lacks {}", set, c);
            }
        }
        let named: usize = {
            let mut all: Vec<u32> = ranges.iter().flat_map(|&(a, n)| a..=a + n).collect();
            all.sort_unstable();
            all.dedup();
            all.len()
        };
        prop_assert_eq!(set.len(), named);
        prop_assert_eq!(CpuSet::parse(&set.to_string()).unwrap(), set);
    }
}
