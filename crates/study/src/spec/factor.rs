//! Factors and their levels (`[factors]`, `[allocators]`), the configurations they make, and
//! tables naming one level per factor (`run.baseline`, `scaling.config`).

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::raw::SpannedTable;
use super::source::Source;
use crate::error::Result;

/// Factors the runner itself understands; every other factor is a name for templates.
pub const BUILTIN_FACTORS: [&str; 4] = ["instances", "cores_per_instance", "binding", "allocator"];

/// Allocators known without an `[allocators]` entry (Debian's library paths).
pub const DEFAULT_ALLOCATORS: [(&str, &str); 4] = [
    ("system", ""),
    ("jemalloc", "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"),
    ("tcmalloc", "/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4"),
    ("mimalloc", "/usr/lib/x86_64-linux-gnu/libmimalloc.so.2"),
];

/// One level of a factor.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Level {
    /// An integer level (`instances = [1, 2]`).
    Int(i64),
    /// A floating-point level.
    Float(f64),
    /// A boolean level.
    Bool(bool),
    /// A string level (`binding = ["none", "cores"]`).
    Str(String),
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Level::Int(v) => write!(f, "{v}"),
            Level::Float(v) => write!(f, "{v}"),
            Level::Bool(v) => write!(f, "{v}"),
            Level::Str(v) => write!(f, "{v}"),
        }
    }
}

impl Level {
    pub(super) fn type_name(&self) -> &'static str {
        match self {
            Level::Int(_) => "an integer",
            Level::Float(_) => "a number",
            Level::Bool(_) => "a boolean",
            Level::Str(_) => "a string",
        }
    }

    pub(super) fn from_toml(v: &toml::Value) -> Option<Level> {
        Some(match v {
            toml::Value::Integer(i) => Level::Int(*i),
            toml::Value::Float(x) => Level::Float(*x),
            toml::Value::Boolean(b) => Level::Bool(*b),
            toml::Value::String(s) => Level::Str(s.clone()),
            _ => return None,
        })
    }

    /// The level as the study file writes it (strings quoted), for error messages.
    pub fn repr(&self) -> String {
        match self {
            Level::Str(s) => format!("{s:?}"),
            other => other.to_string(),
        }
    }
}

/// How instances are bound to CPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Binding {
    /// No binding: the scheduler places threads anywhere.
    None,
    /// Whole cores (SMT siblings together), an instance's cores kept in one LLC when they fit.
    Cores,
    /// Whole LLC domains per instance.
    Llc,
    /// Whole NUMA nodes per instance, memory bound to them.
    Node,
}

impl Binding {
    /// Parses `none`, `cores`, `llc`, `node`.
    pub fn parse(s: &str) -> Option<Binding> {
        Some(match s {
            "none" => Binding::None,
            "cores" => Binding::Cores,
            "llc" => Binding::Llc,
            "node" => Binding::Node,
            _ => return None,
        })
    }
}

impl fmt::Display for Binding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Binding::None => "none",
            Binding::Cores => "cores",
            Binding::Llc => "llc",
            Binding::Node => "node",
        })
    }
}

/// A configuration: one level of every factor, in the study file's factor order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Config(pub Vec<(String, Level)>);

impl Config {
    /// The level of factor `name`.
    pub fn get(&self, name: &str) -> Option<&Level> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, l)| l)
    }

    /// A stable, readable key: `instances=2 binding=cores`.
    pub fn key(&self) -> String {
        self.0
            .iter()
            .map(|(n, l)| format!("{n}={l}"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Instances (default 1).
    pub fn instances(&self) -> usize {
        match self.get("instances") {
            Some(Level::Int(n)) if *n > 0 => *n as usize,
            _ => 1,
        }
    }

    /// Cores per instance, when the study sets it.
    pub fn cores_per_instance(&self) -> Option<usize> {
        match self.get("cores_per_instance") {
            Some(Level::Int(n)) if *n > 0 => Some(*n as usize),
            _ => None,
        }
    }

    /// Binding (default none).
    pub fn binding(&self) -> Binding {
        match self.get("binding") {
            Some(Level::Str(s)) => Binding::parse(s).unwrap_or(Binding::None),
            _ => Binding::None,
        }
    }

    /// Allocator name (default `system`).
    pub fn allocator(&self) -> String {
        match self.get("allocator") {
            Some(l) => l.to_string(),
            None => "system".into(),
        }
    }
}

impl fmt::Display for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.key())
    }
}

/// The values a parameter takes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Domain {
    /// Unordered levels: a `[factors]` list, or `categorical = [...]`.
    Categorical(Vec<Level>),
    /// Ordered levels (`ordinal = [...]`): sampled by position, near an elite's.
    Ordinal(Vec<Level>),
    /// Every integer from `min` to `max` (`integer = [min, max]`), sampled on a log scale
    /// with `log`.
    Integer {
        /// The smallest.
        min: i64,
        /// The largest.
        max: i64,
        /// Sampled on a log scale.
        log: bool,
    },
    /// Reals from `min` to `max` (`real = [min, max]`), kept to `digits` significant digits.
    Real {
        /// The smallest.
        min: f64,
        /// The largest.
        max: f64,
        /// Sampled on a log scale.
        log: bool,
        /// Significant digits a value is rounded to (so that a configuration has one key).
        digits: u32,
    },
}

impl Domain {
    /// The listed levels (categorical and ordinal domains).
    pub fn levels(&self) -> Option<&[Level]> {
        match self {
            Domain::Categorical(l) | Domain::Ordinal(l) => Some(l),
            _ => None,
        }
    }

    /// How many values it holds (`None`: a real range).
    pub fn count(&self) -> Option<u128> {
        match self {
            Domain::Categorical(l) | Domain::Ordinal(l) => Some(l.len() as u128),
            Domain::Integer { min, max, .. } => Some((*max as i128 - *min as i128 + 1) as u128),
            Domain::Real { .. } => None,
        }
    }

    /// Every value, when there are at most `limit` (`None`: more, or a real range).
    pub fn values(&self, limit: usize) -> Option<Vec<Level>> {
        if self.count()? > limit as u128 {
            return None;
        }
        Some(match self {
            Domain::Categorical(l) | Domain::Ordinal(l) => l.clone(),
            Domain::Integer { min, max, .. } => (*min..=*max).map(Level::Int).collect(),
            Domain::Real { .. } => return None,
        })
    }

    /// `l` as this domain's value, when it is one (an integer is a real's value too; a real
    /// must be within its range at its digits): the level a configuration holds.
    pub fn canonical(&self, l: &Level) -> Option<Level> {
        match (self, l) {
            (Domain::Categorical(v) | Domain::Ordinal(v), l) => v.contains(l).then(|| l.clone()),
            (Domain::Integer { min, max, .. }, Level::Int(i)) => {
                (min..=max).contains(&i).then_some(Level::Int(*i))
            }
            (
                Domain::Real {
                    min, max, digits, ..
                },
                Level::Float(_) | Level::Int(_),
            ) => {
                let x = match l {
                    Level::Int(i) => *i as f64,
                    Level::Float(x) => *x,
                    _ => return None,
                };
                // A bound holds itself even when it has more digits than its values keep.
                let kept = round_digits(x, *digits) == x || x == *min || x == *max;
                (x >= *min && x <= *max && kept).then_some(Level::Float(x))
            }
            _ => None,
        }
    }

    /// Whether `l` is one of its values.
    pub fn contains(&self, l: &Level) -> bool {
        self.canonical(l).is_some_and(|c| &c == l)
    }

    /// The domain as the study file writes it, for messages and `study validate`.
    pub fn describe(&self) -> String {
        let log = |l: &bool| if *l { ", log scale" } else { "" };
        let list = |v: &[Level]| v.iter().map(Level::repr).collect::<Vec<_>>().join(", ");
        match self {
            Domain::Categorical(v) => format!("one of {}", list(v)),
            Domain::Ordinal(v) => format!("ordered {}", list(v)),
            Domain::Integer { min, max, log: l } => format!("integer {min}–{max}{}", log(l)),
            Domain::Real {
                min,
                max,
                log: l,
                digits,
            } => format!("real {min}–{max}{}, {digits} significant digits", log(l)),
        }
    }
}

/// `x` rounded to `digits` significant digits (irace's `digits`: a real parameter's values
/// are kept to a precision so that configurations have stable keys).
pub fn round_digits(x: f64, digits: u32) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let scale = 10f64.powi(digits as i32 - 1 - x.abs().log10().floor() as i32);
    (x * scale).round() / scale
}

/// One parameter of the space: a `[factors]` list or a typed `[parameters]` entry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Factor {
    /// The parameter's name: a built-in one ([`BUILTIN_FACTORS`]) or a template placeholder.
    pub name: String,
    /// Its values.
    pub domain: Domain,
    /// The condition under which it has a value (`None`: always); a configuration for which
    /// it is false leaves the parameter out (inactive), and its placeholder renders empty.
    #[serde(default)]
    pub when: Option<super::expr::Expr>,
}

impl Factor {
    /// The listed levels (`[factors]` lists, categorical and ordinal parameters).
    pub fn levels(&self) -> Option<&[Level]> {
        self.domain.levels()
    }
}

/// The parameters of `[factors]` (lists) and `[parameters]` (typed) in the file's order, each
/// name once.
pub(super) fn factors(
    source: &Source,
    lists: &SpannedTable,
    typed: &BTreeMap<String, toml::Spanned<super::raw::RawParam>>,
    allocators: &BTreeMap<String, String>,
) -> Result<Vec<Factor>> {
    let mut all = list_factors(source, lists, allocators)?;
    for (name, p) in typed {
        if lists.contains_key(name) {
            return Err(source.bad(
                p,
                format!("parameters.{name}"),
                format!("{name} is in [factors] too: give it once, as a list there or typed here"),
            ));
        }
    }
    all.extend(super::param::parameters(source, typed, allocators)?);
    // The tables iterate by name; the file's order is the spans'.
    all.sort_by_key(|(at, _)| *at);
    Ok(all.into_iter().map(|(_, f)| f).collect())
}

/// The factors of `[factors]` with their spans' starts, each level
/// checked; built-in factors' levels must make sense to the runner (`allocators` is the
/// file's `[allocators]`).
pub(super) fn list_factors(
    source: &Source,
    table: &SpannedTable,
    allocators: &BTreeMap<String, String>,
) -> Result<Vec<(usize, Factor)>> {
    let mut factors = Vec::new();
    for (name, value) in table {
        let field = format!("factors.{name}");
        let bad = |msg: &dyn fmt::Display| source.bad(value, &field, msg);
        let Some(arr) = value.get_ref().as_array() else {
            return Err(bad(
                &"expected a list of levels (a typed range goes under [parameters]: docs/study-file.md)",
            ));
        };
        let levels = levels_of(name, arr, allocators).map_err(|e| bad(&e))?;
        factors.push((
            value.span().start,
            Factor {
                name: name.clone(),
                domain: Domain::Categorical(levels),
                when: None,
            },
        ));
    }
    Ok(factors)
}

/// A list of levels that cannot be a factor's.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LevelsError {
    /// The list is empty.
    #[error("has no levels")]
    Empty,
    /// A level is a table, array or date.
    #[error("level {index} must be a number, string or boolean")]
    NotAValue {
        /// The level's place in the list, from 1.
        index: usize,
    },
    /// A built-in factor's level it cannot take.
    #[error("level {index} ({level}): {source}")]
    Invalid {
        /// The level's place in the list, from 1.
        index: usize,
        /// The level as written.
        level: String,
        /// Why.
        #[source]
        source: LevelError,
    },
    /// A level listed twice.
    #[error("level {level} is listed twice")]
    Twice {
        /// The level as written.
        level: String,
    },
    /// Levels of two types.
    #[error("level {level} is {kind} but the first level is {first}")]
    Mixed {
        /// The level as written.
        level: String,
        /// Its type.
        kind: &'static str,
        /// The first level's type.
        first: &'static str,
    },
}

/// A level a built-in factor (`instances`, `cores_per_instance`, `binding`, `allocator`)
/// cannot take.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LevelError {
    /// A count below 1.
    #[error("must be at least 1")]
    BelowOne,
    /// A count that is not an integer.
    #[error("{factor} levels are positive integers, not {kind}")]
    NotACount {
        /// The factor.
        factor: String,
        /// The level's type.
        kind: &'static str,
    },
    /// A binding not known.
    #[error("binding levels are \"none\", \"cores\", \"llc\" or \"node\"")]
    Binding,
    /// A binding that is not a string.
    #[error("binding levels are strings, not {kind}")]
    BindingType {
        /// The level's type.
        kind: &'static str,
    },
    /// An allocator that is not a string.
    #[error("allocator levels are names (strings), not {kind}")]
    AllocatorType {
        /// The level's type.
        kind: &'static str,
    },
    /// An allocator with no library known.
    #[error(
        "no library for allocator {name:?}: add it to [allocators] (name = \"/path/lib.so\"); known: {known}"
    )]
    NoLibrary {
        /// The allocator.
        name: String,
        /// The allocators known, comma-separated.
        known: String,
    },
    /// An allocator whose library is not installed.
    #[error(
        "allocator library {path} does not exist (install it, e.g. libjemalloc2, libgoogle-perftools4, libmimalloc2.0)"
    )]
    MissingLibrary {
        /// The library's path.
        path: String,
    },
}

/// The levels of list `arr` of factor `name`: each a number, string or boolean, all of one
/// type, none twice, a built-in factor's each valid.
pub(super) fn levels_of(
    name: &str,
    arr: &[toml::Value],
    allocators: &BTreeMap<String, String>,
) -> std::result::Result<Vec<Level>, LevelsError> {
    if arr.is_empty() {
        return Err(LevelsError::Empty);
    }
    let mut levels: Vec<Level> = Vec::new();
    for (i, v) in arr.iter().enumerate() {
        let Some(l) = Level::from_toml(v) else {
            return Err(LevelsError::NotAValue { index: i + 1 });
        };
        check_level(name, &l, allocators).map_err(|source| LevelsError::Invalid {
            index: i + 1,
            level: l.repr(),
            source,
        })?;
        if levels.contains(&l) {
            return Err(LevelsError::Twice { level: l.repr() });
        }
        if let Some(first) = levels.first()
            && std::mem::discriminant(first) != std::mem::discriminant(&l)
        {
            return Err(LevelsError::Mixed {
                level: l.repr(),
                kind: l.type_name(),
                first: first.type_name(),
            });
        }
        levels.push(l);
    }
    Ok(levels)
}

/// Allocator name → library: the defaults, overridden and extended by `[allocators]`.
pub(super) fn allocators(own: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut all: BTreeMap<String, String> = DEFAULT_ALLOCATORS
        .iter()
        .map(|(n, p)| (n.to_string(), p.to_string()))
        .collect();
    all.extend(own.clone());
    all
}

/// Checks a level of a built-in factor.
pub(super) fn check_level(
    name: &str,
    l: &Level,
    allocators: &BTreeMap<String, String>,
) -> std::result::Result<(), LevelError> {
    match name {
        "instances" | "cores_per_instance" => match l {
            Level::Int(n) if *n >= 1 => Ok(()),
            Level::Int(_) => Err(LevelError::BelowOne),
            other => Err(LevelError::NotACount {
                factor: name.to_string(),
                kind: other.type_name(),
            }),
        },
        "binding" => match l {
            Level::Str(s) if Binding::parse(s).is_some() => Ok(()),
            Level::Str(_) => Err(LevelError::Binding),
            other => Err(LevelError::BindingType {
                kind: other.type_name(),
            }),
        },
        "allocator" => match l {
            Level::Str(s) => check_allocator(s, allocators),
            other => Err(LevelError::AllocatorType {
                kind: other.type_name(),
            }),
        },
        _ => Ok(()),
    }
}

/// An allocator level needs a library (`[allocators]` or a default) that exists.
fn check_allocator(
    name: &str,
    allocators: &BTreeMap<String, String>,
) -> std::result::Result<(), LevelError> {
    let path = allocators.get(name).map(String::as_str).or_else(|| {
        DEFAULT_ALLOCATORS
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, p)| *p)
    });
    match path {
        None => Err(LevelError::NoLibrary {
            name: name.to_string(),
            known: DEFAULT_ALLOCATORS
                .iter()
                .map(|(n, _)| *n)
                .chain(allocators.keys().map(String::as_str))
                .collect::<Vec<_>>()
                .join(", "),
        }),
        Some("") => Ok(()),
        Some(p) if Path::new(p).is_file() => Ok(()),
        Some(p) => Err(LevelError::MissingLibrary {
            path: p.to_string(),
        }),
    }
}
