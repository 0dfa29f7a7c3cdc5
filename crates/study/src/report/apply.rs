//! The apply script of a run's best configuration (or of its baseline, when the winner is not
//! shown better than it): a POSIX shell script that sets its knobs, runs its setup and starts
//! every instance with its binding and environment, and systemd drop-ins for a
//! `NAME@.service` template; and writing them into a directory.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use perfpilot_store::TrialRecord;
use serde::Serialize;

use crate::error::StudyError;
use crate::layout::InstanceLayout;
use perfpilot_lab::server::command::split_words;

use crate::spec::{Config, LoadKind, Study, render};
use crate::summary::Summary;
use crate::trial::TrialDetail;

/// The apply script of a configuration.
#[derive(Clone, Debug, Serialize)]
pub struct Apply {
    /// The configuration it deploys.
    pub config: String,
    /// A POSIX shell script starting every instance with its binding and environment.
    pub shell: String,
    /// systemd drop-ins: `(path, content)`, one per instance of a `NAME@.service` template.
    pub dropins: Vec<(String, String)>,
}

impl Apply {
    /// Writes `apply.sh` (executable) and the drop-ins (under `systemd/`) into `dir`, creating
    /// it; returns the script's path.
    pub fn write_to(&self, dir: &Path) -> Result<PathBuf, StudyError> {
        let failed = |path: &Path| {
            let path = path.to_path_buf();
            move |error| StudyError::Write { path, error }
        };
        std::fs::create_dir_all(dir).map_err(failed(dir))?;
        let sh = dir.join("apply.sh");
        std::fs::write(&sh, &self.shell).map_err(failed(&sh))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            // The script is still usable through `sh apply.sh` where the mode cannot be set.
            let _ = std::fs::set_permissions(&sh, std::fs::Permissions::from_mode(0o755));
        }
        for (p, content) in &self.dropins {
            let f = dir.join(p);
            if let Some(parent) = f.parent() {
                std::fs::create_dir_all(parent).map_err(failed(parent))?;
            }
            std::fs::write(&f, content).map_err(failed(&f))?;
        }
        Ok(sh)
    }
}

/// `word` quoted for a POSIX shell where it needs quoting; a NUL byte, which no shell word can
/// hold, is an error naming the word.
fn quote(word: &str) -> Result<Cow<'_, str>, ApplyError> {
    shlex::try_quote(word).map_err(|_| ApplyError::Nul {
        word: word.to_string(),
    })
}

/// The shell variables that stand for a scratch file system's device and mount point: the
/// study made its own on a loop device; on the target machine they are the user's.
const STORAGE_VARS: [(&str, &str); 2] = [("device", "DEVICE"), ("mount", "MOUNT")];

/// `word` quoted for sh, with the storage variables (`$DEVICE`, `$MOUNT`) left to expand.
fn quote_vars(word: &str) -> Result<String, ApplyError> {
    let mut q = quote(word)?.into_owned();
    for (_, var) in STORAGE_VARS {
        // shlex single-quotes a word holding `$`: close the quote around the variable.
        q = q.replace(&format!("${var}"), &format!("'\"${var}\"'"));
    }
    // A word that starts or ends with a variable gets an empty '' there: drop it.
    let q = q.strip_prefix("''").unwrap_or(&q);
    let q = q.strip_suffix("''").unwrap_or(q);
    Ok(q.to_string())
}

/// What a storage study's script says first: the file system the configuration ran on, and
/// the variables the user sets for the device and mount point to apply it to.
fn storage_heading(sh: &mut String, study: &Study, values: &BTreeMap<String, String>) {
    let Some(st) = &study.storage else { return };
    let fs = render(&st.filesystem, values);
    let _ = writeln!(
        sh,
        "# The study ran each trial on a file system it made on a loop device: {fs} (type, then mkfs options)."
    );
    let _ = writeln!(
        sh,
        "# Make the data's file system so (this script formats nothing), then give its block device and mount point:"
    );
    let _ = writeln!(
        sh,
        "DEVICE=${{DEVICE:?set DEVICE to the data's block device under /sys/block, e.g. sdb}}"
    );
    let _ = writeln!(
        sh,
        "MOUNT=${{MOUNT:?set MOUNT to where that file system is mounted}}"
    );
}

/// The systemd unit name for a study: its name with every character but letters, digits and
/// `-` replaced by `-` (`app` when nothing is left).
fn unit_name(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let s = s.trim_matches('-').to_string();
    if s.is_empty() { "app".into() } else { s }
}

/// The script's opening comment: what it deploys and on what evidence; a configuration that
/// is not a winner shown better than the baseline says so first, in a comment and on stderr
/// when the script runs.
fn heading(sh: &mut String, study: &Study, run: i64, key: &str, summary: Option<&Summary>) {
    let name = &study.name;
    let winner = summary.and_then(|s| s.winner.as_deref());
    // (the comment, the line said when it runs)
    let caution = match summary {
        Some(s) if winner == Some(key) && !s.winner_shown_better() => Some((
            format!(
                "CAUTION: this deploys the race's winner {key}, which is NOT shown significantly better than the baseline {} (evidence: {}). Written because --force was given.",
                s.baseline, s.verdict
            ),
            format!(
                "deploying the winner {key}, which is NOT shown significantly better than the baseline {}",
                s.baseline
            ),
        )),
        Some(s) if key == s.baseline && winner.is_some_and(|w| w != key) => {
            let w = winner.unwrap_or_default();
            Some((
                format!(
                    "NOTE: this deploys the BASELINE {key}, not the race's winner {w}, which is not shown significantly better than it (evidence: {}). `perfpilot study report {run} --apply DIR --force` writes the winner's script instead.",
                    s.verdict
                ),
                format!(
                    "deploying the baseline {key}, not the winner {w}, which is not shown significantly better"
                ),
            ))
        }
        _ => None,
    };
    let _ = writeln!(sh, "#!/bin/sh");
    if let Some((c, _)) = &caution {
        let _ = writeln!(sh, "# {c}");
    }
    let what = match (summary, winner) {
        (_, Some(w)) if w == key => "the best configuration",
        (Some(s), _) if s.baseline == key => "the baseline configuration",
        _ => "configuration",
    };
    let _ = writeln!(
        sh,
        "# Deploys {what} of study {name:?} (perfpilot study run {run}):"
    );
    let _ = writeln!(sh, "#   {key}");
    if let Some(s) = summary.filter(|_| caution.is_none()) {
        let _ = writeln!(sh, "# Evidence: {}", s.verdict);
    }
    let _ = writeln!(
        sh,
        "# Generated by `perfpilot study report {run} --apply DIR`."
    );
    let _ = writeln!(sh, "set -eu");
    if let Some((_, said)) = &caution {
        // Said again when it runs, for whoever runs it without reading it.
        let line = format!("perfpilot study run {run}: {said} (see the top of this script)");
        let quoted = quote(&line).map_or_else(
            |_| "'see the top of this script'".into(),
            |q| q.into_owned(),
        );
        let _ = writeln!(sh, "echo {quoted} >&2");
    }
}

/// Why the apply script of a trial cannot be written.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The trial's stored configuration cannot be decoded.
    #[error(
        "trial {trial}: its stored configuration cannot be decoded ({source}); the store was written by another perfpilot version or edited"
    )]
    Factors {
        /// The trial's id.
        trial: i64,
        /// The decoder's error.
        #[source]
        source: serde_json::Error,
    },
    /// The trial's stored detail cannot be decoded.
    #[error(
        "trial {trial}: its stored detail cannot be decoded ({source}); the store was written by another perfpilot version or edited"
    )]
    Detail {
        /// The trial's id.
        trial: i64,
        /// The decoder's error.
        #[source]
        source: serde_json::Error,
    },
    /// The trial failed before its layout was planned.
    #[error("trial {trial} has no layout: it failed before its instances were placed")]
    NoLayout {
        /// The trial's id.
        trial: i64,
    },
    /// A word that a shell cannot hold.
    #[error("{word:?} holds a NUL byte, which a shell script cannot pass to a command")]
    Nul {
        /// The word.
        word: String,
    },
    /// The deployment's command line cannot be split into words.
    #[error("deployment.command {line:?}: {source}")]
    Command {
        /// The command line, templates filled in.
        line: String,
        /// Why.
        #[source]
        source: perfpilot_lab::server::command::WordsError,
    },
}

/// The apply script of the configuration of trial `t` (its layout and environment).
pub fn apply_script(
    study: &Study,
    run: i64,
    t: &TrialRecord,
    summary: Option<&Summary>,
) -> Result<Apply, ApplyError> {
    let stored: Config =
        serde_json::from_str(&t.factors).map_err(|source| ApplyError::Factors {
            trial: t.id,
            source,
        })?;
    // Templates read inactive parameters as empty; the key is the configuration's.
    let config = study.for_templates(&stored);
    let detail: TrialDetail =
        serde_json::from_str(&t.detail).map_err(|source| ApplyError::Detail {
            trial: t.id,
            source,
        })?;
    let layout = detail.layout.ok_or(ApplyError::NoLayout { trial: t.id })?;
    let n = layout.instances.len();
    let mut sh = String::new();
    heading(&mut sh, study, run, &stored.key(), summary);
    if let Some(w) = &study.deployment.workdir {
        let _ = writeln!(sh, "cd {}", quote(&w.display().to_string())?);
    }
    let mut base_values = crate::deploy::values_for(&config, n, None);
    storage_heading(&mut sh, study, &base_values);
    let storage_values: Vec<(String, String)> = if study.storage.is_some() {
        STORAGE_VARS
            .iter()
            .map(|(name, var)| ((*name).to_string(), format!("${var}")))
            .collect()
    } else {
        Vec::new()
    };
    base_values.extend(storage_values.iter().cloned());
    for k in &study.deployment.knobs {
        let _ = writeln!(
            sh,
            "echo {} > {}",
            quote_vars(&render(&k.value, &base_values))?,
            quote_vars(&format!(
                "/{}",
                render(&k.path, &base_values).trim_start_matches('/')
            ))?
        );
    }
    for c in &study.deployment.setup {
        let _ = writeln!(sh, "{}", render(c, &base_values));
    }
    let batch = matches!(study.load.kind, LoadKind::Batch { .. });
    let unit = unit_name(&study.name);
    let mut dropins = Vec::new();
    for il in &layout.instances {
        let port = study
            .deployment
            .base_port
            .saturating_add(il.instance as u16);
        let mut values = crate::deploy::values_for(&config, n, Some((il, port)));
        values.extend(storage_values.iter().cloned());
        let env = crate::deploy::environment(study, &config, &values);
        let line = instance_line(study, il, &values, &env)?;
        if batch {
            let _ = writeln!(sh, "# instance {}: the batch", il.instance);
        } else {
            let _ = writeln!(sh, "# instance {} on port {port}", il.instance);
        }
        let _ = writeln!(sh, "{line} &");
        let heading = format!("# study {:?}, run {run}: {}", study.name, stored.key());
        dropins.push(dropin(&unit, il, &heading, &env));
    }
    let _ = writeln!(sh, "wait");
    Ok(Apply {
        config: stored.key(),
        shell: sh,
        dropins,
    })
}

/// The command line starting instance `il` (`values`: its template values, `env`: its
/// environment): `env`, the binding wrapper, the command, each word quoted.
fn instance_line(
    study: &Study,
    il: &InstanceLayout,
    values: &BTreeMap<String, String>,
    env: &[(String, String)],
) -> Result<String, ApplyError> {
    let command = render(&study.deployment.command, values);
    let words = split_words(&command).map_err(|source| ApplyError::Command {
        line: command,
        source,
    })?;
    let mut line = String::new();
    if !env.is_empty() {
        line.push_str("env ");
        for (k, v) in env {
            let _ = write!(line, "{}={} ", k, quote(v)?);
        }
    }
    if il.bound {
        if il.membind.is_empty() {
            let _ = write!(line, "taskset -c {} ", il.cpuset);
        } else {
            let nodes: Vec<String> = il.membind.iter().map(u32::to_string).collect();
            let _ = write!(
                line,
                "numactl --physcpubind={} --membind={} ",
                il.cpuset,
                nodes.join(",")
            );
        }
    }
    line.push_str(
        &words
            .iter()
            .map(|w| quote_vars(w))
            .collect::<Result<Vec<_>, _>>()?
            .join(" "),
    );
    Ok(line)
}

/// The systemd drop-in of instance `il` of template unit `unit` (its path and text):
/// `heading` names the study and run, `env` is the instance's environment.
fn dropin(
    unit: &str,
    il: &InstanceLayout,
    heading: &str,
    env: &[(String, String)],
) -> (String, String) {
    let mut d = String::new();
    let _ = writeln!(
        d,
        "# /etc/systemd/system/{unit}@{}.service.d/perfpilot-study.conf",
        il.instance
    );
    let _ = writeln!(d, "{heading}");
    let _ = writeln!(d, "[Service]");
    if il.bound {
        let _ = writeln!(d, "CPUAffinity={}", il.cpuset.to_string().replace(',', " "));
        if !il.membind.is_empty() {
            let nodes: Vec<String> = il.membind.iter().map(u32::to_string).collect();
            let _ = writeln!(d, "NUMAPolicy=bind");
            let _ = writeln!(d, "NUMAMask={}", nodes.join(","));
        }
    }
    for (k, v) in env {
        let _ = writeln!(d, "Environment=\"{k}={}\"", v.replace('"', "\\\""));
    }
    (
        format!(
            "systemd/{unit}@{}.service.d/perfpilot-study.conf",
            il.instance
        ),
        d,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_variables_expand_inside_a_quoted_word_and_nothing_else_does() {
        for (word, expanded) in [
            (
                "/sys/block/$DEVICE/queue/read_ahead_kb",
                "/sys/block/sdb/queue/read_ahead_kb",
            ),
            ("$MOUNT/batch", "/data x/batch"),
            ("$MOUNT", "/data x"),
            ("it's $HOME on $DEVICE", "it's $HOME on sdb"),
        ] {
            let q = quote_vars(word).unwrap();
            let out = std::process::Command::new("sh")
                .args(["-c", &format!("printf %s {q}")])
                .env("DEVICE", "sdb")
                .env("MOUNT", "/data x")
                .output()
                .unwrap();
            assert_eq!(String::from_utf8_lossy(&out.stdout), expanded, "{q}");
        }
    }

    #[test]
    fn a_quoted_word_reaches_the_command_unchanged_through_sh() {
        for word in [
            "it's $HOME and `date` a b",
            "'",
            "",
            "--listen=127.0.0.1:8080",
            "a\\b \"c\" ${x:-y} ; | & * ? ~ # %",
            "ünïcode space",
        ] {
            let script = format!("printf '%s' {}", quote(word).unwrap());
            let out = std::process::Command::new("sh")
                .args(["-c", &script])
                .env("HOME", "/should/not/expand")
                .output()
                .expect("sh runs");
            assert!(out.status.success(), "{script}");
            assert_eq!(String::from_utf8_lossy(&out.stdout), word, "{script}");
        }
    }

    #[test]
    fn plain_words_stay_unquoted_and_a_nul_byte_is_refused() {
        assert_eq!(
            quote("/sys/kernel/mm/transparent_hugepage/enabled").unwrap(),
            "/sys/kernel/mm/transparent_hugepage/enabled"
        );
        assert_eq!(quote("madvise").unwrap(), "madvise");
        let e = quote("a\0b").unwrap_err().to_string();
        assert!(e.contains("NUL byte"), "{e}");
    }
}
