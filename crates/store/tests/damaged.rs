//! Damaged stores: a truncated file, pages overwritten with garbage, another program's SQLite
//! database, a store of a newer schema, and a full disk give clear errors naming the file, never
//! a panic; and the journal's open entries survive a corrupted sample table.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use perfpilot_store::journal::ActionState;
use perfpilot_store::{Error, Retention, Store};

const T0: i64 = 1_763_800_000_000;

fn sample(i: u64) -> perfpilot_observe::sample::Sample {
    common::synthetic(i, 40, 6, T0 + i as i64 * 1_000)
}

/// A store with an open journal entry (a trial) written first, then `n` samples.
fn store_with_journal(path: &Path, n: u64) -> i64 {
    let mut store = Store::open(path).unwrap();
    store.set_retention(Retention::unlimited());
    let id = store
        .journal_begin(
            "sig",
            "load (pid 1)",
            "cache_affinity",
            "{\"members\":[]}",
            "[]",
            "test",
        )
        .unwrap();
    store
        .journal_set_state(id, ActionState::Trial, "measuring")
        .unwrap();
    for i in 0..n {
        store.append(&sample(i)).unwrap();
    }
    id
}

fn page_size(path: &Path) -> u64 {
    let head = std::fs::read(path).unwrap();
    let n = u16::from_be_bytes([head[16], head[17]]);
    if n == 1 { 65_536 } else { u64::from(n) }
}

/// Every error the store gives names its file and says what to do or what went wrong.
fn assert_names(e: &Error, path: &Path) {
    let msg = e.to_string();
    assert!(msg.contains(&path.display().to_string()), "{msg}");
}

#[test]
fn a_truncated_store_is_an_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("perfpilot.db");
    store_with_journal(&path, 30);
    let len = std::fs::metadata(&path).unwrap().len();
    assert!(len > 8 * page_size(&path), "{len}");
    // Cut at a page boundary and mid-page: every read either works or is an error.
    for cut in [len / 2, len / 3 + 123, 100] {
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(cut).unwrap();
        drop(f);
        match Store::open(&path) {
            Err(e) => assert_names(&e, &path),
            Ok(store) => {
                let errors = [
                    store.samples(None, None).err(),
                    store.actions(false, 10).err(),
                    store.count().err(),
                ];
                for e in errors.iter().flatten() {
                    assert_names(e, &path);
                }
                assert!(
                    errors.iter().any(Option::is_some),
                    "a store cut to {cut} of {len} bytes read as whole"
                );
            }
        }
    }
}

#[test]
fn pages_overwritten_with_garbage_give_errors_not_panics() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("perfpilot.db");
    store_with_journal(&path, 30);
    let page = page_size(&path);
    let mut bytes = std::fs::read(&path).unwrap();
    let pages = bytes.len() as u64 / page;
    let mut rng = common::Rng::new(7);
    let mut errors = 0;
    // Each round overwrites a run of bytes in one page (never page 1's header: that is the
    // "not a database" case, tested with the samples).
    for round in 0..12 {
        let p = 1 + rng.below(pages - 1);
        let at = (p * page + rng.below(page - 64)) as usize;
        for b in &mut bytes[at..at + 64] {
            *b = rng.next() as u8;
        }
        std::fs::write(&path, &bytes).unwrap();
        match Store::open(&path) {
            Err(e) => {
                assert_names(&e, &path);
                errors += 1;
            }
            Ok(store) => {
                // Reading everything gives rows, corrupt rows counted, or an error.
                match store.samples(None, None) {
                    Ok(r) => assert!(r.samples.len() + r.skipped_corrupt() <= 30, "{round}"),
                    Err(e) => {
                        assert_names(&e, &path);
                        errors += 1;
                    }
                }
                if let Err(e) = store.actions(false, 10) {
                    assert_names(&e, &path);
                    errors += 1;
                }
            }
        }
    }
    println!("12 rounds of garbage, {errors} errors, no panic");
}

#[test]
fn another_programs_database_is_refused_and_left_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch("CREATE TABLE accounts (id INTEGER PRIMARY KEY, owner TEXT); INSERT INTO accounts (owner) VALUES ('x');")
            .unwrap();
    }
    let before = std::fs::read(&path).unwrap();
    let e = Store::open(&path).unwrap_err();
    assert_names(&e, &path);
    let msg = e.to_string();
    assert!(
        msg.contains("another program") && msg.contains("accounts"),
        "{msg}"
    );
    assert!(e.is_nothing_there(), "{e:?}");
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "the file was written"
    );
    let e = Store::open_existing(&path).unwrap_err();
    assert!(e.is_nothing_there(), "{e:?}");
}

#[test]
fn a_store_of_a_newer_schema_is_refused_by_every_opener() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("perfpilot.db");
    store_with_journal(&path, 1);
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.pragma_update(None, "user_version", 99).unwrap();
    }
    for e in [
        Store::open(&path).unwrap_err(),
        Store::open_existing(&path).unwrap_err(),
    ] {
        assert!(matches!(e, Error::NewerSchema { found: 99, .. }), "{e:?}");
        assert!(e.to_string().contains("upgrade perfpilot"), "{e}");
        assert_names(&e, &path);
    }
    // The version is read as it is, without opening (or upgrading) the store.
    assert_eq!(Store::schema_version_at(&path).unwrap(), 99);
    let gone = Store::schema_version_at(dir.path().join("missing.db")).unwrap_err();
    assert!(matches!(gone, Error::Missing { .. }), "{gone:?}");
}

/// The pages of the samples table and its index: everything after the last page written before
/// the first sample.
fn sample_pages(path: &Path, journal_only: &Path) -> (u64, u64) {
    let page = page_size(path);
    let first = std::fs::metadata(journal_only).unwrap().len() / page;
    let last = std::fs::metadata(path).unwrap().len() / page;
    (first, last)
}

#[test]
fn the_journal_survives_a_corrupted_sample_table() {
    let dir = tempfile::tempdir().unwrap();
    // The same store without samples: where the sample pages begin.
    let bare = dir.path().join("bare.db");
    store_with_journal(&bare, 0);
    let path = dir.path().join("perfpilot.db");
    let id = store_with_journal(&path, 40);
    let (first, last) = sample_pages(&path, &bare);
    assert!(last > first + 4, "{first}..{last}");
    let page = page_size(&path) as usize;
    let mut bytes = std::fs::read(&path).unwrap();
    for p in first as usize..last as usize {
        for (k, b) in bytes[p * page..(p + 1) * page].iter_mut().enumerate() {
            *b = (k * 31 + p) as u8;
        }
    }
    std::fs::write(&path, &bytes).unwrap();

    let mut store = Store::open(&path).expect("a store whose samples are corrupt still opens");
    let open = store.actions(true, 10).unwrap();
    assert_eq!(open.len(), 1, "{open:?}");
    assert_eq!(open[0].id, id);
    assert_eq!(open[0].state, ActionState::Trial);
    // Closing the entry (what `revert` does) still works.
    store
        .journal_set_state(id, ActionState::Reverted, "reverted")
        .unwrap();
    assert!(store.actions(true, 10).unwrap().is_empty());
    // The samples are an error naming the file, or corrupt rows counted.
    match store.samples(None, None) {
        Err(e) => assert_names(&e, &path),
        Ok(r) => assert!(r.skipped_corrupt() > 0 || r.samples.len() < 40),
    }
}

const FULL_CHILD: &str = "PERFPILOT_STORE_FULL_CHILD";

/// Runs in a private mount namespace (see the test below): a 2 MiB tmpfs, filled.
#[test]
fn full_disk_child() {
    let Some(dir) = std::env::var_os(FULL_CHILD) else {
        return;
    };
    let dir = PathBuf::from(dir);
    let st = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=2m", "perfpilot-full"])
        .arg(&dir)
        .status()
        .unwrap();
    assert!(st.success(), "child: mount");
    let path = dir.join("perfpilot.db");
    let id = store_with_journal(&path, 0);
    let mut store = Store::open(&path).unwrap();
    store.set_retention(Retention::unlimited());
    let mut err = None;
    for i in 0..10_000 {
        if let Err(e) = store.append(&sample(i)) {
            err = Some(e);
            break;
        }
    }
    let e = err.expect("a 2 MiB file system never filled");
    assert_names(&e, &path);
    let msg = e.to_string();
    assert!(msg.contains("full"), "{msg}");
    // The journal's open entry is still there, in this connection and in a new one.
    assert_eq!(store.actions(true, 10).unwrap()[0].id, id);
    drop(store);
    match Store::open(&path) {
        Ok(s) => assert_eq!(s.actions(true, 10).unwrap()[0].id, id),
        Err(e) => {
            assert_names(&e, &path);
            panic!("a full disk makes the store unopenable: {e}");
        }
    }
    println!("full disk: {msg}");
}

#[test]
fn a_full_disk_is_an_error_naming_the_store_and_the_journal_stays_readable() {
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    // A private mount namespace: the tmpfs vanishes with the child, whatever happens.
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private"])
        .arg(&exe)
        .args([
            "full_disk_child",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(FULL_CHILD, dir.path())
        .output();
    let out = match out {
        Ok(o) => o,
        Err(e) => {
            eprintln!("unsupported here: cannot run unshare ({e})");
            return;
        }
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() && stderr.contains("unshare failed") {
        eprintln!("unsupported here: no private mount namespace ({stderr})");
        return;
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    // libtest prints "test full_disk_child ... " before the child's own line, on the same line.
    let line = stdout
        .lines()
        .find_map(|l| l.find("full disk:").map(|i| &l[i..]));
    assert!(line.is_some(), "{stdout}");
    println!("{}", line.unwrap_or_default());
}
