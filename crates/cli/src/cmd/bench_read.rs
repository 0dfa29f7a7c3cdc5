//! `perfpilot bench read`: a reader of the files in a directory, sequential or random, as a
//! workload that tests and benchmarks of storage tuning spawn and own.
//!
//! Sequential: passes over every file in name order, each file opened anew (a device's
//! `read_ahead_kb` applies to files opened after it changes: the kernel copies it into the open
//! file) and its cached pages dropped first (`posix_fadvise(DONTNEED)`: only these files, unlike
//! `drop_caches`), so every pass reads from the device. Random: block-sized reads at random
//! block offsets of random files, the files' cached pages dropped every 4,096 reads. The bytes
//! read so far go to `--progress` (rewritten whole about every 20 ms) for a probe to read as a
//! counter. It prints `ready` and runs until its standard input closes.

use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use perfpilot_stats::rng::Rng;
use perfpilot_sys::pagecache::drop_cached;

#[derive(Args, Clone)]
pub struct ReadArgs {
    /// The directory whose regular files are read (not recursively).
    #[arg(long)]
    dir: PathBuf,
    /// The size of each read, KiB.
    #[arg(long, default_value_t = 4)]
    block_kib: usize,
    /// Random block reads instead of sequential passes.
    #[arg(long)]
    random: bool,
    /// A file to write the bytes read so far to (a counter for a `command` probe).
    #[arg(long)]
    progress: Option<PathBuf>,
    /// The seed of the random offsets.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// Reads issued between drops of the files' cached pages in random mode.
const RANDOM_DROP_EVERY: u64 = 4096;

/// How often the progress file is rewritten.
const PROGRESS_EVERY: Duration = Duration::from_millis(20);

pub fn run(a: ReadArgs) -> anyhow::Result<()> {
    if a.block_kib == 0 {
        bail!("--block-kib must be at least 1");
    }
    let files = files_in(&a.dir)?;
    let done = Arc::new(AtomicU64::new(0));
    {
        let (a, files, done) = (a.clone(), files.clone(), Arc::clone(&done));
        std::thread::spawn(move || {
            let r = if a.random {
                random(&files, a.block_kib << 10, a.seed, &done)
            } else {
                sequential(&files, a.block_kib << 10, &done)
            };
            if let Err(e) = r {
                eprintln!("bench read: {e:#}");
                std::process::exit(2);
            }
        });
    }
    if let Some(p) = a.progress.clone() {
        let done = Arc::clone(&done);
        std::thread::spawn(move || {
            loop {
                if let Err(e) = write_progress(&p, done.load(Ordering::Relaxed)) {
                    eprintln!("bench read: {e:#}");
                    std::process::exit(2);
                }
                std::thread::sleep(PROGRESS_EVERY);
            }
        });
    }
    println!("ready");
    std::io::stdout().flush()?;
    let mut buf = [0u8; 64];
    let mut stdin = std::io::stdin();
    while matches!(stdin.read(&mut buf), Ok(n) if n > 0) {}
    Ok(())
}

/// The regular files of `dir`, by name, with their sizes; an error when there are none.
fn files_in(dir: &Path) -> anyhow::Result<Vec<(PathBuf, u64)>> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let e = e.with_context(|| format!("reading {}", dir.display()))?;
        let m = e
            .metadata()
            .with_context(|| format!("stat {}", e.path().display()))?;
        if m.is_file() && m.len() > 0 {
            v.push((e.path(), m.len()));
        }
    }
    v.sort();
    if v.is_empty() {
        bail!("{} holds no non-empty regular file to read", dir.display());
    }
    Ok(v)
}

fn open(path: &Path) -> anyhow::Result<File> {
    File::open(path).with_context(|| format!("opening {}", path.display()))
}

/// Sequential passes over `files` until the process ends.
fn sequential(files: &[(PathBuf, u64)], block: usize, done: &AtomicU64) -> anyhow::Result<()> {
    let mut buf = vec![0u8; block];
    loop {
        for (path, _) in files {
            let mut f = open(path)?;
            drop_cached(&f, path)?;
            loop {
                let n = f
                    .read(&mut buf)
                    .with_context(|| format!("reading {}", path.display()))?;
                if n == 0 {
                    break;
                }
                done.fetch_add(n as u64, Ordering::Relaxed);
            }
        }
    }
}

/// Random block reads over `files` until the process ends.
fn random(
    files: &[(PathBuf, u64)],
    block: usize,
    seed: u64,
    done: &AtomicU64,
) -> anyhow::Result<()> {
    let open: Vec<(File, &Path, u64)> = files
        .iter()
        .map(|(p, len)| Ok((open(p)?, p.as_path(), (*len / block as u64).max(1))))
        .collect::<anyhow::Result<_>>()?;
    let mut rng = Rng::new(seed);
    let mut buf = vec![0u8; block];
    let mut reads = 0u64;
    loop {
        if reads.is_multiple_of(RANDOM_DROP_EVERY) {
            for (f, p, _) in &open {
                drop_cached(f, p)?;
            }
        }
        let (f, p, blocks) = &open[rng.below(open.len())];
        let at = rng.below(*blocks as usize) as u64 * block as u64;
        let n = f
            .read_at(&mut buf, at)
            .with_context(|| format!("reading {} at {at}", p.display()))?;
        done.fetch_add(n as u64, Ordering::Relaxed);
        reads += 1;
    }
}

/// Writes `bytes` to `path` whole (a temporary file renamed over it), so a reader never sees a
/// partial number.
fn write_progress(path: &Path, bytes: u64) -> anyhow::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, format!("{bytes}\n"))
        .with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_without_files_is_an_error_naming_it() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("sub")).unwrap();
        std::fs::write(d.path().join("empty"), b"").unwrap();
        let e = files_in(d.path()).unwrap_err().to_string();
        assert!(e.contains(&d.path().display().to_string()), "{e}");
        assert!(e.contains("no non-empty regular file"), "{e}");
    }

    #[test]
    fn files_are_read_in_name_order_with_their_sizes() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("b"), [1u8; 10]).unwrap();
        std::fs::write(d.path().join("a"), [1u8; 20]).unwrap();
        let v = files_in(d.path()).unwrap();
        assert_eq!(v, vec![(d.path().join("a"), 20), (d.path().join("b"), 10)]);
    }

    #[test]
    fn a_sequential_pass_counts_every_byte() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("a"), vec![3u8; 10_000]).unwrap();
        let files = files_in(d.path()).unwrap();
        let done = Arc::new(AtomicU64::new(0));
        let seen = Arc::clone(&done);
        std::thread::spawn(move || sequential(&files, 4096, &seen));
        assert!(
            (0..500).any(|_| {
                std::thread::sleep(Duration::from_millis(10));
                done.load(Ordering::Relaxed) >= 30_000
            }),
            "three passes of 10,000 bytes were not counted"
        );
    }
}
