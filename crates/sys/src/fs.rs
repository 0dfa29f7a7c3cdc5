use std::io::{ErrorKind, Read};
use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// The root under which `proc/` and `sys/` are read: `/` for the live system, or a captured
/// tree for tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fs {
    root: PathBuf,
    /// Test builds only (`failpoints`): a directory whose files stand in for the live ones of
    /// the same relative path, so crash tests write a fixture instead of a global knob.
    overlay: Option<PathBuf>,
}

impl Default for Fs {
    fn default() -> Self {
        Self::live()
    }
}

impl Fs {
    /// The running system.
    pub fn live() -> Self {
        Fs {
            root: PathBuf::from("/"),
            overlay: crate::failpoint::sysfs_overlay(),
        }
    }

    /// A captured tree: `root/proc/...` and `root/sys/...`.
    pub fn at(root: impl Into<PathBuf>) -> Self {
        Fs {
            root: root.into(),
            overlay: None,
        }
    }

    /// True for the running system (syscalls make sense only there).
    pub fn is_live(&self) -> bool {
        self.root == Path::new("/")
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `root/rel`, where `rel` is relative (`proc/stat`).
    pub fn path(&self, rel: &str) -> PathBuf {
        let rel = rel.trim_start_matches('/');
        if let Some(p) = self.overlaid(rel) {
            return p;
        }
        self.root.join(rel)
    }

    /// The overlay's file standing in for `rel`, if there is one (test builds only).
    pub(crate) fn overlaid(&self, rel: &str) -> Option<PathBuf> {
        let p = self.overlay.as_ref()?.join(rel.trim_start_matches('/'));
        p.is_file().then_some(p)
    }

    /// Reads a whole file as text.
    pub fn read(&self, rel: &str) -> Result<String> {
        let path = self.path(rel);
        read_string(&path)
    }

    /// Reads a file that may be absent: `Ok(None)` when it does not exist.
    pub fn read_opt(&self, rel: &str) -> Result<Option<String>> {
        let path = self.path(rel);
        match std::fs::read_to_string(&path) {
            Ok(s) => Ok(Some(s)),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(source) => Err(Error::Io { path, source }),
        }
    }

    /// Names of the entries of a directory (unsorted).
    pub fn list(&self, rel: &str) -> Result<Vec<String>> {
        let path = self.path(rel);
        list_dir(&path)
    }
}

pub(crate) fn read_string(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })
}

pub(crate) fn list_dir(path: &Path) -> Result<Vec<String>> {
    let rd = std::fs::read_dir(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mut out = Vec::new();
    for entry in rd {
        let entry = entry.map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })?;
        if let Some(name) = entry.file_name().to_str() {
            out.push(name.to_string());
        }
    }
    Ok(out)
}

/// The entries of the directory open as `dir` whose names are decimal numbers (pids in
/// `/proc`, tids in a task directory), unsorted, into `out`: read with `getdents64` into `buf`,
/// without the allocation per name that `read_dir` makes.
pub(crate) fn numeric_entries(
    dir: &std::fs::File,
    buf: &mut Vec<u8>,
    out: &mut Vec<i32>,
) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    /// `struct linux_dirent64`: d_ino (8), d_off (8), d_reclen (2), d_type (1), then the name.
    const NAME_AT: usize = 19;
    out.clear();
    if buf.len() < 32 * 1024 {
        buf.resize(32 * 1024, 0);
    }
    loop {
        let n = uninterrupted(|| {
            // SAFETY: `buf` is valid for writes of `buf.len()` bytes, and getdents64 writes at
            // most that many into it.
            unsafe {
                libc::syscall(
                    libc::SYS_getdents64,
                    dir.as_raw_fd(),
                    buf.as_mut_ptr(),
                    buf.len(),
                ) as isize
            }
        })?;
        if n == 0 {
            return Ok(());
        }
        let mut at = 0;
        while at + NAME_AT <= n {
            let reclen = usize::from(u16::from_ne_bytes([buf[at + 16], buf[at + 17]]));
            if reclen == 0 {
                break;
            }
            let name = &buf[at + NAME_AT..(at + reclen).min(n)];
            let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
            if !name.is_empty() && name.iter().all(u8::is_ascii_digit) {
                // Ten digits or fewer fit; longer names are not pids.
                if let Some(v) = std::str::from_utf8(name).ok().and_then(|t| t.parse().ok()) {
                    out.push(v);
                }
            }
            at += reclen;
        }
    }
}

/// Runs a raw call that returns a count or -1 with `errno`, again while it is interrupted.
fn uninterrupted(mut call: impl FnMut() -> isize) -> std::io::Result<usize> {
    loop {
        let n = call();
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

fn pid_error(path: &Path, source: std::io::Error) -> Error {
    if source.kind() == ErrorKind::NotFound || source.raw_os_error() == Some(libc::ESRCH) {
        Error::Vanished {
            path: path.to_path_buf(),
        }
    } else {
        Error::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Reads a per-process file into `buf` (cleared first). ENOENT and ESRCH mean the process or
/// thread exited: they become [`Error::Vanished`].
pub(crate) fn read_pid_file(path: &Path, buf: &mut Vec<u8>) -> Result<()> {
    buf.clear();
    let mut f = std::fs::File::open(path).map_err(|e| pid_error(path, e))?;
    f.read_to_end(buf).map_err(|e| pid_error(path, e))?;
    Ok(())
}

/// Reads a small single-record procfs file (`stat`, `status`, `io`): such files are produced
/// whole by the first `read`, so a read that does not fill the buffer is the end and the
/// second, empty `read` is saved. With `dir`, `rel` is opened relative to that directory
/// (which `base` names, for errors); without it, `base` itself is read. Returns the open file,
/// which a caller may keep to read again from the start.
pub(crate) fn read_single(
    dir: Option<&std::fs::File>,
    base: &Path,
    rel: &str,
    buf: &mut Vec<u8>,
) -> Result<std::fs::File> {
    use std::os::fd::{AsRawFd, FromRawFd};
    buf.clear();
    let full = || {
        if rel.is_empty() {
            base.to_path_buf()
        } else {
            base.join(rel)
        }
    };
    let err = |e: std::io::Error| pid_error(&full(), e);
    let f = match dir {
        Some(d) => {
            let mut name = [0u8; 64];
            if rel.len() >= name.len() || rel.as_bytes().contains(&0) {
                return Err(Error::Io {
                    path: full(),
                    source: std::io::Error::from(ErrorKind::InvalidInput),
                });
            }
            name[..rel.len()].copy_from_slice(rel.as_bytes());
            // SAFETY: name is NUL-terminated; the fd is checked and then owned by the File.
            let fd = unsafe {
                libc::openat(
                    d.as_raw_fd(),
                    name.as_ptr().cast(),
                    libc::O_RDONLY | libc::O_CLOEXEC,
                )
            };
            if fd < 0 {
                return Err(err(std::io::Error::last_os_error()));
            }
            // SAFETY: fd is a new descriptor that nothing else owns.
            unsafe { std::fs::File::from_raw_fd(fd) }
        }
        None => std::fs::File::open(base).map_err(err)?,
    };
    fill_single(buf, &f).map_err(err)?;
    Ok(f)
}

/// Fills `buf` (cleared first) with a single-record procfs file, read with `pread` from its
/// start whatever the file's position: such files are produced whole by the first read, so a
/// read that does not fill the buffer is the end and the second, empty read is saved. The
/// bytes go into the buffer's spare room as they are (no zeroing first: at 10,000 threads a
/// sample, the 4 KiB memset per file showed).
pub(crate) fn fill_single(buf: &mut Vec<u8>, file: &std::fs::File) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    buf.clear();
    if buf.capacity() < 4096 {
        buf.reserve(4096);
    }
    loop {
        let len = buf.len();
        let cap = buf.capacity();
        let spare = buf.spare_capacity_mut();
        let n = uninterrupted(|| {
            // SAFETY: `spare` is valid for writes of `spare.len()` bytes and pread writes at
            // most that many; the `n` bytes it reports are initialised before `set_len`.
            unsafe {
                libc::pread(
                    file.as_raw_fd(),
                    spare.as_mut_ptr().cast(),
                    spare.len(),
                    len as libc::off_t,
                )
            }
        })?;
        // SAFETY: see above: `len + n` bytes are initialised and within the capacity.
        unsafe { buf.set_len(len + n) };
        if n == 0 || len + n < cap {
            return Ok(());
        }
        buf.reserve(cap);
    }
}

/// Parses `Key:   value [kB]` lines (meminfo, status, smaps_rollup), calling `f(key, value)`.
pub(crate) fn for_each_kv<'a>(text: &'a str, mut f: impl FnMut(usize, &'a str, &'a str)) {
    for (i, line) in text.lines().enumerate() {
        if let Some((k, v)) = line.split_once(':') {
            f(i + 1, k.trim(), v.trim());
        }
    }
}

/// The values of `keys` from `Key: value [kB]` lines (bytes for `kB` values, the number
/// otherwise; 0 for a key the text lacks). The first malformed value is the error.
pub(crate) fn kv_numbers<const N: usize>(
    text: &str,
    path: &Path,
    keys: [&str; N],
) -> Result<[u64; N]> {
    let mut out = [0u64; N];
    let mut err = None;
    for_each_kv(text, |line, k, v| {
        if let Some(i) = keys.iter().position(|key| *key == k) {
            match parse_kb(path, line, k, v) {
                Ok(n) => out[i] = n,
                Err(e) => {
                    err.get_or_insert(e);
                }
            }
        }
    });
    match err {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// Parses a `NNN kB` (or bare number) value into bytes.
pub(crate) fn parse_kb(path: &Path, line: usize, key: &str, v: &str) -> Result<u64> {
    let mut it = v.split_ascii_whitespace();
    let n: u64 = it
        .next()
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| Error::parse(path, line, format!("{key}: {v:?} is not a number")))?;
    match it.next() {
        Some("kB") => n
            .checked_mul(1024)
            .ok_or_else(|| Error::parse(path, line, format!("{key}: {v:?} is too large"))),
        _ => Ok(n),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_numeric_entries_are_listed_and_across_several_getdents_calls() {
        let dir = std::env::temp_dir().join(format!("perfpilot-numeric-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // More names than one 32 KiB getdents buffer holds (about 24 bytes each).
        for n in 1..=2000 {
            std::fs::create_dir_all(dir.join(n.to_string())).unwrap();
        }
        for other in ["self", "3x", "thread-self"] {
            std::fs::write(dir.join(other), "").unwrap();
        }
        let f = std::fs::File::open(&dir).unwrap();
        let (mut buf, mut out) = (vec![0u8; 32 * 1024], Vec::new());
        numeric_entries(&f, &mut buf, &mut out).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        out.sort_unstable();
        assert_eq!(out, (1..=2000).collect::<Vec<i32>>());
    }
}
