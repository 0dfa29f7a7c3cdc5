//! Tunables: every threshold and switch of the optimizer, with its default, range and unit
//! (the `asoo` of the source). Defaults are scaled for small machines; the source's values are
//! given where they differ.
//!
//! One table ([`tunables!`]) declares each tunable once; from it come the typed [`Tunables`]
//! the optimizer reads (`tun.windows`, `tun.allow_unverified`: a typo does not compile) and the
//! by-name machinery the CLI, the config file and the store need ([`DEFS`], [`validate`],
//! [`Tunables::set`], [`listing`]).

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

/// The level at which cache affinity compacts a workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    /// A NUMA node.
    Node,
    /// The CPUs sharing one last-level cache.
    Llc,
    /// The hardware threads of one core.
    Core,
}

impl Level {
    /// Every level, in the order `tunables --list` shows them.
    pub const ALL: [Level; 3] = [Level::Node, Level::Llc, Level::Core];

    /// The names of [`Level::ALL`], as the tunable `affinity_level` takes them.
    pub const NAMES: &'static [&'static str] = &[
        Level::Node.as_str(),
        Level::Llc.as_str(),
        Level::Core.as_str(),
    ];

    /// The name of the level.
    pub const fn as_str(self) -> &'static str {
        match self {
            Level::Node => "node",
            Level::Llc => "llc",
            Level::Core => "core",
        }
    }

    /// Parses [`Level::as_str`].
    pub fn parse(s: &str) -> Option<Level> {
        Level::ALL.into_iter().find(|l| l.as_str() == s)
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// What a tunable holds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    /// `on` or `off`.
    Bool,
    /// A number in `min ..= max`.
    Number {
        /// The smallest value allowed.
        min: f64,
        /// The largest value allowed.
        max: f64,
    },
    /// One of a fixed list of names.
    Choice(&'static [&'static str]),
}

/// One tunable's definition.
#[derive(Debug, Clone, Copy)]
pub struct Def {
    /// The name used in the config file, `-o name=value` and the store.
    pub name: &'static str,
    /// The default, as text.
    pub default: &'static str,
    /// What values it takes.
    pub kind: Kind,
    /// The unit of a number (empty for switches and choices).
    pub unit: &'static str,
    /// What it does, in a line.
    pub help: &'static str,
}

impl Def {
    /// The values it takes, as `tunables --list` shows them: `on|off`, `min..max`, `a|b|c`.
    pub fn range(&self) -> String {
        match self.kind {
            Kind::Bool => "on|off".to_string(),
            Kind::Number { min, max } => format!("{min}..{max}"),
            Kind::Choice(c) => c.join("|"),
        }
    }
}

/// A type a tunable can hold: read from its validated text (see [`validate`]) and written back.
pub trait Value: Sized + Copy {
    /// The value of validated text; `None` when the text is not of this type.
    fn from_text(text: &str) -> Option<Self>;
    /// The value as text, as the store and `tunables --list` show it.
    fn to_text(self) -> String;
}

impl Value for f64 {
    fn from_text(text: &str) -> Option<f64> {
        text.trim().parse().ok()
    }
    fn to_text(self) -> String {
        self.to_string()
    }
}

impl Value for bool {
    fn from_text(text: &str) -> Option<bool> {
        match text {
            "on" => Some(true),
            "off" => Some(false),
            _ => None,
        }
    }
    fn to_text(self) -> String {
        if self { "on" } else { "off" }.to_string()
    }
}

impl Value for Level {
    fn from_text(text: &str) -> Option<Level> {
        Level::parse(text)
    }
    fn to_text(self) -> String {
        self.as_str().to_string()
    }
}

/// The [`Kind`] of a tunable of type `$ty` (numbers carry their range).
macro_rules! tunable_kind {
    (f64, $min:literal, $max:literal) => {
        Kind::Number {
            min: $min,
            max: $max,
        }
    };
    (bool) => {
        Kind::Bool
    };
    (Level) => {
        Kind::Choice(Level::NAMES)
    };
}

/// The typed value of a default written as a token in the table (`5`, `on`, `llc`).
macro_rules! tunable_default {
    (f64, $d:literal) => {
        $d as f64
    };
    (bool, on) => {
        true
    };
    (bool, off) => {
        false
    };
    (Level, node) => {
        Level::Node
    };
    (Level, llc) => {
        Level::Llc
    };
    (Level, core) => {
        Level::Core
    };
}

/// Declares every tunable once: `name: type = default [min, max], "unit", "help";` (the range
/// only for numbers). Generates [`DEFS`], the typed [`Tunables`] and its by-name access.
macro_rules! tunables {
    ($( $name:ident : $ty:ident = $default:tt $([$min:literal, $max:literal])?, $unit:literal, $help:literal; )*) => {
        /// Every tunable, in the order `tunables --list` shows them.
        pub const DEFS: &[Def] = &[$(
            Def {
                name: stringify!($name),
                default: stringify!($default),
                kind: tunable_kind!($ty $(, $min, $max)?),
                unit: $unit,
                help: $help,
            },
        )*];

        /// The values in force: one typed field per tunable (see [`DEFS`] for ranges and units).
        #[derive(Debug, Clone, PartialEq, Serialize)]
        pub struct Tunables {
            $(
                #[doc = $help]
                pub $name: $ty,
            )*
        }

        impl Default for Tunables {
            #[allow(clippy::unnecessary_cast)]
            fn default() -> Self {
                Tunables {
                    $($name: tunable_default!($ty, $default),)*
                }
            }
        }

        impl Tunables {
            /// Stores validated `text` in the field `name`; `None` when there is no such field
            /// or the text is not of its type.
            fn assign(&mut self, name: &str, text: &str) -> Option<()> {
                match name {
                    $(stringify!($name) => self.$name = <$ty as Value>::from_text(text)?,)*
                    _ => return None,
                }
                Some(())
            }

            /// The value of `name` as text; `None` for an unknown name.
            pub fn get(&self, name: &str) -> Option<String> {
                match name {
                    $(stringify!($name) => Some(Value::to_text(self.$name)),)*
                    _ => None,
                }
            }
        }
    };
}

tunables! {
    interval_s: f64 = 5 [0.2, 3600.0], "s",
        "time between scans; one scan is one evaluation window";
    min_age_s: f64 = 60 [0.0, 1e7], "s",
        "a workload must have run this long to be eligible (source: 30 minutes)";
    min_cpu_cores: f64 = 0.5 [0.0, 4096.0], "cores",
        "a workload must use this much CPU to be eligible (source: 2 cores for large pages)";
    min_memory_mib: f64 = 64 [0.0, 1e9], "MiB",
        "a workload must hold this much memory to be eligible for large pages (source: 16 GB)";
    cache_affinity: bool = on, "",
        "compact multi-threaded workloads onto one cache/node domain";
    memory_affinity: bool = on, "",
        "move a compacted workload's private pages to its node";
    large_pages: bool = on, "",
        "promote large anonymous and shared-memory ranges to huge pages (MADV_COLLAPSE)";
    shmem_advise_at_start: bool = on, "",
        "when the daemon starts with large_pages on and shmem_enabled `never`, raise it to `advise` (journaled, restored at stop) so that servers started later map shared memory where huge pages can be collapsed";
    read_ahead: bool = on, "",
        "adapt block devices' read_ahead_kb to the sequential share of their reads";
    affinity_level: Level = llc, "",
        "the domain cache affinity compacts onto (core exists to exercise the logic on small machines)";
    headroom: f64 = 0.8 [0.1, 8.0], "share",
        "compact only when demand <= free domain capacity x headroom (no predicted loss in response time); above 1 only for experiments that force an overload";
    migrate_mb_per_s: f64 = 64 [1.0, 100_000.0], "MB/s",
        "pace of page migration";
    migrate_max_share: f64 = 0.7 [0.0, 1.0], "share",
        "move at most this share of a workload's private memory (source: 70 %)";
    collapse_mb_per_s: f64 = 512 [1.0, 100_000.0], "MB/s",
        "pace of huge-page promotion";
    huge_coverage_target: f64 = 0.9 [0.0, 1.0], "share",
        "a workload whose huge-page coverage is above this is not promoted";
    windows: f64 = 6 [2.0, 100.0], "windows",
        "evaluation windows before and after an action, at least (a switchback trial's baseline that plans its periods)";
    max_windows: f64 = 30 [2.0, 1000.0], "windows",
        "a sequential trial whose baseline is noisy measures up to this many windows on each side (at least `windows`), as many as `resolution` needs";
    resolution: f64 = 0.03 [0.001, 1.0], "share",
        "the half-width of the gain's interval a sequential trial aims for: its window count follows from its baseline's noise";
    rest_change_max: f64 = 0.1 [0.0, 1.0], "share of the CPUs",
        "a sequential trial during which the rest of the machine's CPU moved by more than this share of its CPUs (at least a quarter of a core) is abandoned, not judged; 0 switches the check off";
    min_effect: f64 = 0.02 [0.0, 1.0], "share",
        "keep an action only when the lower end of its gain's confidence interval clears this";
    confidence: f64 = 0.95 [0.5, 0.999], "share",
        "confidence level of the verdicts' intervals";
    period_max_s: f64 = 120 [2.0, 3600.0], "s",
        "the longest period of a switchback trial (the change on, or off): longer ones let the drift back in; a signal whose windows do not fit is measured before and after";
    switch_settle_s: f64 = 0 [0.0, 3600.0], "s",
        "seconds a switched change needs to take hold; each switchback period drops at least one window, and as many as this covers";
    harm_bound: f64 = 0.02 [0.0, 0.5], "share",
        "a change that cannot be undone (one-way, or against a control where huge pages are not split back) is kept when its interval rules out a loss worse than this, even when its gain is not resolved (said as such)";
    drift_floor: f64 = 0.04 [0.0, 0.5], "share",
        "a one-way trial allows at least this much drift (sd of the level, log scale) between its windows before and after, more where its own windows show more";
    one_way_history_s: f64 = 480 [0.0, 86_400.0], "s",
        "before a trial judged before and after on the signal itself (one-way, or before/after where a switchback's periods do not fit), its signal is watched unchanged for this long: how far it moves on its own over the trial's span widens the verdict's interval (0: not watched)";
    verdict_within_s: f64 = 300 [30.0, 86_400.0], "s",
        "a one-way trial ends within this long of its start: its windows a side are capped to fit, its change's application included";
    watch_windows: f64 = 2 [0.0, 100.0], "× the trial's windows",
        "after a one-way keep, its later windows are watched against its baseline for this many times the windows it measured after the change; a loss ends it (0: no watch)";
    backoff_s: f64 = 3600 [0.0, 1e8], "s",
        "after a reverted or neutral action, do not try that strategy on that workload for this long (the source's hibernation)";
    allow_unverified: bool = off, "",
        "act on workloads that have no usable benefit signal (kept without a verdict)";
    cpu_budget_pct: f64 = 1 [0.01, 100.0], "% of one CPU",
        "budget of the daemon's monitoring (sampling, reading, deciding); scans slow down to keep under it. Making changes is paced instead (collapse_mb_per_s, migrate_mb_per_s)";
    revert_on_stop: bool = on, "",
        "undo every action when the daemon stops, except huge pages, which stay (off: keep verified actions in place)";
    probe_timeout_s: f64 = 2 [0.1, 60.0], "s",
        "how long a signal probe may take";
    read_ahead_max_kb: f64 = 4096 [16.0, 1_048_576.0], "KiB",
        "largest read_ahead_kb the read-ahead strategy sets";
    read_ahead_min_mb_per_s: f64 = 5 [0.0, 1e6], "MB/s",
        "a device must read this fast to be considered";
}

/// A tunable value that is out of range or not of its kind.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TunableError {
    /// No tunable has this name.
    #[error("unknown tunable {0:?}; `perfpilot tunables --list` shows them")]
    Unknown(String),
    /// The value is not one the tunable takes.
    #[error("tunable {name}: {value:?} is not valid: {why}")]
    Invalid {
        /// The tunable.
        name: String,
        /// The value as given.
        value: String,
        /// What it should be.
        why: String,
    },
}

/// The definition of `name`.
pub fn def(name: &str) -> Result<&'static Def, TunableError> {
    DEFS.iter()
        .find(|d| d.name == name)
        .ok_or_else(|| TunableError::Unknown(name.to_string()))
}

/// Checks and normalises `value` for `name` (`1`/`true`/`yes` → `on`).
pub fn validate(name: &str, value: &str) -> Result<String, TunableError> {
    let d = def(name)?;
    let bad = |why: String| TunableError::Invalid {
        name: name.to_string(),
        value: value.to_string(),
        why,
    };
    let v = value.trim();
    match d.kind {
        Kind::Bool => match v.to_ascii_lowercase().as_str() {
            "on" | "1" | "true" | "yes" => Ok("on".into()),
            "off" | "0" | "false" | "no" => Ok("off".into()),
            _ => Err(bad("expected on or off".into())),
        },
        Kind::Number { min, max } => {
            let x: f64 = v.parse().map_err(|_| bad("not a number".into()))?;
            if !(min..=max).contains(&x) {
                return Err(bad(format!("outside {min} ..= {max} {}", d.unit)));
            }
            Ok(v.to_string())
        }
        Kind::Choice(options) => {
            if options.contains(&v) {
                Ok(v.to_string())
            } else {
                Err(bad(format!("expected one of {}", options.join(", "))))
            }
        }
    }
}

impl Tunables {
    /// Sets one tunable, validated.
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), TunableError> {
        let v = validate(name, value)?;
        self.assign(name, &v).ok_or_else(|| TunableError::Invalid {
            name: name.to_string(),
            value: value.to_string(),
            why: format!("{v:?} does not read as its type"),
        })
    }

    /// Applies `name=value` pairs in order.
    pub fn apply<'a>(
        &mut self,
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<(), TunableError> {
        for (n, v) in pairs {
            self.set(n, v)?;
        }
        Ok(())
    }

    /// The defaults with persisted `name → value` pairs applied over them; a pair that does
    /// not validate (a tunable since removed, a value out of a narrowed range) is left out and
    /// returned, for the caller to report.
    pub fn with_persisted(persisted: &BTreeMap<String, String>) -> (Tunables, Vec<TunableError>) {
        let mut t = Tunables::default();
        let mut ignored = Vec::new();
        for (n, v) in persisted {
            if let Err(e) = t.set(n, v) {
                ignored.push(e);
            }
        }
        (t, ignored)
    }

    /// `min_memory_mib` in bytes.
    pub fn min_memory_bytes(&self) -> u64 {
        (self.min_memory_mib * 1048576.0) as u64
    }

    /// `windows` as a count (a fraction is dropped, as it always was).
    pub fn window_count(&self) -> usize {
        self.windows as usize
    }

    /// Every (definition, value as text) pair, in the order of [`DEFS`].
    pub fn iter(&self) -> impl Iterator<Item = (&'static Def, String)> + '_ {
        DEFS.iter()
            .map(|d| (d, self.get(d.name).unwrap_or_default()))
    }
}

/// What `tunables --list` shows: each tunable with the value in force given the persisted
/// `name → value` pairs, as text the way it was persisted (invalid pairs are ignored, as the
/// daemon ignores them).
pub fn listing(persisted: &BTreeMap<String, String>) -> Vec<(&'static Def, String)> {
    DEFS.iter()
        .map(|d| {
            let value = persisted
                .get(d.name)
                .and_then(|v| validate(d.name, v).ok())
                .unwrap_or_else(|| d.default.to_string());
            (d, value)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_values_are_checked() {
        for d in DEFS {
            assert_eq!(
                validate(d.name, d.default).unwrap(),
                d.default,
                "{}",
                d.name
            );
        }
        let mut t = Tunables::default();
        t.set("headroom", "0.5").unwrap();
        assert_eq!(t.headroom, 0.5);
        t.set("allow_unverified", "yes").unwrap();
        assert!(t.allow_unverified);
        t.set("affinity_level", "core").unwrap();
        assert_eq!(t.affinity_level, Level::Core);
        assert!(matches!(
            t.set("headroom", "9"),
            Err(TunableError::Invalid { .. })
        ));
        assert!(matches!(
            t.set("affinity_level", "socket"),
            Err(TunableError::Invalid { .. })
        ));
        let e = t.set("no_such", "1").unwrap_err();
        assert!(e.to_string().contains("perfpilot tunables --list"));
    }

    #[test]
    fn every_typed_default_reads_back_as_the_listed_default_text() {
        let t = Tunables::default();
        for (d, text) in t.iter() {
            assert_eq!(text, d.default, "{}", d.name);
        }
        assert_eq!(t.interval_s, 5.0);
        assert_eq!(t.windows, 6.0);
        assert!(t.cache_affinity && t.revert_on_stop && !t.allow_unverified);
        assert_eq!(t.affinity_level, Level::Llc);
    }

    #[test]
    fn setting_by_name_reaches_the_typed_field_and_back() {
        let mut t = Tunables::default();
        t.apply([
            ("windows", "4"),
            ("read_ahead", "false"),
            ("affinity_level", "node"),
        ])
        .unwrap();
        assert_eq!(t.windows, 4.0);
        assert!(!t.read_ahead);
        assert_eq!(t.affinity_level, Level::Node);
        assert_eq!(t.get("read_ahead").as_deref(), Some("off"));
        assert_eq!(t.get("windwos"), None, "a misspelt name is no tunable");
    }

    #[test]
    fn range_errors_name_the_tunable_and_its_range() {
        let e = validate("windows", "1").unwrap_err().to_string();
        assert_eq!(
            e,
            "tunable windows: \"1\" is not valid: outside 2 ..= 100 windows"
        );
        let e = validate("revert_on_stop", "maybe").unwrap_err().to_string();
        assert_eq!(
            e,
            "tunable revert_on_stop: \"maybe\" is not valid: expected on or off"
        );
    }

    #[test]
    fn persisted_values_override_defaults_and_bad_ones_are_reported() {
        let persisted: BTreeMap<String, String> = [
            ("windows".to_string(), "4".to_string()),
            ("headroom".to_string(), "99".to_string()),
            ("gone".to_string(), "1".to_string()),
        ]
        .into();
        let (t, ignored) = Tunables::with_persisted(&persisted);
        assert_eq!(t.windows, 4.0);
        assert_eq!(t.headroom, 0.8);
        assert_eq!(ignored.len(), 2, "{ignored:?}");
        let list = listing(&persisted);
        let value = |n: &str| list.iter().find(|(d, _)| d.name == n).unwrap().1.clone();
        assert_eq!(value("windows"), "4");
        assert_eq!(value("headroom"), "0.8");
        assert_eq!(list.len(), DEFS.len());
    }

    #[test]
    fn ranges_read_as_the_list_shows_them() {
        assert_eq!(def("affinity_level").unwrap().range(), "node|llc|core");
        assert_eq!(def("read_ahead").unwrap().range(), "on|off");
        assert_eq!(def("interval_s").unwrap().range(), "0.2..3600");
    }
}
