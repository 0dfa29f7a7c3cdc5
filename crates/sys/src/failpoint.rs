//! Named kill points: the places where a crash would leave the system and the journal apart
//! (the journal written but the change not made, the change made but the journal not closed,
//! part way through a multi-step action or a revert).
//!
//! [`kill_point`] does nothing unless this crate is built with the `failpoints` feature, which
//! only the crash tests turn on (a dev-dependency feature). In such a build the `fail` crate's
//! `FAILPOINTS` environment variable arms points: `FAILPOINTS="engine.step.applied=return"`
//! kills the process with SIGKILL the first time it reaches that point, and
//! `"engine.step.applied=2*off->return"` the third time. The same feature lets
//! `PERFPILOT_SYSFS_OVERLAY` name a directory whose files stand in for the live ones of the same
//! relative path ([`crate::Fs::live`]), so a crash test writes a fixture where a real knob
//! would be global.

/// A kill point: its name (as armed in `FAILPOINTS`) and where it is, in words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KillPoint {
    /// The point's name.
    pub name: &'static str,
    /// Where it is: what is written and what is made when it is reached.
    pub place: &'static str,
}

/// Every kill point in perfpilot. The crash tests iterate over this list, and a test checks
/// that each `kill_point` call in the sources is listed here and each entry is called.
pub const POINTS: &[KillPoint] = &[
    KillPoint {
        name: "engine.trial.begun",
        place: "a trial's journal row written, none of its changes prepared",
    },
    KillPoint {
        name: "engine.step.journaled",
        place: "a step's undo record journaled, the step not applied (every step of every strategy: affinity, each paced collapse or migration step, a sysfs knob)",
    },
    KillPoint {
        name: "engine.step.applied",
        place: "a step applied, the journal not yet told how it went",
    },
    KillPoint {
        name: "engine.switch.off",
        place: "a switchback trial switched off (its changes undone), the journal still holding them open",
    },
    KillPoint {
        name: "engine.switch.on",
        place: "a switchback trial switched back on (its changes made again)",
    },
    KillPoint {
        name: "engine.verdict.undone",
        place: "a trial's changes undone after its verdict (or an early end), the journal not yet closed",
    },
    KillPoint {
        name: "engine.verdict.kept",
        place: "a trial kept, the journal not yet saying so",
    },
    KillPoint {
        name: "engine.enforce.journaled",
        place: "a kept or running action extended to new threads: the undo record journaled, the mask not yet set",
    },
    KillPoint {
        name: "engine.recover.undone",
        place: "a restarted daemon undid an open action of a crashed one, the journal not yet closed",
    },
    KillPoint {
        name: "engine.start_knob.begun",
        place: "the start-up knob's journal row written, the knob not prepared",
    },
    KillPoint {
        name: "engine.start_knob.applied",
        place: "the start-up knob written, its action not yet marked kept",
    },
    KillPoint {
        name: "engine.start_knob.restored",
        place: "the start-up knob restored, its action not yet closed",
    },
    KillPoint {
        name: "engine.stop.undone",
        place: "at stop, an action's changes undone, its journal row not yet closed",
    },
    KillPoint {
        name: "journal.undo.next",
        place: "between two undo records of one action (a multi-step revert half done: recovery, stop, verdict, `revert`)",
    },
    KillPoint {
        name: "revert.undone",
        place: "`perfpilot revert`: an action undone, its journal row not yet closed",
    },
    KillPoint {
        name: "study.knob.journaled",
        place: "a study knob's undo record on disk, the knob not yet written",
    },
    KillPoint {
        name: "study.knob.applied",
        place: "a study knob written, the next one not yet journaled",
    },
    KillPoint {
        name: "study.knob.restoring",
        place: "a study restoring its knobs: one restored, the others and the journal file not yet",
    },
];

/// Marks kill point `name` (listed in [`POINTS`]). In a `failpoints` build where `FAILPOINTS`
/// arms it, says so on stderr and kills this process with SIGKILL; otherwise does nothing.
#[inline]
pub fn kill_point(name: &'static str) {
    #[cfg(feature = "failpoints")]
    armed::reach(name);
    #[cfg(not(feature = "failpoints"))]
    let _ = name;
}

/// The overlay directory of the live [`crate::Fs`] (`PERFPILOT_SYSFS_OVERLAY`), only in a
/// `failpoints` build.
pub(crate) fn sysfs_overlay() -> Option<std::path::PathBuf> {
    #[cfg(feature = "failpoints")]
    {
        std::env::var_os("PERFPILOT_SYSFS_OVERLAY").map(std::path::PathBuf::from)
    }
    #[cfg(not(feature = "failpoints"))]
    None
}

#[cfg(feature = "failpoints")]
mod armed {
    use std::sync::Once;

    static SETUP: Once = Once::new();

    pub(super) fn reach(name: &'static str) {
        // The scenario reads FAILPOINTS once and stays for the life of the process.
        SETUP.call_once(|| std::mem::forget(fail::FailScenario::setup()));
        if fail::eval(name, |_| ()).is_some() {
            eprintln!("kill point {name} reached: SIGKILL");
            // SAFETY: kill(2) on our own pid has no memory-safety preconditions.
            unsafe {
                libc::kill(libc::getpid(), libc::SIGKILL);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::POINTS;

    /// The `kill_point("…")` names in the workspace's sources (this file excluded).
    fn called() -> Vec<(String, String)> {
        let crates = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut out = Vec::new();
        let mut stack = vec![crates];
        while let Some(dir) = stack.pop() {
            for e in std::fs::read_dir(&dir).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    if !p.ends_with("target") {
                        stack.push(p);
                    }
                    continue;
                }
                if p.extension().is_none_or(|x| x != "rs") || p.ends_with("sys/src/failpoint.rs") {
                    continue;
                }
                let text = std::fs::read_to_string(&p).unwrap();
                for piece in text.split("kill_point(\"").skip(1) {
                    let name = piece.split('"').next().unwrap().to_string();
                    out.push((name, p.display().to_string()));
                }
            }
        }
        out
    }

    #[test]
    fn every_kill_point_in_the_sources_is_listed_and_every_listed_one_is_called() {
        let called = called();
        for (name, file) in &called {
            assert!(
                POINTS.iter().any(|p| p.name == name),
                "{file}: kill point {name} is not in failpoint::POINTS"
            );
        }
        for p in POINTS {
            assert!(
                called.iter().any(|c| c.0 == p.name),
                "kill point {} is listed but never called",
                p.name
            );
        }
        let mut names: Vec<&str> = POINTS.iter().map(|p| p.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), POINTS.len(), "a kill point is listed twice");
    }
}
