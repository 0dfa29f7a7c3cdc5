//! The apply script of a run's best configuration (or of its baseline, when the winner is not
//! shown better than it): a POSIX shell script that sets its knobs, runs its setup and starts
//! every instance with its binding and environment, and systemd drop-ins for a
//! `NAME@.service` template; and writing them into a directory.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use perfpilot_store::TrialRecord;
use serde::Serialize;

use crate::error::StudyError;
use crate::spec::{Config, Study, render, split_words};
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
fn quote(word: &str) -> Result<Cow<'_, str>, String> {
    shlex::try_quote(word).map_err(|_| {
        format!("{word:?} holds a NUL byte, which a shell script cannot pass to a command")
    })
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

/// The apply script of the configuration of trial `t` (its layout and environment).
pub fn apply_script(
    study: &Study,
    run: i64,
    t: &TrialRecord,
    summary: Option<&Summary>,
) -> Result<Apply, String> {
    let config: Config = serde_json::from_str(&t.factors).map_err(|e| e.to_string())?;
    let detail: TrialDetail = serde_json::from_str(&t.detail).map_err(|e| e.to_string())?;
    let layout = detail.layout.ok_or("the trial has no layout")?;
    let n = layout.instances.len();
    let mut sh = String::new();
    heading(&mut sh, study, run, &config.key(), summary);
    if let Some(w) = &study.deployment.workdir {
        let _ = writeln!(sh, "cd {}", quote(&w.display().to_string())?);
    }
    let base_values = crate::deploy::values_for(&config, n, None);
    for k in &study.deployment.knobs {
        let _ = writeln!(
            sh,
            "echo {} > {}",
            quote(&render(&k.value, &base_values))?,
            quote(&format!("/{}", k.path.trim_start_matches('/')))?
        );
    }
    for c in &study.deployment.setup {
        let _ = writeln!(sh, "{}", render(c, &base_values));
    }
    let unit = unit_name(&study.name);
    let mut dropins = Vec::new();
    for il in &layout.instances {
        let port = study
            .deployment
            .base_port
            .saturating_add(il.instance as u16);
        let values = crate::deploy::values_for(&config, n, Some((il, port)));
        let words = split_words(&render(&study.deployment.command, &values))?;
        let env = crate::deploy::environment(study, &config, &values);
        let mut line = String::new();
        if !env.is_empty() {
            line.push_str("env ");
            for (k, v) in &env {
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
                .map(|w| quote(w))
                .collect::<Result<Vec<_>, _>>()?
                .join(" "),
        );
        let _ = writeln!(sh, "# instance {} on port {port}", il.instance);
        let _ = writeln!(sh, "{line} &");

        let mut d = String::new();
        let _ = writeln!(
            d,
            "# /etc/systemd/system/{unit}@{}.service.d/perfpilot-study.conf",
            il.instance
        );
        let _ = writeln!(d, "# study {:?}, run {run}: {}", study.name, config.key());
        let _ = writeln!(d, "[Service]");
        if il.bound {
            let _ = writeln!(d, "CPUAffinity={}", il.cpuset.to_string().replace(',', " "));
            if !il.membind.is_empty() {
                let nodes: Vec<String> = il.membind.iter().map(u32::to_string).collect();
                let _ = writeln!(d, "NUMAPolicy=bind");
                let _ = writeln!(d, "NUMAMask={}", nodes.join(","));
            }
        }
        for (k, v) in &env {
            let _ = writeln!(d, "Environment=\"{k}={}\"", v.replace('"', "\\\""));
        }
        dropins.push((
            format!(
                "systemd/{unit}@{}.service.d/perfpilot-study.conf",
                il.instance
            ),
            d,
        ));
    }
    let _ = writeln!(sh, "wait");
    Ok(Apply {
        config: config.key(),
        shell: sh,
        dropins,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let e = quote("a\0b").unwrap_err();
        assert!(e.contains("NUL byte"), "{e}");
    }
}
