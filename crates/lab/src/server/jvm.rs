//! A JVM service: a class run by `java` with a fixed heap (`-Xms` = `-Xmx`, so the heap is
//! mapped whole from the start), compiled from its source with `javac` when needed.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use super::ServerError;

/// The Debian package with `java` and `javac`.
pub const PACKAGE: &str = "openjdk-17-jdk-headless";

/// Compiles `source` into `classes` (at most `limit`; given up when `give_up` says so).
pub fn compile(
    source: &Path,
    classes: &Path,
    limit: Duration,
    give_up: &dyn Fn() -> bool,
) -> Result<(), ServerError> {
    std::fs::create_dir_all(classes).map_err(|e| ServerError::Files {
        what: "creating",
        path: classes.to_path_buf(),
        source: e,
    })?;
    let mut c = Command::new(crate::tool::require("javac", PACKAGE)?);
    c.arg("-d").arg(classes).arg(source);
    let dir = classes.parent().unwrap_or(classes);
    crate::run::run("javac", c, dir, limit, give_up)?;
    Ok(())
}

/// `java` running class `main` from `classes` with a heap of `heap_mib` MiB; the caller adds
/// the class's arguments.
pub fn command(classes: &Path, main: &str, heap_mib: u64) -> Result<Command, ServerError> {
    let mut c = Command::new(crate::tool::require("java", PACKAGE)?);
    c.arg(format!("-Xmx{heap_mib}m"))
        .arg(format!("-Xms{heap_mib}m"))
        .arg("-cp")
        .arg(classes)
        .arg(main);
    Ok(c)
}
