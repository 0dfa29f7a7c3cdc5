//! Heap allocations per request of the load engine, counted by a global allocator that counts
//! (this binary only): `cargo run --release -p perfpilot-drive --example allocs -- URL
//! [USERS] [THREADS] [SECONDS]`. `https://` URLs are driven over HTTP/1.1 without certificate
//! checks. Only the measured window is counted (after a one-second warm-up).

// A global allocator is an unsafe trait; this one only counts and passes each call on.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use perfpilot_drive::{DriveSpec, HttpVersion, Load, RunControl, ThinkTime, TlsOptions, run};

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is passed to the system allocator unchanged; only counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: the caller's layout is passed on as is.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(new_size as u64, Ordering::Relaxed);
        // SAFETY: as for `dealloc`; the new size is the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The counters at the start and the end of the measured window.
static SNAPSHOTS: Mutex<Vec<(u64, u64)>> = Mutex::new(Vec::new());

/// Read by the engine at the start and the end of the measured window (its CPU clock hook):
/// takes a snapshot of the counters.
fn snapshot() -> Duration {
    let s = (
        ALLOCS.load(Ordering::Relaxed),
        BYTES.load(Ordering::Relaxed),
    );
    SNAPSHOTS.lock().unwrap_or_else(|p| p.into_inner()).push(s);
    Duration::ZERO
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(url) = args.first() else {
        eprintln!("usage: allocs URL [USERS] [THREADS] [SECONDS]");
        std::process::exit(2);
    };
    let num =
        |i: usize, default: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default);
    let mut spec = DriveSpec::new(
        vec![url.clone()],
        Load::Closed {
            users: num(1, 64),
            think: ThinkTime::Zero,
        },
    );
    spec.threads = num(2, 1);
    spec.warmup = Duration::from_secs(1);
    spec.duration = Duration::from_secs(num(3, 5) as u64);
    spec.http = HttpVersion::Http1;
    spec.tls = TlsOptions {
        insecure: true,
        ca_file: None,
    };
    let control = RunControl {
        cpu_clock: Some(snapshot),
        ..RunControl::default()
    };
    let m = match run(&spec, &control) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("allocs: {e}");
            std::process::exit(1);
        }
    };
    let snaps = SNAPSHOTS.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let (Some(a), Some(b)) = (snaps.first(), snaps.last()) else {
        eprintln!("allocs: the measured window never began");
        std::process::exit(1);
    };
    let n = m.requests.max(1) as f64;
    println!(
        "{} requests ({} ok): {:.3} allocations and {:.1} bytes allocated per request",
        m.requests,
        m.ok,
        (b.0 - a.0) as f64 / n,
        (b.1 - a.1) as f64 / n
    );
}
