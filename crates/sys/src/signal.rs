//! Signals: asking a child perfpilot started to stop, how a closed output pipe ends a command,
//! and SIGHUP as a request to read the configuration again.

use crate::{Error, Result};

/// Sends SIGTERM to process `pid`, asking it to exit cleanly.
///
/// `pid` must name one process: 0 and ids above `i32::MAX` are refused, because `kill(2)`
/// would read them as "my process group" or "every process I may signal". A process that
/// has already exited (and been reaped) gives an error that [`Error::is_vanished`] accepts.
pub fn terminate(pid: u32) -> Result<()> {
    send(pid, libc::SIGTERM)
}

/// Sends SIGINT to process `pid`: PostgreSQL's fast shutdown (SIGTERM waits for its clients).
/// The same rules for `pid` as [`terminate`].
pub fn interrupt(pid: u32) -> Result<()> {
    send(pid, libc::SIGINT)
}

/// Sends SIGKILL to `pid` (a process that must go at once, such as one left in a namespace
/// about to be deleted).
pub fn kill(pid: u32) -> Result<()> {
    send(pid, libc::SIGKILL)
}

fn send(pid: u32, signal: i32) -> Result<()> {
    let target = format!("pid {pid}");
    let raw = i32::try_from(pid)
        .ok()
        .filter(|&p| p > 0)
        .ok_or_else(|| Error::Syscall {
            call: "kill",
            target: target.clone(),
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a single process id (must be 1..=2147483647)",
            ),
        })?;
    // SAFETY: kill has no memory preconditions; raw > 0 addresses exactly one process.
    if unsafe { libc::kill(raw, signal) } != 0 {
        return Err(Error::Syscall {
            call: "kill",
            target,
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// Sends SIGKILL to every process of process group `pgid` (a group perfpilot made for a child it
/// started, with `CommandExt::process_group(0)`, so the group id is the child's pid). Ids that
/// would address more than one group (0, 1, above `i32::MAX`) are refused.
pub fn kill_group(pgid: u32) -> Result<()> {
    let target = format!("process group {pgid}");
    let raw = i32::try_from(pgid)
        .ok()
        .filter(|&p| p > 1)
        .ok_or_else(|| Error::Syscall {
            call: "killpg",
            target: target.clone(),
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a single process group id (must be 2..=2147483647)",
            ),
        })?;
    // SAFETY: killpg has no memory preconditions; raw > 1 addresses exactly one group.
    if unsafe { libc::killpg(raw, libc::SIGKILL) } != 0 {
        return Err(Error::Syscall {
            call: "killpg",
            target,
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// Restores `SIGPIPE`'s default action (end the process), which the Rust runtime sets to
/// "ignore": a command whose reader went away (`perfpilot tunables --list | head -3`) then ends
/// quietly, as other Unix tools do, instead of panicking in `println!`. Not for the daemon, which
/// must outlive a closed log pipe.
pub fn end_on_closed_pipe() {
    // SAFETY: setting a standard signal's disposition to SIG_DFL has no memory preconditions.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
}

/// Sets `flag` whenever the process receives SIGHUP (the daemon reads its configuration again
/// and clears it). `signal-hook` installs the handler: it only stores into the flag, which is
/// all a signal handler may safely do.
pub fn flag_on_hangup(flag: std::sync::Arc<std::sync::atomic::AtomicBool>) -> Result<()> {
    signal_hook::flag::register(signal_hook::consts::SIGHUP, flag)
        .map(|_| ())
        .map_err(|source| Error::Syscall {
            call: "sigaction",
            target: "SIGHUP".into(),
            source,
        })
}

/// Sets `flag` when the process receives SIGINT or SIGTERM (the daemon stops cleanly). Unlike
/// `ctrlc`'s termination handler, it leaves SIGHUP alone: that one means "reload".
pub fn flag_on_stop(flag: std::sync::Arc<std::sync::atomic::AtomicBool>) -> Result<()> {
    for (sig, name) in [
        (signal_hook::consts::SIGINT, "SIGINT"),
        (signal_hook::consts::SIGTERM, "SIGTERM"),
    ] {
        signal_hook::flag::register(sig, flag.clone()).map_err(|source| Error::Syscall {
            call: "sigaction",
            target: name.into(),
            source,
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_terminated_child_exits_by_sigterm() {
        use std::os::unix::process::ExitStatusExt;
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep must be installed");
        terminate(child.id()).unwrap();
        let status = child.wait().unwrap();
        assert_eq!(status.signal(), Some(libc::SIGTERM));
    }

    #[test]
    fn killing_a_group_ends_the_child_and_its_children() {
        use std::os::unix::process::CommandExt;
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & sleep 30; wait"])
            .process_group(0)
            .spawn()
            .expect("sh must be installed");
        kill_group(child.id()).unwrap();
        let status = child.wait().unwrap();
        assert!(!status.success());
        // The group empties once the orphaned `sleep` is reaped by init (later on a busy
        // machine): then signalling it again finds no process.
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let e = loop {
            match kill_group(child.id()) {
                Err(e) => break e,
                Ok(()) if std::time::Instant::now() < until => {
                    std::thread::sleep(std::time::Duration::from_millis(20))
                }
                Ok(()) => panic!("the group of {} still has members after 10 s", child.id()),
            }
        };
        assert!(e.to_string().contains("No such process"), "{e}");
        assert!(kill_group(1).is_err() && kill_group(0).is_err());
    }

    #[test]
    fn a_hangup_sets_the_flag() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};
        let flag = Arc::new(AtomicBool::new(false));
        flag_on_hangup(flag.clone()).unwrap();
        // SAFETY: raise has no memory preconditions; the handler only sets the flag.
        unsafe { libc::raise(libc::SIGHUP) };
        assert!(flag.load(Ordering::SeqCst));
    }

    #[test]
    fn process_group_and_broadcast_ids_are_refused() {
        for pid in [0, u32::MAX, 1 << 31] {
            let e = terminate(pid).unwrap_err();
            assert!(e.to_string().contains("not a single process id"), "{e}");
        }
    }
}
