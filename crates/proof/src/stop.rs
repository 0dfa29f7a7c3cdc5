//! The harness's stop request: set by the Ctrl-C/SIGTERM handler; every wait, command and
//! server start (`perfpilot_lab`'s `give_up`) checks it and gives up, so `?` unwinds the run
//! and its guards restore.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

/// Set by the Ctrl-C/SIGTERM handler.
static STOP: AtomicBool = AtomicBool::new(false);

/// Asks every wait to give up (the Ctrl-C handler calls it).
pub fn request_stop() {
    STOP.store(true, Ordering::SeqCst);
}

/// Whether a stop was requested.
pub fn stopping() -> bool {
    STOP.load(Ordering::SeqCst)
}

/// Fails when a stop was requested, so `?` unwinds the run (and its guards restore).
pub fn check_stop() -> Result<()> {
    if stopping() {
        bail!("interrupted: stopping (every setting is restored, every process stopped)");
    }
    Ok(())
}

/// Sleeps `d`, waking early (with an error) when a stop is requested.
pub fn sleep(d: Duration) -> Result<()> {
    let end = Instant::now() + d;
    while Instant::now() < end {
        check_stop()?;
        std::thread::sleep((end - Instant::now()).min(Duration::from_millis(100)));
    }
    check_stop()
}
