//! A new configuration taken in while the daemon runs (SIGHUP): the rules and the fleet table
//! at once, `[tunables]` from the next scan, the presets rediscovered if they changed.

use tracing::info;

use super::Engine;
use crate::config::DaemonConfig;
use crate::signal::servers::Servers;

impl Engine {
    /// Replaces the configuration; returns what changed, a line each (for the log).
    pub fn reload_config(&mut self, config: DaemonConfig) -> Vec<String> {
        let old = &self.policy.config;
        let mut changed = Vec::new();
        if old.tunables != config.tunables {
            changed.push("tunables".to_string());
        }
        if old.workloads != config.workloads || old.only_matched != config.only_matched {
            changed.push("workload rules".to_string());
        }
        if old.preset != config.preset {
            changed.push("presets (servers are looked at again)".to_string());
            self.watch.signals.servers = Servers::new(&self.fs, config.preset.clone());
        }
        if old.read_ahead_devices != config.read_ahead_devices {
            changed.push("read_ahead_devices".to_string());
        }
        if old.fleet != config.fleet {
            changed.push("fleet".to_string());
        }
        if old.listen != config.listen
            || old.textfile != config.textfile
            || old.web_config != config.web_config
            || old.status_remote != config.status_remote
        {
            changed.push(
                "listen/web_config/status_remote/textfile (taken in at the next start)".to_string(),
            );
        }
        if !changed.is_empty() {
            info!("configuration reloaded: {}", changed.join(", "));
        }
        self.policy.config = config;
        changed
    }

    /// The configuration in force.
    pub fn config(&self) -> &DaemonConfig {
        &self.policy.config
    }
}
