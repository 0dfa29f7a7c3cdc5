//! Measures the stored size and the append/read cost of big synthetic samples.
//!
//! `cargo run --release -p perfpilot-store --example sample_cost [PROCS THREADS N]`
//! (default 1000 processes × 10 threads, 20 samples).

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::Instant;

use perfpilot_store::{Retention, Store};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse())
        .collect::<Result<_, _>>()?;
    let procs = args.first().copied().unwrap_or(1_000);
    let threads = args.get(1).copied().unwrap_or(10);
    let n = args.get(2).copied().unwrap_or(20) as u64;
    let t0 = 1_763_800_000_000i64;
    let samples: Vec<_> = (0..n)
        .map(|i| common::synthetic(i, procs, threads, t0 + i as i64 * 5_000))
        .collect();

    let t = Instant::now();
    let mut json = 0;
    let mut blob = 0;
    for s in &samples {
        let (raw, b) = perfpilot_store::samples::encode(s).map_err(std::io::Error::other)?;
        json += raw;
        blob += b.len();
    }
    let encode = t.elapsed() / n as u32;

    let dir = std::env::temp_dir().join(format!("perfpilot-sample-cost-{}", std::process::id()));
    let path = dir.join("perfpilot.db");
    let mut store = Store::open(&path)?;
    store.set_retention(Retention::unlimited());
    let t = Instant::now();
    for s in &samples {
        store.append(s)?;
    }
    let append = t.elapsed() / n as u32;
    let t = Instant::now();
    let r = store.samples(None, None)?;
    let read = t.elapsed() / n as u32;
    assert_eq!(r.samples.len() as u64, n);
    println!(
        "{procs} processes x {threads} threads, {n} samples: json {} B, zstd-3 {} B per sample \
         ({:.1}x); encode {encode:?}, append {append:?} (encode + insert), read {read:?} \
         (select + decode) per sample; live store {} B",
        json / n as usize,
        blob / n as usize,
        json as f64 / blob as f64,
        store.size_bytes()?
    );
    drop(store);
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
