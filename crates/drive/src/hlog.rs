//! HdrHistogram interval logs (`.hlog`): one histogram per second of the measured window, in
//! the format of HdrHistogram's `HistogramLogWriter`, so its own tools (`HistogramLogReader`,
//! `HistogramLogProcessor`) and the `hdrhistogram` crate's `IntervalLogIterator` read them and
//! percentiles merge over time and across load generators. Values are microseconds.

use std::io::Write;

use hdrhistogram::serialization::V2DeflateSerializer;
use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};

use crate::error::DriveError;
use crate::interval::Interval;

/// The comment at the head of every log: the unit, which HdrHistogram's tools need to be told.
pub const HLOG_UNIT_COMMENT: &str =
    "values are microseconds (HistogramLogProcessor: -outputValueUnitRatio 1000 for ms)";

/// Writes every interval of `intervals` to `out` as it comes (say from a live channel); each
/// with its tag (the worker it came from) when given. Returns the number written.
pub fn write_hlog<W: Write>(
    out: &mut W,
    intervals: impl IntoIterator<Item = (Interval, Option<String>)>,
) -> Result<u64, DriveError> {
    let mut intervals = intervals.into_iter();
    let err = |e: String| DriveError::Decode {
        what: "HdrHistogram interval log".to_string(),
        reason: e,
    };
    let Some(first) = intervals.next() else {
        // No second completed: a log with its header only.
        writeln!(out, "#{HLOG_UNIT_COMMENT}").map_err(|e| err(e.to_string()))?;
        return Ok(0);
    };
    let mut ser = V2DeflateSerializer::new();
    let mut log = IntervalLogWriterBuilder::new()
        .add_comment("written by perfpilot drive")
        .add_comment(HLOG_UNIT_COMMENT)
        .with_start_time(first.0.start() - std::time::Duration::from_secs(first.0.t_s))
        .with_max_value_divisor(1000.0)
        .begin_log_with(out, &mut ser)
        .map_err(|e| err(e.to_string()))?;
    let mut written = 0;
    for (i, tag) in std::iter::once(first).chain(intervals) {
        let tag = tag.as_deref().and_then(Tag::new);
        log.write_histogram(
            i.hist.inner(),
            std::time::Duration::from_secs(i.t_s),
            std::time::Duration::from_secs(1),
            tag,
        )
        .map_err(|e| err(format!("{e:?}")))?;
        written += 1;
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hdrhistogram::serialization::Deserializer;
    use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};

    #[test]
    fn the_log_reads_back_with_hdrhistograms_own_reader_second_by_second() {
        let (tx, rx) = std::sync::mpsc::channel();
        for t in 0..3u64 {
            let mut i = Interval::new(t);
            i.window_start_ms = 1_700_000_000_000;
            for v in 1..=100 {
                i.hist.record_us(v * (t + 1));
            }
            tx.send((i, (t == 2).then(|| "worker-2".to_string())))
                .unwrap();
        }
        drop(tx);
        let mut buf = Vec::new();
        assert_eq!(write_hlog(&mut buf, rx.iter()).unwrap(), 3);
        let mut seen = Vec::new();
        let mut start = None;
        for e in IntervalLogIterator::new(&buf) {
            match e.unwrap() {
                LogEntry::StartTime(t) => start = Some(t.as_secs()),
                LogEntry::Interval(h) => {
                    let bytes = base64::Engine::decode(
                        &base64::engine::general_purpose::STANDARD,
                        h.encoded_histogram(),
                    )
                    .unwrap();
                    let hist: hdrhistogram::Histogram<u64> = Deserializer::new()
                        .deserialize(&mut bytes.as_slice())
                        .unwrap();
                    seen.push((
                        h.start_timestamp().as_secs(),
                        hist.len(),
                        hist.max(),
                        h.tag().map(|t| t.as_str().to_string()),
                    ));
                }
                LogEntry::BaseTime(_) => {}
            }
        }
        assert_eq!(start, Some(1_700_000_000));
        assert_eq!(seen.len(), 3);
        assert_eq!((seen[0].0, seen[0].1), (0, 100));
        assert_eq!(seen[2].0, 2);
        assert!((299..=301).contains(&seen[2].2), "{seen:?}");
        assert_eq!(seen[2].3.as_deref(), Some("worker-2"));
        assert!(String::from_utf8_lossy(&buf).contains("microseconds"));
    }
}
