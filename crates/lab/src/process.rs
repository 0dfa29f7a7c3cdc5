//! Processes an experiment starts: waiting until one is ready (without waiting on one that has
//! died), stopping one (a signal, a grace period, then SIGKILL, reaped either way), the
//! processes below one, and the CPU one has used, all through `perfpilot-sys`'s readers and
//! signals.

use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

use perfpilot_sys::Fs;
use perfpilot_sys::process::ProcReader;

/// How often a wait looks again.
const POLL: Duration = Duration::from_millis(50);

/// How long one connection attempt of [`accepts`] may take.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(300);

/// How a started process is asked to stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopSignal {
    /// SIGINT (PostgreSQL's fast shutdown).
    Interrupt,
    /// SIGTERM.
    Terminate,
}

/// Why a process did not become ready.
#[derive(Debug, PartialEq, Eq)]
pub enum NotReady {
    /// It exited first.
    Exited(ExitStatus),
    /// It was not ready within the limit.
    Late,
    /// The caller asked the wait to give up (Ctrl-C).
    Stopped,
}

/// Waits until `ready` says yes, at most `limit`, looking every 50 ms; gives up as soon as
/// `child` exits or `give_up` says so.
pub fn wait_ready(
    child: &mut Child,
    limit: Duration,
    mut ready: impl FnMut() -> bool,
    give_up: &dyn Fn() -> bool,
) -> Result<(), NotReady> {
    let deadline = Instant::now() + limit;
    loop {
        if give_up() {
            return Err(NotReady::Stopped);
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(NotReady::Exited(status));
        }
        if ready() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(NotReady::Late);
        }
        std::thread::sleep(POLL);
    }
}

/// Whether `host:port` accepts a TCP connection (within 300 ms).
pub fn accepts(host: &str, port: u16) -> bool {
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map(Iterator::collect)
        .unwrap_or_default();
    addrs
        .iter()
        .any(|a| TcpStream::connect_timeout(a, CONNECT_TIMEOUT).is_ok())
}

/// Stops `child`: `signal`, up to `grace` for it to exit, then SIGKILL; reaped either way.
/// Returns whether it exited within the grace period (or had already).
pub fn stop(child: &mut Child, signal: StopSignal, grace: Duration) -> bool {
    if let Ok(Some(_)) = child.try_wait() {
        return true;
    }
    // Our own child, not yet reaped, so its pid is still its own; if it exits meanwhile, the
    // wait below sees it.
    let _ = match signal {
        StopSignal::Interrupt => perfpilot_sys::signal::interrupt(child.id()),
        StopSignal::Terminate => perfpilot_sys::signal::terminate(child.id()),
    };
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    false
}

/// Every descendant of `pid` (children, their children, …), from the parent links in the
/// processes' `stat` files.
pub fn descendants(pid: u32) -> Vec<u32> {
    let mut reader = ProcReader::new(&Fs::live());
    let pids = reader.pids().unwrap_or_default();
    let parent_of: Vec<(u32, u32)> = pids
        .into_iter()
        .filter_map(|p| {
            let st = reader.stat(p).ok()?;
            Some((u32::try_from(p).ok()?, u32::try_from(st.ppid).ok()?))
        })
        .collect();
    let mut out = Vec::new();
    let mut frontier = vec![pid];
    while let Some(parent) = frontier.pop() {
        for &(p, pp) in &parent_of {
            if pp == parent && !out.contains(&p) {
                out.push(p);
                frontier.push(p);
            }
        }
    }
    out
}

/// CPU seconds (user + system) process `pid` has used so far (`None` once it is gone).
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let mut r = ProcReader::new(&Fs::live());
    let st = r.stat(i32::try_from(pid).ok()?).ok()?;
    Some((st.utime + st.stime) as f64 / perfpilot_sys::clock_ticks_per_sec() as f64)
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;

    #[test]
    fn a_child_that_exits_is_not_waited_for_and_one_that_ignores_a_signal_is_killed() {
        let mut quick = Command::new("sh")
            .args(["-c", "exit 3"])
            .spawn()
            .expect("sh");
        let r = wait_ready(&mut quick, Duration::from_secs(30), || false, &|| false);
        assert!(
            matches!(r, Err(NotReady::Exited(s)) if s.code() == Some(3)),
            "{r:?}"
        );

        let mut stubborn = Command::new("sh")
            .args(["-c", "trap '' TERM; exec sleep 30"])
            .spawn()
            .expect("sh");
        let r = wait_ready(&mut stubborn, Duration::from_millis(100), || false, &|| {
            false
        });
        assert_eq!(r, Err(NotReady::Late));
        assert!(cpu_seconds(stubborn.id()).is_some());
        assert!(!stop(
            &mut stubborn,
            StopSignal::Terminate,
            Duration::from_millis(300)
        ));
        assert!(stubborn.try_wait().expect("wait").is_some(), "reaped");

        let mut parent = Command::new("sh")
            .args(["-c", "sleep 30; true"])
            .spawn()
            .expect("sh");
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut below = descendants(parent.id());
        while below.is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
            below = descendants(parent.id());
        }
        assert_eq!(below.len(), 1, "sleep runs below sh: {below:?}");
        for d in below {
            let _ = perfpilot_sys::signal::terminate(d);
        }
        assert!(stop(
            &mut parent,
            StopSignal::Terminate,
            Duration::from_secs(10)
        ));

        let mut polite = Command::new("sleep").arg("30").spawn().expect("sleep");
        let given_up = wait_ready(&mut polite, Duration::from_secs(30), || false, &|| true);
        assert_eq!(given_up, Err(NotReady::Stopped));
        assert!(stop(
            &mut polite,
            StopSignal::Interrupt,
            Duration::from_secs(10)
        ));
    }

    #[test]
    fn a_listening_port_accepts_and_a_closed_one_does_not() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = l.local_addr().expect("addr").port();
        assert!(accepts("127.0.0.1", port));
        drop(l);
        assert!(!accepts("127.0.0.1", port));
    }
}
