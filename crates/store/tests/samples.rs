//! The samples part of the store: append, read, retention, corrupt rows, open errors.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{bulky, synthetic};
use perfpilot_observe::sample::Sample;
use perfpilot_store::{Error, Retention, Store};

const T0: i64 = 1_763_800_000_000;

fn db(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("state/perfpilot/perfpilot.db")
}

fn small(i: u64, time_ms: i64) -> Sample {
    synthetic(i, 5, 2, time_ms)
}

fn fill(store: &mut Store, n: u64, step_ms: i64) -> Vec<Sample> {
    (0..n)
        .map(|i| {
            let s = small(i, T0 + i as i64 * step_ms);
            store.append(&s).expect("append");
            s
        })
        .collect()
}

fn raw(path: &Path) -> rusqlite::Connection {
    rusqlite::Connection::open(path).expect("raw connection")
}

#[test]
fn open_creates_parents_wal_and_incremental_vacuum() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    let store = Store::open(&path).unwrap();
    assert!(path.is_file());
    assert_eq!(store.path(), path);
    assert_eq!(store.count().unwrap(), 0);
    assert_eq!(store.time_span().unwrap(), None);
    assert!(store.size_bytes().unwrap() > 0);
    let c = raw(&path);
    let mode: String = c
        .pragma_query_value(None, "journal_mode", |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    let av: i64 = c
        .pragma_query_value(None, "auto_vacuum", |r| r.get(0))
        .unwrap();
    assert_eq!(av, 2, "auto_vacuum must be INCREMENTAL");
    let v: i64 = c
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(v, perfpilot_store::schema::SCHEMA_VERSION);
    drop(store);
    // Reopening an existing store neither fails nor migrates again.
    let store = Store::open(&path).unwrap();
    assert_eq!(store.count().unwrap(), 0);
}

#[test]
fn append_and_read_back_in_time_order() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(db(&dir)).unwrap();
    let mut written = fill(&mut store, 20, 5_000);
    // A sample appended late with an earlier time is read back in its time place.
    let late = small(99, T0 + 2_500);
    let id = store.append(&late).unwrap();
    assert_eq!(id, 21);
    written.insert(1, late);
    let r = store.samples(None, None).unwrap();
    assert_eq!(r.before, None);
    assert_eq!(r.skipped_corrupt(), 0);
    assert_eq!(r.samples, written);
    assert_eq!(store.count().unwrap(), 21);
    assert_eq!(store.time_span().unwrap(), Some((T0, T0 + 19 * 5_000)));
}

#[test]
fn range_bounds_are_inclusive_and_before_is_the_previous_sample() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(db(&dir)).unwrap();
    let w = fill(&mut store, 30, 1_000);
    let r = store.samples(Some(T0 + 10_000), Some(T0 + 20_000)).unwrap();
    assert_eq!(r.samples, w[10..=20].to_vec());
    assert_eq!(r.before.as_ref(), Some(&w[9]));
    // A start between samples: the one before is the last one earlier than it.
    let r = store.samples(Some(T0 + 10_500), None).unwrap();
    assert_eq!(r.samples, w[11..].to_vec());
    assert_eq!(r.before.as_ref(), Some(&w[10]));
    // Nothing before the first sample.
    let r = store.samples(Some(T0), Some(T0)).unwrap();
    assert_eq!(r.samples, vec![w[0].clone()]);
    assert_eq!(r.before, None);
    // A range after the last sample: empty, but the last sample is the base.
    let r = store.samples(Some(T0 + 100_000), None).unwrap();
    assert!(r.samples.is_empty());
    assert_eq!(r.before.as_ref(), Some(&w[29]));
    // Only an end.
    let r = store.samples(None, Some(T0 + 4_999)).unwrap();
    assert_eq!(r.samples, w[..5].to_vec());
}

#[test]
fn iterator_streams_the_same_samples_across_batches() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(db(&dir)).unwrap();
    // Several samples with the same time: the (time, id) cursor must not lose or repeat any.
    let mut w = Vec::new();
    for i in 0..37u64 {
        let s = small(i, T0 + (i / 3) as i64 * 1_000);
        store.append(&s).unwrap();
        w.push(s);
    }
    let mut it = store.iter_samples(Some(T0 + 1_000), None).unwrap();
    assert_eq!(it.before(), Some(&w[2]));
    let got: Vec<Sample> = it.by_ref().map(|s| s.unwrap()).collect();
    assert_eq!(got, w[3..].to_vec());
    assert!(it.corrupt().is_empty());
}

#[test]
fn a_second_connection_reads_while_the_first_appends() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    let mut writer = Store::open(&path).unwrap();
    let reader = Store::open(&path).unwrap();
    let w = fill(&mut writer, 3, 1_000);
    assert_eq!(reader.samples(None, None).unwrap().samples, w);
    writer.append(&small(3, T0 + 3_000)).unwrap();
    assert_eq!(reader.count().unwrap(), 4);
}

#[test]
fn corrupt_rows_are_skipped_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    let mut store = Store::open(&path).unwrap();
    let w = fill(&mut store, 6, 1_000);
    let c = raw(&path);
    // The last row: garbage bytes, as a torn write would leave.
    c.execute(
        "UPDATE samples SET data = x'deadbeef00112233' WHERE id = (SELECT max(id) FROM samples)",
        [],
    )
    .unwrap();
    // Row 2: a truncated but otherwise genuine zstd frame.
    c.execute(
        "UPDATE samples SET data = substr(data, 1, length(data) / 2) WHERE id = 2",
        [],
    )
    .unwrap();
    // Row 3: valid zstd of something that is not a sample.
    let junk = zstd::bulk::compress(b"{\"not\":\"a sample\"}", 3).unwrap();
    c.execute(
        "UPDATE samples SET data = ?1, raw_len = 18 WHERE id = 3",
        [junk],
    )
    .unwrap();
    // Row 4: wrong type in the BLOB column.
    c.execute("UPDATE samples SET data = 'text' WHERE id = 4", [])
        .unwrap();
    drop(c);

    let r = store.samples(None, None).unwrap();
    assert_eq!(r.samples, vec![w[0].clone(), w[4].clone()]);
    assert_eq!(r.skipped_corrupt(), 4);
    let ids: Vec<i64> = r.corrupt.iter().map(|c| c.id).collect();
    assert_eq!(ids, vec![2, 3, 4, 6]);
    assert_eq!(r.corrupt[3].time_ms, T0 + 5_000);
    let msg = r.corrupt[3].to_string();
    assert!(msg.contains("row 6") && msg.contains("decompress"), "{msg}");
    assert!(
        r.corrupt[1].reason.contains("deserialize"),
        "{:?}",
        r.corrupt[1]
    );

    // The base before a range skips corrupt rows too.
    let r = store.samples(Some(T0 + 4_500), None).unwrap();
    assert_eq!(r.before.as_ref(), Some(&w[4]));
    assert!(r.samples.is_empty());
    assert_eq!(r.skipped_corrupt(), 1);
    let r = store.samples(Some(T0 + 4_000), None).unwrap();
    assert_eq!(r.before.as_ref(), Some(&w[0]));
}

#[test]
fn retention_deletes_samples_older_than_max_age() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(db(&dir)).unwrap();
    store.set_retention(Retention {
        max_age: Some(Duration::from_secs(7 * 24 * 3600)),
        max_bytes: None,
    });
    let hour = 3_600_000;
    // Ten days of hourly samples.
    for i in 0..240u64 {
        store.append(&small(i, T0 + i as i64 * hour)).unwrap();
    }
    let (first, last) = store.time_span().unwrap().unwrap();
    assert_eq!(last, T0 + 239 * hour);
    assert!(
        last - first <= 7 * 24 * hour,
        "span {} h",
        (last - first) / hour
    );
    // Checked on every append that crosses the limit, so nothing older stays.
    assert_eq!(first, last - 7 * 24 * hour);
    assert_eq!(store.count().unwrap(), 7 * 24 + 1);
    let r = store.samples(None, None).unwrap();
    assert_eq!(r.samples.len(), 7 * 24 + 1);
    assert_eq!(r.samples[0].time_ms, first);
}

#[test]
fn retention_keeps_live_data_under_max_bytes_and_the_file_shrinks() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    let mut store = Store::open(&path).unwrap();
    store.set_retention(Retention::unlimited());
    // ~64 KiB of barely compressible data per sample (~52 KiB stored), 200 samples: ~11 MiB.
    let mut last = None;
    for i in 0..200u64 {
        let s = bulky(i, T0 + i as i64 * 1_000, 64 << 10);
        store.append(&s).unwrap();
        last = Some(s);
    }
    let before_live = store.size_bytes().unwrap();
    let before_file = std::fs::metadata(&path).unwrap().len()
        + std::fs::metadata(path.with_extension("db-wal"))
            .map(|m| m.len())
            .unwrap_or(0);
    assert!(before_live > 8 << 20, "live {before_live}");

    let max = 2u64 << 20;
    store.set_retention(Retention {
        max_age: None,
        max_bytes: Some(max),
    });
    let out = store.enforce_retention().unwrap();
    assert!(out.deleted_for_size > 150, "{out:?}");
    assert_eq!(out.deleted_for_age, 0);
    let live = store.size_bytes().unwrap();
    assert!(live <= max, "live {live} > {max}");
    // The oldest went, the newest stayed, and what is left is contiguous.
    let r = store.samples(None, None).unwrap();
    assert_eq!(r.samples.last(), last.as_ref());
    assert_eq!(r.samples.len() as u64, store.count().unwrap());
    let n = r.samples.len() as i64;
    assert_eq!(r.samples[0].time_ms, T0 + (200 - n) * 1_000);
    // Incremental vacuum + checkpoint: the database file itself got smaller.
    let file = std::fs::metadata(&path).unwrap().len();
    assert!(file <= max + (64 << 10), "file {file} after retention");
    assert!(file < before_file / 4, "file {file}, was {before_file}");

    // Enforced after appends from now on.
    for i in 200..260u64 {
        store
            .append(&bulky(i, T0 + i as i64 * 1_000, 64 << 10))
            .unwrap();
        assert!(store.size_bytes().unwrap() <= max + (80 << 10));
    }
    let live = store.size_bytes().unwrap();
    assert!(live <= max, "live {live} > {max}");
    assert_eq!(
        store.time_span().unwrap().map(|s| s.1),
        Some(T0 + 259 * 1_000)
    );
}

#[test]
fn retention_never_deletes_the_newest_sample() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(db(&dir)).unwrap();
    store.set_retention(Retention {
        max_age: Some(Duration::ZERO),
        max_bytes: Some(1),
    });
    store.append(&small(0, T0)).unwrap();
    let s = small(1, T0 + 1_000);
    store.append(&s).unwrap();
    assert_eq!(store.count().unwrap(), 1);
    assert_eq!(store.samples(None, None).unwrap().samples, vec![s]);
}

#[test]
fn samples_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    let w = {
        let mut store = Store::open(&path).unwrap();
        fill(&mut store, 5, 1_000)
    };
    let mut store = Store::open(&path).unwrap();
    assert_eq!(store.samples(None, None).unwrap().samples, w);
    assert_eq!(store.append(&small(5, T0 + 5_000)).unwrap(), 6);
}

fn open_err(path: &Path) -> String {
    match Store::open(path) {
        Ok(_) => panic!("{} opened", path.display()),
        Err(e) => {
            assert!(
                matches!(e, Error::Open { .. } | Error::NewerSchema { .. }),
                "{e:?}"
            );
            e.to_string()
        }
    }
}

#[test]
fn open_fails_when_a_file_is_where_a_directory_should_be() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("plain");
    std::fs::write(&file, "x").unwrap();
    let path = file.join("sub/perfpilot.db");
    let msg = open_err(&path);
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    assert!(msg.contains("choose another --store path"), "{msg}");
    assert!(msg.contains("cannot create directory"), "{msg}");
}

#[test]
fn open_fails_on_a_directory_or_a_file_that_is_not_a_database() {
    let dir = tempfile::tempdir().unwrap();
    let msg = open_err(dir.path());
    assert!(msg.contains("is a directory"), "{msg}");
    let junk = dir.path().join("junk.db");
    std::fs::write(&junk, vec![b'x'; 8192]).unwrap();
    let msg = open_err(&junk);
    assert!(msg.contains("not a database"), "{msg}");
    assert!(msg.contains("junk.db"), "{msg}");
}

#[test]
fn open_fails_where_nothing_can_be_written() {
    // Not writable even for root: procfs.
    let path = Path::new("/proc/perfpilot-store-test/perfpilot.db");
    let msg = open_err(path);
    assert!(msg.contains("/proc/perfpilot-store-test"), "{msg}");
    assert!(msg.contains("choose another --store path"), "{msg}");

    // A read-only directory (only meaningful when not root: root writes anyway).
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let ro = dir.path().join("ro");
    std::fs::create_dir(&ro).unwrap();
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
    let probe_writable = std::fs::write(ro.join("probe"), "x").is_ok();
    let res = Store::open(ro.join("perfpilot.db"));
    if probe_writable {
        assert!(res.is_ok(), "root can write a 0555 directory");
    } else {
        let msg = res.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            msg.contains("ro/perfpilot.db") && msg.contains("--store"),
            "{msg}"
        );
    }
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn open_refuses_a_newer_schema() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    drop(Store::open(&path).unwrap());
    raw(&path)
        .pragma_update(
            None,
            "user_version",
            perfpilot_store::schema::SCHEMA_VERSION + 1,
        )
        .unwrap();
    let msg = open_err(&path);
    assert!(msg.contains("newer than this perfpilot"), "{msg}");
    assert!(msg.contains("perfpilot.db"), "{msg}");
}

/// The size and the cost of a big sample: 1,000 processes × 10 threads.
/// Run with `--nocapture` to see the figures (debug build: see examples/sample_cost.rs for
/// release figures).
#[test]
fn size_of_a_1000_process_10_thread_sample() {
    let s = synthetic(1, 1_000, 10, T0);
    let json = serde_json::to_vec(&s).unwrap();
    let (raw_len, blob) = perfpilot_store::samples::encode(&s).unwrap();
    assert_eq!(raw_len, json.len());
    assert!(
        blob.len() * 4 < json.len(),
        "compressed {} of {}",
        blob.len(),
        json.len()
    );
    let back = perfpilot_store::samples::decode(1, raw_len as i64, &blob).unwrap();
    assert_eq!(back, s);

    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(db(&dir)).unwrap();
    let t = Instant::now();
    for i in 0..5u64 {
        store
            .append(&synthetic(i, 1_000, 10, T0 + i as i64 * 5_000))
            .unwrap();
    }
    let append = t.elapsed() / 5;
    let t = Instant::now();
    let r = store.samples(None, None).unwrap();
    let read = t.elapsed() / 5;
    assert_eq!(r.samples.len(), 5);
    println!(
        "1000x10 sample: json {} B, zstd-3 {} B ({:.1}x); debug build: append {:?}, read {:?} \
         per sample; store {} B live for 5 samples",
        json.len(),
        blob.len(),
        json.len() as f64 / blob.len() as f64,
        append,
        read,
        store.size_bytes().unwrap()
    );
}
