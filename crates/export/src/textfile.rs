//! The textfile for node_exporter's textfile collector: `perfpilot.prom` in the directory
//! given, in the Prometheus text format, replaced atomically (written beside it under a name
//! the collector ignores, then renamed), so the collector never reads half a file.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::ExportError;

/// The file's name in the directory.
pub const FILE_NAME: &str = "perfpilot.prom";

/// Writes `text` to `dir/perfpilot.prom` atomically; returns the path.
pub fn write(dir: &Path, text: &str) -> Result<PathBuf, ExportError> {
    let err = |source| ExportError::Textfile {
        dir: dir.to_path_buf(),
        source,
    };
    let path = dir.join(FILE_NAME);
    // Not `*.prom`: the collector skips it while it is being written.
    let tmp = dir.join(format!(".{FILE_NAME}.{}.tmp", std::process::id()));
    let mut f = std::fs::File::create(&tmp).map_err(err)?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(err)?;
    drop(f);
    std::fs::rename(&tmp, &path).map_err(err)?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_textfile_is_replaced_whole_and_leaves_no_temporary_behind() {
        let d = tempfile::tempdir().unwrap();
        write(d.path(), "a 1\n").unwrap();
        let p = write(d.path(), "a 2\n").unwrap();
        assert_eq!(std::fs::read_to_string(p).unwrap(), "a 2\n");
        let names: Vec<String> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec![FILE_NAME.to_string()]);
    }

    #[test]
    fn a_missing_directory_is_named_in_the_error() {
        let e = write(Path::new("/nonexistent/perfpilot-textfile"), "a 1\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("/nonexistent/perfpilot-textfile"), "{e}");
    }
}
