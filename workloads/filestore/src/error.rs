//! What can go wrong serving a request, and the HTTP status each answer carries.

use std::io;
use std::path::PathBuf;

use hyper::StatusCode;

/// A failed store operation.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The file system has no room left: no free blocks, no free inodes, or a quota is used
    /// up. Ingest fails with 507 while reads go on.
    #[error(
        "no space left for {what} ({cause}): free blocks or inodes on the store's file system, or give it a larger one"
    )]
    Full {
        /// What was being written (a document's file, a directory, the catalog).
        what: String,
        /// The operating system's or SQLite's words for it.
        cause: String,
    },
    /// The request is malformed; the text says which part and what to send instead.
    #[error("{0}")]
    BadRequest(String),
    /// No document has this id.
    #[error("no document {0:?}")]
    NotFound(String),
    /// The body is larger than the store accepts.
    #[error("the document is {size} bytes; the store takes at most {limit} (--max-doc-bytes)")]
    TooLarge {
        /// The body's size so far, bytes.
        size: u64,
        /// The limit, bytes.
        limit: u64,
    },
    /// Any other I/O failure on a file of the store.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The failure.
        source: io::Error,
    },
    /// The catalog database failed.
    #[error("catalog: {0}")]
    Catalog(String),
}

impl StoreError {
    /// An I/O failure on `path` while writing `what`: the no-space kinds become
    /// [`StoreError::Full`], everything else [`StoreError::Io`].
    pub fn from_io(what: &str, path: PathBuf, source: io::Error) -> StoreError {
        if is_no_space(&source) {
            StoreError::Full {
                what: format!("{what} {}", path.display()),
                cause: source.to_string(),
            }
        } else {
            StoreError::Io { path, source }
        }
    }

    /// A catalog failure: SQLite's "database or disk is full" (and a journal it cannot create
    /// for want of an inode) becomes [`StoreError::Full`].
    pub fn from_sqlite(e: rusqlite::Error) -> StoreError {
        if let rusqlite::Error::SqliteFailure(f, _) = &e
            && matches!(
                f.code,
                rusqlite::ErrorCode::DiskFull | rusqlite::ErrorCode::CannotOpen
            )
        {
            return StoreError::Full {
                what: "the catalog".into(),
                cause: e.to_string(),
            };
        }
        StoreError::Catalog(e.to_string())
    }

    /// The HTTP status this failure answers with.
    pub fn status(&self) -> StatusCode {
        match self {
            StoreError::Full { .. } => StatusCode::INSUFFICIENT_STORAGE,
            StoreError::BadRequest(_) => StatusCode::BAD_REQUEST,
            StoreError::NotFound(_) => StatusCode::NOT_FOUND,
            StoreError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            StoreError::Io { .. } | StoreError::Catalog(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// Whether `e` says the file system is out of blocks, inodes (both `ENOSPC`) or quota.
pub fn is_no_space(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ENOSPC and EDQUOT on Linux.
    const ENOSPC: i32 = 28;
    const EDQUOT: i32 = 122;

    #[test]
    fn enospc_and_quota_from_the_kernel_answer_507() {
        for errno in [ENOSPC, EDQUOT] {
            let e = StoreError::from_io(
                "document",
                PathBuf::from("/s/objects/ab/cd/x"),
                io::Error::from_raw_os_error(errno),
            );
            assert_eq!(e.status(), StatusCode::INSUFFICIENT_STORAGE, "{e}");
            assert!(e.to_string().contains("/s/objects/ab/cd/x"), "{e}");
        }
    }

    #[test]
    fn other_io_failures_are_server_errors_naming_the_file() {
        let e = StoreError::from_io(
            "document",
            PathBuf::from("/s/x"),
            io::Error::from(io::ErrorKind::PermissionDenied),
        );
        assert_eq!(e.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert!(e.to_string().starts_with("/s/x: "), "{e}");
    }

    #[test]
    fn a_full_catalog_answers_507() {
        let full = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_FULL),
            None,
        );
        assert_eq!(
            StoreError::from_sqlite(full).status(),
            StatusCode::INSUFFICIENT_STORAGE
        );
        let busy = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
            None,
        );
        assert_eq!(
            StoreError::from_sqlite(busy).status(),
            StatusCode::INTERNAL_SERVER_ERROR
        );
    }
}
