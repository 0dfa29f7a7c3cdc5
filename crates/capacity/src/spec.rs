//! The capacity file (TOML; `docs/capacity.md`): the tiers of a deployment as instances, the
//! request classes the driver sends through the front tier, the load sweeps, and which points
//! the model is fitted from. Parsing rejects unknown fields with TOML's line and column;
//! validation names the file and the field.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use perfpilot_drive::{ThinkTime, parse_duration};
use perfpilot_model::Discipline;
use serde::{Deserialize, Serialize};

use crate::error::{CapacityError, Result};

/// The most `[capacity] repeat` may ask for: each repeat takes a warm-up and a window.
pub const MAX_REPEAT: u32 = 50;

/// The most `[capacity] rounds` may ask for: each round measures every point again.
pub const MAX_ROUNDS: u32 = 10;

/// What runs a tier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TierKind {
    /// A throw-away PostgreSQL cluster (initdb into a temporary directory).
    Postgres,
    /// nginx as a reverse proxy over the instances of the tier named in `upstream`.
    Nginx,
    /// A command per instance (`{host}`, `{port}`, `{TIER.host}`, `{TIER.port}` filled in).
    Command,
}

/// How an nginx tier spreads requests over its upstream's instances.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Balance {
    /// nginx's default: each request to the next instance in turn, busy or not, so that with
    /// few users two requests can queue on one instance while another idles.
    #[default]
    RoundRobin,
    /// Each request to the instance with the fewest open requests (`least_conn`): an idle
    /// instance is used first, as the model's station of several instances assumes.
    LeastConn,
}

/// One tier.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TierFile {
    /// Unique name; other tiers refer to it as `{NAME.host}`, `{NAME.port}`.
    pub name: String,
    /// What runs it.
    pub kind: TierKind,
    /// The command of a `command` tier.
    #[serde(default)]
    pub command: Option<String>,
    /// Shell commands run once before the first instance starts.
    #[serde(default)]
    pub setup: Vec<String>,
    /// An HTTP URL answering 200 when an instance is ready (else: its port accepts TCP).
    #[serde(default)]
    pub ready: Option<String>,
    /// The tier the proxy forwards to (an `nginx` tier).
    #[serde(default)]
    pub upstream: Option<String>,
    /// How the proxy spreads requests over the upstream's instances (an `nginx` tier):
    /// `round_robin` (default) or `least_conn`.
    #[serde(default)]
    pub balance: Option<Balance>,
    /// CPU quota per instance in cores (cgroup v2 `cpu.max`, v1 `cpu.cfs_quota_us`); none: no
    /// quota.
    #[serde(default)]
    pub cpu_quota: Option<f64>,
    /// Cores an instance can use without a quota (its threads or workers); default: all.
    #[serde(default)]
    pub cores: Option<f64>,
    /// Price of one instance, for the cost ranking.
    #[serde(default)]
    pub price: Option<f64>,
    /// How an instance takes requests: `ps` (default) or `fcfs` for a pool of workers taking
    /// them in arrival order, so that a short request waits behind long ones.
    #[serde(default)]
    pub discipline: Option<Discipline>,
    /// PostgreSQL settings (`-c name=value`) of a `postgres` tier.
    #[serde(default)]
    pub settings: BTreeMap<String, String>,
}

/// One request class the driver sends through the front tier.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassFile {
    /// Unique name (`score`, `lookup`).
    pub name: String,
    /// Path on the front tier (`/score/big`).
    pub path: String,
    /// HTTP method (default GET).
    #[serde(default = "get")]
    pub method: String,
    /// Request headers.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Request body file.
    #[serde(default)]
    pub body_file: Option<PathBuf>,
}

fn get() -> String {
    "GET".into()
}

/// One load sweep: user counts on one deployment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepFile {
    /// A name for tables and charts.
    pub name: String,
    /// Users per point (per unit of the mix).
    pub users: Vec<u32>,
    /// Think time (`0`, `50ms`, `exp:50ms`).
    #[serde(default = "zero")]
    pub think_time: String,
    /// Users of each class per unit (default: one of the first class).
    #[serde(default)]
    pub mix: BTreeMap<String, u32>,
    /// Instances per tier (default 1).
    #[serde(default)]
    pub instances: BTreeMap<String, u32>,
    /// Instances from the second of this tier run in a network namespace: a second host.
    #[serde(default)]
    pub second_host: Option<String>,
}

fn zero() -> String {
    "0".into()
}

/// `[capacity]`: timing and fitting.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CapacityFile {
    /// Unmeasured warm-up per point.
    #[serde(default = "warmup")]
    pub warmup: String,
    /// Measured window per point.
    #[serde(default = "measure")]
    pub measure: String,
    /// Unmeasured load after each deployment, at the sweep's largest users, before its first
    /// point: a fresh deployment's first requests are slow (cold caches, connections opened).
    #[serde(default = "deploy_warmup")]
    pub deploy_warmup: String,
    /// Points the model is fitted from (`SWEEP: USERS`); default: the two lowest of the first
    /// sweep.
    #[serde(default)]
    pub fit: Vec<String>,
    /// Driver threads (default 1).
    #[serde(default)]
    pub driver_threads: Option<usize>,
    /// The first fit point measured again this many times in a row after its deployment's
    /// points (all rounds), on the same deployment: the machine's repeatability at that load
    /// (0: not measured).
    #[serde(default)]
    pub repeat: u32,
    /// Times every point is measured, in rounds of alternating order on its deployment (the
    /// sweeps with the same instances and second host share one); a point is the mean of its
    /// rounds. Default 1.
    #[serde(default = "one")]
    pub rounds: u32,
}

impl Default for CapacityFile {
    fn default() -> Self {
        CapacityFile {
            warmup: warmup(),
            measure: measure(),
            deploy_warmup: deploy_warmup(),
            fit: Vec::new(),
            driver_threads: None,
            repeat: 0,
            rounds: one(),
        }
    }
}

fn one() -> u32 {
    1
}

fn warmup() -> String {
    "2s".into()
}

fn measure() -> String {
    "5s".into()
}

fn deploy_warmup() -> String {
    "10s".into()
}

/// The whole file as written.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct File {
    /// A name for the report.
    #[serde(default)]
    pub name: Option<String>,
    /// `[[tier]]`, in start order (a tier another refers to comes first).
    #[serde(alias = "tiers")]
    pub tier: Vec<TierFile>,
    /// `[[class]]`: at least one.
    #[serde(alias = "classes")]
    pub class: Vec<ClassFile>,
    /// `[[sweep]]`: at least one.
    #[serde(alias = "sweeps")]
    pub sweep: Vec<SweepFile>,
    /// `[capacity]`.
    #[serde(default)]
    pub capacity: CapacityFile,
}

/// A validated capacity study.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Capacity {
    /// Where it was read from.
    pub path: PathBuf,
    /// Its name.
    pub name: String,
    /// The file's content, checked.
    pub file: File,
    /// Warm-up per point.
    pub warmup: Duration,
    /// Measured window per point.
    pub measure: Duration,
    /// Unmeasured load after each deployment.
    pub deploy_warmup: Duration,
    /// Driver threads.
    pub driver_threads: usize,
    /// Times the first fit point is measured again (`[capacity] repeat`).
    #[serde(default)]
    pub repeat: u32,
    /// Rounds every point is measured in (`[capacity] rounds`).
    #[serde(default = "one")]
    pub rounds: u32,
}

impl Capacity {
    /// Reads and checks the file at `path`.
    pub fn load(path: &Path) -> Result<Capacity> {
        let text = std::fs::read_to_string(path).map_err(|e| CapacityError::File {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        Capacity::parse(&text, path)
    }

    /// Parses and checks capacity-file text; `path` names it in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Capacity> {
        let bad = |message: String| CapacityError::File {
            path: path.to_path_buf(),
            message,
        };
        let file: File = toml::from_str(text).map_err(|e| bad(e.to_string().trim().into()))?;
        let names = check_tiers(&file.tier).map_err(bad)?;
        check_classes(&file.class).map_err(bad)?;
        check_sweeps(&file, &names).map_err(bad)?;
        let cap = &file.capacity;
        let dur = |field: &str, v: &str| {
            parse_duration(v).map_err(|e| bad(format!("capacity.{field}: {e}")))
        };
        let warmup = dur("warmup", &cap.warmup)?;
        let measure = dur("measure", &cap.measure)?;
        let deploy_warmup = dur("deploy_warmup", &cap.deploy_warmup)?;
        if measure < Duration::from_secs(4) {
            return Err(bad(format!(
                "capacity.measure = {}: measure at least 4s (the steady-state check needs 4 one-second windows)",
                cap.measure
            )));
        }
        let driver_threads = cap.driver_threads.unwrap_or(1).max(1);
        let repeat = cap.repeat;
        if cap.repeat > MAX_REPEAT {
            return Err(bad(format!(
                "capacity.repeat = {}: at most {MAX_REPEAT} (each takes warmup + measure)",
                cap.repeat
            )));
        }
        if cap.rounds == 0 || cap.rounds > MAX_ROUNDS {
            return Err(bad(format!(
                "capacity.rounds = {}: give 1 to {MAX_ROUNDS} (each round measures every point again)",
                cap.rounds
            )));
        }
        let rounds = cap.rounds;
        let name = file.name.clone().unwrap_or_else(|| {
            path.file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "capacity".into())
        });
        let c = Capacity {
            path: path.to_path_buf(),
            name,
            file,
            warmup,
            measure,
            deploy_warmup,
            driver_threads,
            repeat,
            rounds,
        };
        for label in &c.file.capacity.fit {
            c.parse_label(label).map_err(bad)?;
        }
        Ok(c)
    }

    /// The tier the driver sends to: the last one declared.
    pub fn front(&self) -> &TierFile {
        // `parse` refuses a file without tiers.
        &self.file.tier[self.file.tier.len() - 1]
    }

    /// Users per class of sweep `s` at `users`.
    pub fn class_users(&self, s: &SweepFile, users: u32) -> Vec<(String, u32)> {
        if s.mix.is_empty() {
            return vec![(self.file.class[0].name.clone(), users)];
        }
        self.file
            .class
            .iter()
            .filter_map(|c| s.mix.get(&c.name).map(|&k| (c.name.clone(), k * users)))
            .collect()
    }

    /// The label of a point: `SWEEP: USERS`.
    pub fn label(sweep: &str, users: u32) -> String {
        format!("{sweep}: {users}")
    }

    fn parse_label(&self, label: &str) -> std::result::Result<(usize, u32), String> {
        let (sweep, users) = label
            .rsplit_once(':')
            .ok_or_else(|| format!("capacity.fit: `{label}` is not `SWEEP: USERS`"))?;
        let i = self
            .file
            .sweep
            .iter()
            .position(|s| s.name == sweep.trim())
            .ok_or_else(|| format!("capacity.fit: `{label}`: no sweep `{}`", sweep.trim()))?;
        let u: u32 = users.trim().parse().map_err(|_| {
            format!(
                "capacity.fit: `{label}`: `{}` is not a user count",
                users.trim()
            )
        })?;
        if !self.file.sweep[i].users.contains(&u) {
            return Err(format!(
                "capacity.fit: `{label}`: the sweep has no {u}-user point"
            ));
        }
        Ok((i, u))
    }

    /// The point `[capacity] repeat` measures again, as (sweep index, users): the first point
    /// to fit from. `None` when `repeat` is 0.
    pub fn repeat_point(&self) -> Option<(usize, u32)> {
        if self.repeat == 0 {
            return None;
        }
        let label = self.fit_labels().into_iter().next()?;
        self.parse_label(&label).ok()
    }

    /// The labels of the points to fit from.
    pub fn fit_labels(&self) -> Vec<String> {
        if !self.file.capacity.fit.is_empty() {
            return self
                .file
                .capacity
                .fit
                .iter()
                .filter_map(|l| self.parse_label(l).ok())
                .map(|(i, u)| Capacity::label(&self.file.sweep[i].name, u))
                .collect();
        }
        let s = &self.file.sweep[0];
        let mut u = s.users.clone();
        u.sort_unstable();
        u.iter()
            .take(2)
            .map(|&n| Capacity::label(&s.name, n))
            .collect()
    }
}

/// Checks the `[[tier]]`s: unique names of letters, digits and `_`, what each kind needs,
/// positive numbers. Returns their names in order.
fn check_tiers(tiers: &[TierFile]) -> std::result::Result<Vec<&str>, String> {
    let mut names: Vec<&str> = Vec::new();
    for t in tiers {
        if names.contains(&t.name.as_str()) {
            return Err(format!("tier `{}` is declared twice", t.name));
        }
        if t.name.is_empty()
            || !t
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return Err(format!(
                "tier name `{}`: use letters, digits and _ only",
                t.name
            ));
        }
        match t.kind {
            TierKind::Command if t.command.is_none() => {
                return Err(format!("tier `{}`: a command tier needs `command`", t.name));
            }
            _ if t.balance.is_some() && t.kind != TierKind::Nginx => {
                return Err(format!(
                    "tier `{}`: `balance` is for an nginx tier (how it spreads requests over its upstream)",
                    t.name
                ));
            }
            TierKind::Nginx => match &t.upstream {
                None => {
                    return Err(format!("tier `{}`: an nginx tier needs `upstream`", t.name));
                }
                Some(u) if !names.contains(&u.as_str()) => {
                    return Err(format!(
                        "tier `{}`: upstream `{u}` is not a tier declared before it",
                        t.name
                    ));
                }
                _ => {}
            },
            _ => {}
        }
        for (field, v) in [
            ("cpu_quota", t.cpu_quota),
            ("cores", t.cores),
            ("price", t.price),
        ] {
            if let Some(v) = v
                && (!v.is_finite() || v <= 0.0)
            {
                return Err(format!("tier `{}`: {field} = {v}; it must be > 0", t.name));
            }
        }
        names.push(&t.name);
    }
    if names.contains(&"driver") {
        return Err("`driver` is the load driver's own tier; name yours differently".into());
    }
    if tiers.is_empty() {
        return Err("no [[tier]]: give at least one".into());
    }
    Ok(names)
}

/// Checks the `[[class]]`es: at least one, paths from `/`, body files that exist.
fn check_classes(classes: &[ClassFile]) -> std::result::Result<(), String> {
    if classes.is_empty() {
        return Err("no [[class]]: give at least one request class".into());
    }
    for c in classes {
        if !c.path.starts_with('/') {
            return Err(format!(
                "class `{}`: path `{}` must start with /",
                c.name, c.path
            ));
        }
        if let Some(b) = &c.body_file
            && !b.is_file()
        {
            return Err(format!(
                "class `{}`: body_file {} does not exist (paths are relative to the current directory)",
                c.name,
                b.display()
            ));
        }
    }
    Ok(())
}

/// Checks the `[[sweep]]`s against the tiers (`names`) and classes they refer to.
fn check_sweeps(file: &File, names: &[&str]) -> std::result::Result<(), String> {
    if file.sweep.is_empty() {
        return Err("no [[sweep]]: give at least one".into());
    }
    for s in &file.sweep {
        let at = |m: String| format!("sweep `{}`: {m}", s.name);
        if s.users.is_empty() || s.users.contains(&0) {
            return Err(at("users must be a non-empty list of counts >= 1".into()));
        }
        if let Some(u) = s
            .users
            .iter()
            .enumerate()
            .find_map(|(i, u)| s.users[..i].contains(u).then_some(u))
        {
            return Err(at(format!(
                "users lists {u} twice: each load is measured once; to measure one again and again, use capacity.repeat"
            )));
        }
        ThinkTime::parse(&s.think_time).map_err(|e| at(format!("think_time: {e}")))?;
        for k in s.mix.keys() {
            if !file.class.iter().any(|c| &c.name == k) {
                return Err(at(format!("mix: no class `{k}`")));
            }
        }
        for (k, &n) in &s.instances {
            if !names.contains(&k.as_str()) || n == 0 {
                return Err(at(format!(
                    "instances.{k} = {n}: name a tier and give >= 1"
                )));
            }
            let kind = file.tier.iter().find(|t| &t.name == k).map(|t| t.kind);
            if n > 1 && kind != Some(TierKind::Command) {
                return Err(at(format!(
                    "instances.{k}: only command tiers have several instances"
                )));
            }
        }
        if let Some(h) = &s.second_host
            && s.instances.get(h).copied().unwrap_or(1) < 2
        {
            return Err(at(format!("second_host = `{h}` needs instances.{h} >= 2")));
        }
    }
    Ok(())
}
