//! Recorded [`Sample`]s: append, read back in time order, and retention.
//!
//! One row per sample: the indexed wall-clock `time_ms`, the boot time `btime` (a change means
//! the counters restarted), and the sample as serde_json compressed with zstd in a BLOB. A row
//! whose BLOB does not decode is skipped and reported in [`SampleRange::corrupt`], never fatal:
//! one bad row must not make a day of recording unreadable.

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use perfpilot_observe::sample::Sample;
use rusqlite::types::ValueRef;
use rusqlite::{Row, params};

use crate::{Error, Result, Store};

/// zstd level of the sample BLOBs: fast, and most of the gain of higher levels.
const ZSTD_LEVEL: i32 = 3;

/// `samples.encoding`: the BLOB is zstd-compressed serde_json.
const ENCODING_ZSTD_JSON: i64 = 1;

/// Retention is checked exactly at least every this many appends (between checks, an estimate
/// of the size and the age of the oldest sample trigger it when a limit is crossed).
const CHECK_EVERY: u32 = 100;

/// Rows read per query while iterating (a sample of a big machine decodes to megabytes).
const BATCH: i64 = 8;

/// Rows looked at, going back in time, to find a decodable sample before a range.
const BEFORE_TRIES: i64 = 4;

/// Uncompressed samples larger than this are treated as corrupt (a bad `raw_len` must not
/// make us allocate without bound).
const MAX_RAW_LEN: usize = 1 << 30;

/// How much recorded data to keep. Enforced after appends: first samples older than `max_age`
/// (measured back from the newest sample) are deleted, then the oldest samples until the live
/// data ([`Store::size_bytes`]) is under `max_bytes`. The newest sample is always kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Keep samples at most this old; `None`: no age limit.
    pub max_age: Option<Duration>,
    /// Keep at most this many bytes of live data; `None`: no size limit.
    pub max_bytes: Option<u64>,
}

impl Default for Retention {
    /// 7 days, 1 GiB.
    fn default() -> Self {
        Retention {
            max_age: Some(Duration::from_secs(7 * 24 * 3600)),
            max_bytes: Some(1 << 30),
        }
    }
}

impl Retention {
    /// Keep everything.
    pub fn unlimited() -> Self {
        Retention {
            max_age: None,
            max_bytes: None,
        }
    }
}

/// What [`Store::enforce_retention`] removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetentionOutcome {
    /// Samples deleted for being older than `max_age`.
    pub deleted_for_age: u64,
    /// Samples deleted to get under `max_bytes`.
    pub deleted_for_size: u64,
}

/// A stored row that could not be decoded into a sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CorruptRow {
    /// `samples.id`.
    pub id: i64,
    /// `samples.time_ms`: when the sample was taken.
    pub time_ms: i64,
    /// Why it could not be decoded.
    pub reason: String,
}

impl fmt::Display for CorruptRow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "sample row {} (time {} ms) is corrupt and was skipped: {}",
            self.id, self.time_ms, self.reason
        )
    }
}

/// The samples of a time range, decoded.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SampleRange {
    /// The last decodable sample before the range's start (none when the range has no start or
    /// nothing precedes it): the base for the first rate of the range.
    pub before: Option<Sample>,
    /// The samples in the range, in time order.
    pub samples: Vec<Sample>,
    /// Rows in the range that did not decode and were skipped.
    pub corrupt: Vec<CorruptRow>,
}

impl SampleRange {
    /// The number of rows skipped as corrupt.
    pub fn skipped_corrupt(&self) -> usize {
        self.corrupt.len()
    }
}

/// Bookkeeping that lets appends check retention without querying the database every time.
#[derive(Debug, Clone, Default)]
pub(crate) struct RetentionState {
    /// Time of the oldest stored sample.
    oldest_ms: Option<i64>,
    /// Live bytes at the last exact check plus the BLOB bytes appended since.
    estimated_bytes: u64,
    appends_since_check: u32,
    force: bool,
}

impl RetentionState {
    pub(crate) fn load(store: &Store) -> Result<Self> {
        Ok(RetentionState {
            oldest_ms: store.time_span()?.map(|(first, _)| first),
            estimated_bytes: store.size_bytes()?,
            appends_since_check: 0,
            // Check on the first append: the limits may have changed since the last run.
            force: true,
        })
    }

    pub(crate) fn force_check(&mut self) {
        self.force = true;
    }
}

fn duration_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Serializes and compresses a sample: `(uncompressed length, BLOB)`.
pub fn encode(sample: &Sample) -> Result<(usize, Vec<u8>), String> {
    let json = serde_json::to_vec(sample).map_err(|e| format!("cannot serialize: {e}"))?;
    let blob =
        zstd::bulk::compress(&json, ZSTD_LEVEL).map_err(|e| format!("cannot compress: {e}"))?;
    Ok((json.len(), blob))
}

/// The inverse of [`encode`].
pub fn decode(encoding: i64, raw_len: i64, blob: &[u8]) -> Result<Sample, String> {
    if encoding != ENCODING_ZSTD_JSON {
        return Err(format!("unknown encoding {encoding}"));
    }
    let cap = usize::try_from(raw_len)
        .ok()
        .filter(|&n| n <= MAX_RAW_LEN)
        .ok_or_else(|| format!("implausible uncompressed length {raw_len}"))?;
    let json = zstd::bulk::decompress(blob, cap).map_err(|e| format!("cannot decompress: {e}"))?;
    if json.len() != cap {
        return Err(format!(
            "decompressed to {} bytes, expected {cap}",
            json.len()
        ));
    }
    serde_json::from_slice(&json).map_err(|e| format!("cannot deserialize: {e}"))
}

/// Decodes a row `(id, time_ms, encoding, raw_len, data)`; the outer error is a SQLite error,
/// the inner one a corrupt row.
fn decode_row(row: &Row<'_>) -> rusqlite::Result<Result<Sample, CorruptRow>> {
    let id: i64 = row.get(0)?;
    let time_ms: i64 = row.get(1)?;
    let corrupt = |reason: String| CorruptRow {
        id,
        time_ms,
        reason,
    };
    let int = |i: usize| -> rusqlite::Result<Option<i64>> {
        Ok(match row.get_ref(i)? {
            ValueRef::Integer(v) => Some(v),
            _ => None,
        })
    };
    let (Some(encoding), Some(raw_len)) = (int(2)?, int(3)?) else {
        return Ok(Err(corrupt("encoding or raw_len is not an integer".into())));
    };
    let ValueRef::Blob(blob) = row.get_ref(4)? else {
        return Ok(Err(corrupt("data is not a BLOB".into())));
    };
    Ok(decode(encoding, raw_len, blob).map_err(corrupt))
}

const COLUMNS: &str = "id, time_ms, encoding, raw_len, data";

impl Store {
    /// Appends one sample and returns its row id, then enforces [`Retention`] when a limit may
    /// have been crossed. The row is written by one statement, hence in one transaction.
    pub fn append(&mut self, sample: &Sample) -> Result<i64> {
        let (raw_len, blob) = encode(sample).map_err(|reason| Error::Encode {
            path: self.path.clone(),
            time_ms: sample.time_ms,
            reason,
        })?;
        let btime = i64::try_from(sample.kernel.btime).unwrap_or(i64::MAX);
        let raw_len = i64::try_from(raw_len).unwrap_or(i64::MAX);
        self.conn
            .prepare_cached(
                "INSERT INTO samples (time_ms, btime, encoding, raw_len, data)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )
            .and_then(|mut st| {
                st.execute(params![
                    sample.time_ms,
                    btime,
                    ENCODING_ZSTD_JSON,
                    raw_len,
                    blob
                ])
            })
            .map_err(|e| {
                self.sql(
                    format!("appending the sample taken at {} ms", sample.time_ms),
                    e,
                )
            })?;
        let id = self.conn.last_insert_rowid();

        let st = &mut self.retention_state;
        st.appends_since_check += 1;
        st.estimated_bytes = st.estimated_bytes.saturating_add(blob.len() as u64);
        let oldest = *st.oldest_ms.get_or_insert(sample.time_ms);
        st.oldest_ms = Some(oldest.min(sample.time_ms));
        let r = self.retention;
        let age_due = r
            .max_age
            .is_some_and(|a| oldest < sample.time_ms.saturating_sub(duration_ms(a)));
        let size_due = r.max_bytes.is_some_and(|m| st.estimated_bytes > m);
        if age_due || size_due || st.force || st.appends_since_check >= CHECK_EVERY {
            self.enforce_retention_at(sample.time_ms)?;
        }
        Ok(id)
    }

    /// Enforces [`Retention`] now, measuring age back from the newest stored sample.
    pub fn enforce_retention(&mut self) -> Result<RetentionOutcome> {
        match self.time_span()? {
            Some((_, newest)) => self.enforce_retention_at(newest),
            None => Ok(RetentionOutcome::default()),
        }
    }

    fn enforce_retention_at(&mut self, now_ms: i64) -> Result<RetentionOutcome> {
        let mut out = RetentionOutcome::default();
        let r = self.retention;
        if let Some(age) = r.max_age {
            let cutoff = now_ms.saturating_sub(duration_ms(age));
            let n = self
                .conn
                .execute(
                    "DELETE FROM samples WHERE time_ms < ?1
                     AND id <> (SELECT max(id) FROM samples)",
                    [cutoff],
                )
                .map_err(|e| self.sql(format!("deleting samples older than {cutoff} ms"), e))?;
            out.deleted_for_age = n as u64;
        }
        if let Some(max) = r.max_bytes {
            // Delete down to a low-water mark so the next appends do not each delete a row.
            let target = max - max / 20;
            loop {
                let live = self.size_bytes()?;
                let count = self.count()?;
                if live <= max || count <= 1 {
                    break;
                }
                let per_row = (live / count).max(1);
                let n = (live.saturating_sub(target))
                    .div_ceil(per_row)
                    .clamp(1, count - 1);
                let n = i64::try_from(n).unwrap_or(i64::MAX);
                let deleted = self
                    .conn
                    .execute(
                        "DELETE FROM samples WHERE id IN
                         (SELECT id FROM samples ORDER BY time_ms, id LIMIT ?1)",
                        [n],
                    )
                    .map_err(|e| self.sql(format!("deleting the {n} oldest samples"), e))?;
                out.deleted_for_size += deleted as u64;
                if deleted == 0 {
                    break;
                }
            }
        }
        if out.deleted_for_age + out.deleted_for_size > 0 {
            self.shrink()?;
        }
        let st = RetentionState::load(self)?;
        self.retention_state = RetentionState { force: false, ..st };
        Ok(out)
    }

    /// Returns the free pages to the file system: incremental vacuum, then a checkpoint so the
    /// database file itself is truncated.
    fn shrink(&self) -> Result<()> {
        let run = |sql: &str| -> rusqlite::Result<()> {
            // Step to the end: incremental_vacuum frees pages as it is stepped.
            let mut st = self.conn.prepare(sql)?;
            let mut rows = st.query([])?;
            while rows.next()?.is_some() {}
            Ok(())
        };
        run("PRAGMA incremental_vacuum").map_err(|e| self.sql("incremental vacuum", e))?;
        run("PRAGMA wal_checkpoint(PASSIVE)").map_err(|e| self.sql("WAL checkpoint", e))?;
        Ok(())
    }

    /// The number of stored samples.
    pub fn count(&self) -> Result<u64> {
        self.conn
            .query_row("SELECT count(*) FROM samples", [], |r| r.get::<_, i64>(0))
            .map(|n| n.max(0) as u64)
            .map_err(|e| self.sql("counting samples", e))
    }

    /// The times of the oldest and the newest stored samples (ms since the epoch), `None` when
    /// the store holds no sample.
    pub fn time_span(&self) -> Result<Option<(i64, i64)>> {
        self.conn
            .query_row("SELECT min(time_ms), max(time_ms) FROM samples", [], |r| {
                Ok(r.get::<_, Option<i64>>(0)?.zip(r.get::<_, Option<i64>>(1)?))
            })
            .map_err(|e| self.sql("reading the time span of the samples", e))
    }

    /// The samples with `from_ms <= time_ms <= to_ms` (either bound optional), decoded, in
    /// time order, with the sample just before `from_ms`. Collects the whole range; use
    /// [`Store::iter_samples`] to stream a long one.
    pub fn samples(&self, from_ms: Option<i64>, to_ms: Option<i64>) -> Result<SampleRange> {
        let mut it = self.iter_samples(from_ms, to_ms)?;
        let mut samples = Vec::new();
        for s in it.by_ref() {
            samples.push(s?);
        }
        Ok(SampleRange {
            before: it.take_before(),
            samples,
            corrupt: it.corrupt,
        })
    }

    /// Streams the samples of a range, like [`Store::samples`], reading a few rows at a time.
    pub fn iter_samples(&self, from_ms: Option<i64>, to_ms: Option<i64>) -> Result<SampleIter<'_>> {
        let before = match from_ms {
            Some(from) => self.sample_before(from)?,
            None => None,
        };
        Ok(SampleIter {
            store: self,
            from_ms: from_ms.unwrap_or(i64::MIN),
            to_ms: to_ms.unwrap_or(i64::MAX),
            cursor: None,
            buffer: VecDeque::new(),
            done: false,
            before,
            corrupt: Vec::new(),
        })
    }

    /// The last decodable sample strictly before `from_ms`.
    fn sample_before(&self, from_ms: i64) -> Result<Option<Sample>> {
        let what = || format!("reading the sample before {from_ms} ms");
        let mut st = self
            .conn
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM samples WHERE time_ms < ?1
                 ORDER BY time_ms DESC, id DESC LIMIT ?2"
            ))
            .map_err(|e| self.sql(what(), e))?;
        let mut rows = st
            .query(params![from_ms, BEFORE_TRIES])
            .map_err(|e| self.sql(what(), e))?;
        while let Some(row) = rows.next().map_err(|e| self.sql(what(), e))? {
            if let Ok(s) = decode_row(row).map_err(|e| self.sql(what(), e))? {
                return Ok(Some(s));
            }
        }
        Ok(None)
    }
}

/// Streams decoded samples in time order; see [`Store::iter_samples`]. Corrupt rows are
/// skipped and collected in [`SampleIter::corrupt`].
pub struct SampleIter<'a> {
    store: &'a Store,
    from_ms: i64,
    to_ms: i64,
    /// `(time_ms, id)` of the last row read.
    cursor: Option<(i64, i64)>,
    buffer: VecDeque<Sample>,
    done: bool,
    before: Option<Sample>,
    corrupt: Vec<CorruptRow>,
}

impl SampleIter<'_> {
    /// The last decodable sample before the range's start; see [`SampleRange::before`].
    pub fn before(&self) -> Option<&Sample> {
        self.before.as_ref()
    }

    /// Takes [`SampleIter::before`] out.
    pub fn take_before(&mut self) -> Option<Sample> {
        self.before.take()
    }

    /// The rows skipped so far because they did not decode.
    pub fn corrupt(&self) -> &[CorruptRow] {
        &self.corrupt
    }

    fn fill(&mut self) -> Result<()> {
        let store = self.store;
        let (after_t, after_id) = self.cursor.unwrap_or((self.from_ms, i64::MIN));
        let what = || format!("reading samples after {after_t} ms (row {after_id})");
        let mut st = store
            .conn
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM samples
                 WHERE time_ms >= ?1 AND (time_ms > ?1 OR id > ?2) AND time_ms <= ?3
                 ORDER BY time_ms, id LIMIT ?4"
            ))
            .map_err(|e| store.sql(what(), e))?;
        let mut rows = st
            .query(params![after_t, after_id, self.to_ms, BATCH])
            .map_err(|e| store.sql(what(), e))?;
        let mut n = 0;
        while let Some(row) = rows.next().map_err(|e| store.sql(what(), e))? {
            n += 1;
            let key = (row.get(1), row.get(0));
            let (Ok(t), Ok(id)) = key else {
                // Both are NOT NULL INTEGER columns; only a damaged file gets here.
                return Err(store.sql(what(), rusqlite::Error::InvalidQuery));
            };
            self.cursor = Some((t, id));
            match decode_row(row).map_err(|e| store.sql(what(), e))? {
                Ok(s) => self.buffer.push_back(s),
                Err(c) => self.corrupt.push(c),
            }
        }
        if n < BATCH {
            self.done = true;
        }
        Ok(())
    }
}

impl Iterator for SampleIter<'_> {
    type Item = Result<Sample>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(s) = self.buffer.pop_front() {
                return Some(Ok(s));
            }
            if self.done {
                return None;
            }
            if let Err(e) = self.fill() {
                self.done = true;
                return Some(Err(e));
            }
        }
    }
}
