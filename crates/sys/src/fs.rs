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
    let mut f = match dir {
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
    fill_single(buf, |b, _| f.read(b)).map_err(err)?;
    Ok(f)
}

/// Fills `buf` (cleared first) with a single-record procfs file through `read(into, offset)`:
/// such files are produced whole by the first read, so a read that does not fill the buffer is
/// the end and the second, empty read is saved.
pub(crate) fn fill_single(
    buf: &mut Vec<u8>,
    mut read: impl FnMut(&mut [u8], u64) -> std::io::Result<usize>,
) -> std::io::Result<()> {
    buf.clear();
    if buf.capacity() < 4096 {
        buf.reserve(4096);
    }
    loop {
        let len = buf.len();
        let cap = buf.capacity();
        buf.resize(cap, 0);
        let n = match read(&mut buf[len..], len as u64) {
            Ok(n) => n,
            Err(e) => {
                buf.truncate(len);
                return Err(e);
            }
        };
        buf.truncate(len + n);
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
