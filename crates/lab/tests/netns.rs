//! Labs of namespace hosts joined to this namespace: this namespace and the hosts reach each
//! other both ways, labs made at once get interfaces and networks of their own, and a lab's
//! drop leaves nothing here. Skipped (saying why) where namespaces cannot be made.

use std::io::Read;
use std::net::{IpAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use perfpilot_lab::netns::{self, NetLab, NsProcess, wait_in};
use perfpilot_sys::netns::ip;

/// A listener inside a host that answers each connection with one line (perl-base is
/// essential on Debian; bash cannot listen).
const ANSWER: &str = r#"use IO::Socket::INET;
my $s = IO::Socket::INET->new(LocalAddr => $ARGV[0], LocalPort => $ARGV[1], Listen => 8, ReuseAddr => 1)
  or die "cannot listen on $ARGV[0]:$ARGV[1]: $!";
while (my $c = $s->accept) { print $c "from the host\n"; close $c }"#;

/// Whether a network interface of that name exists here.
fn interface(name: &str) -> bool {
    Path::new("/sys/class/net").join(name).exists()
}

/// Whether a network namespace of that name exists.
fn namespace(name: &str) -> bool {
    Path::new("/run/netns").join(name).exists()
}

/// What `addr:port` says on connecting, retried for up to 30 s while it is not listening yet.
fn answer(addr: &str, port: u16) -> String {
    let to: std::net::SocketAddr = format!("{addr}:{port}").parse().expect("a socket address");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match TcpStream::connect_timeout(&to, Duration::from_secs(1)) {
            Ok(mut s) => {
                let mut said = String::new();
                s.read_to_string(&mut said).expect("read the answer");
                return said;
            }
            Err(e) if Instant::now() > deadline => panic!("{to} never answered from here: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

#[test]
fn a_lab_joined_to_this_namespace_reaches_its_hosts_and_leaves_nothing_behind() {
    if let Some(why) = netns::unavailable() {
        println!("skipped: {why}");
        return;
    }
    let Some(perl) = perfpilot_lab::tool::find("perl") else {
        println!("skipped: perl (the listener inside a host) is not installed");
        return;
    };
    let lab = NetLab::joined(1).expect("create a joined lab");
    let here = lab.here_addr().expect("a joined lab's address here");
    let link = lab
        .here_link()
        .expect("a joined lab's interface here")
        .to_string();
    let made = [lab.hub().to_string(), lab.host(0).to_string()];
    assert!(
        link.len() <= 15,
        "{link}: longer than an interface name may be"
    );
    assert!(interface(&link), "{link} was not made here");

    // Host 0 reaches a listener here, at this namespace's address on the lab.
    let listener = TcpListener::bind((here.as_str(), 0)).expect("bind this side's address");
    let port = listener.local_addr().expect("the listener's port").port();
    wait_in(&lab, lab.host(0), &here, port).expect("host 0 reaches this namespace");
    let (_, from) = listener.accept().expect("the connection from host 0");
    let host0: IpAddr = lab.addr(0).parse().expect("host 0's address");
    assert_eq!(from.ip(), host0, "the connection came from elsewhere");

    // This namespace reaches a listener inside host 0.
    let listening = lab
        .command(lab.host(0), &perl.to_string_lossy())
        .args(["-e", ANSWER, &lab.addr(0), "7000"])
        .stdout(Stdio::null())
        .spawn()
        .expect("start the listener in host 0");
    let listening = NsProcess(listening);
    assert_eq!(answer(&lab.addr(0), 7000), "from the host\n");

    drop(listening);
    drop(lab);
    assert!(!interface(&link), "{link} outlived the lab");
    for ns in made {
        assert!(!namespace(&ns), "namespace {ns} outlived the lab");
    }
}

#[test]
fn labs_made_at_once_get_interfaces_and_networks_of_their_own() {
    if let Some(why) = netns::unavailable() {
        println!("skipped: {why}");
        return;
    }
    let made: Vec<NetLab> = std::thread::scope(|s| {
        let joined: Vec<_> = (0..4).map(|_| s.spawn(|| NetLab::joined(1))).collect();
        let plain = s.spawn(|| NetLab::new(1));
        let mut labs: Vec<NetLab> = joined
            .into_iter()
            .map(|j| j.join().expect("a thread").expect("create a joined lab"))
            .collect();
        labs.push(plain.join().expect("a thread").expect("create a lab"));
        labs
    });
    let Some((plain, joined)) = made.split_last() else {
        unreachable!("five labs were made")
    };
    assert_eq!(
        plain.here_addr(),
        None,
        "a lab not joined has an address here"
    );
    assert_eq!(
        plain.here_link(),
        None,
        "a lab not joined has an interface here"
    );
    let mut links: Vec<&str> = joined.iter().filter_map(NetLab::here_link).collect();
    let mut nets: Vec<String> = joined
        .iter()
        .filter_map(NetLab::here_addr)
        .map(|a| {
            a.rsplit_once('.')
                .map(|(net, _)| net.to_string())
                .unwrap_or(a)
        })
        .collect();
    links.sort_unstable();
    links.dedup();
    nets.sort_unstable();
    nets.dedup();
    assert_eq!(links.len(), 4, "interfaces shared: {links:?}");
    assert_eq!(nets.len(), 4, "networks shared: {nets:?}");
    for lab in joined {
        let here = lab.here_addr().expect("a joined lab's address here");
        let listener = TcpListener::bind((here.as_str(), 0)).expect("bind this side's address");
        let port = listener.local_addr().expect("the listener's port").port();
        wait_in(lab, lab.host(0), &here, port).expect("each lab's host reaches this namespace");
    }
}

/// Deletes a namespace and an interface on drop, also when the test fails before its sweep.
struct Leftovers {
    ns: String,
    link: String,
}

impl Drop for Leftovers {
    fn drop(&mut self) {
        let _ = ip(&["link", "del", &self.link]);
        let _ = ip(&["netns", "del", &self.ns]);
    }
}

#[test]
fn a_killed_runs_lab_is_swept_and_a_running_ones_left_alone() {
    if let Some(why) = netns::unavailable() {
        println!("skipped: {why}");
        return;
    }
    // A pid that ran and is gone: its lab is what a killed run leaves.
    let mut gone = std::process::Command::new("true")
        .spawn()
        .expect("run true");
    let pid = gone.id();
    gone.wait().expect("reap true");
    if Path::new("/proc").join(pid.to_string()).exists() {
        println!("skipped: pid {pid} was taken again at once");
        return;
    }
    let left = Leftovers {
        ns: format!("perfpilot-{pid}x0-hub"),
        link: format!("pp{pid}j0"),
    };
    ip(&["netns", "add", &left.ns]).expect("add the stale namespace");
    // As a joined lab leaves it: this end here, the other in its hub.
    ip(&[
        "link", "add", &left.link, "type", "veth", "peer", "name", "here", "netns", &left.ns,
    ])
    .expect("add the stale interface");
    let live = NetLab::joined(1).expect("create a joined lab");
    let live_link = live.here_link().expect("a joined lab's link").to_string();
    let removed = netns::remove_stale();
    assert!(
        removed.contains(&left.ns) && removed.contains(&left.link),
        "{removed:?}"
    );
    assert!(!namespace(&left.ns) && !interface(&left.link));
    // This process runs: its lab stays whole.
    assert!(namespace(live.hub()) && namespace(live.host(0)) && interface(&live_link));
    assert!(!removed.iter().any(|r| r == live.hub() || *r == live_link));
}
