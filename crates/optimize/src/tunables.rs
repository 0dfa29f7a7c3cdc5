//! Tunables: every threshold and switch of the optimizer, with its default, range and unit
//! (the `asoo` of the source). Defaults are scaled for small machines; the source's values are
//! given where they differ.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

/// The level at which cache affinity compacts a workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    Node,
    Llc,
    Core,
}

/// What a tunable holds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    Bool,
    Number { min: f64, max: f64 },
    Choice(&'static [&'static str]),
}

/// One tunable's definition.
#[derive(Debug, Clone, Copy)]
pub struct Def {
    pub name: &'static str,
    pub default: &'static str,
    pub kind: Kind,
    pub unit: &'static str,
    pub help: &'static str,
}

/// Every tunable.
pub const DEFS: &[Def] = &[
    Def {
        name: "interval_s",
        default: "5",
        kind: Kind::Number {
            min: 0.2,
            max: 3600.0,
        },
        unit: "s",
        help: "time between scans; one scan is one evaluation window",
    },
    Def {
        name: "min_age_s",
        default: "60",
        kind: Kind::Number { min: 0.0, max: 1e7 },
        unit: "s",
        help: "a workload must have run this long to be eligible (source: 30 minutes)",
    },
    Def {
        name: "min_cpu_cores",
        default: "0.5",
        kind: Kind::Number {
            min: 0.0,
            max: 4096.0,
        },
        unit: "cores",
        help: "a workload must use this much CPU to be eligible (source: 2 cores for large pages)",
    },
    Def {
        name: "min_memory_mib",
        default: "64",
        kind: Kind::Number { min: 0.0, max: 1e9 },
        unit: "MiB",
        help: "a workload must hold this much memory to be eligible for large pages (source: 16 GB)",
    },
    Def {
        name: "cache_affinity",
        default: "on",
        kind: Kind::Bool,
        unit: "",
        help: "compact multi-threaded workloads onto one cache/node domain",
    },
    Def {
        name: "memory_affinity",
        default: "on",
        kind: Kind::Bool,
        unit: "",
        help: "move a compacted workload's private pages to its node",
    },
    Def {
        name: "large_pages",
        default: "on",
        kind: Kind::Bool,
        unit: "",
        help: "promote large anonymous and shared-memory ranges to huge pages (MADV_COLLAPSE)",
    },
    Def {
        name: "read_ahead",
        default: "on",
        kind: Kind::Bool,
        unit: "",
        help: "adapt block devices' read_ahead_kb to the sequential share of their reads",
    },
    Def {
        name: "affinity_level",
        default: "llc",
        kind: Kind::Choice(&["node", "llc", "core"]),
        unit: "",
        help: "the domain cache affinity compacts onto (core exists to exercise the logic on small machines)",
    },
    Def {
        name: "headroom",
        default: "0.8",
        kind: Kind::Number { min: 0.1, max: 8.0 },
        unit: "share",
        help: "compact only when demand <= free domain capacity x headroom (no predicted loss in response time); above 1 only for experiments that force an overload",
    },
    Def {
        name: "migrate_mb_per_s",
        default: "64",
        kind: Kind::Number {
            min: 1.0,
            max: 100_000.0,
        },
        unit: "MB/s",
        help: "pace of page migration",
    },
    Def {
        name: "migrate_max_share",
        default: "0.7",
        kind: Kind::Number { min: 0.0, max: 1.0 },
        unit: "share",
        help: "move at most this share of a workload's private memory (source: 70 %)",
    },
    Def {
        name: "collapse_mb_per_s",
        default: "512",
        kind: Kind::Number {
            min: 1.0,
            max: 100_000.0,
        },
        unit: "MB/s",
        help: "pace of huge-page promotion",
    },
    Def {
        name: "huge_coverage_target",
        default: "0.9",
        kind: Kind::Number { min: 0.0, max: 1.0 },
        unit: "share",
        help: "a workload whose huge-page coverage is above this is not promoted",
    },
    Def {
        name: "windows",
        default: "6",
        kind: Kind::Number {
            min: 2.0,
            max: 100.0,
        },
        unit: "windows",
        help: "evaluation windows before and after an action (or on/off pairs when interleaved)",
    },
    Def {
        name: "min_effect",
        default: "0.02",
        kind: Kind::Number { min: 0.0, max: 1.0 },
        unit: "share",
        help: "keep an action only when the lower end of its gain's confidence interval clears this",
    },
    Def {
        name: "confidence",
        default: "0.95",
        kind: Kind::Number {
            min: 0.5,
            max: 0.999,
        },
        unit: "share",
        help: "confidence level of the verdicts' intervals",
    },
    Def {
        name: "backoff_s",
        default: "3600",
        kind: Kind::Number { min: 0.0, max: 1e8 },
        unit: "s",
        help: "after a reverted or neutral action, do not try that strategy on that workload for this long (the source's hibernation)",
    },
    Def {
        name: "allow_unverified",
        default: "off",
        kind: Kind::Bool,
        unit: "",
        help: "act on workloads that have no usable benefit signal (kept without a verdict)",
    },
    Def {
        name: "cpu_budget_pct",
        default: "1",
        kind: Kind::Number {
            min: 0.01,
            max: 100.0,
        },
        unit: "% of one CPU",
        help: "the daemon's own CPU budget; scans slow down to keep under it",
    },
    Def {
        name: "revert_on_stop",
        default: "on",
        kind: Kind::Bool,
        unit: "",
        help: "undo every action when the daemon stops (off: keep verified actions in place)",
    },
    Def {
        name: "probe_timeout_s",
        default: "2",
        kind: Kind::Number {
            min: 0.1,
            max: 60.0,
        },
        unit: "s",
        help: "how long a signal probe may take",
    },
    Def {
        name: "read_ahead_max_kb",
        default: "4096",
        kind: Kind::Number {
            min: 16.0,
            max: 1_048_576.0,
        },
        unit: "KiB",
        help: "largest read_ahead_kb the read-ahead strategy sets",
    },
    Def {
        name: "read_ahead_min_mb_per_s",
        default: "5",
        kind: Kind::Number { min: 0.0, max: 1e6 },
        unit: "MB/s",
        help: "a device must read this fast to be considered",
    },
];

/// A tunable value that is out of range or not of its kind.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TunableError {
    #[error("unknown tunable {0:?}; `perfpilot tunables --list` shows them")]
    Unknown(String),
    #[error("tunable {name}: {value:?} is not valid: {why}")]
    Invalid {
        name: String,
        value: String,
        why: String,
    },
}

/// The values in force.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Tunables {
    values: BTreeMap<&'static str, String>,
}

impl Default for Tunables {
    fn default() -> Self {
        Tunables {
            values: DEFS
                .iter()
                .map(|d| (d.name, d.default.to_string()))
                .collect(),
        }
    }
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
        let d = def(name)?;
        self.values.insert(d.name, v);
        Ok(())
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

    /// The value of `name` as text.
    pub fn get(&self, name: &str) -> &str {
        self.values.get(name).map(String::as_str).unwrap_or("")
    }

    /// A numeric tunable (0 when not numeric, which validation rules out).
    pub fn num(&self, name: &str) -> f64 {
        self.get(name).parse().unwrap_or(0.0)
    }

    /// A boolean tunable.
    pub fn on(&self, name: &str) -> bool {
        self.get(name) == "on"
    }

    /// The cache-affinity level.
    pub fn level(&self) -> Level {
        match self.get("affinity_level") {
            "node" => Level::Node,
            "core" => Level::Core,
            _ => Level::Llc,
        }
    }

    /// Every (definition, value) pair.
    pub fn iter(&self) -> impl Iterator<Item = (&'static Def, &str)> {
        DEFS.iter().map(|d| (d, self.get(d.name)))
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Level::Node => "node",
            Level::Llc => "llc",
            Level::Core => "core",
        })
    }
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
        assert_eq!(t.num("headroom"), 0.5);
        t.set("allow_unverified", "yes").unwrap();
        assert!(t.on("allow_unverified"));
        t.set("affinity_level", "core").unwrap();
        assert_eq!(t.level(), Level::Core);
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
}
