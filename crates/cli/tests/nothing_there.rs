//! Commands that only read create nothing: without a store (or daemon state) at the path they
//! are given they say "no store at PATH" (or name the state directory) and exit with the one
//! documented status for "nothing there", 66; `tunables --list` lists the defaults instead.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const EXE: &str = env!("CARGO_BIN_EXE_perfpilot");

/// The exit status `perfpilot --help` documents for "nothing there".
const NOTHING_THERE: i32 = 66;

/// A scratch directory, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let p = std::env::temp_dir().join(format!(
            "perfpilot-nothing-there-{tag}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("scratch directory");
        Scratch(p)
    }

    /// The names of the files under the directory, recursively, sorted.
    fn files(&self) -> Vec<String> {
        fn walk(dir: &Path, base: &Path, out: &mut Vec<String>) {
            for e in std::fs::read_dir(dir).expect("readable").flatten() {
                let p = e.path();
                out.push(p.strip_prefix(base).unwrap_or(&p).display().to_string());
                if p.is_dir() {
                    walk(&p, base, out);
                }
            }
        }
        let mut v = Vec::new();
        walk(&self.0, &self.0, &mut v);
        v.sort();
        v
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs perfpilot with a home and state directory inside `dir`, so that no default path
/// outside it is ever used.
fn perfpilot(dir: &Scratch, args: &[&str]) -> Output {
    Command::new(EXE)
        .args(args)
        .env("HOME", dir.0.join("home"))
        .env("XDG_STATE_HOME", dir.0.join("xdg"))
        .env_remove("PERFPILOT_STATE_DIR")
        .env_remove("PERFPILOT_STORE")
        .output()
        .expect("runs the perfpilot binary")
}

/// Asserts that `args` exits with [`NOTHING_THERE`], names `path` on stderr and leaves `dir`
/// as empty as it was; returns the message.
fn refuses(dir: &Scratch, args: &[&str], path: &Path) -> String {
    let out = perfpilot(dir, args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(NOTHING_THERE), "{args:?}: {err}");
    assert!(err.contains(&path.display().to_string()), "{args:?}: {err}");
    assert!(out.stdout.is_empty(), "{args:?}: {out:?}");
    assert!(dir.files().is_empty(), "{args:?} created {:?}", dir.files());
    err.into_owned()
}

#[test]
fn study_commands_on_a_missing_store_create_nothing_and_say_no_store_at_its_path() {
    let dir = Scratch::new("study");
    let db = dir.0.join("sub").join("x.db");
    let s = db.to_str().expect("utf-8 path");
    for args in [
        &["study", "list", "--store", s][..],
        &["study", "report", "1", "--store", s],
        &["study", "replay", "1", "--store", s],
        &["study", "compare", "1", "2", "--store", s],
    ] {
        let err = refuses(&dir, args, &db);
        assert!(err.contains(&format!("no store at {s}")), "{args:?}: {err}");
    }
}

#[test]
fn dump_of_a_missing_store_creates_nothing_and_says_no_store_at_its_path() {
    let dir = Scratch::new("dump");
    let db = dir.0.join("x.db");
    let s = db.to_str().expect("utf-8 path");
    let err = refuses(&dir, &["dump", "--what", "cpu", "--store", s], &db);
    assert!(err.contains(&format!("no store at {s}")), "{err}");
}

#[test]
fn status_and_revert_of_an_unused_state_directory_create_nothing_and_name_it() {
    let dir = Scratch::new("status");
    let state = dir.0.join("state");
    let s = state.to_str().expect("utf-8 path");
    refuses(&dir, &["status", "--state-dir", s], &state);
    refuses(&dir, &["status", "--json", "--state-dir", s], &state);
    refuses(&dir, &["revert", "--all", "--state-dir", s], &state);
    // An existing but empty directory is just as unused.
    std::fs::create_dir(&state).expect("state directory");
    let out = perfpilot(&dir, &["status", "--state-dir", s]);
    assert_eq!(out.status.code(), Some(NOTHING_THERE), "{out:?}");
    assert_eq!(dir.files(), ["state"]);
}

#[test]
fn tunables_without_a_store_lists_the_defaults_and_creates_nothing() {
    let dir = Scratch::new("tunables");
    let state = dir.0.join("state");
    let s = state.to_str().expect("utf-8 path");
    for args in [
        &["tunables", "--list", "--state-dir", s][..],
        &["tunables", "--state-dir", s],
    ] {
        let out = perfpilot(&dir, args);
        let (stdout, err) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(out.status.success(), "{args:?}: {err}");
        let windows = stdout
            .lines()
            .find(|l| l.starts_with("windows "))
            .unwrap_or_else(|| panic!("no windows line in {stdout}"));
        let cols: Vec<&str> = windows.split_whitespace().collect();
        assert_eq!(cols.get(1), cols.get(2), "value is the default: {windows}");
        assert!(
            err.contains(&format!(
                "no store at {}",
                state.join("perfpilot.db").display()
            )),
            "{err}"
        );
        assert!(dir.files().is_empty(), "{args:?} created {:?}", dir.files());
    }
}

#[test]
fn reading_an_existing_store_leaves_only_its_file_and_an_empty_list_says_so() {
    let dir = Scratch::new("existing");
    let state = dir.0.join("state");
    let s = state.to_str().expect("utf-8 path");
    let out = perfpilot(&dir, &["tunables", "-o", "windows=4", "--state-dir", s]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(dir.files(), ["state", "state/perfpilot.db"]);
    let db = state.join("perfpilot.db");
    let db_s = db.to_str().expect("utf-8 path");

    let out = perfpilot(&dir, &["study", "list", "--store", db_s]);
    assert!(out.status.success(), "{out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("no study runs in {db_s}")), "{err}");

    let out = perfpilot(&dir, &["tunables", "--list", "--state-dir", s]);
    let list = String::from_utf8_lossy(&out.stdout);
    let windows = list
        .lines()
        .find(|l| l.starts_with("windows "))
        .unwrap_or("");
    assert_eq!(windows.split_whitespace().nth(1), Some("4"), "{list}");
    assert!(out.stderr.is_empty(), "{out:?}");

    let out = perfpilot(&dir, &["status", "--json", "--state-dir", s]);
    assert!(out.status.success(), "{out:?}");
    let out = perfpilot(&dir, &["dump", "--what", "cpu", "--store", db_s]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(dir.files(), ["state", "state/perfpilot.db"]);
}

#[test]
fn a_file_that_is_not_a_store_is_nothing_there_and_is_left_as_it_was() {
    let dir = Scratch::new("notastore");
    let db = dir.0.join("empty.db");
    std::fs::write(&db, b"").expect("empty file");
    let s = db.to_str().expect("utf-8 path");
    let out = perfpilot(&dir, &["study", "list", "--store", s]);
    assert_eq!(out.status.code(), Some(NOTHING_THERE), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("no store at {s}")), "{err}");
    assert_eq!(dir.files(), ["empty.db"]);
    assert_eq!(std::fs::metadata(&db).map(|m| m.len()).ok(), Some(0));
}

#[test]
fn help_documents_the_exit_status_for_nothing_there() {
    let dir = Scratch::new("help");
    for args in [&["--help"][..], &["status", "--help"], &["dump", "--help"]] {
        let out = perfpilot(&dir, args);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("66  nothing there: no store"),
            "{args:?}: {text}"
        );
    }
}
