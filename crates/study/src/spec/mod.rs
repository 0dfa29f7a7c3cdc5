//! The study file (TOML; the format is in `docs/study-file.md`): parsing and validation.
//!
//! Parsing (`raw`) rejects unknown fields and mistyped values with TOML's own line and
//! column; validation then checks what TOML cannot (an unknown placeholder in a template, a
//! level of the wrong type, an allocator without a library, a constraint that does not parse)
//! and names the file, the line (from the value's `toml::Spanned` position) and the field.
//! Each section has its file: `factor`, `deployment`, `load`, `objective`, `run` (with
//! `budget`); `template` holds the placeholders shared by them and the runner, `source` turns
//! positions into lines. `preflight` checks a parsed study against the machine (programs,
//! files, ports) without running anything.

mod budget;
mod deployment;
mod factor;
mod load;
mod objective;
mod preflight;
mod raw;
mod run;
mod source;
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
pub use factor::{BUILTIN_FACTORS, Binding, Config, DEFAULT_ALLOCATORS, Factor, Level};
pub use load::{LoadKind, LoadSpec};
pub(crate) use objective::MIN_EFFECT_BELOW;
pub use objective::{Goal, Objective};
pub use preflight::{Finding, FindingKind, PortHolder, Severity, preflight};
pub(crate) use run::share_below;
pub use run::{
    DEFAULT_FAR_BEHIND, DEFAULT_FUTILITY, DEFAULT_MIN_CHANCE, DEFAULT_MIN_ROUNDS,
    DEFAULT_STOP_LOSS, FAR_BEHIND_MIN_ROUNDS, RunSpec, ScalingSpec,
};
pub use storage::Storage;
pub use template::{
    DEPLOY_PLACEHOLDERS, LOAD_PLACEHOLDERS, STORAGE_PLACEHOLDERS, placeholders, render, split_words,
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
    /// The factors in the file's order; their levels' product is the configurations.
    pub factors: Vec<Factor>,
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
        let factors = factor::factors(&source, &raw.factors, &raw.allocators)?;
        let allocators = factor::allocators(&raw.allocators);
        let templates = Templates::new(&source, &factors, raw.storage.is_some());
        let storage = match &raw.storage {
            Some(s) => Some(storage::storage(&source, &templates, s)?),
            None => None,
        };
        let deployment = deployment::deployment(&source, &templates, &raw.deployment)?;
        let load = load::load(&source, &templates, &raw.load)?;
        let objective = objective::objective(&source, &raw.objective, &load)?;
        let run = run::run(&source, &raw.run, &factors)?;
        let scaling = run::scaling(&source, &raw.scaling, &factors)?;
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
            allocators,
            run,
            scaling,
            storage,
        })
    }

    /// Every configuration: the cartesian product of the levels, in a stable order.
    pub fn configurations(&self) -> Vec<Config> {
        let mut out = vec![Config(Vec::new())];
        for f in &self.factors {
            let mut next = Vec::with_capacity(out.len() * f.levels.len());
            for c in &out {
                for l in &f.levels {
                    let mut c = c.clone();
                    c.0.push((f.name.clone(), l.clone()));
                    next.push(c);
                }
            }
            out = next;
        }
        out
    }

    /// The library an allocator name preloads (empty for the system allocator).
    pub fn allocator_path(&self, name: &str) -> Option<&str> {
        self.allocators.get(name).map(String::as_str)
    }
}

#[cfg(test)]
mod tests;
