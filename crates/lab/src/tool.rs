//! Finding the programs an experiment runs: on `PATH`, then where Debian puts servers that are
//! not on a user's `PATH` (`/usr/sbin`, `/sbin`, PostgreSQL's versioned `bin` directories,
//! newest first).

use std::path::{Path, PathBuf};

/// Where PostgreSQL's server programs live, one directory per major version.
const POSTGRES_VERSIONS: &str = "/usr/lib/postgresql";

/// A program that is not installed.
#[derive(Debug, thiserror::Error)]
#[error(
    "{tool} is not installed: install the Debian package {package} (scripts/install-deps installs \
     every package the tests and the proof harness use)"
)]
pub struct Missing {
    /// The program.
    pub tool: String,
    /// The Debian package that has it.
    pub package: String,
}

/// The path of `tool`, or an error naming the Debian package `package` that has it.
pub fn require(tool: &str, package: &str) -> Result<PathBuf, Missing> {
    find(tool).ok_or_else(|| Missing {
        tool: tool.to_string(),
        package: package.to_string(),
    })
}

/// The path of the executable `tool`, or `None` when it is not installed.
pub fn find(tool: &str) -> Option<PathBuf> {
    dirs()
        .into_iter()
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

/// The directories [`find`] looks in, in order.
fn dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.retain(|d| !d.as_os_str().is_empty());
    dirs.extend(["/usr/sbin", "/sbin"].map(PathBuf::from));
    dirs.extend(postgres_bins(Path::new(POSTGRES_VERSIONS)));
    dirs
}

/// `ROOT/*/bin`, the highest version first.
fn postgres_bins(root: &Path) -> Vec<PathBuf> {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            // Numbered versions compare as numbers, so 9.6 comes after 17.
            let major = name.split('.').next().and_then(|m| m.parse().ok());
            (major.unwrap_or(0), e.path().join("bin"))
        })
        .collect();
    versions.sort();
    versions.into_iter().rev().map(|(_, p)| p).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_postgresql_comes_first() {
        let dir = tempfile::tempdir().expect("temp dir");
        for v in ["9.6", "15", "17"] {
            std::fs::create_dir_all(dir.path().join(v).join("bin")).expect("dirs");
        }
        let bins = postgres_bins(dir.path());
        let names: Vec<String> = bins
            .iter()
            .map(|p| {
                p.parent()
                    .unwrap()
                    .file_name()
                    .unwrap()
                    .to_string_lossy()
                    .to_string()
            })
            .collect();
        assert_eq!(names, ["17", "15", "9.6"]);
    }

    #[test]
    fn a_program_on_path_is_found_and_a_missing_one_is_not() {
        assert!(find("sh").is_some_and(|p| p.ends_with("sh")));
        assert_eq!(find("no-such-program-perfpilot"), None);
    }
}
