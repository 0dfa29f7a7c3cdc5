//! Hosts as network namespaces on this machine, over `perfpilot_sys::netns`: a lab of hosts
//! ([`NetLab`]: a hub namespace with a bridge and hosts joined to it by veth pairs, on a
//! private /24) for the tests and runs that need several machines' worth of addresses.
//! [`NetLab::new`] makes nothing in the caller's own namespace (its veth pairs are made inside
//! the hub). [`NetLab::joined`] also joins the caller's namespace to the bridge (one veth pair,
//! this end at [`NetLab::here_addr`], on a /24 that no route here covers), so that processes
//! here and on the hosts reach each other: capacity's second host is host 0 of such a lab.
//! [`NetLab`]'s drop deletes everything it made (after killing what was left in its
//! namespaces), also when the caller panics.

use std::net::Ipv4Addr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, Once, PoisonError};
use std::time::{Duration, Instant};

use perfpilot_sys::netns::{self, PREFIX, ip};
use serde::Deserialize;

/// Why a lab could not be made (the namespaces made so far are removed).
#[derive(Debug, thiserror::Error)]
pub enum NetLabError {
    /// `ip` failed; the error quotes the command and what `ip` said.
    #[error("cannot make the namespace lab: {0}")]
    Ip(#[from] perfpilot_sys::Error),
    /// `ip -json route` said something other than a list of routes.
    #[error(
        "cannot read the routes here from `ip -json route`: {0}; an iproute2 with JSON output (4.14 or newer) is needed"
    )]
    Routes(String),
    /// Every network a joined lab may use overlaps a route here.
    #[error(
        "no network from 10.100.0.0/24 to 10.199.249.0/24 is free for a namespace lab joined to \
         this namespace: each overlaps a route here (such as {route}; `ip route show table all` \
         lists them); remove or narrow the routes that cover them, or run where none do"
    )]
    NoFreeNetwork {
        /// A route in the way, as `ADDRESS/LENGTH`.
        route: String,
    },
}

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
    /// This namespace's end of the veth pair into the hub, for a joined lab.
    here: Option<String>,
}

impl NetLab {
    /// A hub and `hosts` hosts at `10.A.B.10`, `10.A.B.11`, …; the hub's bridge is `10.A.B.1`.
    /// Nothing is made in the caller's namespace.
    pub fn new(hosts: usize) -> Result<NetLab, NetLabError> {
        NetLab::create(hosts, false)
    }

    /// A lab as [`NetLab::new`] makes, with the caller's namespace joined to the bridge at
    /// `10.A.B.2` ([`NetLab::here_addr`]), `10.A.B.0/24` being a network no route here covers.
    pub fn joined(hosts: usize) -> Result<NetLab, NetLabError> {
        NetLab::create(hosts, true)
    }

    fn create(hosts: usize, join: bool) -> Result<NetLab, NetLabError> {
        // Once a process: a killed run's labs would hold their networks and names for good.
        static SWEPT: Once = Once::new();
        SWEPT.call_once(|| {
            remove_stale();
        });
        static NEXT: AtomicU64 = AtomicU64::new(0);
        // Joined labs pick their network and route it here one at a time, so that two in this
        // process never pick the same one.
        static JOINING: Mutex<()> = Mutex::new(());
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        // The pid and the counter make the names unique among live labs.
        let tag = format!("{PREFIX}{pid}x{n}");
        let start = (100 + pid % 100, (pid / 100 % 200 + (n % 250) as u32) % 250);
        let joining = join.then(|| JOINING.lock().unwrap_or_else(PoisonError::into_inner));
        let (a, b) = if join {
            free_net(start, &routed()?)?
        } else {
            start
        };
        let mut lab = NetLab {
            hub: format!("{tag}-hub"),
            hosts: Vec::new(),
            net: format!("10.{a}.{b}"),
            here: None,
        };
        add_namespace(&lab.hub)?;
        let hub = lab.hub.clone();
        let bridge = format!("{}.1/24", lab.net);
        ip(&["-n", &hub, "link", "set", "lo", "up"])?;
        ip(&["-n", &hub, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &hub, "addr", "add", &bridge, "dev", "br0"])?;
        ip(&["-n", &hub, "link", "set", "br0", "up"])?;
        for i in 0..hosts {
            let name = format!("{tag}-h{i}");
            add_namespace(&name)?;
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
        if join {
            lab.join(pid, n)?;
        }
        drop(joining);
        Ok(lab)
    }

    /// Joins the caller's namespace to the bridge: a veth pair from here into the hub (`here`
    /// there, on the bridge), this end at `.2`.
    fn join(&mut self, pid: u32, n: u64) -> Result<(), NetLabError> {
        // At most 15 bytes (IFNAMSIZ): a pid has at most 7 digits, leaving 5 hex digits for
        // the counter.
        let link = format!("pp{pid}j{n:x}");
        // One of this name is a killed run's (it holds this live process's pid): replace it.
        if Path::new("/sys/class/net").join(&link).exists() {
            let _ = ip(&["link", "del", &link]);
        }
        // Named before it exists, so that the drop removes it whatever fails next.
        self.here = Some(link.clone());
        let hub = self.hub.clone();
        ip(&[
            "link", "add", &link, "type", "veth", "peer", "name", "here", "netns", &hub,
        ])?;
        ip(&["-n", &hub, "link", "set", "here", "master", "br0"])?;
        ip(&["-n", &hub, "link", "set", "here", "up"])?;
        let addr = format!("{}.2/24", self.net);
        ip(&["addr", "add", &addr, "dev", &link])?;
        ip(&["link", "set", &link, "up"])?;
        Ok(())
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

    /// The caller's namespace's address on the lab's network, where the hosts reach it: `Some`
    /// for a lab made by [`NetLab::joined`].
    pub fn here_addr(&self) -> Option<String> {
        self.here.as_ref().map(|_| format!("{}.2", self.net))
    }

    /// The caller's namespace's end of the pair into the hub (an interface here): `Some` for a
    /// lab made by [`NetLab::joined`].
    pub fn here_link(&self) -> Option<&str> {
        self.here.as_deref()
    }

    /// The words that run a command inside namespace `ns`: `ip netns exec NS`.
    pub fn exec_prefix(&self, ns: &str) -> Vec<String> {
        netns::exec_prefix(ns)
    }

    /// `program args…` run inside namespace `ns` (`ip netns exec`).
    pub fn command(&self, ns: &str, program: &str) -> Command {
        let prefix = self.exec_prefix(ns);
        let mut c = Command::new(&prefix[0]);
        c.args(&prefix[1..]).arg(program);
        c
    }

    /// Kills (SIGKILL) every process left in namespace `ns`, such as the instances a killed
    /// study worker started; returns how many it killed.
    pub fn kill_all_in(&self, ns: &str) -> usize {
        kill_in(ns)
    }
}

impl Drop for NetLab {
    fn drop(&mut self) {
        // This end explicitly and first: a deleted namespace is torn down asynchronously, and
        // the pair with it, so this end (and its route) would outlive the drop for a moment.
        if let Some(link) = &self.here {
            let _ = ip(&["link", "del", link]);
        }
        for ns in self.hosts.iter().chain(std::iter::once(&self.hub)) {
            // Leftovers first (a killed process's children): a deleted namespace's
            // processes would live on.
            kill_in(ns);
            let _ = ip(&["netns", "del", ns]);
        }
    }
}

/// Removes the labs of processes that no longer run (a killed run's, whose drop never ran):
/// their namespaces, after killing what is left in them, and this namespace's ends of their
/// joins. Returns their names. A lab whose pid runs is left alone, even if that pid now belongs
/// to another process: nothing here can tell them apart.
pub fn remove_stale() -> Vec<String> {
    let gone = |pid: u32| !Path::new("/proc").join(pid.to_string()).exists();
    let names = |dir: &str| -> Vec<String> {
        std::fs::read_dir(dir)
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut removed = Vec::new();
    for link in names("/sys/class/net") {
        if lab_pid(&link, "pp", 'j').is_some_and(gone) && ip(&["link", "del", &link]).is_ok() {
            removed.push(link);
        }
    }
    for ns in names("/run/netns") {
        if lab_pid(&ns, PREFIX, 'x').is_some_and(gone) {
            kill_in(&ns);
            if ip(&["netns", "del", &ns]).is_ok() {
                removed.push(ns);
            }
        }
    }
    removed
}

/// The pid in a lab's name: `prefix`, the pid's digits, then `mark` (`perfpilot-123x0-hub`,
/// `pp123j0`); `None` for any other name.
fn lab_pid(name: &str, prefix: &str, mark: char) -> Option<u32> {
    let rest = name.strip_prefix(prefix)?;
    let (pid, after) = rest.split_at(rest.find(|c: char| !c.is_ascii_digit())?);
    if !after.starts_with(mark) {
        return None;
    }
    pid.parse().ok()
}

/// Kills (SIGKILL) every process in namespace `ns`; returns how many it killed.
fn kill_in(ns: &str) -> usize {
    let pids = netns::pids(ns);
    for &pid in &pids {
        let _ = perfpilot_sys::signal::kill(pid);
    }
    pids.len()
}

/// Adds namespace `ns`. One of that name is a killed run's (the name holds this live process's
/// pid): what is left in it is killed and it is replaced.
fn add_namespace(ns: &str) -> Result<(), NetLabError> {
    if Path::new("/run/netns").join(ns).exists() {
        kill_in(ns);
        let _ = ip(&["netns", "del", ns]);
    }
    Ok(ip(&["netns", "add", ns])?)
}

/// The IPv4 networks routed in this namespace (every table), as (address, length). Catch-alls
/// shorter than /8 (the default route, a VPN's two halves) are left out: a lab's /24 takes
/// over from them only for its own addresses, as any local network does.
fn routed() -> Result<Vec<(u32, u32)>, NetLabError> {
    let out = netns::ip_output(&["-json", "-4", "route", "show", "table", "all"])?;
    Ok(routes_in(&out)?
        .into_iter()
        .filter(|&(_, len)| len >= 8)
        .collect())
}

/// One route as `ip -json route` lists it: what it leads to.
#[derive(Deserialize)]
struct Route {
    dst: String,
}

/// The destinations of the routes in `ip -json route`'s output, as (address, length); the
/// `default` route has none.
fn routes_in(json: &str) -> Result<Vec<(u32, u32)>, NetLabError> {
    if json.trim().is_empty() {
        return Ok(Vec::new());
    }
    let routes: Vec<Route> =
        serde_json::from_str(json).map_err(|e| NetLabError::Routes(e.to_string()))?;
    Ok(routes.iter().filter_map(|r| destination(&r.dst)).collect())
}

/// A route's destination (`10.1.2.0/24`, `127.0.0.1`) as (address, length); `None` for
/// `default` and what does not parse.
fn destination(dst: &str) -> Option<(u32, u32)> {
    let (addr, len) = match dst.split_once('/') {
        Some((addr, len)) => (addr, len.parse().ok().filter(|&l| l <= 32)?),
        None => (dst, 32),
    };
    Some((u32::from(addr.parse::<Ipv4Addr>().ok()?), len))
}

/// The first `10.A.B.0/24` (A in 100..200, B in 0..250), from `start` on and wrapping round,
/// that none of `routes` overlaps, as (A, B).
fn free_net(start: (u32, u32), routes: &[(u32, u32)]) -> Result<(u32, u32), NetLabError> {
    const NETS: u32 = 100 * 250;
    let first = (start.0 - 100) * 250 + start.1;
    let at = |k: u32| {
        let i = (first + k) % NETS;
        (100 + i / 250, i % 250)
    };
    let blocker = |(a, b): (u32, u32)| {
        let net = (10 << 24) | (a << 16) | (b << 8);
        routes.iter().copied().find(|&(addr, len)| {
            // Two prefixes overlap when they agree on the shorter one's bits.
            let bits = len.min(24);
            let mask = u32::MAX.checked_shl(32 - bits).unwrap_or(0);
            (net ^ addr) & mask == 0
        })
    };
    match (0..NETS).map(at).find(|&net| blocker(net).is_none()) {
        Some(net) => Ok(net),
        None => Err(NetLabError::NoFreeNetwork {
            route: blocker(start)
                .map(|(addr, len)| format!("{}/{len}", Ipv4Addr::from(addr)))
                .unwrap_or_default(),
        }),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_labs_name_gives_its_pid_and_any_other_name_none() {
        assert_eq!(lab_pid("perfpilot-123x0-hub", PREFIX, 'x'), Some(123));
        assert_eq!(lab_pid("perfpilot-45x12-h3", PREFIX, 'x'), Some(45));
        assert_eq!(lab_pid("pp6789j1f", "pp", 'j'), Some(6789));
        // Capacity's namespaces before labs were joined, other tools', and no pid at all.
        assert_eq!(lab_pid("perfpilot-cap-1234", PREFIX, 'x'), None);
        assert_eq!(lab_pid("perfpilot-x0-hub", PREFIX, 'x'), None);
        assert_eq!(lab_pid("pp123", "pp", 'j'), None);
        assert_eq!(lab_pid("ppp12j0", "pp", 'j'), None);
        assert_eq!(lab_pid("eth0", "pp", 'j'), None);
    }

    fn net(a: u32, b: u32) -> u32 {
        (10 << 24) | (a << 16) | (b << 8)
    }

    #[test]
    fn a_route_gives_its_destination_and_the_default_route_none() {
        assert_eq!(destination("192.0.2.0/24"), Some((0xc000_0200, 24)));
        assert_eq!(destination("127.0.0.1"), Some((0x7f00_0001, 32)));
        assert_eq!(destination("10.7.0.0/16"), Some((net(7, 0), 16)));
        assert_eq!(destination("default"), None);
        assert_eq!(destination("10.1.2.0/33"), None);
        assert_eq!(destination(""), None);
        // As `ip -json -4 route show table all` lists them (a local and an unreachable route
        // among them).
        let listed = r#"[{"dst":"default","gateway":"192.0.2.1","dev":"eth0","flags":[]},
            {"dst":"192.0.2.0/24","dev":"eth0","protocol":"kernel","scope":"link","flags":[]},
            {"type":"local","dst":"127.0.0.1","dev":"lo","table":"local","flags":[]},
            {"type":"unreachable","dst":"10.7.0.0/16","metric":1024,"flags":[]}]"#;
        assert_eq!(
            routes_in(listed).expect("routes"),
            vec![(0xc000_0200, 24), (0x7f00_0001, 32), (net(7, 0), 16)]
        );
        assert_eq!(routes_in("").expect("no routes"), vec![]);
        let bad = routes_in("10.0.0.0/8 dev eth0").unwrap_err().to_string();
        assert!(bad.contains("ip -json route"), "{bad}");
    }

    #[test]
    fn a_joined_lab_takes_the_first_network_from_its_own_on_that_no_route_overlaps() {
        assert_eq!(free_net((150, 7), &[]).ok(), Some((150, 7)));
        // Its own /24, a wider route over it, and a narrower one inside the next.
        let routes = [
            (net(150, 7), 24),
            (net(150, 8), 23),
            (net(150, 10) | 128, 25),
        ];
        assert_eq!(free_net((150, 7), &routes).ok(), Some((150, 11)));
        // The last network wraps round to the first.
        assert_eq!(
            free_net((199, 249), &[(net(199, 249), 24)]).ok(),
            Some((100, 0))
        );
    }

    #[test]
    fn a_route_over_every_network_a_joined_lab_may_use_is_named_in_the_error() {
        match free_net((150, 7), &[(net(0, 0), 8)]) {
            Err(e @ NetLabError::NoFreeNetwork { .. }) => {
                assert!(e.to_string().contains("such as 10.0.0.0/8"), "{e}");
            }
            other => panic!("expected no free network, got {other:?}"),
        }
    }
}
