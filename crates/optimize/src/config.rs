//! The daemon's configuration file (TOML): `[tunables]` and `[[workload]]` tables that match
//! processes (by command name, executable, command line or cgroup), include or exclude them,
//! and give their benefit signal.
//!
//! ```toml
//! [tunables]
//! interval_s = 5
//!
//! [[workload]]
//! match = { comm = "sharedcache" }
//! signal = { url = "http://127.0.0.1:9187/metrics", metric = "sharedcache_ops_total" }
//!
//! [[workload]]
//! match = { exe = "/usr/bin/batchjob" }
//! signal = { command = "cat /run/batch/ops", kind = "counter" }
//!
//! [[workload]]
//! match = { cgroup = "system.slice/backup.service" }
//! action = "exclude"
//!
//! [[workload]]
//! match = { comm = "scoring" }
//! model = "capacity/model.toml"   # status shows its tier's utilisation and headroom
//! tier = "app"
//! ```
//!
//! Top-level `listen`, `web_config` (TLS and basic auth for it, in the exporter toolkit's
//! format), `status_remote` and `textfile`, and a `[fleet]` table configure the live metrics
//! and the fleet's priors; `read_ahead_devices = ["sdb", "nvme*"]` limits the read-ahead strategy to
//! those block devices; `conf.d/*.toml` beside the main file are read after it (`dropins.rs`).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::fleet::FleetConfig;
use crate::signal::preset::PresetConfig;
use crate::tunables::{Tunables, validate};

/// A configuration that could not be read: names the file, the line and the field.
#[derive(Debug, thiserror::Error)]
pub enum DaemonConfigError {
    /// The file could not be read.
    #[error("cannot read the config {}: {source}", path.display())]
    Read {
        /// The configuration file.
        path: PathBuf,
        /// Why it could not be read.
        #[source]
        source: std::io::Error,
    },
    /// The file does not parse, or a value in it is not valid.
    #[error("{}:{line}: {msg}", path.display())]
    Invalid {
        /// The configuration file.
        path: PathBuf,
        /// The line (from 1) of the offending table or value.
        line: usize,
        /// What is wrong, naming the field.
        msg: String,
    },
}

/// Whether a counter or a gauge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ValueKind {
    /// A monotonically increasing count: its rate is the signal.
    Counter,
    /// A level: its value is the signal.
    Gauge,
}

/// An application probe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged, deny_unknown_fields)]
pub enum ProbeSpec {
    /// An HTTP endpoint in the Prometheus text format.
    Http {
        /// The endpoint (`http://` only).
        url: String,
        /// The metric's name.
        metric: String,
        /// Labels the metric's line must carry.
        #[serde(default)]
        labels: BTreeMap<String, String>,
        /// Counter or gauge (default: see [`ProbeSpec::kind`]).
        kind: Option<ValueKind>,
        /// Whether a larger value is better (default: yes).
        #[serde(default = "yes")]
        higher_is_better: bool,
        /// Divide by the CPU the workload used in the window: work per CPU-second, a measure
        /// of efficiency that other load on shared CPUs does not blur.
        #[serde(default)]
        per_cpu: bool,
    },
    /// A command printing a number.
    Command {
        /// The command, run with `sh -c`.
        command: String,
        /// Counter or gauge (default: gauge).
        kind: Option<ValueKind>,
        /// Whether a larger value is better (default: yes).
        #[serde(default = "yes")]
        higher_is_better: bool,
        /// As for `url`: divide by the workload's CPU in the window.
        #[serde(default)]
        per_cpu: bool,
    },
}

fn yes() -> bool {
    true
}

impl ProbeSpec {
    /// Counter or gauge: as given, else a `_total` metric is a counter, anything else a gauge.
    pub fn kind(&self) -> ValueKind {
        match self {
            ProbeSpec::Http { kind: Some(k), .. } | ProbeSpec::Command { kind: Some(k), .. } => *k,
            ProbeSpec::Http { metric, .. } if metric.ends_with("_total") => ValueKind::Counter,
            _ => ValueKind::Gauge,
        }
    }

    /// Whether the value is divided by the workload's CPU.
    pub fn per_cpu(&self) -> bool {
        match self {
            ProbeSpec::Http { per_cpu, .. } | ProbeSpec::Command { per_cpu, .. } => *per_cpu,
        }
    }

    /// Whether a larger value is better.
    pub fn higher_is_better(&self) -> bool {
        match self {
            ProbeSpec::Http {
                higher_is_better, ..
            }
            | ProbeSpec::Command {
                higher_is_better, ..
            } => *higher_is_better,
        }
    }
}

/// How a `[[workload]]` entry selects processes; every given field must match.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Matcher {
    /// The command name (`/proc/<pid>/comm`), exactly.
    pub comm: Option<String>,
    /// The executable path, exactly.
    pub exe: Option<String>,
    /// A substring of the command line.
    pub cmdline: Option<String>,
    /// The cgroup path (as in `/proc/<pid>/cgroup`, without the leading `/`), or a prefix of it.
    pub cgroup: Option<String>,
}

/// What a process looks like to a matcher.
#[derive(Debug, Clone, Default)]
pub struct Identity<'a> {
    /// The command name.
    pub comm: &'a str,
    /// The executable path, where readable.
    pub exe: Option<&'a str>,
    /// The command line, arguments separated by spaces.
    pub cmdline: &'a str,
    /// The cgroup path (v2), where readable.
    pub cgroup: Option<&'a str>,
}

impl Matcher {
    /// True when every given field matches.
    pub fn matches(&self, id: &Identity) -> bool {
        self.comm.as_deref().is_none_or(|c| c == id.comm)
            && self.exe.as_deref().is_none_or(|e| id.exe == Some(e))
            && self
                .cmdline
                .as_deref()
                .is_none_or(|c| id.cmdline.contains(c))
            && self.cgroup.as_deref().is_none_or(|c| {
                id.cgroup.is_some_and(|g| {
                    g.trim_start_matches('/')
                        .starts_with(c.trim_start_matches('/'))
                })
            })
    }

    fn is_empty(&self) -> bool {
        self.comm.is_none() && self.exe.is_none() && self.cmdline.is_none() && self.cgroup.is_none()
    }
}

/// Include (default) or exclude what a rule matches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RuleAction {
    /// Optimize what the rule matches.
    #[default]
    Include,
    /// Leave what the rule matches alone.
    Exclude,
}

/// One `[[workload]]` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// Which processes the rule is about (`match` in the file).
    #[serde(rename = "match")]
    pub matcher: Matcher,
    /// Include (default) or exclude them.
    #[serde(default)]
    pub action: RuleAction,
    /// Their benefit signal, when the application has one.
    pub signal: Option<ProbeSpec>,
    /// A capacity model of their deployment (`perfpilot model` file; relative to the config
    /// file): `status` shows their tier's utilisation and headroom.
    pub model: Option<PathBuf>,
    /// Which station of `model` they are (needed when it has several).
    pub tier: Option<String>,
    /// `model` loaded (when the configuration is read).
    #[serde(skip)]
    pub capacity: Option<perfpilot_model::headroom::TierCapacity>,
}

/// The daemon's whole configuration file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DaemonConfig {
    /// `name → value` from `[tunables]`, validated.
    pub tunables: BTreeMap<String, String>,
    /// The `[[workload]]` tables, in file order (the first match wins).
    pub workloads: Vec<Rule>,
    /// Only matched workloads are considered when true (`only_matched = true` at the top level).
    pub only_matched: bool,
    /// The `[[preset]]` tables: built-in application signals added or overridden.
    pub preset: Vec<PresetConfig>,
    /// Where to serve `/metrics` and `/status` (`listen = "127.0.0.1:10187"`; off when absent).
    pub listen: Option<SocketAddr>,
    /// The endpoint's web-config file: TLS and basic auth, in the format of Prometheus'
    /// exporter toolkit (`web_config = "/etc/perfpilot/web-config.yml"`).
    pub web_config: Option<PathBuf>,
    /// Serve `/status` to clients off loopback too (`status_remote = true`; default false).
    pub status_remote: bool,
    /// A directory for node_exporter's textfile collector (`textfile = "/var/lib/…"`).
    pub textfile: Option<PathBuf>,
    /// The `[fleet]` table: verdicts of other hosts read from Prometheus.
    pub fleet: Option<FleetConfig>,
    /// The block devices the read-ahead strategy may tune (`read_ahead_devices = ["sdb",
    /// "nvme*"]`: a name, or a prefix ending in `*`); every device when absent.
    pub read_ahead_devices: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    #[serde(default)]
    tunables: BTreeMap<String, toml::Spanned<toml::Value>>,
    #[serde(default)]
    workload: Vec<toml::Spanned<Rule>>,
    only_matched: Option<bool>,
    #[serde(default)]
    preset: Vec<toml::Spanned<PresetConfig>>,
    listen: Option<toml::Spanned<String>>,
    web_config: Option<PathBuf>,
    status_remote: Option<bool>,
    textfile: Option<PathBuf>,
    fleet: Option<toml::Spanned<FleetConfig>>,
    read_ahead_devices: Option<toml::Spanned<Vec<String>>>,
}

/// The default port of the metrics endpoint (the one the unit's config, the DaemonSet and the
/// docs use): past the exporters' allocations of Prometheus' default port list, whose
/// 9100–9999 are all taken (9187 is postgres_exporter's); docs/metrics.md says how it was chosen.
pub const DEFAULT_PORT: u16 = 10187;

/// A tunable's value as the text `validate` reads, checked: a number, a string, or a boolean
/// (`on`/`off`).
fn tunable_value(name: &str, value: &toml::Value) -> Result<String, String> {
    let v = match value {
        toml::Value::String(s) => s.clone(),
        toml::Value::Integer(i) => i.to_string(),
        toml::Value::Float(f) => f.to_string(),
        toml::Value::Boolean(b) => if *b { "on" } else { "off" }.to_string(),
        other => {
            return Err(format!(
                "tunable {name}: {other} is not a number, string or boolean"
            ));
        }
    };
    validate(name, &v).map_err(|e| e.to_string())
}

/// A `[[workload]]` rule checked, with its model's tier loaded (a relative `model` path is
/// beside the config file `path`).
fn checked_rule(mut rule: Rule, path: &Path) -> Result<Rule, String> {
    if rule.matcher.is_empty() {
        return Err("`match` needs at least one of comm, exe, cmdline, cgroup".into());
    }
    if rule.action == RuleAction::Exclude && rule.signal.is_some() {
        return Err("an excluded workload cannot have a signal".into());
    }
    if let Some(ProbeSpec::Http { url, .. }) = &rule.signal
        && !url.starts_with("http://")
    {
        return Err(format!("signal url {url:?} must start with http://"));
    }
    if let Some(m) = &rule.model {
        let m = match path.parent() {
            Some(dir) if m.is_relative() => dir.join(m),
            _ => m.clone(),
        };
        let tier = perfpilot_model::headroom::TierCapacity::load(&m, rule.tier.as_deref())
            .map_err(|e| e.to_string())?;
        rule.capacity = Some(tier);
    } else if rule.tier.is_some() {
        return Err("`tier` names a station of a `model`; add `model = \"FILE\"`".into());
    }
    Ok(rule)
}

/// Reads a listen address: `ADDR:PORT`, `[V6]:PORT`, or a bare port (on 127.0.0.1).
pub fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    let s = s.trim();
    if let Ok(port) = s.trim_start_matches(':').parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    s.parse().map_err(|_| {
        format!("listen {s:?}: expected ADDRESS:PORT (e.g. 127.0.0.1:{DEFAULT_PORT}) or a port")
    })
}

/// A device name of `/sys/block` (no `/`, no blank), or such a prefix ending in one `*`.
fn device_pattern_ok(p: &str) -> bool {
    let name = p.strip_suffix('*').unwrap_or(p);
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':'))
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

impl DaemonConfig {
    /// Reads and validates a configuration file.
    pub fn load(path: &Path) -> Result<DaemonConfig, DaemonConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| DaemonConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text, path)
    }

    /// Parses configuration text; `path` is used in errors.
    pub fn parse(text: &str, path: &Path) -> Result<DaemonConfig, DaemonConfigError> {
        Self::parse_layer(text, path).map(|(c, _)| c)
    }

    /// Parses one file of a layered configuration: the config, and `only_matched` where the
    /// file sets it (a later file overrides only what it sets).
    pub(crate) fn parse_layer(
        text: &str,
        path: &Path,
    ) -> Result<(DaemonConfig, Option<bool>), DaemonConfigError> {
        let invalid = |line: usize, msg: String| DaemonConfigError::Invalid {
            path: path.to_path_buf(),
            line,
            msg,
        };
        let raw: Raw = toml::from_str(text).map_err(|e| {
            let line = e.span().map(|s| line_of(text, s.start)).unwrap_or(1);
            invalid(line, e.message().to_string())
        })?;
        let mut tunables = BTreeMap::new();
        for (name, value) in raw.tunables {
            let line = line_of(text, value.span().start);
            let v = tunable_value(&name, value.get_ref()).map_err(|e| invalid(line, e))?;
            tunables.insert(name, v);
        }
        let mut workloads = Vec::new();
        for rule in raw.workload {
            let line = line_of(text, rule.span().start);
            let rule = checked_rule(rule.into_inner(), path)
                .map_err(|e| invalid(line, format!("workload: {e}")))?;
            workloads.push(rule);
        }
        let mut preset = Vec::new();
        for (i, p) in raw.preset.into_iter().enumerate() {
            let line = line_of(text, p.span().start);
            let p = p.into_inner();
            p.validate(i + 1)
                .map_err(|e| invalid(line, e.to_string()))?;
            preset.push(p);
        }
        let listen = match raw.listen {
            Some(l) => Some(
                parse_listen(l.get_ref()).map_err(|e| invalid(line_of(text, l.span().start), e))?,
            ),
            None => None,
        };
        let fleet = match raw.fleet {
            Some(f) => {
                let line = line_of(text, f.span().start);
                let f = f.into_inner();
                f.validate().map_err(|e| invalid(line, e))?;
                Some(f)
            }
            None => None,
        };
        let read_ahead_devices = match raw.read_ahead_devices {
            Some(d) => {
                let line = line_of(text, d.span().start);
                let d = d.into_inner();
                if let Some(bad) = d.iter().find(|n| !device_pattern_ok(n)) {
                    return Err(invalid(
                        line,
                        format!(
                            "read_ahead_devices: {bad:?} is not a block device name (as in /sys/block: `sdb`, `nvme0n1`) or a prefix ending in `*` (`nvme*`)"
                        ),
                    ));
                }
                Some(d)
            }
            None => None,
        };
        let config = DaemonConfig {
            tunables,
            workloads,
            only_matched: raw.only_matched.unwrap_or(false),
            preset,
            listen,
            web_config: raw.web_config,
            status_remote: raw.status_remote.unwrap_or(false),
            textfile: raw.textfile,
            fleet,
            read_ahead_devices,
        };
        Ok((config, raw.only_matched))
    }

    /// Whether the read-ahead strategy may tune the block device `name` (see
    /// [`DaemonConfig::read_ahead_devices`]).
    pub fn read_ahead_device(&self, name: &str) -> bool {
        self.read_ahead_devices.as_ref().is_none_or(|list| {
            list.iter().any(|p| match p.strip_suffix('*') {
                Some(prefix) => name.starts_with(prefix),
                None => name == p,
            })
        })
    }

    /// Whether `read_ahead_devices` names the device itself (not by a prefix): its read-ahead
    /// is then perfpilot's to tune even where someone set it by hand.
    pub fn read_ahead_named(&self, name: &str) -> bool {
        self.read_ahead_devices
            .as_ref()
            .is_some_and(|list| list.iter().any(|p| p == name))
    }

    /// The first rule matching a process.
    pub fn rule_for(&self, id: &Identity) -> Option<&Rule> {
        self.workloads.iter().find(|r| r.matcher.matches(id))
    }

    /// Applies `[tunables]` over `t`.
    pub fn apply_tunables(&self, t: &mut Tunables) {
        for (n, v) in &self.tunables {
            // Validated in `parse`.
            let _ = t.set(n, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"
[tunables]
interval_s = 2
affinity_level = "core"
allow_unverified = true

[[workload]]
match = { comm = "sharedcache" }
signal = { url = "http://127.0.0.1:9187/metrics", metric = "sharedcache_ops_total" }

[[workload]]
match = { exe = "/usr/bin/batch", cmdline = "--nightly" }
signal = { command = "cat /run/app/ops", kind = "counter" }

[[workload]]
match = { cgroup = "system.slice/backup.service" }
action = "exclude"
"#;

    #[test]
    fn parses_the_documented_example() {
        let c = DaemonConfig::parse(EXAMPLE, Path::new("perfpilot.toml")).unwrap();
        assert_eq!(c.tunables["interval_s"], "2");
        assert_eq!(c.tunables["allow_unverified"], "on");
        assert_eq!(c.workloads.len(), 3);
        let sc = c
            .rule_for(&Identity {
                comm: "sharedcache",
                cmdline: "sharedcache --table-mib 64",
                ..Default::default()
            })
            .unwrap();
        assert_eq!(sc.signal.as_ref().unwrap().kind(), ValueKind::Counter);
        let b = Identity {
            comm: "batch",
            exe: Some("/usr/bin/batch"),
            cmdline: "/usr/bin/batch --nightly",
            cgroup: None,
        };
        assert!(matches!(
            c.rule_for(&b).unwrap().signal,
            Some(ProbeSpec::Command { .. })
        ));
        let bk = Identity {
            comm: "tar",
            cgroup: Some("/system.slice/backup.service"),
            ..Default::default()
        };
        assert_eq!(c.rule_for(&bk).unwrap().action, RuleAction::Exclude);
        assert!(
            c.rule_for(&Identity {
                comm: "bash",
                ..Default::default()
            })
            .is_none()
        );
        let mut t = Tunables::default();
        c.apply_tunables(&mut t);
        assert_eq!(t.interval_s, 2.0);
    }

    #[test]
    fn read_ahead_devices_limit_the_strategy_to_names_and_prefixes() {
        let all = DaemonConfig::parse("", Path::new("c.toml")).unwrap();
        assert!(all.read_ahead_device("vda") && all.read_ahead_device("loop3"));
        let c = DaemonConfig::parse(
            "read_ahead_devices = [\"loop3\", \"nvme*\"]\n",
            Path::new("c.toml"),
        )
        .unwrap();
        assert!(c.read_ahead_device("loop3"));
        assert!(c.read_ahead_device("nvme0n1"));
        assert!(!c.read_ahead_device("loop31"));
        assert!(!c.read_ahead_device("vda"));
        assert!(c.read_ahead_named("loop3") && !c.read_ahead_named("nvme0n1"));
        assert!(!all.read_ahead_named("vda"));
        for bad in ["\"/dev/sdb\"", "\"\"", "\"*\"", "\"sd*b\""] {
            let e = DaemonConfig::parse(
                &format!("\nread_ahead_devices = [{bad}]\n"),
                Path::new("c.toml"),
            )
            .unwrap_err()
            .to_string();
            assert!(
                e.starts_with("c.toml:2: read_ahead_devices:") && e.contains("/sys/block"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn errors_name_file_line_and_field() {
        let e = DaemonConfig::parse(
            "[tunables]\nheadroom = 30\n",
            Path::new("/etc/perfpilot.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("/etc/perfpilot.toml:2: tunable headroom"),
            "{e}"
        );
        let e = DaemonConfig::parse("[tunables]\nnope = 1\n", Path::new("c.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("c.toml:2:") && e.contains("nope"), "{e}");
        let e = DaemonConfig::parse(
            "\n\n[[workload]]\nmatch = { name = \"x\" }\n",
            Path::new("c.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("c.toml:4") && e.contains("name"), "{e}");
        let e = DaemonConfig::parse("[[workload]]\nmatch = {}\n", Path::new("c.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("at least one of"), "{e}");
        let e = DaemonConfig::parse("[tunables\n", Path::new("c.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("c.toml:1:"), "{e}");
    }
}
