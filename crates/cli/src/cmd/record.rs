//! `perfpilot record`: append samples to the embedded store at a fixed interval.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use perfpilot_observe::{Fs, Sampler, SamplerConfig};
use perfpilot_store::record::Schedule;
use perfpilot_store::{Retention, Store};

use perfpilot_units as units;

#[derive(Args)]
pub struct RecordArgs {
    /// Time between samples (e.g. 5s, 1m).
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    interval: Duration,
    /// Stop after this long (default: until interrupted).
    #[arg(long = "for", value_name = "DURATION", value_parser = humantime::parse_duration)]
    duration: Option<Duration>,
    /// The store (default: $XDG_STATE_HOME/perfpilot/perfpilot.db, /var/lib/perfpilot/perfpilot.db for root).
    #[arg(long, value_name = "PATH", env = "PERFPILOT_STORE")]
    store: Option<PathBuf>,
    /// Delete samples older than this.
    #[arg(long, default_value = "7days", value_parser = humantime::parse_duration)]
    max_age: Duration,
    /// Keep at most this many MiB of samples; the oldest go first.
    #[arg(long, default_value_t = 1024)]
    max_size_mib: u64,
    /// Do not read per-thread counters.
    #[arg(long)]
    no_threads: bool,
    /// Take the expensive memory readings (numa_maps, smaps_rollup) of the top processes every
    /// N-th sample.
    #[arg(long, default_value_t = 6)]
    memory_every: u32,
}

/// The store path from `--store` or the default.
pub fn store_path(p: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    match p {
        Some(p) => Ok(p),
        None => Store::default_path().context("choosing the store path; give one with --store"),
    }
}

pub fn run(a: RecordArgs) -> anyhow::Result<()> {
    if a.interval.is_zero() {
        anyhow::bail!("--interval must be positive");
    }
    let path = store_path(a.store)?;
    let mut store = Store::open(&path)?;
    store.set_retention(Retention {
        max_age: Some(a.max_age),
        max_bytes: Some(a.max_size_mib << 20),
    });
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    ctrlc::set_handler(move || s2.store(true, Ordering::SeqCst))
        .context("installing the Ctrl-C handler")?;
    // Room for the sampler's kept `stat` descriptors (half of the soft limit at most).
    perfpilot_sys::raise_open_files_limit(1 << 18);
    let mut sampler = Sampler::new(
        &Fs::live(),
        SamplerConfig {
            threads: !a.no_threads,
            expensive_every: a.memory_every,
            ..SamplerConfig::default()
        },
    );
    eprintln!(
        "recording every {} to {} (keeping {} / {}); Ctrl-C stops",
        units::duration(a.interval),
        path.display(),
        units::duration(a.max_age),
        units::bytes(a.max_size_mib << 20)
    );
    let mut skipped_msgs = 0;
    let summary = store.record(
        &mut sampler,
        &Schedule {
            interval: a.interval,
            duration: a.duration,
        },
        &stop,
        |skips| {
            if skipped_msgs < 3 {
                skipped_msgs += 1;
                eprintln!(
                    "warning: sample skipped {} unreadable and {} malformed files: {}",
                    skips.permission + skips.other,
                    skips.malformed,
                    skips.messages.join("; ")
                );
            }
        },
    )?;
    eprintln!(
        "wrote {} samples in {} to {} ({} in the store); the recorder used {} of one CPU",
        summary.samples,
        units::duration_secs(summary.wall_s),
        path.display(),
        units::bytes(store.size_bytes()?),
        units::percent(summary.cpu_pct())
    );
    Ok(())
}
