//! `gen`: the data step. Writes the session's table row by row through a buffer of `bufsize`.

use std::fs::File;
use std::io::{BufWriter, Write};

use crate::Error;
use crate::batch::BatchConfig;
use crate::data::{ROW_BYTES, row};
use crate::job::SessionFiles;

/// Writes `cfg.rows()` rows of session `s`; the result is the rows written.
pub fn run(cfg: &BatchConfig, s: u32, files: &SessionFiles) -> Result<String, Error> {
    let path = &files.input;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| Error::io("create", dir, e))?;
    }
    let f = File::create(path).map_err(|e| Error::io("create", path, e))?;
    let mut w = BufWriter::with_capacity(cfg.bufsize, f);
    let mut b = [0u8; ROW_BYTES];
    let rows = cfg.rows();
    for i in 0..rows {
        row(cfg.seed, s, i).encode(&mut b);
        w.write_all(&b).map_err(|e| Error::io("write", path, e))?;
    }
    w.flush().map_err(|e| Error::io("write", path, e))?;
    Ok(format!("{rows} rows"))
}
