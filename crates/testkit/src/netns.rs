//! A lab of network-namespace "hosts" on this machine: a hub namespace with a bridge and hosts
//! joined to it by veth pairs, on a private /24. Nothing is created in the caller's own
//! namespace (veth pairs are made inside the hub), and [`NetLab`]'s drop deletes every
//! namespace it made — also when the test panics — after its [`NsProcess`] guards stopped
//! the processes in them.

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

/// Why namespaces cannot be made here, if they cannot (not root, no `ip`, no bridge support).
pub fn unavailable() -> Option<String> {
    if !crate::is_root() {
        return Some("network namespaces need root".into());
    }
    if crate::find("ip").is_none() {
        return Some("`ip` (iproute2) is not installed".into());
    }
    None
}

/// The lab; see the module's documentation.
pub struct NetLab {
    hub: String,
    hosts: Vec<String>,
    net: String,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl NetLab {
    /// A hub and `hosts` hosts at `10.A.B.10`, `10.A.B.11`, …; the hub's bridge is `10.A.B.1`.
    /// `Err` says why the kernel refused (the namespaces made so far are removed).
    pub fn new(hosts: usize) -> Result<NetLab, String> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let tag = format!("pp{pid}x{n}");
        let net = format!(
            "10.{}.{}",
            100 + pid % 100,
            (u64::from(pid) / 100 % 200 + n) % 250
        );
        let mut lab = NetLab {
            hub: format!("{tag}hub"),
            hosts: Vec::new(),
            net,
        };
        ip(&["netns", "add", &lab.hub])?;
        let hub = lab.hub.clone();
        let bridge = format!("{}.1/24", lab.net);
        ip(&["-n", &hub, "link", "set", "lo", "up"])?;
        ip(&["-n", &hub, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &hub, "addr", "add", &bridge, "dev", "br0"])?;
        ip(&["-n", &hub, "link", "set", "br0", "up"])?;
        for i in 0..hosts {
            let name = format!("{tag}h{i}");
            ip(&["netns", "add", &name])?;
            lab.hosts.push(name.clone());
            let port = format!("p{i}");
            ip(&[
                "-n", &hub, "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns",
                &name,
            ])?;
            ip(&["-n", &hub, "link", "set", &port, "master", "br0"])?;
            ip(&["-n", &hub, "link", "set", &port, "up"])?;
            let addr = format!("{}/24", lab.addr(i));
            ip(&["-n", &name, "addr", "add", &addr, "dev", "eth0"])?;
            ip(&["-n", &name, "link", "set", "eth0", "up"])?;
            ip(&["-n", &name, "link", "set", "lo", "up"])?;
        }
        Ok(lab)
    }

    /// The hub's namespace (where the bridge is).
    pub fn hub(&self) -> &str {
        &self.hub
    }

    /// The hub's address on the bridge.
    pub fn hub_addr(&self) -> String {
        format!("{}.1", self.net)
    }

    /// Host `i`'s namespace.
    pub fn host(&self, i: usize) -> &str {
        &self.hosts[i]
    }

    /// Host `i`'s address.
    pub fn addr(&self, i: usize) -> String {
        format!("{}.{}", self.net, 10 + i)
    }

    /// `program args…` run inside namespace `ns` (`ip netns exec`).
    pub fn command(&self, ns: &str, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns, program]);
        c
    }
}

impl NetLab {
    /// Kills (SIGKILL) every process left in namespace `ns`, such as the instances a killed
    /// study worker started; returns how many it killed.
    pub fn kill_all_in(&self, ns: &str) -> usize {
        let out = Command::new("ip")
            .args(["netns", "pids", ns])
            .stdin(Stdio::null())
            .output();
        let pids: Vec<String> = out
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .split_whitespace()
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        for pid in &pids {
            let _ = Command::new("kill").args(["-9", pid]).status();
        }
        pids.len()
    }
}

impl Drop for NetLab {
    fn drop(&mut self) {
        for ns in self.hosts.iter().chain(std::iter::once(&self.hub)) {
            // Leftovers first (a killed process's children): a deleted namespace's
            // processes would live on.
            self.kill_all_in(ns);
            let _ = ip(&["netns", "del", ns]);
        }
    }
}

/// A process started in a namespace, killed and reaped on drop (declare it after the
/// [`NetLab`], so that it goes first).
pub struct NsProcess(pub Child);

impl Drop for NsProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits until `addr` (host:port) accepts a TCP connection from inside `ns`, up to 30 s.
pub fn wait_in(lab: &NetLab, ns: &str, host: &str, port: u16) -> Result<(), String> {
    let probe = format!("exec 3<>/dev/tcp/{host}/{port}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::time::Instant::now() < deadline {
        let ok = lab
            .command(ns, "bash")
            .args(["-c", &probe])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    Err(format!(
        "{host}:{port} never accepted a connection from {ns}"
    ))
}
