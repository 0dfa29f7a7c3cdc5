//! MySQL and MariaDB: detected, not read in this build.
//!
//! The `mysql` crate (28.0, default features off, `minimal-rust`) adds 56 crates to the
//! build (URL, IDNA/ICU, regex, UUID, LRU, …) for one `SHOW GLOBAL STATUS LIKE 'Questions'`,
//! past the 40 this project accepts for it, and a hand-written client is not wanted. So a
//! MySQL server is recognised (status says so) and the reader answers that it is not
//! supported, and the daemon falls back to its next signal.

use std::time::Duration;

use super::Reading;
use super::reader::{Fault, Session};

/// The reader of a MySQL candidate: always "not supported in this build".
pub(crate) struct Mysql;

impl Session for Mysql {
    fn read(&mut self, _io_limit: Duration) -> Result<Reading, Fault> {
        Err(Fault::Unsupported(
            "reading MySQL/MariaDB's Questions needs a MySQL client this build leaves out; \
             configure a probe (e.g. mysqld_exporter's /metrics as a [[preset]] with \
             kind = \"prometheus\")"
                .into(),
        ))
    }

    fn reset(&mut self) {}
}
