//! A file's pages in the page cache: dropping them (`posix_fadvise(POSIX_FADV_DONTNEED)`), so
//! that the next reads of that file, and only that file, reach its device (a test or a
//! benchmark of cold reads without `drop_caches`, which is global).

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;

use crate::{Error, Result};

fn fadvise(f: &File, path: &Path, advice: libc::c_int, call: &'static str) -> Result<()> {
    // SAFETY: posix_fadvise only reads its integer arguments; the descriptor is open for the
    // duration of the call (borrowed from `f`). Offset 0 and length 0 mean the whole file.
    let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, advice) };
    if rc != 0 {
        return Err(Error::Syscall {
            call,
            target: path.display().to_string(),
            source: std::io::Error::from_raw_os_error(rc),
        });
    }
    Ok(())
}

/// Writes the file's dirty pages back and drops its clean cached pages (the whole file).
/// Pages mapped by a process stay; other files' pages are not touched.
pub fn drop_cached(f: &File, path: &Path) -> Result<()> {
    f.sync_data().map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    fadvise(
        f,
        path,
        libc::POSIX_FADV_DONTNEED,
        "posix_fadvise(DONTNEED)",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_written_file_has_its_pages_dropped() {
        let mut t = tempfile::NamedTempFile::new().unwrap();
        t.write_all(&vec![7u8; 1 << 20]).unwrap();
        drop_cached(t.as_file(), t.path()).unwrap();
        // A file opened read-only can be advised too (the reader's case).
        let r = File::open(t.path()).unwrap();
        drop_cached(&r, t.path()).unwrap();
        assert_eq!(std::fs::read(t.path()).unwrap().len(), 1 << 20);
    }

    #[test]
    fn a_pipe_cannot_be_advised_and_the_error_names_it() {
        let (r, _w) = std::io::pipe().unwrap();
        let f = File::from(std::os::fd::OwnedFd::from(r));
        let e = drop_cached(&f, Path::new("the-pipe"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("the-pipe"), "{e}");
    }
}
