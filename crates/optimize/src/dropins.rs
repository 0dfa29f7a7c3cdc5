//! A configuration in layers: the main file (`/etc/perfpilot/perfpilot.toml`) and then the
//! drop-ins of `conf.d/*.toml` beside it, in name order. A later file overrides what it sets:
//! each `[tunables]` value, `only_matched`, `listen`, `web_config`, `status_remote`, `textfile`, `read_ahead_devices` and `[fleet]`; its
//! `[[workload]]` rules are tried before the earlier files' (the first match wins), and its
//! `[[preset]]` tables come after theirs. One file with an error fails the whole load, naming
//! that file and line, so a reload keeps the configuration in force.

use std::path::{Path, PathBuf};

use crate::config::{DaemonConfig, DaemonConfigError};

/// The main configuration file of a system install.
pub const SYSTEM_CONFIG: &str = "/etc/perfpilot/perfpilot.toml";

/// The drop-in directory of a main file: `conf.d` beside it.
pub fn dropin_dir(main: &Path) -> PathBuf {
    main.parent()
        .unwrap_or_else(|| Path::new("."))
        .join("conf.d")
}

/// The drop-ins of a main file, in the order they are read (`*.toml`, by name).
pub fn dropins(main: &Path) -> Result<Vec<PathBuf>, DaemonConfigError> {
    let dir = dropin_dir(main);
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(DaemonConfigError::Read { path: dir, source }),
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml") && p.is_file())
        .collect();
    files.sort();
    Ok(files)
}

impl DaemonConfig {
    /// Reads `main` and its drop-ins (see the module's comment); returns the config and every
    /// file read, in order.
    pub fn load_layered(main: &Path) -> Result<(DaemonConfig, Vec<PathBuf>), DaemonConfigError> {
        let mut files = vec![main.to_path_buf()];
        files.extend(dropins(main)?);
        let mut merged = DaemonConfig::default();
        for f in &files {
            let text = std::fs::read_to_string(f).map_err(|source| DaemonConfigError::Read {
                path: f.clone(),
                source,
            })?;
            let (layer, only_matched) = DaemonConfig::parse_layer(&text, f)?;
            merged.overlay(layer, only_matched);
        }
        Ok((merged, files))
    }

    /// Lays `later` over `self` (see the module's comment).
    fn overlay(&mut self, later: DaemonConfig, only_matched: Option<bool>) {
        self.tunables.extend(later.tunables);
        let mut rules = later.workloads;
        rules.append(&mut self.workloads);
        self.workloads = rules;
        self.preset.extend(later.preset);
        if let Some(m) = only_matched {
            self.only_matched = m;
        }
        if later.listen.is_some() {
            self.listen = later.listen;
        }
        if later.web_config.is_some() {
            self.web_config = later.web_config;
        }
        self.status_remote |= later.status_remote;
        if later.textfile.is_some() {
            self.textfile = later.textfile;
        }
        if later.fleet.is_some() {
            self.fleet = later.fleet;
        }
        if later.read_ahead_devices.is_some() {
            self.read_ahead_devices = later.read_ahead_devices;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RuleAction;

    fn tree(main: &str, dropins: &[(&str, &str)]) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("perfpilot.toml"), main).unwrap();
        std::fs::create_dir(d.path().join("conf.d")).unwrap();
        for (name, text) in dropins {
            std::fs::write(d.path().join("conf.d").join(name), text).unwrap();
        }
        d
    }

    #[test]
    fn later_drop_ins_override_what_they_set_and_their_rules_come_first() {
        let d = tree(
            "only_matched = true\nlisten = \"127.0.0.1:10187\"\n[tunables]\ninterval_s = 5\nwindows = 6\n[[workload]]\nmatch = { comm = \"redis-server\" }\n",
            &[
                ("10-interval.toml", "[tunables]\ninterval_s = 2\n"),
                (
                    "20-redis.toml",
                    "[tunables]\ninterval_s = 3\n[[workload]]\nmatch = { comm = \"redis-server\" }\naction = \"exclude\"\n",
                ),
                ("README", "not toml, not read"),
            ],
        );
        let (c, files) = DaemonConfig::load_layered(&d.path().join("perfpilot.toml")).unwrap();
        assert_eq!(files.len(), 3);
        assert!(files[2].ends_with("conf.d/20-redis.toml"));
        assert_eq!(c.tunables["interval_s"], "3");
        assert_eq!(c.tunables["windows"], "6");
        assert!(c.only_matched);
        assert_eq!(c.listen.unwrap().port(), 10187);
        assert_eq!(c.workloads.len(), 2);
        assert_eq!(c.workloads[0].action, RuleAction::Exclude);
    }

    #[test]
    fn a_drop_in_with_an_error_fails_the_load_naming_its_file_and_line() {
        let d = tree(
            "[tunables]\ninterval_s = 5\n",
            &[("50-bad.toml", "# a comment\n\n[tunables]\nheadroom = 30\n")],
        );
        let e = DaemonConfig::load_layered(&d.path().join("perfpilot.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("conf.d/50-bad.toml:4:"), "{e}");
        assert!(e.contains("headroom"), "{e}");
    }

    #[test]
    fn a_main_file_without_conf_d_is_read_alone() {
        let d = tempfile::tempdir().unwrap();
        let main = d.path().join("perfpilot.toml");
        std::fs::write(&main, "[fleet]\nprometheus = \"http://127.0.0.1:9090\"\n").unwrap();
        let (c, files) = DaemonConfig::load_layered(&main).unwrap();
        assert_eq!(files, vec![main]);
        assert_eq!(c.fleet.unwrap().quorum, 0.5);
    }
}
