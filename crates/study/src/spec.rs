//! The study file (TOML; the format is in `docs/study-file.md`): parsing and validation.
//!
//! Parsing rejects unknown fields and mistyped values with TOML's own line and column;
//! validation then checks what TOML cannot (an unknown placeholder in a template, a level of
//! the wrong type, an allocator without a library, a constraint that does not parse) and names
//! the file, the line and the field.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use perfpilot_drive::{Threshold, parse_duration};
use serde::{Deserialize, Serialize};

use crate::error::{Result, StudyError};

/// Factors the runner itself understands; every other factor is a name for templates.
pub const BUILTIN_FACTORS: [&str; 4] = ["instances", "cores_per_instance", "binding", "allocator"];

/// Placeholders every deployment template may use besides the factors.
pub const DEPLOY_PLACEHOLDERS: [&str; 6] =
    ["port", "instance", "cpus", "cpuset", "nodes", "instances"];

/// Placeholders a load command may use besides the factors.
pub const LOAD_PLACEHOLDERS: [&str; 6] = [
    "targets",
    "users",
    "duration_s",
    "warmup_s",
    "instances",
    "ports",
];

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
    Int(i64),
    Float(f64),
    Bool(bool),
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

/// How the runner decides an instance is ready.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Ready {
    /// An HTTP GET of this URL template answers 2xx.
    Http { url: String },
    /// The instance's port accepts a TCP connection.
    Tcp,
}

/// A sysfs/procfs knob set for each trial and restored after it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KnobSpec {
    /// Path relative to `/` (`sys/kernel/mm/transparent_hugepage/enabled`, `proc/sys/vm/swappiness`).
    pub path: String,
    /// Value template (factor placeholders allowed).
    pub value: String,
}

/// The deployment: how one trial's instances are started and stopped.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Deployment {
    /// Command template per instance (one command line; shell quoting allowed, no pipes).
    pub command: String,
    /// Environment templates.
    pub env: Vec<(String, String)>,
    pub ready: Ready,
    pub ready_timeout: Duration,
    /// Shell commands run before each trial's instances start, and after they stop.
    pub setup: Vec<String>,
    pub teardown: Vec<String>,
    pub knobs: Vec<KnobSpec>,
    /// Instance `i` listens on `base_port + i` (or the next free port).
    pub base_port: u16,
    /// Working directory of instances and setup/teardown (relative paths: to the current one).
    pub workdir: Option<PathBuf>,
}

/// What drives the load.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum LoadKind {
    /// perfpilot's built-in driver.
    Builtin {
        /// Target URL template per instance (`http://127.0.0.1:{port}/score/iris-forest`).
        url: String,
        method: String,
        headers: Vec<(String, String)>,
        /// Body template text (from `body` or `body_file`).
        body: Option<String>,
        /// CSV rows for the body's `{{column}}` placeholders.
        data: Option<PathBuf>,
        think_time: String,
        timeout: Duration,
        threads: usize,
    },
    /// Any command printing a number (the last number on stdout) after the measured window.
    Command {
        command: String,
        /// `throughput` or `latency_ms`.
        meaning: String,
    },
}

/// The load.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoadSpec {
    pub kind: LoadKind,
    /// Closed-loop users per instance.
    pub users_per_instance: usize,
}

/// What the study optimizes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Goal {
    /// Requests per second, higher is better.
    MaxThroughput,
    /// A latency statistic (`p99`, `p50`, `mean`), lower is better.
    MinLatency(String),
    /// CPU milliseconds per request over all instances, lower is better.
    MinCpuPerRequest,
}

impl Goal {
    /// How the goal reads in reports.
    pub fn describe(&self) -> String {
        match self {
            Goal::MaxThroughput => "maximize throughput (requests/s)".into(),
            Goal::MinLatency(p) => format!("minimize {p} latency (ms)"),
            Goal::MinCpuPerRequest => "minimize CPU per request (ms)".into(),
        }
    }

    /// Whether larger values are better.
    pub fn higher_is_better(&self) -> bool {
        matches!(self, Goal::MaxThroughput)
    }

    /// The unit of the objective value.
    pub fn unit(&self) -> &'static str {
        match self {
            Goal::MaxThroughput => "req/s",
            Goal::MinLatency(_) => "ms",
            Goal::MinCpuPerRequest => "CPU ms/req",
        }
    }
}

/// The objective and its constraints.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Objective {
    pub goal: Goal,
    /// Constraints as written (`p99 < 50ms`, `errors < 0.1%`).
    pub constraints: Vec<String>,
    /// The smallest relative effect worth finding (0.05 = 5 %): the baseline's run-to-run
    /// variation is compared to it.
    pub min_effect: f64,
}

impl Objective {
    /// The parsed constraints (validated when the study was loaded).
    pub fn thresholds(&self) -> Vec<Threshold> {
        self.constraints
            .iter()
            .filter_map(|c| Threshold::parse(c).ok())
            .collect()
    }
}

/// One factor and its levels.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Factor {
    pub name: String,
    pub levels: Vec<Level>,
}

/// The default conditional power under which a tied configuration leaves the race.
pub const DEFAULT_FUTILITY: f64 = 0.0;

/// Default `run.min_rounds`, irace's `firstTest`: with three rounds and a dozen
/// configurations, Conover's comparisons (unadjusted, after Friedman's gate) dropped the
/// exhaustive winner of `examples/studies/scoring-spss.toml` with nine others in a real race
/// on the 2-core VM, when one configuration happened to rank first in all three.
pub const DEFAULT_MIN_ROUNDS: usize = 5;

/// Default `run.min_chance`: a configuration best in fewer than 5 % of the bootstrap
/// resamples of the rounds leaves. Replayed on three exhaustive runs of
/// `examples/studies/scoring-spss.toml` (16 rounds, 300 round orders each), the defaults (with
/// the far-behind rule) took 42–46 % of the exhaustive trials, 47–49 % at 1 %, and 58–64 %
/// with both rules off; every race's winner was one the exhaustive run could not tell from
/// its own (`docs/study-file.md`, Racing).
pub const DEFAULT_MIN_CHANCE: f64 = 0.05;

/// Default `run.far_behind`: from round 3 on, a configuration whose one-sided upper bound
/// (at `run.alpha`, Student t on the paired log ratios) of its ratio to the leader is below
/// 1 − 0.2 leaves, before the rank tests start at `min_rounds`. On the 2-core VM the one-core
/// layouts of `examples/studies/scoring-spss.toml` run at half the throughput of the rest;
/// without this rule they ran five rounds each.
pub const DEFAULT_FAR_BEHIND: f64 = 0.2;

/// Default `run.stop_loss`: the race ends once choosing the leader is expected to cost less
/// than 0.5 % of its score. Replayed on four exhaustive runs of
/// `examples/studies/scoring-spss.toml` (300 round orders each), it took the races from
/// 42–47 % to 39–45 % of the exhaustive trials on average; their winners scored 99.5–99.9 % of
/// the exhaustive winner's on average over every exhaustive round (`docs/study-file.md`,
/// Racing).
pub const DEFAULT_STOP_LOSS: f64 = 0.005;

/// Rounds before the far-behind rule ([`DEFAULT_FAR_BEHIND`]): the first with a standard
/// deviation of two paired ratios to judge by.
pub const FAR_BEHIND_MIN_ROUNDS: usize = 3;

/// The racing shares of `[run]` (`futility`, `min_chance`, `far_behind`, `stop_loss`) and
/// the bound each must stay below; each is at least 0 (0 turns its rule off).
pub(crate) fn share_below(key: &str) -> f64 {
    match key {
        "min_chance" | "stop_loss" => 0.5,
        _ => 1.0,
    }
}

/// `objective.min_effect` must stay below this.
pub(crate) const MIN_EFFECT_BELOW: f64 = 10.0;

/// A race's budget (F-Race's computational budget): the trials a run may take, race and
/// confirmation together.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Budget {
    /// At most this many trials.
    Trials(usize),
    /// At most this share (0–1] of the trials an exhaustive run takes (every configuration
    /// in every round, and the confirmation).
    Share(f64),
}

impl Budget {
    /// `120` (trials) or `50%` (of an exhaustive run's trials); `None` otherwise.
    pub fn parse(s: &str) -> Option<Budget> {
        let s = s.trim();
        if let Some(p) = s.strip_suffix('%') {
            let x: f64 = p.trim().parse().ok()?;
            return (x > 0.0 && x <= 100.0).then_some(Budget::Share(x / 100.0));
        }
        let n: usize = s.parse().ok()?;
        (n > 0).then_some(Budget::Trials(n))
    }

    /// The trials it allows a run whose exhaustive run takes `exhaustive` trials.
    pub fn trials(&self, exhaustive: usize) -> usize {
        match self {
            Budget::Trials(n) => *n,
            Budget::Share(x) => (x * exhaustive as f64).floor() as usize,
        }
    }
}

impl std::fmt::Display for Budget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Budget::Trials(n) => write!(f, "{n} trials"),
            Budget::Share(x) => write!(f, "{} % of an exhaustive run's trials", x * 100.0),
        }
    }
}

/// Trial timing, repetitions and racing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunSpec {
    pub warmup: Duration,
    pub measure: Duration,
    /// Rounds at most (each alive configuration once per round).
    pub repetitions: usize,
    /// Race out configurations that are significantly worse.
    pub racing: bool,
    /// Rounds before the first rank test (the far-behind rule acts from round 3).
    pub min_rounds: usize,
    pub alpha: f64,
    /// Conditional power below which a configuration tied with the leader leaves the race:
    /// the chance that the rounds left would show it worse, were its observed shortfall real
    /// (0: never).
    pub futility: f64,
    /// From round 7 on, a configuration whose chance of being the best (a bootstrap of the
    /// rounds so far) is below this leaves the race (0: never).
    pub min_chance: f64,
    /// From round 3 on (before `min_rounds` too), a configuration significantly more than this
    /// share behind the leader leaves the race (0: never).
    pub far_behind: f64,
    /// From `min_rounds` on, the race ends when the expected loss of choosing the leader now
    /// (the sum over the others still racing of E[max(0, their advantage)], paired log
    /// ratios with a Student-t posterior) is below this share of its score (0: never).
    pub stop_loss: f64,
    /// The most trials a raced run may take, race and confirmation together: the race ends
    /// before a round that would leave too few for the confirmation (none: no cap).
    pub budget: Option<Budget>,
    /// A configuration practically equivalent to the leader (within `objective.min_effect`)
    /// leaves the race. Off by default: it saves few trials once `min_chance` is on, and a
    /// lucky early leader can push the true best out as "equivalent".
    pub drop_equivalent: bool,
    /// Extra paired rounds of winner and baseline.
    pub confirm_rounds: usize,
    pub seed: u64,
    /// The baseline configuration (default: each factor's first level).
    pub baseline: Config,
    /// Seconds between stopping one trial and starting the next.
    pub cooldown: Duration,
}

/// The scaling mode: a load sweep of one configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScalingSpec {
    /// Total users at each point.
    pub users: Vec<usize>,
    pub config: Config,
}

/// A validated study.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Study {
    /// Where it was read from.
    pub path: PathBuf,
    /// The file's text (kept in the store so `--resume` and reports need no file).
    pub source: String,
    pub name: String,
    pub deployment: Deployment,
    pub load: LoadSpec,
    pub objective: Objective,
    pub factors: Vec<Factor>,
    /// Allocator name → library for `LD_PRELOAD` (empty: none).
    pub allocators: BTreeMap<String, String>,
    pub run: RunSpec,
    pub scaling: ScalingSpec,
}

// ---- the raw file ------------------------------------------------------------------------

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStudy {
    name: Option<String>,
    deployment: RawDeployment,
    load: RawLoad,
    #[serde(default)]
    objective: RawObjective,
    #[serde(default)]
    factors: toml::Table,
    #[serde(default)]
    allocators: BTreeMap<String, String>,
    #[serde(default)]
    run: RawRun,
    #[serde(default)]
    scaling: RawScaling,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDeployment {
    command: String,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    ready: RawReady,
    #[serde(default)]
    setup: Vec<String>,
    #[serde(default)]
    teardown: Vec<String>,
    #[serde(default)]
    knobs: Vec<KnobSpec>,
    #[serde(default = "default_port")]
    base_port: u16,
    workdir: Option<PathBuf>,
}

fn default_port() -> u16 {
    18080
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawReady {
    http: Option<String>,
    tcp: Option<bool>,
    timeout: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLoad {
    url: Option<String>,
    #[serde(default = "default_method")]
    method: String,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    body: Option<String>,
    body_file: Option<PathBuf>,
    data: Option<PathBuf>,
    #[serde(default = "default_users")]
    users_per_instance: usize,
    #[serde(default = "default_think")]
    think_time: String,
    timeout: Option<String>,
    threads: Option<usize>,
    command: Option<String>,
    #[serde(default = "default_meaning", rename = "as")]
    meaning: String,
}

fn default_method() -> String {
    "GET".into()
}
fn default_users() -> usize {
    4
}
fn default_think() -> String {
    "0".into()
}
fn default_meaning() -> String {
    "throughput".into()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawObjective {
    #[serde(default = "default_goal")]
    goal: String,
    #[serde(default)]
    constraints: Vec<String>,
    #[serde(default = "default_effect")]
    min_effect: f64,
}

impl Default for RawObjective {
    fn default() -> Self {
        RawObjective {
            goal: default_goal(),
            constraints: Vec::new(),
            min_effect: default_effect(),
        }
    }
}

fn default_goal() -> String {
    "maximize throughput".into()
}
fn default_effect() -> f64 {
    0.05
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawRun {
    warmup: Option<String>,
    measure: Option<String>,
    repetitions: Option<usize>,
    racing: Option<bool>,
    min_rounds: Option<usize>,
    alpha: Option<f64>,
    futility: Option<f64>,
    min_chance: Option<f64>,
    far_behind: Option<f64>,
    stop_loss: Option<f64>,
    budget: Option<toml::Value>,
    drop_equivalent: Option<bool>,
    confirm_rounds: Option<usize>,
    seed: Option<u64>,
    #[serde(default)]
    baseline: toml::Table,
    cooldown: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawScaling {
    #[serde(default)]
    users: Vec<usize>,
    #[serde(default)]
    config: toml::Table,
}

// ---- locating fields ---------------------------------------------------------------------

/// The 1-based line of `key` in table `section` (`deployment`, `factors`, `run.baseline`);
/// the section's header line when the key is not written as `key = …` on a line; 1 otherwise.
pub(crate) fn line_of(src: &str, section: &str, key: &str) -> usize {
    let mut current = String::new();
    let mut header_line = None;
    for (i, raw) in src.lines().enumerate() {
        let line = raw.trim();
        if line.starts_with('[') {
            current = line
                .trim_start_matches('[')
                .trim_end_matches(']')
                .trim()
                .to_string();
            if current == section && header_line.is_none() {
                header_line = Some(i + 1);
            }
            continue;
        }
        if let Some(rest) = line.strip_prefix(key)
            && rest.trim_start().starts_with('=')
        {
            // Top-level dotted keys (`deployment.command = …`) count too.
            if current == section || (current.is_empty() && section.is_empty()) {
                return i + 1;
            }
        }
        let dotted = format!("{section}.{key}");
        if current.is_empty()
            && let Some(rest) = line.strip_prefix(&dotted)
            && rest.trim_start().starts_with('=')
        {
            return i + 1;
        }
    }
    // `key` inside an inline table: `env = { KEY = … }` is on the line of `env`.
    if let Some((parent, last)) = section.rsplit_once('.') {
        return line_of(src, parent, last);
    }
    header_line.unwrap_or(1)
}

/// The names in `{name}` placeholders of a template (`{{` and `}}` are literal braces).
pub fn placeholders(template: &str) -> std::result::Result<Vec<String>, String> {
    let mut names = Vec::new();
    let mut chars = template.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '{' if chars.peek().map(|p| p.1) == Some('{') => {
                chars.next();
            }
            '}' if chars.peek().map(|p| p.1) == Some('}') => {
                chars.next();
            }
            '{' => {
                let rest = &template[i + 1..];
                let Some(end) = rest.find('}') else {
                    return Err(format!("a `{{` at byte {i} has no closing `}}`"));
                };
                names.push(rest[..end].trim().to_string());
                for _ in 0..end + 1 {
                    chars.next();
                }
            }
            _ => {}
        }
    }
    Ok(names)
}

/// Fills `{name}` placeholders from `values` (unknown names are left as written; validation
/// rejected them already). `{{` and `}}` become `{` and `}`.
pub fn render(template: &str, values: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(pos) = rest.find(['{', '}']) {
        out.push_str(&rest[..pos]);
        let tail = &rest[pos..];
        if tail.starts_with("{{") || tail.starts_with("}}") {
            out.push_str(&tail[..1]);
            rest = &tail[2..];
        } else if tail.starts_with('{') {
            match tail.find('}') {
                Some(end) => {
                    let name = tail[1..end].trim();
                    match values.get(name) {
                        Some(v) => out.push_str(v),
                        None => out.push_str(&tail[..=end]),
                    }
                    rest = &tail[end + 1..];
                }
                None => {
                    out.push_str(tail);
                    rest = "";
                }
            }
        } else {
            out.push('}');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    out
}

// ---- loading -----------------------------------------------------------------------------

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
        let raw: RawStudy = toml::from_str(text).map_err(|e| StudyError::Syntax {
            path: path.to_path_buf(),
            message: e.to_string().trim_end().replace('\n', "\n  "),
        })?;
        let bad = |section: &str, key: &str, field: &str, msg: String| {
            StudyError::invalid(path, line_of(text, section, key), field, msg)
        };

        // Factors.
        let mut factors = Vec::new();
        for (name, value) in &raw.factors {
            let field = format!("factors.{name}");
            let Some(arr) = value.as_array() else {
                return Err(bad(
                    "factors",
                    name,
                    &field,
                    "expected a list of levels".into(),
                ));
            };
            if arr.is_empty() {
                return Err(bad("factors", name, &field, "has no levels".into()));
            }
            let mut levels = Vec::new();
            for (i, v) in arr.iter().enumerate() {
                let Some(l) = Level::from_toml(v) else {
                    return Err(bad(
                        "factors",
                        name,
                        &field,
                        format!("level {} must be a number, string or boolean", i + 1),
                    ));
                };
                check_level(name, &l, &raw.allocators).map_err(|m| {
                    bad(
                        "factors",
                        name,
                        &field,
                        format!("level {} ({}): {m}", i + 1, level_repr(&l)),
                    )
                })?;
                if levels.contains(&l) {
                    return Err(bad(
                        "factors",
                        name,
                        &field,
                        format!("level {} is listed twice", level_repr(&l)),
                    ));
                }
                if let Some(first) = levels.first()
                    && std::mem::discriminant(first) != std::mem::discriminant(&l)
                {
                    return Err(bad(
                        "factors",
                        name,
                        &field,
                        format!(
                            "level {} is {} but the first level is {}",
                            level_repr(&l),
                            l.type_name(),
                            Level::type_name(first)
                        ),
                    ));
                }
                levels.push(l);
            }
            factors.push(Factor {
                name: name.clone(),
                levels,
            });
        }
        // Keep the file's order of factors.
        factors.sort_by_key(|f| line_of(text, "factors", &f.name));

        // Allocators.
        let mut allocators: BTreeMap<String, String> = DEFAULT_ALLOCATORS
            .iter()
            .map(|(n, p)| (n.to_string(), p.to_string()))
            .collect();
        allocators.extend(raw.allocators.clone());

        // Templates.
        let factor_names: Vec<&str> = factors.iter().map(|f| f.name.as_str()).collect();
        let check_template = |tpl: &str, section: &str, key: &str, field: &str, extra: &[&str]| {
            let names = placeholders(tpl).map_err(|m| bad(section, key, field, m))?;
            for n in names {
                if !extra.contains(&n.as_str()) && !factor_names.contains(&n.as_str()) {
                    let mut known: Vec<&str> = extra.to_vec();
                    known.extend(factor_names.iter().copied().filter(|f| !extra.contains(f)));
                    return Err(bad(
                        section,
                        key,
                        field,
                        format!(
                            "unknown placeholder {{{n}}}: not a factor of this study; known: {}",
                            known
                                .iter()
                                .map(|k| format!("{{{k}}}"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    ));
                }
            }
            Ok::<(), StudyError>(())
        };
        let d = &raw.deployment;
        if d.command.trim().is_empty() {
            return Err(bad(
                "deployment",
                "command",
                "deployment.command",
                "is empty".into(),
            ));
        }
        check_template(
            &d.command,
            "deployment",
            "command",
            "deployment.command",
            &DEPLOY_PLACEHOLDERS,
        )?;
        split_words(&d.command)
            .map_err(|m| bad("deployment", "command", "deployment.command", m))?;
        for (k, v) in &d.env {
            check_template(
                v,
                "deployment.env",
                k,
                &format!("deployment.env.{k}"),
                &DEPLOY_PLACEHOLDERS,
            )?;
            if k == "LD_PRELOAD" && factor_names.contains(&"allocator") {
                return Err(bad(
                    "deployment.env",
                    k,
                    "deployment.env.LD_PRELOAD",
                    "the allocator factor sets LD_PRELOAD; remove it from env".into(),
                ));
            }
        }
        for (i, s) in d.setup.iter().enumerate() {
            check_template(
                s,
                "deployment",
                "setup",
                &format!("deployment.setup[{i}]"),
                &["instances"],
            )?;
        }
        for (i, s) in d.teardown.iter().enumerate() {
            check_template(
                s,
                "deployment",
                "teardown",
                &format!("deployment.teardown[{i}]"),
                &["instances"],
            )?;
        }
        for (i, k) in d.knobs.iter().enumerate() {
            let field = format!("deployment.knobs[{i}]");
            check_template(
                &k.value,
                "deployment.knobs",
                "value",
                &field,
                &["instances"],
            )?;
            let p = k.path.trim_start_matches('/');
            if !(p.starts_with("sys/") || p.starts_with("proc/")) || p.split('/').any(|c| c == "..")
            {
                return Err(bad(
                    "deployment.knobs",
                    "path",
                    &field,
                    format!("{:?} must be a path under /sys or /proc without ..", k.path),
                ));
            }
        }
        let ready = match (&d.ready.http, d.ready.tcp) {
            (Some(_), Some(true)) => {
                return Err(bad(
                    "deployment",
                    "ready",
                    "deployment.ready",
                    "give either http or tcp, not both".into(),
                ));
            }
            (Some(url), _) => {
                check_template(
                    url,
                    "deployment",
                    "ready",
                    "deployment.ready.http",
                    &DEPLOY_PLACEHOLDERS,
                )?;
                if !url.starts_with("http://") {
                    return Err(bad(
                        "deployment",
                        "ready",
                        "deployment.ready.http",
                        format!("{url:?} must start with http://"),
                    ));
                }
                Ready::Http { url: url.clone() }
            }
            _ => Ready::Tcp,
        };
        let dur = |section: &str, key: &str, field: &str, v: &Option<String>, def: Duration| match v
        {
            None => Ok(def),
            Some(s) => parse_duration(s).map_err(|e| bad(section, key, field, e.to_string())),
        };
        let ready_timeout = dur(
            "deployment",
            "ready",
            "deployment.ready.timeout",
            &d.ready.timeout,
            Duration::from_secs(30),
        )?;
        let deployment = Deployment {
            command: d.command.clone(),
            env: d.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            ready,
            ready_timeout,
            setup: d.setup.clone(),
            teardown: d.teardown.clone(),
            knobs: d.knobs.clone(),
            base_port: d.base_port,
            workdir: d.workdir.clone(),
        };

        // Load.
        let l = &raw.load;
        if l.users_per_instance == 0 {
            return Err(bad(
                "load",
                "users_per_instance",
                "load.users_per_instance",
                "must be at least 1".into(),
            ));
        }
        let kind = match (&l.url, &l.command) {
            (Some(_), Some(_)) => {
                return Err(bad(
                    "load",
                    "command",
                    "load",
                    "give either url (the built-in driver) or command (an adapter), not both"
                        .into(),
                ));
            }
            (None, None) => {
                return Err(bad(
                    "load",
                    "url",
                    "load",
                    "needs url (the built-in driver) or command (an adapter)".into(),
                ));
            }
            (Some(url), None) => {
                check_template(url, "load", "url", "load.url", &DEPLOY_PLACEHOLDERS)?;
                if !url.starts_with("http://") {
                    return Err(bad(
                        "load",
                        "url",
                        "load.url",
                        format!("{url:?} must start with http://"),
                    ));
                }
                perfpilot_drive::ThinkTime::parse(&l.think_time)
                    .map_err(|e| bad("load", "think_time", "load.think_time", e.to_string()))?;
                let body = match (&l.body, &l.body_file) {
                    (Some(_), Some(_)) => {
                        return Err(bad(
                            "load",
                            "body_file",
                            "load.body_file",
                            "give body or body_file, not both".into(),
                        ));
                    }
                    (Some(b), None) => Some(b.clone()),
                    (None, Some(f)) => Some(std::fs::read_to_string(f).map_err(|e| {
                        bad(
                            "load",
                            "body_file",
                            "load.body_file",
                            format!("cannot read {}: {e}", f.display()),
                        )
                    })?),
                    (None, None) => None,
                };
                if let Some(data) = &l.data
                    && !data.is_file()
                {
                    return Err(bad(
                        "load",
                        "data",
                        "load.data",
                        format!("{} is not a file", data.display()),
                    ));
                }
                LoadKind::Builtin {
                    url: url.clone(),
                    method: l.method.clone(),
                    headers: l
                        .headers
                        .iter()
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect(),
                    body,
                    data: l.data.clone(),
                    think_time: l.think_time.clone(),
                    timeout: dur(
                        "load",
                        "timeout",
                        "load.timeout",
                        &l.timeout,
                        Duration::from_secs(10),
                    )?,
                    threads: l.threads.unwrap_or(1).max(1),
                }
            }
            (None, Some(cmd)) => {
                check_template(cmd, "load", "command", "load.command", &LOAD_PLACEHOLDERS)?;
                if !["throughput", "latency_ms"].contains(&l.meaning.as_str()) {
                    return Err(bad(
                        "load",
                        "as",
                        "load.as",
                        format!("{:?}: expected throughput or latency_ms", l.meaning),
                    ));
                }
                LoadKind::Command {
                    command: cmd.clone(),
                    meaning: l.meaning.clone(),
                }
            }
        };
        let load = LoadSpec {
            kind,
            users_per_instance: l.users_per_instance,
        };

        // Objective.
        let o = &raw.objective;
        let g = o.goal.trim().to_ascii_lowercase();
        let goal = if g == "maximize throughput" {
            Goal::MaxThroughput
        } else if g == "minimize cpu per request" || g == "minimize cpu_per_request" {
            Goal::MinCpuPerRequest
        } else if let Some(p) = g.strip_prefix("minimize latency") {
            let p = p.trim();
            let p = if p.is_empty() { "p99" } else { p };
            if !["mean", "p50", "p75", "p90", "p95", "p99", "p99.9", "max"].contains(&p) {
                return Err(bad(
                    "objective",
                    "goal",
                    "objective.goal",
                    format!(
                        "latency statistic {p:?}: expected mean, p50, p75, p90, p95, p99, p99.9 or max"
                    ),
                ));
            }
            Goal::MinLatency(p.to_string())
        } else {
            return Err(bad(
                "objective",
                "goal",
                "objective.goal",
                format!(
                    "{:?}: expected \"maximize throughput\", \"minimize latency p99\" (any of mean, p50…p99.9, max) or \"minimize cpu per request\"",
                    o.goal
                ),
            ));
        };
        if matches!(goal, Goal::MinCpuPerRequest) && matches!(load.kind, LoadKind::Command { .. }) {
            return Err(bad(
                "objective",
                "goal",
                "objective.goal",
                "CPU per request needs request counts: use the built-in driver (load.url)".into(),
            ));
        }
        for c in &o.constraints {
            Threshold::parse(c).map_err(|e| {
                bad(
                    "objective",
                    "constraints",
                    "objective.constraints",
                    e.to_string(),
                )
            })?;
        }
        if !(o.min_effect > 0.0 && o.min_effect < MIN_EFFECT_BELOW) {
            return Err(bad(
                "objective",
                "min_effect",
                "objective.min_effect",
                "must be a positive fraction such as 0.05 (5 %)".into(),
            ));
        }
        let objective = Objective {
            goal,
            constraints: o.constraints.clone(),
            min_effect: o.min_effect,
        };

        // Run.
        let r = &raw.run;
        let repetitions = r.repetitions.unwrap_or(5);
        if repetitions == 0 {
            return Err(bad(
                "run",
                "repetitions",
                "run.repetitions",
                "must be at least 1".into(),
            ));
        }
        let alpha = r.alpha.unwrap_or(0.05);
        if !(alpha > 0.0 && alpha < 0.5) {
            return Err(bad(
                "run",
                "alpha",
                "run.alpha",
                "must be between 0 and 0.5".into(),
            ));
        }
        // A share in [0, below): 0 turns its rule off.
        let share = |v: Option<f64>, default: f64, key: &str| -> Result<f64> {
            let x = v.unwrap_or(default);
            let below = share_below(key);
            if (0.0..below).contains(&x) {
                Ok(x)
            } else {
                Err(bad(
                    "run",
                    key,
                    &format!("run.{key}"),
                    format!("must be at least 0 (off) and below {below}"),
                ))
            }
        };
        let futility = share(r.futility, DEFAULT_FUTILITY, "futility")?;
        let min_chance = share(r.min_chance, DEFAULT_MIN_CHANCE, "min_chance")?;
        let far_behind = share(r.far_behind, DEFAULT_FAR_BEHIND, "far_behind")?;
        let stop_loss = share(r.stop_loss, DEFAULT_STOP_LOSS, "stop_loss")?;
        let budget = match &r.budget {
            None => None,
            Some(v) => {
                let parsed = match v {
                    toml::Value::Integer(n) => Budget::parse(&n.to_string()),
                    toml::Value::String(t) => Budget::parse(t),
                    _ => None,
                };
                Some(parsed.ok_or_else(|| {
                    bad(
                        "run",
                        "budget",
                        "run.budget",
                        format!("{v} is neither a number of trials (120) nor a share of an exhaustive run's trials (\"50%\")"),
                    )
                })?)
            }
        };
        let config_from = |table: &toml::Table, section: &str| -> Result<Config> {
            for (k, v) in table {
                let field = format!("{section}.{k}");
                let Some(f) = factors.iter().find(|f| &f.name == k) else {
                    return Err(bad(
                        section,
                        k,
                        &field,
                        format!("{k:?} is not a factor of this study"),
                    ));
                };
                let ok = Level::from_toml(v).is_some_and(|l| f.levels.contains(&l));
                if !ok {
                    return Err(bad(
                        section,
                        k,
                        &field,
                        format!(
                            "{v} is not one of the factor's levels ({})",
                            f.levels
                                .iter()
                                .map(level_repr)
                                .collect::<Vec<_>>()
                                .join(", ")
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
                            .and_then(Level::from_toml)
                            .unwrap_or_else(|| f.levels[0].clone());
                        (f.name.clone(), l)
                    })
                    .collect(),
            ))
        };
        let baseline = config_from(&r.baseline, "run.baseline")?;
        let run = RunSpec {
            warmup: dur(
                "run",
                "warmup",
                "run.warmup",
                &r.warmup,
                Duration::from_secs(10),
            )?,
            measure: dur(
                "run",
                "measure",
                "run.measure",
                &r.measure,
                Duration::from_secs(30),
            )?,
            repetitions,
            racing: r.racing.unwrap_or(true),
            min_rounds: r.min_rounds.unwrap_or(DEFAULT_MIN_ROUNDS).max(2),
            alpha,
            futility,
            min_chance,
            far_behind,
            stop_loss,
            budget,
            drop_equivalent: r.drop_equivalent.unwrap_or(false),
            confirm_rounds: r.confirm_rounds.unwrap_or(3),
            seed: r.seed.unwrap_or(1),
            baseline,
            cooldown: dur(
                "run",
                "cooldown",
                "run.cooldown",
                &r.cooldown,
                Duration::from_millis(200),
            )?,
        };
        if run.measure.is_zero() {
            return Err(bad(
                "run",
                "measure",
                "run.measure",
                "must be longer than 0".into(),
            ));
        }
        let scaling = ScalingSpec {
            users: raw.scaling.users.clone(),
            config: config_from(&raw.scaling.config, "scaling.config")?,
        };
        if scaling.users.contains(&0) {
            return Err(bad(
                "scaling",
                "users",
                "scaling.users",
                "user counts must be at least 1".into(),
            ));
        }

        let name = raw.name.clone().unwrap_or_else(|| {
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

fn level_repr(l: &Level) -> String {
    match l {
        Level::Str(s) => format!("{s:?}"),
        other => other.to_string(),
    }
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
            Level::Str(s) => {
                let path = allocators.get(s).map(String::as_str).or_else(|| {
                    DEFAULT_ALLOCATORS
                        .iter()
                        .find(|(n, _)| n == s)
                        .map(|(_, p)| *p)
                });
                match path {
                    None => Err(format!(
                        "no library for allocator {s:?}: add it to [allocators] (name = \"/path/lib.so\"); known: {}",
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
            other => Err(format!(
                "allocator levels are names (strings), not {}",
                other.type_name()
            )),
        },
        _ => Ok(()),
    }
}

/// Splits a command line into words: whitespace separates, single and double quotes group,
/// a backslash escapes the next character. Pipes and other shell syntax are not interpreted.
pub fn split_words(s: &str) -> std::result::Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some('"'), '\\') => {
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
            }
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                in_word = true;
            }
            (None, '\\') => {
                if let Some(n) = chars.next() {
                    cur.push(n);
                    in_word = true;
                }
            }
            (None, c) if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            (None, c) => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    if quote.is_some() {
        return Err("a quote is not closed".into());
    }
    if in_word {
        words.push(cur);
    }
    if words.is_empty() {
        return Err("is empty".into());
    }
    Ok(words)
}
