//! `perfpilot drive`'s outputs that other tools read: the HdrHistogram interval log and
//! Prometheus remote write, fed live one second at a time, and the series CSV at the end.

use std::path::PathBuf;
use std::sync::mpsc::Sender;
use std::thread::JoinHandle;

use anyhow::{Context, Result};
use perfpilot_drive::remote_write::{PushReport, push_live};
use perfpilot_drive::{Interval, Measurement, series_csv, write_hlog};

/// Where the live seconds go.
#[derive(Debug, Default, Clone)]
pub struct LiveArgs {
    /// HdrHistogram interval log file.
    pub hlog: Option<PathBuf>,
    /// Prometheus remote-write URL.
    pub remote_write: Option<String>,
    /// Labels for every remote-written series.
    pub labels: Vec<(String, String)>,
}

/// The running consumers; [`LiveOutputs::finish`] waits for them once the senders are dropped.
pub struct LiveOutputs {
    hlog: Option<(PathBuf, JoinHandle<Result<u64>>)>,
    remote: Option<(String, JoinHandle<PushReport>)>,
}

/// Parses `NAME=VALUE` labels, refusing names Prometheus would not take.
pub fn parse_labels(items: &[String]) -> Result<Vec<(String, String)>> {
    items
        .iter()
        .map(|item| {
            let (k, v) = item.split_once('=').with_context(|| {
                format!("--remote-write-label {item:?} must look like NAME=VALUE")
            })?;
            let ok = !k.is_empty()
                && !k.starts_with("__")
                && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !k.starts_with(|c: char| c.is_ascii_digit());
            anyhow::ensure!(
                ok,
                "--remote-write-label {item:?}: {k:?} is not a Prometheus label name \
                 ([a-zA-Z_][a-zA-Z0-9_]*, not starting with __)"
            );
            Ok((k.to_string(), v.to_string()))
        })
        .collect()
}

impl LiveOutputs {
    /// Starts the consumers `args` asks for; returns them and the senders to give the run.
    pub fn start(args: &LiveArgs) -> Result<(LiveOutputs, Vec<Sender<Interval>>)> {
        let mut senders = Vec::new();
        let hlog = match &args.hlog {
            Some(path) => {
                let mut file = std::io::BufWriter::new(
                    std::fs::File::create(path)
                        .with_context(|| format!("cannot create {}", path.display()))?,
                );
                let (tx, rx) = std::sync::mpsc::channel::<Interval>();
                senders.push(tx);
                let shown = path.display().to_string();
                let h = std::thread::spawn(move || {
                    // Untagged: the log is this run's (a coordinator's: the merged seconds).
                    let n = write_hlog(&mut file, rx.iter().map(|i| (i, None)))
                        .with_context(|| format!("cannot write {shown}"))?;
                    std::io::Write::flush(&mut file)
                        .with_context(|| format!("cannot write {shown}"))?;
                    Ok(n)
                });
                Some((path.clone(), h))
            }
            None => None,
        };
        let remote = match &args.remote_write {
            Some(url) => {
                let (tx, rx) = std::sync::mpsc::channel::<Interval>();
                senders.push(tx);
                let (url2, labels) = (url.clone(), args.labels.clone());
                let h = std::thread::spawn(move || {
                    push_live(&url2, &labels, &rx, &|w| eprintln!("warning: {w}"))
                });
                Some((url.clone(), h))
            }
            None => None,
        };
        Ok((LiveOutputs { hlog, remote }, senders))
    }

    /// Waits for the consumers (every sender must be dropped first) and says what they did.
    pub fn finish(self, quiet: bool) -> Result<()> {
        if let Some((path, h)) = self.hlog {
            let n = h
                .join()
                .map_err(|_| anyhow::anyhow!("the interval log writer panicked"))??;
            if !quiet {
                eprintln!("hlog: {n} one-second histograms in {}", path.display());
            }
        }
        if let Some((url, h)) = self.remote {
            let r = h
                .join()
                .map_err(|_| anyhow::anyhow!("the remote writer panicked"))?;
            if r.undelivered > 0 {
                eprintln!(
                    "warning: remote write to {url}: {} of {} seconds not delivered ({}); the \
                     local results above are complete",
                    r.undelivered,
                    r.undelivered + r.delivered,
                    r.first_error.as_deref().unwrap_or("no answer")
                );
            } else if !quiet {
                eprintln!("remote write: {} seconds delivered to {url}", r.delivered);
            }
        }
        Ok(())
    }
}

/// Writes the series CSV of `m` to `path`.
pub fn write_csv(path: &PathBuf, m: &Measurement) -> Result<()> {
    let text = series_csv(m)?;
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}
