//! `[deployment]`: how one trial's instances are started, made ready and stopped, and the
//! knobs set around them.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::raw::{RawDeployment, RawKnob, RawReady};
use super::source::Source;
use perfpilot_lab::server::command::split_words;

use super::template::{DEPLOY_PLACEHOLDERS, TRIAL_PLACEHOLDERS, Templates};
use crate::error::Result;

/// How the runner decides an instance is ready.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Ready {
    /// An HTTP GET of this URL template answers 2xx.
    Http {
        /// The URL template (`http://127.0.0.1:{port}/health`).
        url: String,
    },
    /// The instance's port accepts a TCP connection.
    Tcp,
}

/// A sysfs/procfs knob set for each trial and restored after it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KnobSpec {
    /// Path template relative to `/` (`sys/kernel/mm/transparent_hugepage/enabled`,
    /// `proc/sys/vm/swappiness`, `sys/block/{device}/queue/read_ahead_kb`).
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
    /// How an instance is known to be ready.
    pub ready: Ready,
    /// How long an instance may take to become ready (default 30 s).
    pub ready_timeout: Duration,
    /// Shell commands run before each trial's instances start.
    pub setup: Vec<String>,
    /// Shell commands run after each trial's instances stop.
    pub teardown: Vec<String>,
    /// Knobs written before each trial and restored after it.
    pub knobs: Vec<KnobSpec>,
    /// Instance `i` listens on `base_port + i` (or the next free port).
    pub base_port: u16,
    /// Working directory of instances and setup/teardown (relative paths: to the current one).
    pub workdir: Option<PathBuf>,
}

/// Checks `[deployment]`: the command, environment, setup and teardown, knobs and readiness.
pub(super) fn deployment(
    source: &Source,
    templates: &Templates,
    d: &RawDeployment,
) -> Result<Deployment> {
    let command = &d.command;
    if command.get_ref().trim().is_empty() {
        return Err(source.bad(command, "deployment.command", "is empty"));
    }
    templates.check(command, "deployment.command", &DEPLOY_PLACEHOLDERS)?;
    split_words(command.get_ref()).map_err(|m| source.bad(command, "deployment.command", m))?;
    for (k, v) in &d.env {
        templates.check(v, &format!("deployment.env.{k}"), &DEPLOY_PLACEHOLDERS)?;
        if k == "LD_PRELOAD" && templates.has_factor("allocator") {
            return Err(source.bad(
                v,
                "deployment.env.LD_PRELOAD",
                "the allocator factor sets LD_PRELOAD; remove it from env",
            ));
        }
    }
    for (i, s) in d.setup.iter().enumerate() {
        templates.check(s, &format!("deployment.setup[{i}]"), &TRIAL_PLACEHOLDERS)?;
    }
    for (i, s) in d.teardown.iter().enumerate() {
        templates.check(s, &format!("deployment.teardown[{i}]"), &TRIAL_PLACEHOLDERS)?;
    }
    for (i, k) in d.knobs.iter().enumerate() {
        knob(source, templates, k, &format!("deployment.knobs[{i}]"))?;
    }
    let ready = ready(source, templates, &d.ready)?;
    let ready_timeout = source.duration(
        d.ready.timeout.as_ref(),
        "deployment.ready.timeout",
        Duration::from_secs(30),
    )?;
    Ok(Deployment {
        command: command.get_ref().clone(),
        env: d
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.get_ref().clone()))
            .collect(),
        ready,
        ready_timeout,
        setup: d.setup.iter().map(|s| s.get_ref().clone()).collect(),
        teardown: d.teardown.iter().map(|s| s.get_ref().clone()).collect(),
        knobs: d
            .knobs
            .iter()
            .map(|k| KnobSpec {
                path: k.path.get_ref().clone(),
                value: k.value.get_ref().clone(),
            })
            .collect(),
        base_port: d.base_port,
        workdir: d.workdir.clone(),
    })
}

/// A knob's value is a template; its path must stay under `/sys` or `/proc`.
fn knob(source: &Source, templates: &Templates, k: &RawKnob, field: &str) -> Result<()> {
    templates.check(&k.value, field, &TRIAL_PLACEHOLDERS)?;
    templates.check(&k.path, field, &TRIAL_PLACEHOLDERS)?;
    let path = k.path.get_ref();
    let p = path.trim_start_matches('/');
    if !(p.starts_with("sys/") || p.starts_with("proc/")) || p.split('/').any(|c| c == "..") {
        return Err(source.bad(
            &k.path,
            field,
            format!("{path:?} must be a path under /sys or /proc without .."),
        ));
    }
    Ok(())
}

/// `ready`: an HTTP URL template or a TCP connect (the default), not both.
fn ready(source: &Source, templates: &Templates, r: &RawReady) -> Result<Ready> {
    match (&r.http, &r.tcp) {
        (Some(_), Some(tcp)) if *tcp.get_ref() => {
            Err(source.bad(tcp, "deployment.ready", "give either http or tcp, not both"))
        }
        (Some(url), _) => {
            templates.check(url, "deployment.ready.http", &DEPLOY_PLACEHOLDERS)?;
            if !url.get_ref().starts_with("http://") {
                return Err(source.bad(
                    url,
                    "deployment.ready.http",
                    format!("{:?} must start with http://", url.get_ref()),
                ));
            }
            Ok(Ready::Http {
                url: url.get_ref().clone(),
            })
        }
        _ => Ok(Ready::Tcp),
    }
}
