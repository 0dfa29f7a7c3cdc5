//! The study file (TOML; the format is in `docs/study-file.md`): parsing and validation.
//!
//! Parsing (`raw`) rejects unknown fields and mistyped values with TOML's own line and
//! column; validation then checks what TOML cannot (an unknown placeholder in a template, a
//! level of the wrong type, an allocator without a library, a constraint that does not parse)
//! and names the file, the line (from the value's `toml::Spanned` position) and the field.
//! Each section has its file: `factor` (`[factors]` lists), `param` (typed `[parameters]`),
//! `search` (`[search]`: grid or iterated, forbidden rules, initial configurations),
//! `deployment`, `load`, `objective`, `run` (with `budget`); `expr` parses conditions and
//! forbidden rules, `space` is the parameter space they make, `template` holds the
//! placeholders shared by the sections and the runner, `source` turns positions into lines.
//! `preflight` checks a parsed study against the machine (programs, files, ports) without
//! running anything.

mod budget;
mod deployment;
pub mod expr;
mod factor;
mod load;
mod objective;
mod param;
mod preflight;
mod raw;
mod run;
mod search;
mod source;
pub mod space;
mod storage;
mod template;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Result, StudyError};
use raw::RawStudy;
use source::Source;
use template::Templates;

pub use budget::Budget;
pub use deployment::{Deployment, KnobSpec, Ready};
pub use factor::{
    BUILTIN_FACTORS, Binding, Config, DEFAULT_ALLOCATORS, Domain, Factor, Level, LevelError,
    LevelsError, round_digits,
};
pub use load::{LoadKind, LoadSpec};
pub(crate) use objective::MIN_EFFECT_BELOW;
pub use objective::{Goal, Objective};
pub use param::DEFAULT_DIGITS;
pub use preflight::{Finding, FindingKind, PortHolder, Severity, preflight};
pub(crate) use run::share_below;
pub use run::{
    DEFAULT_FAR_BEHIND, DEFAULT_FUTILITY, DEFAULT_MIN_CHANCE, DEFAULT_MIN_ROUNDS,
    DEFAULT_STOP_LOSS, FAR_BEHIND_MIN_ROUNDS, RunSpec, ScalingSpec,
};
pub use search::{Method, Schedule, SearchSpec, varying};
pub use space::{NotInSpace, Space, SpaceSize};
pub use storage::{ScratchError, SizeError, Storage};
pub use template::{
    DEPLOY_PLACEHOLDERS, LOAD_PLACEHOLDERS, STORAGE_PLACEHOLDERS, UnclosedBrace, placeholders,
    render,
};

/// A validated study.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Study {
    /// Where it was read from.
    pub path: PathBuf,
    /// The file's text (kept in the store so `--resume` and reports need no file).
    pub source: String,
    /// The study's name (default: the file name without its extension).
    pub name: String,
    /// How a trial's instances are started and stopped.
    pub deployment: Deployment,
    /// What drives the load.
    pub load: LoadSpec,
    /// What is optimized, under which constraints.
    pub objective: Objective,
    /// The parameters (`[factors]` lists and typed `[parameters]`) in the file's order.
    pub factors: Vec<Factor>,
    /// How the space is searched, what it forbids, where an iterated search starts.
    #[serde(default)]
    pub search: SearchSpec,
    /// Allocator name → library for `LD_PRELOAD` (empty: none).
    pub allocators: BTreeMap<String, String>,
    /// Trial timing, rounds and racing.
    pub run: RunSpec,
    /// The scaling mode's load sweep.
    pub scaling: ScalingSpec,
    /// The scratch file system each trial makes (`[storage]`), if any.
    #[serde(default)]
    pub storage: Option<Storage>,
}

impl Study {
    /// Reads and validates the study file at `path`.
    pub fn load(path: &Path) -> Result<Study> {
        let text = std::fs::read_to_string(path).map_err(|source| StudyError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Study::parse(&text, path)
    }

    /// Parses and validates study text; `path` names it in errors and anchors relative paths
    /// of `body_file` (relative to the current directory, like every other path).
    pub fn parse(text: &str, path: &Path) -> Result<Study> {
        let raw = RawStudy::parse(text, path)?;
        let source = Source::new(path, text);
        let factors = factor::factors(&source, &raw.factors, &raw.parameters, &raw.allocators)?;
        param::check_conditions(&source, &raw.parameters, &factors)?;
        let mut search = search::search(&source, &raw.search, &factors)?;
        let anchors = anchors(&raw);
        search::check_not_empty(&source, &factors, &search.forbidden, &anchors)?;
        let allocators = factor::allocators(&raw.allocators);
        let templates = Templates::new(&source, &factors, raw.storage.is_some());
        let storage = match &raw.storage {
            Some(s) => Some(storage::storage(&source, &templates, s)?),
            None => None,
        };
        let deployment = deployment::deployment(&source, &templates, &raw.deployment)?;
        let load = load::load(&source, &templates, &raw.load)?;
        let objective = objective::objective(&source, &raw.objective, &load)?;
        // Where a table the file leaves out is named: its first parameter.
        let first = anchors.parameters.values().min_by_key(|s| s.start).cloned();
        let space = Space::new(&factors, &search.forbidden);
        let run = run::run(&source, &raw.run, &space, first.clone())?;
        let scaling = run::scaling(&source, &raw.scaling, &space, &run.baseline, first)?;
        search.initial = search::initial(&source, &raw.search, &space, &run.baseline)?;
        search::check_space(&source, (&factors, &search, &run), &anchors)?;
        let name = raw.name.unwrap_or_else(|| {
            path.file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "study".into())
        });
        Ok(Study {
            path: path.to_path_buf(),
            source: text.to_string(),
            name,
            deployment,
            load,
            objective,
            factors,
            search,
            allocators,
            run,
            scaling,
            storage,
        })
    }

    /// The parameter space: the parameters, their conditions and the forbidden rules.
    pub fn space(&self) -> Space<'_> {
        Space::new(&self.factors, &self.search.forbidden)
    }

    /// Every configuration of the space, in a stable order (the cartesian product of the
    /// levels, the last parameter varying fastest; inactive parameters left out, forbidden
    /// configurations skipped): a grid's configurations. Empty when the space cannot be
    /// listed (a real range, or more than [`space::ENUMERATE_LIMIT`]; validation refuses
    /// such a grid).
    pub fn configurations(&self) -> Vec<Config> {
        self.space()
            .enumerate(space::ENUMERATE_LIMIT)
            .unwrap_or_default()
    }

    /// `c` as templates read it: each parameter it leaves inactive (its condition false)
    /// given as an empty string, so that its placeholder renders empty.
    pub fn for_templates(&self, c: &Config) -> Config {
        let mut out = c.clone();
        for f in &self.factors {
            if c.get(&f.name).is_none() {
                out.0.push((f.name.clone(), Level::Str(String::new())));
            }
        }
        out
    }

    /// Whether `c` is a configuration of this study (what a study worker runs).
    pub fn holds(&self, c: &Config) -> bool {
        self.space().check(c).is_ok()
    }

    /// Configurations that between them show every level a run may use, for the checks of
    /// `preflight`: a grid's every configuration; for an iterated search the baseline, the
    /// initial configurations, and for each parameter each listed level (a range's bounds)
    /// with the others at the baseline's, where the space allows it.
    pub fn representatives(&self) -> Vec<Config> {
        if self.search.method == Method::Grid {
            return self.configurations();
        }
        let space = self.space();
        let mut out = vec![self.run.baseline.clone()];
        out.extend(self.search.initial.iter().cloned());
        for f in &self.factors {
            let values: Vec<Level> = match &f.domain {
                Domain::Categorical(l) | Domain::Ordinal(l) => l.clone(),
                Domain::Integer { min, max, .. } => vec![Level::Int(*min), Level::Int(*max)],
                Domain::Real { min, max, .. } => vec![Level::Float(*min), Level::Float(*max)],
            };
            for v in values {
                let table = BTreeMap::from([(f.name.clone(), v)]);
                if let Ok(c) = space.from_table(&table, space::Fill::Lowest(&self.run.baseline))
                    && !out.contains(&c)
                {
                    out.push(c);
                }
            }
        }
        out
    }

    /// An iterated search's schedule (iterations, elites, rounds before the first test).
    pub fn schedule(&self) -> Schedule {
        Schedule::new(&self.search, varying(&self.factors), self.run.min_rounds)
    }

    /// The library an allocator name preloads (empty for the system allocator).
    pub fn allocator_path(&self, name: &str) -> Option<&str> {
        self.allocators.get(name).map(String::as_str)
    }
}

/// Where the checks over the whole space point: `search.method`, each forbidden rule, each
/// parameter, `run.budget`.
fn anchors(raw: &RawStudy) -> search::Anchors {
    let mut parameters: BTreeMap<String, std::ops::Range<usize>> = raw
        .factors
        .iter()
        .map(|(k, v)| (k.clone(), v.span()))
        .collect();
    parameters.extend(raw.parameters.iter().map(|(k, v)| (k.clone(), v.span())));
    search::Anchors {
        method: raw.search.method.as_ref().map(toml::Spanned::span),
        forbidden: raw
            .search
            .forbidden
            .iter()
            .map(toml::Spanned::span)
            .collect(),
        parameters,
        budget: raw.run.budget.as_ref().map(toml::Spanned::span),
    }
}

#[cfg(test)]
mod tests;
