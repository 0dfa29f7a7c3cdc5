//! One daemon per state directory: the lock is exclusive, says who holds it, and is released
//! when its holder lets go.

use perfpilot_optimize::daemon::{DaemonError, Lock};

#[test]
fn a_second_daemon_is_refused_with_the_holders_pid_until_the_first_lets_go() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("state");
    assert_eq!(Lock::held(&dir), None, "no lock file yet");
    let lock = Lock::take(&dir).unwrap();
    assert_eq!(lock.path(), dir.join("daemon.lock"));
    let me = i32::try_from(std::process::id()).unwrap();
    assert_eq!(Lock::held(&dir), Some(Some(me)));
    match Lock::take(&dir) {
        Err(e @ DaemonError::Locked { .. }) => {
            let text = e.to_string();
            assert!(
                text.starts_with(&format!("another perfpilot daemon (pid {me}) holds ")),
                "{text}"
            );
            assert!(
                text.ends_with("; stop it first or use another --state-dir"),
                "{text}"
            );
        }
        other => panic!(
            "a second lock was not refused: {:?}",
            other.map(|l| l.path().to_path_buf())
        ),
    }
    drop(lock);
    assert_eq!(Lock::held(&dir), None, "released on drop");
    let again = Lock::take(&dir).unwrap();
    assert_eq!(Lock::held(&dir), Some(Some(me)));
    drop(again);
}

#[test]
fn a_state_directory_that_cannot_be_created_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let e = Lock::take(&file.join("state")).err().unwrap().to_string();
    assert!(
        e.starts_with(&format!(
            "cannot use the state directory {}",
            file.join("state").display()
        )),
        "{e}"
    );
}
