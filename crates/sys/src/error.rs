use std::path::PathBuf;

/// Errors of the Linux readers and system calls. Every variant names the file, or the call
/// and its target, it is about.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be opened or read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why it could not be read.
        #[source]
        source: std::io::Error,
    },
    /// The file was read but a line did not have the expected shape.
    #[error("{}:{line}: {msg}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// The line (1-based) that did not parse.
        line: usize,
        /// What was wrong with it.
        msg: String,
    },
    /// The process or thread the file belongs to exited while it was being read.
    #[error("process vanished while reading {}", path.display())]
    Vanished {
        /// The file that was being read.
        path: PathBuf,
    },
    /// A system call failed.
    #[error("{call} failed for {target}: {source}")]
    Syscall {
        /// The call (`sched_setaffinity`, `move_pages`, …).
        call: &'static str,
        /// What it was called on (a thread, a process, a range).
        target: String,
        /// The error the kernel returned.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// True when the process or thread went away: a normal event for a sampler.
    pub fn is_vanished(&self) -> bool {
        matches!(self, Error::Vanished { .. })
            || matches!(self, Error::Syscall { source, .. } if source.raw_os_error() == Some(libc::ESRCH))
    }

    /// True when the kernel refused access (EACCES/EPERM).
    pub fn is_permission(&self) -> bool {
        let src = match self {
            Error::Io { source, .. } | Error::Syscall { source, .. } => source,
            _ => return false,
        };
        src.kind() == std::io::ErrorKind::PermissionDenied
            || src.raw_os_error() == Some(libc::EPERM)
    }

    pub(crate) fn parse(path: impl Into<PathBuf>, line: usize, msg: impl Into<String>) -> Self {
        Error::Parse {
            path: path.into(),
            line,
            msg: msg.into(),
        }
    }
}

/// Result of the Linux readers.
pub type Result<T> = std::result::Result<T, Error>;
