//! `lookup`: the random-I/O job. Reads `lookups` single rows at random row numbers (the row
//! number is the index: rows have a fixed size) and checks each against the generator.

use std::os::unix::fs::FileExt;

use perfpilot_stats::rng::{Rng, mix64};

use crate::Error;
use crate::batch::BatchConfig;
use crate::data::{ROW_BYTES, Row, row};
use crate::job::{SessionFiles, open_input};

/// Runs the job; the result is the rows found.
pub fn run(cfg: &BatchConfig, s: u32, seq: u32, files: &SessionFiles) -> Result<String, Error> {
    let f = open_input(cfg, files)?;
    let rows = cfg.rows();
    if rows == 0 {
        return Ok("0 rows found (an empty table)".into());
    }
    let mut rng = Rng::new(mix64(cfg.seed ^ (u64::from(s) << 32) ^ u64::from(seq)));
    let mut b = [0u8; ROW_BYTES];
    for _ in 0..cfg.lookups {
        let i = rng.next_u64() % rows;
        f.read_exact_at(&mut b, i * ROW_BYTES as u64)
            .map_err(|e| Error::io("read", &files.input, e))?;
        let got = Row::decode(&b);
        let want = row(cfg.seed, s, i);
        if got.key != want.key {
            return Err(Error::Check(format!(
                "row {i} of {} has key {:#x}, the generator wrote {:#x}",
                files.input.display(),
                got.key,
                want.key
            )));
        }
    }
    Ok(format!("{} rows found", cfg.lookups))
}
