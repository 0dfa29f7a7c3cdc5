//! Hosts as network namespaces on this machine, over `perfpilot_sys::netns`: a lab of hosts
//! ([`NetLab`]: a hub namespace with a bridge and hosts joined to it by veth pairs, on a
//! private /24) for the tests and runs that need several machines' worth of addresses; the
//! second host of a capacity sweep is `perfpilot_sys::netns::NetNs`. Nothing is created in the
//! caller's own namespace (veth pairs are made inside the hub), and [`NetLab`]'s drop deletes
//! every namespace it made (after killing what was left in them), also when the caller panics.

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use perfpilot_sys::netns::{self, ip};

/// Why namespaces cannot be made here, if they cannot (not root, no `ip`).
pub fn unavailable() -> Option<String> {
    if !perfpilot_sys::user::is_root() {
        return Some("network namespaces need root".into());
    }
    if crate::tool::find("ip").is_none() {
        return Some("`ip` (iproute2) is not installed".into());
    }
    None
}

/// The lab; see the module's documentation.
#[derive(Debug)]
pub struct NetLab {
    hub: String,
    hosts: Vec<String>,
    net: String,
}

impl NetLab {
    /// A hub and `hosts` hosts at `10.A.B.10`, `10.A.B.11`, …; the hub's bridge is `10.A.B.1`.
    /// `Err` says why the kernel refused (the namespaces made so far are removed).
    pub fn new(hosts: usize) -> perfpilot_sys::Result<NetLab> {
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
        let prefix = netns::exec_prefix(ns);
        let mut c = Command::new(&prefix[0]);
        c.args(&prefix[1..]).arg(program);
        c
    }

    /// Kills (SIGKILL) every process left in namespace `ns`, such as the instances a killed
    /// study worker started; returns how many it killed.
    pub fn kill_all_in(&self, ns: &str) -> usize {
        let pids = netns::pids(ns);
        for &pid in &pids {
            let _ = perfpilot_sys::signal::kill(pid);
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
#[derive(Debug)]
pub struct NsProcess(pub Child);

impl Drop for NsProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits until `host:port` accepts a TCP connection from inside `ns`, up to 30 s.
pub fn wait_in(lab: &NetLab, ns: &str, host: &str, port: u16) -> Result<(), String> {
    let probe = format!("exec 3<>/dev/tcp/{host}/{port}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
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
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(format!(
        "{host}:{port} never accepted a connection from {ns}"
    ))
}
