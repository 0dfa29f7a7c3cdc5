use std::path::PathBuf;

/// Errors of the Linux readers. Every variant names the file it is about.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be opened or read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file was read but a line did not have the expected shape.
    #[error("{}:{line}: {msg}", path.display())]
    Parse {
        path: PathBuf,
        line: usize,
        msg: String,
    },
    /// The process or thread the file belongs to exited while it was being read.
    #[error("process vanished while reading {}", path.display())]
    Vanished { path: PathBuf },
    /// A system call failed.
    #[error("{call} failed for {target}: {source}")]
    Syscall {
        call: &'static str,
        target: String,
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
