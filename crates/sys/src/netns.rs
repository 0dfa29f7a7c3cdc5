//! Network namespaces through `ip` (iproute2): running `ip` ([`ip`], [`ip_output`]), the
//! processes in a namespace ([`pids`]) and the words that run a command inside one
//! ([`exec_prefix`]). The hosts built on these (a lab of namespaces on a bridge, which the
//! caller's namespace can join: the multi-host tests' hosts and capacity's second host) are
//! `perfpilot_lab::netns`.

use std::process::Command;

use crate::error::{Error, Result};

/// The prefix of every namespace perfpilot creates.
pub const PREFIX: &str = "perfpilot-";

/// Runs `ip ARGS…`; an error quotes the command and what `ip` said.
pub fn ip(args: &[&str]) -> Result<()> {
    ip_output(args).map(drop)
}

/// Runs `ip ARGS…` and returns what it printed; an error quotes the command and what `ip` said.
pub fn ip_output(args: &[&str]) -> Result<String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| Error::Syscall {
            call: "ip",
            target: args.join(" "),
            source: e,
        })?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(Error::Syscall {
            call: "ip",
            target: format!(
                "`ip {}` ({})",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
            source: std::io::Error::other("ip failed"),
        })
    }
}

/// The processes in namespace `name` (`ip netns pids`; none when it cannot be read).
pub fn pids(name: &str) -> Vec<u32> {
    Command::new("ip")
        .args(["netns", "pids", name])
        .stdin(std::process::Stdio::null())
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The words that run a command inside namespace `name`: `ip netns exec NAME`.
pub fn exec_prefix(name: &str) -> Vec<String> {
    ["ip", "netns", "exec", name].map(String::from).to_vec()
}
