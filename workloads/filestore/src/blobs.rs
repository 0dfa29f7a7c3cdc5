//! Documents as files under a hashed directory tree: `objects/AB/CD/<sha256 of the id>`, two
//! levels of 256 directories so that no directory grows past a few thousand entries at a
//! million documents. A write goes to `tmp/` first and is renamed into place, so a reader
//! never sees half a document and a full file system leaves no partial file behind.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::error::StoreError;

/// The longest document id, bytes.
pub const MAX_ID_LEN: usize = 128;

/// Checks a document id: 1 to [`MAX_ID_LEN`] of `A-Z a-z 0-9 . _ -`, not starting with a dot.
pub fn check_id(id: &str) -> Result<(), StoreError> {
    let ok = !id.is_empty()
        && id.len() <= MAX_ID_LEN
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(StoreError::BadRequest(format!(
            "document id {id:?}: use 1 to {MAX_ID_LEN} letters, digits, '.', '_' or '-', not starting with '.'"
        )))
    }
}

/// The document files of a store.
#[derive(Debug, Clone)]
pub struct Blobs {
    objects: PathBuf,
    tmp: PathBuf,
}

impl Blobs {
    /// The files under `root` (`root/objects`, `root/tmp`), creating both directories.
    pub fn open(root: &Path) -> Result<Blobs, StoreError> {
        let blobs = Blobs {
            objects: root.join("objects"),
            tmp: root.join("tmp"),
        };
        for d in [&blobs.objects, &blobs.tmp] {
            fs::create_dir_all(d).map_err(|e| StoreError::from_io("directory", d.clone(), e))?;
        }
        Ok(blobs)
    }

    /// Where document `id` lives.
    pub fn path_of(&self, id: &str) -> PathBuf {
        let hex: String = Sha256::digest(id.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        self.objects.join(&hex[0..2]).join(&hex[2..4]).join(hex)
    }

    /// Writes document `id` into a temporary file and its directory; [`Staged::commit`] puts
    /// it in place. Out of blocks or inodes is [`StoreError::Full`].
    pub fn stage(&self, id: &str, content: &[u8]) -> Result<Staged, StoreError> {
        let path = self.path_of(id);
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir)
                .map_err(|e| StoreError::from_io("directory", dir.to_path_buf(), e))?;
        }
        let tmp = self.tmp.join(format!("{id}.{:016x}", fastrand::u64(..)));
        let staged = Staged {
            tmp: tmp.clone(),
            path,
            committed: false,
        };
        let mut f =
            fs::File::create(&tmp).map_err(|e| StoreError::from_io("document", tmp.clone(), e))?;
        f.write_all(content)
            .and_then(|()| f.flush())
            .map_err(|e| StoreError::from_io("document", tmp, e))?;
        Ok(staged)
    }

    /// The content of document `id`, `None` when its file does not exist.
    pub fn read(&self, id: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let path = self.path_of(id);
        match fs::read(&path) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(StoreError::Io { path, source: e }),
        }
    }

    /// Removes document `id`'s file (a missing file is not an error).
    pub fn remove(&self, id: &str) -> Result<(), StoreError> {
        let path = self.path_of(id);
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(StoreError::Io { path, source: e }),
        }
    }
}

/// A document written to a temporary file; dropped without [`Staged::commit`], the file is
/// removed.
#[derive(Debug)]
pub struct Staged {
    tmp: PathBuf,
    path: PathBuf,
    committed: bool,
}

impl Staged {
    /// Renames the document into place (replacing an older version atomically).
    pub fn commit(mut self) -> Result<(), StoreError> {
        fs::rename(&self.tmp, &self.path)
            .map_err(|e| StoreError::from_io("document", self.path.clone(), e))?;
        self.committed = true;
        Ok(())
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.committed {
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_checked_with_a_message_saying_what_is_allowed() {
        for good in ["a", "doc-1.pdf", "A_b", &"x".repeat(MAX_ID_LEN)] {
            assert!(check_id(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            ".hidden",
            "a/b",
            "a b",
            "é",
            &"x".repeat(MAX_ID_LEN + 1),
        ] {
            let e = check_id(bad).unwrap_err();
            assert!(e.to_string().contains("letters, digits"), "{e}");
        }
    }

    #[test]
    fn a_document_lives_two_hashed_levels_down_and_is_replaced_atomically() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = Blobs::open(dir.path()).unwrap();
        let p = blobs.path_of("invoice-7");
        let rel = p.strip_prefix(dir.path().join("objects")).unwrap();
        let parts: Vec<_> = rel
            .iter()
            .map(|c| c.to_string_lossy().into_owned())
            .collect();
        assert_eq!(parts.len(), 3, "{parts:?}");
        assert_eq!(parts[2].len(), 64);
        assert!(parts[2].starts_with(&format!("{}{}", parts[0], parts[1])));

        blobs.stage("invoice-7", b"one").unwrap().commit().unwrap();
        blobs.stage("invoice-7", b"two").unwrap().commit().unwrap();
        assert_eq!(blobs.read("invoice-7").unwrap().unwrap(), b"two");
        assert_eq!(blobs.read("other").unwrap(), None);
        assert_eq!(fs::read_dir(dir.path().join("tmp")).unwrap().count(), 0);
    }

    #[test]
    fn a_staged_document_dropped_uncommitted_leaves_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = Blobs::open(dir.path()).unwrap();
        drop(blobs.stage("gone", b"content").unwrap());
        assert_eq!(fs::read_dir(dir.path().join("tmp")).unwrap().count(), 0);
        assert_eq!(blobs.read("gone").unwrap(), None);
    }
}
