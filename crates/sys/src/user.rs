//! Who perfpilot runs as, and running a piece of work as another user.

use std::io;

/// The effective user id of this process.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Whether this process runs as root (effective uid 0): the daemon's and `revert`'s
/// privileges, and the default state paths, depend on it.
pub fn is_root() -> bool {
    euid() == 0
}

/// The effective group id of this process.
fn egid() -> u32 {
    // SAFETY: getegid has no preconditions and cannot fail.
    unsafe { libc::getegid() }
}

/// The login name of user `uid`, from the password database (`getpwuid_r`), or from
/// `/etc/passwd` when the C library cannot answer; `None` for a uid with no entry.
pub fn name_of(uid: u32) -> Option<String> {
    name_from_libc(uid).or_else(|| {
        let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
        name_in_passwd(&passwd, uid)
    })
}

fn name_from_libc(uid: u32) -> Option<String> {
    let mut buf = vec![0u8; 1024];
    loop {
        // SAFETY: passwd is plain old data; getpwuid_r fills it with pointers into `buf`,
        // which outlives every read of them below.
        let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: every pointer is valid for the length given.
        let rc = unsafe {
            libc::getpwuid_r(
                uid,
                &mut pwd,
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut found,
            )
        };
        if rc == libc::ERANGE && buf.len() < 1 << 20 {
            buf.resize(buf.len() * 4, 0);
            continue;
        }
        if rc != 0 || found.is_null() || pwd.pw_name.is_null() {
            return None;
        }
        // SAFETY: pw_name points at a NUL-terminated string inside `buf`.
        let name = unsafe { std::ffi::CStr::from_ptr(pwd.pw_name) };
        return Some(name.to_string_lossy().into_owned());
    }
}

/// The name of `uid` in `/etc/passwd`-formatted text (`name:x:uid:gid:…`).
fn name_in_passwd(passwd: &str, uid: u32) -> Option<String> {
    passwd.lines().find_map(|line| {
        let mut f = line.split(':');
        let name = f.next()?;
        let id: u32 = f.nth(1)?.parse().ok()?;
        (id == uid && !name.is_empty()).then(|| name.to_string())
    })
}

/// Runs `f` with effective user `uid` and group `gid`, for work that the other side
/// authenticates by the caller's credentials (PostgreSQL's and MariaDB's peer authentication
/// read `SO_PEERCRED`, which records the connecting thread's effective ids at `connect`).
///
/// As root, `f` runs on a new thread whose effective ids alone are switched with the raw
/// `setresgid`/`setresuid` system calls: these change one thread, whereas the C library's
/// wrappers change every thread of the process. The ids are switched back before the thread
/// ends, also when `f` panics (the panic then continues in the caller). When this process is
/// not root and `uid` is its own effective uid, `f` runs directly; otherwise the answer is an
/// error saying that peer authentication needs root or that same user.
pub fn as_user<T: Send + 'static>(
    uid: u32,
    gid: u32,
    f: impl FnOnce() -> T + Send + 'static,
) -> io::Result<T> {
    let me = euid();
    if me == uid && (me != 0 || egid() == gid) {
        return Ok(f());
    }
    if me != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "acting as uid {uid} needs root or that same user, and this process runs as \
                 uid {me}: peer authentication accepts only the server's own OS user"
            ),
        ));
    }
    let (root_gid, thread) = (
        egid(),
        std::thread::Builder::new().name("perfpilot-as-user".into()),
    );
    let handle = thread.spawn(move || -> io::Result<T> {
        set_thread_ids(libc::SYS_setresgid, gid, "setresgid")?;
        if let Err(e) = set_thread_ids(libc::SYS_setresuid, uid, "setresuid") {
            // Best effort: this thread's credentials end with it anyway.
            let _ = set_thread_ids(libc::SYS_setresgid, root_gid, "setresgid");
            return Err(e);
        }
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        // The uid first: restoring the gid needs root's effective uid back.
        let back = set_thread_ids(libc::SYS_setresuid, 0, "setresuid")
            .and_then(|()| set_thread_ids(libc::SYS_setresgid, root_gid, "setresgid"));
        match out {
            Ok(v) => back.map(|()| v),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })?;
    match handle.join() {
        Ok(r) => r,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// Sets this thread's effective id (the middle of the three) through the raw system call
/// `call` (`SYS_setresuid` or `SYS_setresgid`), leaving the real and saved ids as they are.
fn set_thread_ids(call: libc::c_long, id: u32, name: &str) -> io::Result<()> {
    let keep = libc::c_long::from(-1i32);
    // SAFETY: setresuid/setresgid take three ids and touch no memory of ours.
    let rc = unsafe { libc::syscall(call, keep, libc::c_long::from(id), keep) };
    if rc == 0 {
        Ok(())
    } else {
        let e = io::Error::last_os_error();
        Err(io::Error::new(
            e.kind(),
            format!("{name}(-1, {id}, -1): {e}"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_uid_is_found_by_name_in_passwd_text() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\n\
                      # comment\n\
                      postgres:x:104:110:PostgreSQL administrator:/var/lib/postgresql:/bin/bash\n";
        assert_eq!(name_in_passwd(passwd, 104).as_deref(), Some("postgres"));
        assert_eq!(name_in_passwd(passwd, 0).as_deref(), Some("root"));
        assert_eq!(name_in_passwd(passwd, 7), None);
    }

    #[test]
    fn root_has_a_name() {
        assert_eq!(name_of(0).as_deref(), Some("root"));
    }

    #[test]
    fn work_as_this_process_own_user_runs_directly() {
        let me = euid();
        let gid = egid();
        let got = as_user(me, gid, euid).unwrap();
        assert_eq!(got, me);
    }

    #[test]
    fn work_as_another_user_runs_with_that_effective_uid_and_leaves_the_process_alone() {
        if !is_root() {
            // Without root, the only thing to check is the refusal.
            let e = as_user(euid().wrapping_add(1), 0, || ()).unwrap_err();
            assert!(e.to_string().contains("needs root"), "{e}");
            return;
        }
        let (uid, gid) = as_user(65534, 65534, || {
            // SAFETY: plain getters.
            unsafe { (libc::geteuid(), libc::getegid()) }
        })
        .unwrap();
        assert_eq!((uid, gid), (65534, 65534));
        assert_eq!(euid(), 0, "the caller's thread keeps root");
        assert_eq!(egid(), 0);
    }

    #[test]
    fn a_panic_inside_the_work_reaches_the_caller() {
        let r = std::panic::catch_unwind(|| as_user(euid(), egid(), || panic!("boom")));
        assert!(r.is_err());
        if is_root() {
            let r = std::panic::catch_unwind(|| as_user(65534, 65534, || panic!("boom")));
            assert!(r.is_err());
            assert_eq!(euid(), 0);
        }
    }
}
