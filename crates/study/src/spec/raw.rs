//! The study file as TOML gives it: serde shapes that reject unknown fields and mistyped
//! values, with `Spanned` on every value a later check may reject so its error names the line.
//! A field without a serde default here is either required or checked as an `Option`, whose
//! default the section's check supplies.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

use crate::error::{Result, StudyError};

/// A table of factor levels (`[factors]`, `run.baseline`, `scaling.config`) by name.
pub(super) type SpannedTable = BTreeMap<String, Spanned<toml::Value>>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStudy {
    pub(super) name: Option<String>,
    pub(super) deployment: RawDeployment,
    pub(super) load: Spanned<RawLoad>,
    #[serde(default)]
    pub(super) objective: RawObjective,
    #[serde(default)]
    pub(super) factors: SpannedTable,
    #[serde(default)]
    pub(super) parameters: BTreeMap<String, Spanned<RawParam>>,
    #[serde(default)]
    pub(super) search: RawSearch,
    #[serde(default)]
    pub(super) allocators: BTreeMap<String, String>,
    #[serde(default)]
    pub(super) run: RawRun,
    #[serde(default)]
    pub(super) scaling: RawScaling,
    pub(super) storage: Option<Spanned<RawStorage>>,
}

/// A typed parameter (`[parameters]`): one of the four domains, with its options.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawParam {
    pub(super) integer: Option<Spanned<Vec<toml::Value>>>,
    pub(super) real: Option<Spanned<Vec<toml::Value>>>,
    pub(super) ordinal: Option<Spanned<Vec<toml::Value>>>,
    pub(super) categorical: Option<Spanned<Vec<toml::Value>>>,
    pub(super) log: Option<Spanned<bool>>,
    pub(super) digits: Option<Spanned<u32>>,
    pub(super) when: Option<Spanned<String>>,
}

/// `[search]`: how the space is searched, what it forbids, where it starts.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSearch {
    pub(super) method: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) forbidden: Vec<Spanned<String>>,
    #[serde(default)]
    pub(super) initial: Vec<Spanned<SpannedTable>>,
    pub(super) iterations: Option<Spanned<usize>>,
    pub(super) elites: Option<Spanned<usize>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStorage {
    pub(super) size: Spanned<String>,
    pub(super) mount: Spanned<PathBuf>,
    pub(super) backing: Option<Spanned<PathBuf>>,
    pub(super) filesystem: Option<Spanned<String>>,
    pub(super) mount_options: Option<Spanned<String>>,
}

impl RawStudy {
    /// Parses the text; TOML's own message (line, column, the field) names what is wrong.
    pub(super) fn parse(text: &str, path: &Path) -> Result<RawStudy> {
        toml::from_str(text).map_err(|e| StudyError::Syntax {
            path: path.to_path_buf(),
            message: e.to_string().trim_end().replace('\n', "\n  "),
        })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDeployment {
    pub(super) command: Spanned<String>,
    #[serde(default)]
    pub(super) env: BTreeMap<String, Spanned<String>>,
    #[serde(default)]
    pub(super) ready: RawReady,
    #[serde(default)]
    pub(super) setup: Vec<Spanned<String>>,
    #[serde(default)]
    pub(super) teardown: Vec<Spanned<String>>,
    #[serde(default)]
    pub(super) knobs: Vec<RawKnob>,
    #[serde(default = "default_port")]
    pub(super) base_port: u16,
    pub(super) workdir: Option<PathBuf>,
}

fn default_port() -> u16 {
    18080
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawReady {
    pub(super) http: Option<Spanned<String>>,
    pub(super) tcp: Option<Spanned<bool>>,
    pub(super) timeout: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawKnob {
    pub(super) path: Spanned<String>,
    pub(super) value: Spanned<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLoad {
    pub(super) kind: Option<Spanned<String>>,
    pub(super) jobs: Option<Spanned<String>>,
    pub(super) smt_factor: Option<Spanned<f64>>,
    pub(super) url: Option<Spanned<String>>,
    #[serde(default = "default_method")]
    pub(super) method: String,
    #[serde(default)]
    pub(super) headers: BTreeMap<String, String>,
    pub(super) body: Option<String>,
    pub(super) body_file: Option<Spanned<PathBuf>>,
    pub(super) data: Option<Spanned<PathBuf>>,
    pub(super) users_per_instance: Option<Spanned<usize>>,
    pub(super) think_time: Option<Spanned<String>>,
    pub(super) timeout: Option<Spanned<String>>,
    pub(super) threads: Option<usize>,
    pub(super) command: Option<Spanned<String>>,
    #[serde(rename = "as")]
    pub(super) meaning: Option<Spanned<String>>,
}

fn default_method() -> String {
    "GET".into()
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawObjective {
    pub(super) goal: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) constraints: Vec<Spanned<String>>,
    pub(super) min_effect: Option<Spanned<f64>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRun {
    pub(super) warmup: Option<Spanned<String>>,
    pub(super) measure: Option<Spanned<String>>,
    pub(super) repetitions: Option<Spanned<usize>>,
    pub(super) racing: Option<bool>,
    pub(super) min_rounds: Option<usize>,
    pub(super) alpha: Option<Spanned<f64>>,
    pub(super) futility: Option<Spanned<f64>>,
    pub(super) min_chance: Option<Spanned<f64>>,
    pub(super) far_behind: Option<Spanned<f64>>,
    pub(super) stop_loss: Option<Spanned<f64>>,
    pub(super) budget: Option<Spanned<toml::Value>>,
    pub(super) drop_equivalent: Option<bool>,
    pub(super) confirm_rounds: Option<usize>,
    pub(super) seed: Option<u64>,
    #[serde(default)]
    pub(super) baseline: SpannedTable,
    pub(super) cooldown: Option<Spanned<String>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawScaling {
    #[serde(default)]
    pub(super) users: Vec<Spanned<usize>>,
    #[serde(default)]
    pub(super) config: SpannedTable,
}
