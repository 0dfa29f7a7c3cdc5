//! Network namespaces through `ip` (iproute2): running `ip` ([`ip`]), the processes in a
//! namespace ([`pids`]), and a namespace joined to this one by a veth pair ([`NetNs`]): a
//! second "host" on the same machine for scale-out runs. Traffic stays between this host and
//! the namespace it created (two private addresses on the pair); dropping the guard deletes
//! the namespace and with it the pair. The hosts experiments and tests use are built on these
//! in `perfpilot_lab::netns`.

use std::process::Command;

use crate::error::{Error, Result};

/// The prefix of every namespace perfpilot creates.
pub const PREFIX: &str = "perfpilot-";

/// A network namespace with a veth link to the creating namespace.
#[derive(Debug)]
pub struct NetNs {
    name: String,
    /// This host's address on the link.
    pub host_addr: String,
    /// The namespace's address on the link.
    pub ns_addr: String,
}

/// Runs `ip ARGS…`; an error quotes the command and what `ip` said.
pub fn ip(args: &[&str]) -> Result<()> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| Error::Syscall {
            call: "ip",
            target: args.join(" "),
            source: e,
        })?;
    if out.status.success() {
        Ok(())
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

impl NetNs {
    /// Creates namespace `perfpilot-<tag>` linked to this one: `10.<a>.<b>.1` on this side,
    /// `.2` inside, where `a.b` is `subnet` (pick one no interface here uses).
    pub fn create(tag: &str, subnet: (u8, u8)) -> Result<NetNs> {
        let name = format!("{PREFIX}{tag}");
        // A namespace a killed run left behind goes first.
        let _ = ip(&["netns", "del", &name]);
        ip(&["netns", "add", &name])?;
        let ns = NetNs {
            host_addr: format!("10.{}.{}.1", subnet.0, subnet.1),
            ns_addr: format!("10.{}.{}.2", subnet.0, subnet.1),
            name,
        };
        // Interface names are at most 15 bytes.
        let short: String = tag
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .take(9)
            .collect();
        let (outer, inner) = (format!("pp{short}a"), format!("pp{short}b"));
        let _ = ip(&["link", "del", &outer]);
        ip(&[
            "link", "add", &outer, "type", "veth", "peer", "name", &inner,
        ])?;
        ip(&["link", "set", &inner, "netns", &ns.name])?;
        ip(&[
            "addr",
            "add",
            &format!("{}/30", ns.host_addr),
            "dev",
            &outer,
        ])?;
        ip(&["link", "set", &outer, "up"])?;
        let exec = |args: &[&str]| {
            let mut all = vec!["netns", "exec", ns.name.as_str(), "ip"];
            all.extend_from_slice(args);
            ip(&all)
        };
        exec(&["addr", "add", &format!("{}/30", ns.ns_addr), "dev", &inner])?;
        exec(&["link", "set", &inner, "up"])?;
        exec(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The words that run a command inside the namespace: `ip netns exec NAME`.
    pub fn exec_prefix(&self) -> Vec<String> {
        exec_prefix(&self.name)
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        // Deleting the namespace deletes the veth pair too.
        let _ = ip(&["netns", "del", &self.name]);
    }
}
