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
    fn type_name(&self) -> &'static str {
        match self {
            Level::Int(_) => "an integer",
            Level::Float(_) => "a number",
            Level::Bool(_) => "a boolean",
            Level::Str(_) => "a string",
        }
    }

    fn from_toml(v: &toml::Value) -> Option<Level> {
        Some(match v {
            toml::Value::Integer(i) => Level::Int(*i),
            toml::Value::Float(x) => Level::Float(*x),
            toml::Value::Boolean(b) => Level::Bool(*b),
            toml::Value::String(s) => Level::Str(s.clone()),
            _ => return None,
        })
    }

    /// The level as the study file writes it (strings quoted), for error messages.
    fn repr(&self) -> String {
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

/// One factor and its levels.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Factor {
    /// The factor's name: a built-in one ([`BUILTIN_FACTORS`]) or a template placeholder.
    pub name: String,
    /// Its levels in the file's order, all of one type, none twice.
    pub levels: Vec<Level>,
}

/// The factors of `[factors]` in the file's order, each level checked; built-in factors'
/// levels must make sense to the runner (`allocators` is the file's `[allocators]`).
pub(super) fn factors(
    source: &Source,
    table: &SpannedTable,
    allocators: &BTreeMap<String, String>,
) -> Result<Vec<Factor>> {
    let mut factors = Vec::new();
    let mut order = Vec::new();
    for (name, value) in table {
        let field = format!("factors.{name}");
        let bad = |msg: String| source.bad(value, &field, msg);
        let Some(arr) = value.get_ref().as_array() else {
            return Err(bad("expected a list of levels".into()));
        };
        if arr.is_empty() {
            return Err(bad("has no levels".into()));
        }
        let mut levels: Vec<Level> = Vec::new();
        for (i, v) in arr.iter().enumerate() {
            let Some(l) = Level::from_toml(v) else {
                return Err(bad(format!(
                    "level {} must be a number, string or boolean",
                    i + 1
                )));
            };
            check_level(name, &l, allocators)
                .map_err(|m| bad(format!("level {} ({}): {m}", i + 1, l.repr())))?;
            if levels.contains(&l) {
                return Err(bad(format!("level {} is listed twice", l.repr())));
            }
            if let Some(first) = levels.first()
                && std::mem::discriminant(first) != std::mem::discriminant(&l)
            {
                return Err(bad(format!(
                    "level {} is {} but the first level is {}",
                    l.repr(),
                    l.type_name(),
                    first.type_name()
                )));
            }
            levels.push(l);
        }
        order.push(value.span().start);
        factors.push(Factor {
            name: name.clone(),
            levels,
        });
    }
    // Keep the file's order of factors (the table iterates them by name).
    let mut ordered: Vec<(usize, Factor)> = order.into_iter().zip(factors).collect();
    ordered.sort_by_key(|(at, _)| *at);
    Ok(ordered.into_iter().map(|(_, f)| f).collect())
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
fn check_level(
    name: &str,
    l: &Level,
    allocators: &BTreeMap<String, String>,
) -> std::result::Result<(), String> {
    match name {
        "instances" | "cores_per_instance" => match l {
            Level::Int(n) if *n >= 1 => Ok(()),
            Level::Int(_) => Err("must be at least 1".into()),
            other => Err(format!(
                "{name} levels are positive integers, not {}",
                other.type_name()
            )),
        },
        "binding" => match l {
            Level::Str(s) if Binding::parse(s).is_some() => Ok(()),
            Level::Str(_) => {
                Err("binding levels are \"none\", \"cores\", \"llc\" or \"node\"".into())
            }
            other => Err(format!(
                "binding levels are strings, not {}",
                other.type_name()
            )),
        },
        "allocator" => match l {
            Level::Str(s) => check_allocator(s, allocators),
            other => Err(format!(
                "allocator levels are names (strings), not {}",
                other.type_name()
            )),
        },
        _ => Ok(()),
    }
}

/// An allocator level needs a library (`[allocators]` or a default) that exists.
fn check_allocator(
    name: &str,
    allocators: &BTreeMap<String, String>,
) -> std::result::Result<(), String> {
    let path = allocators.get(name).map(String::as_str).or_else(|| {
        DEFAULT_ALLOCATORS
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, p)| *p)
    });
    match path {
        None => Err(format!(
            "no library for allocator {name:?}: add it to [allocators] (name = \"/path/lib.so\"); known: {}",
            DEFAULT_ALLOCATORS
                .iter()
                .map(|(n, _)| *n)
                .chain(allocators.keys().map(String::as_str))
                .collect::<Vec<_>>()
                .join(", ")
        )),
        Some("") => Ok(()),
        Some(p) if Path::new(p).is_file() => Ok(()),
        Some(p) => Err(format!(
            "allocator library {p} does not exist (install it, e.g. libjemalloc2, libgoogle-perftools4, libmimalloc2.0)"
        )),
    }
}

/// A configuration from a table naming levels (`run.baseline`, `scaling.config`, the table's
/// path given as `section`): each name a factor, each value one of its levels; factors left
/// out take their first level.
pub(super) fn config_from(
    source: &Source,
    factors: &[Factor],
    table: &SpannedTable,
    section: &str,
) -> Result<Config> {
    for (k, v) in table {
        let field = format!("{section}.{k}");
        let Some(f) = factors.iter().find(|f| &f.name == k) else {
            return Err(source.bad(v, &field, format!("{k:?} is not a factor of this study")));
        };
        let ok = Level::from_toml(v.get_ref()).is_some_and(|l| f.levels.contains(&l));
        if !ok {
            let levels = f.levels.iter().map(Level::repr).collect::<Vec<_>>();
            return Err(source.bad(
                v,
                &field,
                format!(
                    "{} is not one of the factor's levels ({})",
                    v.get_ref(),
                    levels.join(", ")
                ),
            ));
        }
    }
    Ok(Config(
        factors
            .iter()
            .map(|f| {
                let l = table
                    .get(&f.name)
                    .and_then(|v| Level::from_toml(v.get_ref()))
                    .unwrap_or_else(|| f.levels[0].clone());
                (f.name.clone(), l)
            })
            .collect(),
    ))
}
