//! The jobs a session runs, each on the session's thread, reading and writing the session's
//! own files under the batch directory.

pub mod fit;
pub mod generate;
pub mod lookup;
pub mod sort_agg;

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::Error;
use crate::batch::BatchConfig;
use crate::data::ROW_BYTES;

/// One kind of job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobKind {
    /// Writes the session's table.
    Gen,
    /// Scan, filter, external sort, merge, aggregate, write.
    SortAgg,
    /// Logistic regression by Newton's method.
    Fit,
    /// Random single-row reads, each checked.
    Lookup,
}

impl JobKind {
    /// Every kind, in the default order of a session.
    pub const ALL: [JobKind; 4] = [
        JobKind::Gen,
        JobKind::SortAgg,
        JobKind::Fit,
        JobKind::Lookup,
    ];

    /// The job's name in logs and flags.
    pub fn name(self) -> &'static str {
        match self {
            JobKind::Gen => "gen",
            JobKind::SortAgg => "sort-agg",
            JobKind::Fit => "fit",
            JobKind::Lookup => "lookup",
        }
    }

    /// The kind named `s`.
    pub fn parse(s: &str) -> Result<JobKind, String> {
        JobKind::ALL
            .into_iter()
            .find(|k| k.name() == s.trim())
            .ok_or_else(|| {
                format!(
                    "unknown job {s:?}: expected gen, sort-agg, fit or lookup (comma-separated)"
                )
            })
    }
}

/// The files of one session.
#[derive(Debug, Clone)]
pub struct SessionFiles {
    /// The session's table.
    pub input: PathBuf,
    /// Where its sort runs go (deleted after the merge).
    pub work: PathBuf,
    /// Where its outputs go.
    pub out: PathBuf,
}

impl SessionFiles {
    /// The files of session `s` under `dir`: `data/`, `work/`, `out/`.
    pub fn new(dir: &Path, s: u32) -> SessionFiles {
        SessionFiles {
            input: dir.join("data").join(format!("session{s:02}.dat")),
            work: dir.join("work").join(format!("session{s:02}")),
            out: dir.join("out").join(format!("session{s:02}")),
        }
    }
}

/// Runs job `kind` of session `s`, step `seq`; the result is a figure that runs can be
/// checked by.
pub fn run(kind: JobKind, cfg: &BatchConfig, s: u32, seq: u32) -> Result<String, Error> {
    let files = SessionFiles::new(&cfg.dir, s);
    match kind {
        JobKind::Gen => generate::run(cfg, s, &files),
        JobKind::SortAgg => sort_agg::run(cfg, &files),
        JobKind::Fit => fit::run(cfg, &files),
        JobKind::Lookup => lookup::run(cfg, s, seq, &files),
    }
}

/// Opens the session's table for reading, checks it holds the configured rows (a table
/// from another size or a missing `gen` is an error saying so) and, for cold reads, writes
/// back and drops its cached pages so the reads reach the device.
pub(crate) fn open_input(cfg: &BatchConfig, files: &SessionFiles) -> Result<File, Error> {
    let f = File::open(&files.input).map_err(|e| Error::io("open", &files.input, e))?;
    let len = f
        .metadata()
        .map_err(|e| Error::io("stat", &files.input, e))?
        .len();
    let want = cfg.rows() * ROW_BYTES as u64;
    if len != want {
        return Err(Error::Check(format!(
            "{} holds {len} bytes, expected {want} ({} rows of {ROW_BYTES} bytes): run the gen job with the same --size-mib first",
            files.input.display(),
            cfg.rows()
        )));
    }
    if cfg.cold {
        drop_cached(&f, &files.input)?;
    }
    Ok(f)
}

/// Writes the file's dirty pages back and asks the kernel to drop its cached pages (only
/// this file's: `posix_fadvise(DONTNEED)`).
pub(crate) fn drop_cached(f: &File, path: &Path) -> Result<(), Error> {
    perfpilot_sys::pagecache::drop_cached(f, path)
        .map_err(|e| Error::io("drop the cached pages of", path, std::io::Error::other(e)))
}
