//! sysfs/procfs knobs (`sys/kernel/mm/transparent_hugepage/enabled`,
//! `sys/block/sda/queue/read_ahead_kb`, `proc/sys/vm/...`): read the current value, write one.

use std::io::{self, Write};
use std::path::Component;

use crate::{Error, Fs, Result};

/// Checks that `rel` is a relative path under `sys/` or `proc/` with no `..`.
fn check_rel(fs: &Fs, rel: &str) -> Result<()> {
    let rel_t = rel.trim_start_matches('/');
    let bad = !(rel_t.starts_with("sys/") || rel_t.starts_with("proc/"))
        || std::path::Path::new(rel_t)
            .components()
            .any(|c| !matches!(c, Component::Normal(_)));
    if bad {
        return Err(Error::Syscall {
            call: "knob path check",
            target: format!(
                "{} (a knob must be a path under sys/ or proc/ without ..)",
                fs.path(rel).display()
            ),
            source: io::Error::from_raw_os_error(libc::EINVAL),
        });
    }
    Ok(())
}

/// The value of a selector file's text (`always [madvise] never` gives `madvise`), or the
/// whole text trimmed for any other file.
pub fn knob_value(text: &str) -> String {
    if let Some(open) = text.find('[')
        && let Some(close) = text[open..].find(']')
    {
        return text[open + 1..open + close].trim().to_string();
    }
    text.trim().to_string()
}

/// The current value of knob `rel` (relative to the [`Fs`] root): for selector files the
/// selected word, otherwise the trimmed text.
pub fn read_knob(fs: &Fs, rel: &str) -> Result<String> {
    check_rel(fs, rel)?;
    Ok(knob_value(&fs.read(rel)?))
}

/// Writes `value` to knob `rel` (relative to the [`Fs`] root). The file must exist (it is
/// never created). A value the kernel rejects is an error naming the file (`write failed for
/// /sys/…: Invalid argument`).
pub fn write_knob(fs: &Fs, rel: &str, value: &str) -> Result<()> {
    check_rel(fs, rel)?;
    let path = fs.path(rel);
    let target = || format!("{} (value {value:?})", path.display());
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        // A live knob takes the value written; a file of a tree (or the test overlay) must
        // lose its old text.
        .truncate(!fs.is_live() || fs.overlaid(rel).is_some())
        .open(&path)
        .map_err(|source| Error::Syscall {
            call: "open for writing",
            target: target(),
            source,
        })?;
    // One write call: sysfs takes the value from a single write.
    f.write_all(value.as_bytes())
        .and_then(|()| f.flush())
        .map_err(|source| Error::Syscall {
            call: "write",
            target: target(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selector_and_plain_values() {
        assert_eq!(knob_value("always [madvise] never\n"), "madvise");
        assert_eq!(
            knob_value("always within_size advise [never] deny force\n"),
            "never"
        );
        assert_eq!(knob_value("[mq-deadline] none\n"), "mq-deadline");
        assert_eq!(knob_value("128\n"), "128");
    }

    #[test]
    fn rejects_paths_outside_sys_and_proc() {
        let fs = Fs::at("/nonexistent");
        for rel in [
            "etc/passwd",
            "sys/../etc/passwd",
            "proc/sys/../../../etc/shadow",
        ] {
            let e = read_knob(&fs, rel).unwrap_err().to_string();
            assert!(
                e.contains("must be a path under sys/ or proc/"),
                "{rel}: {e}"
            );
        }
    }
}
