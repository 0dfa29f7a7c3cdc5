//! `[load]`: the built-in driver (`url`), an adapter command that prints a number, or
//! `kind = "batch"`: the deployment's command is a batch run to completion.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use toml::Spanned;

use super::raw::RawLoad;
use super::source::Source;
use super::template::{DEPLOY_PLACEHOLDERS, LOAD_PLACEHOLDERS, Templates};
use crate::error::Result;

/// Closed-loop users per instance when `load.users_per_instance` is left out.
const DEFAULT_USERS: usize = 4;

/// How long a batch may run when `load.timeout` is left out.
const DEFAULT_BATCH_TIMEOUT: Duration = Duration::from_secs(3600);

/// What drives the load.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum LoadKind {
    /// perfpilot's built-in driver.
    Builtin {
        /// Target URL template per instance (`http://127.0.0.1:{port}/score/iris-forest`).
        url: String,
        /// The HTTP method (default `GET`).
        method: String,
        /// Request headers, name → value.
        headers: Vec<(String, String)>,
        /// Body template text (from `body` or `body_file`).
        body: Option<String>,
        /// CSV rows for the body's `{{column}}` placeholders.
        data: Option<PathBuf>,
        /// Think time between a user's requests as written (`0`, `100ms`, `exp:1s`).
        think_time: String,
        /// Per-request timeout (default 10 s).
        timeout: Duration,
        /// Driver threads (default 1).
        threads: usize,
    },
    /// Any command printing a number (the last number on stdout) after the measured window.
    Command {
        /// The command template (placeholders in [`LOAD_PLACEHOLDERS`] and factors).
        command: String,
        /// `throughput` or `latency_ms`.
        meaning: String,
    },
    /// The deployment's command is a batch: a trial starts it on every instance, waits for
    /// all to exit (within `timeout`) and measures elapsed time, CPU time and bytes.
    Batch {
        /// How long the batch may run before it is killed and the trial fails.
        timeout: Duration,
        /// Template of a job log to read per instance (JSON lines: `job`, `real_s`, `user_s`,
        /// `sys_s`, `read_bytes`, `written_bytes`, `status`; batchmix's `jobs.jsonl`).
        jobs: Option<String>,
        /// The share of a core a thread gets while its SMT siblings are busy, for the
        /// core-equivalent CPU (`None`: the core shared evenly among its threads).
        smt_factor: Option<f64>,
    },
}

/// The load.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoadSpec {
    /// The driver or adapter.
    pub kind: LoadKind,
    /// Closed-loop users per instance.
    pub users_per_instance: usize,
}

/// Checks `[load]` (`load` spans the table, for an error about the table as a whole).
pub(super) fn load(
    source: &Source,
    templates: &Templates,
    load: &Spanned<RawLoad>,
) -> Result<LoadSpec> {
    let l = load.get_ref();
    if let Some(users) = &l.users_per_instance
        && *users.get_ref() == 0
    {
        return Err(source.bad(users, "load.users_per_instance", "must be at least 1"));
    }
    if let Some(kind) = &l.kind {
        match kind.get_ref().as_str() {
            "batch" => {
                return Ok(LoadSpec {
                    kind: batch(source, templates, l, load)?,
                    users_per_instance: 1,
                });
            }
            "http" | "command" => {}
            other => {
                return Err(source.bad(
                    kind,
                    "load.kind",
                    format!("{other:?}: expected \"http\" (load.url), \"command\" (load.command) or \"batch\" (the deployment's command run to completion)"),
                ));
            }
        }
    }
    if let Some(f) = &l.smt_factor {
        return Err(source.bad(
            f,
            "load.smt_factor",
            "the core-equivalent CPU is computed for batch studies: add kind = \"batch\"",
        ));
    }
    if let Some(jobs) = &l.jobs {
        return Err(source.bad(
            jobs,
            "load.jobs",
            "a job log is read only by batch studies: add kind = \"batch\"",
        ));
    }
    let kind = match (&l.url, &l.command) {
        (Some(_), Some(command)) => {
            return Err(source.bad(
                command,
                "load",
                "give either url (the built-in driver) or command (an adapter), not both",
            ));
        }
        (None, None) => {
            return Err(source.bad(
                load,
                "load",
                "needs url (the built-in driver) or command (an adapter)",
            ));
        }
        (Some(url), None) => builtin(source, templates, l, url)?,
        (None, Some(command)) => adapter(source, templates, l, command)?,
    };
    Ok(LoadSpec {
        kind,
        users_per_instance: l
            .users_per_instance
            .as_ref()
            .map_or(DEFAULT_USERS, |u| *u.get_ref()),
    })
}

/// A batch: no URL, command or users; an optional timeout and job log.
fn batch(
    source: &Source,
    templates: &Templates,
    l: &RawLoad,
    load: &Spanned<RawLoad>,
) -> Result<LoadKind> {
    let stray = [
        ("url", l.url.as_ref().map(Spanned::span)),
        ("command", l.command.as_ref().map(Spanned::span)),
        ("think_time", l.think_time.as_ref().map(Spanned::span)),
        (
            "users_per_instance",
            l.users_per_instance.as_ref().map(Spanned::span),
        ),
        ("data", l.data.as_ref().map(Spanned::span)),
    ];
    if let Some((name, span)) = stray.iter().find_map(|(n, s)| s.clone().map(|s| (n, s))) {
        return Err(source.invalid(
            span,
            format!("load.{name}"),
            "a batch study runs the deployment's command to completion: remove it (the command is [deployment] command)",
        ));
    }
    if let Some(jobs) = &l.jobs {
        templates.check(jobs, "load.jobs", &DEPLOY_PLACEHOLDERS)?;
    }
    let timeout = source.duration(l.timeout.as_ref(), "load.timeout", DEFAULT_BATCH_TIMEOUT)?;
    if timeout.is_zero() {
        return Err(source.bad(load, "load.timeout", "must be longer than 0 s"));
    }
    let smt_factor = match &l.smt_factor {
        None => None,
        Some(f) if *f.get_ref() > 0.0 && *f.get_ref() <= 1.0 => Some(*f.get_ref()),
        Some(f) => {
            return Err(source.bad(
                f,
                "load.smt_factor",
                "must be above 0 and at most 1: the share of a core a thread gets while its SMT siblings are busy (POWER8 SMT8: 0.56)",
            ));
        }
    };
    Ok(LoadKind::Batch {
        timeout,
        jobs: l.jobs.as_ref().map(|j| j.get_ref().clone()),
        smt_factor,
    })
}

/// The built-in driver: URL, think time, body (inline or from a file), data, timeout.
fn builtin(
    source: &Source,
    templates: &Templates,
    l: &RawLoad,
    url: &Spanned<String>,
) -> Result<LoadKind> {
    templates.check(url, "load.url", &DEPLOY_PLACEHOLDERS)?;
    if !url.get_ref().starts_with("http://") {
        return Err(source.bad(
            url,
            "load.url",
            format!("{:?} must start with http://", url.get_ref()),
        ));
    }
    let think_time = match &l.think_time {
        None => "0".to_string(),
        Some(t) => {
            perfpilot_drive::ThinkTime::parse(t.get_ref())
                .map_err(|e| source.bad(t, "load.think_time", e.to_string()))?;
            t.get_ref().clone()
        }
    };
    let body = match (&l.body, &l.body_file) {
        (Some(_), Some(f)) => {
            return Err(source.bad(f, "load.body_file", "give body or body_file, not both"));
        }
        (Some(b), None) => Some(b.clone()),
        (None, Some(f)) => Some(std::fs::read_to_string(f.get_ref()).map_err(|e| {
            source.bad(
                f,
                "load.body_file",
                format!("cannot read {}: {e}", f.get_ref().display()),
            )
        })?),
        (None, None) => None,
    };
    if let Some(data) = &l.data
        && !data.get_ref().is_file()
    {
        return Err(source.bad(
            data,
            "load.data",
            format!("{} is not a file", data.get_ref().display()),
        ));
    }
    Ok(LoadKind::Builtin {
        url: url.get_ref().clone(),
        method: l.method.clone(),
        headers: l
            .headers
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        body,
        data: l.data.as_ref().map(|d| d.get_ref().clone()),
        think_time,
        timeout: source.duration(l.timeout.as_ref(), "load.timeout", Duration::from_secs(10))?,
        threads: l.threads.unwrap_or(1).max(1),
    })
}

/// An adapter command and what its number means (`as`, default `throughput`).
fn adapter(
    source: &Source,
    templates: &Templates,
    l: &RawLoad,
    command: &Spanned<String>,
) -> Result<LoadKind> {
    templates.check(command, "load.command", &LOAD_PLACEHOLDERS)?;
    let meaning = match &l.meaning {
        None => "throughput".to_string(),
        Some(m) if ["throughput", "latency_ms"].contains(&m.get_ref().as_str()) => {
            m.get_ref().clone()
        }
        Some(m) => {
            return Err(source.bad(
                m,
                "load.as",
                format!("{:?}: expected throughput or latency_ms", m.get_ref()),
            ));
        }
    };
    Ok(LoadKind::Command {
        command: command.get_ref().clone(),
        meaning,
    })
}
