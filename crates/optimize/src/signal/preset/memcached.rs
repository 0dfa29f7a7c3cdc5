//! memcached: the text protocol's `stats`, `cmd_get + cmd_set`.

use std::io::{BufRead, BufReader, Write};
use std::time::Duration;

use super::reader::{Fault, Session, Stream, read_line};
use super::{Endpoint, Reading, snippet};

/// The largest `stats` answer read (it is about 2 KiB).
const STATS_LIMIT: usize = 64 << 10;

/// A kept connection to one memcached.
pub(crate) struct Memcached {
    endpoint: Endpoint,
    conn: Option<BufReader<Stream>>,
}

impl Memcached {
    pub(crate) fn new(endpoint: Endpoint) -> Memcached {
        Memcached {
            endpoint,
            conn: None,
        }
    }
}

impl Session for Memcached {
    fn read(&mut self, io_limit: Duration) -> Result<Reading, Fault> {
        if self.conn.is_none() {
            self.conn = Some(BufReader::new(Stream::connect(&self.endpoint, io_limit)?));
        }
        let Some(conn) = self.conn.as_mut() else {
            unreachable!("connected just above")
        };
        conn.get_mut()
            .write_all(b"stats\r\n")
            .map_err(|e| Fault::io(&e))?;
        Ok(Reading {
            value: read_stats(conn)?,
            source: "cmd_get + cmd_set from stats".into(),
        })
    }

    fn reset(&mut self) {
        self.conn = None;
    }
}

/// Reads a `stats` answer up to its `END` line and gives `cmd_get + cmd_set`.
pub(crate) fn read_stats(r: &mut impl BufRead) -> Result<f64, Fault> {
    let (mut get, mut set, mut read) = (None, None, 0usize);
    loop {
        let line = read_line(r, 1024)?;
        read += line.len() + 2;
        if read > STATS_LIMIT {
            return Err(Fault::TooLarge(STATS_LIMIT as u64));
        }
        if line == b"END" {
            break;
        }
        let text = String::from_utf8_lossy(&line);
        let mut words = text.split_ascii_whitespace();
        if words.next() != Some("STAT") {
            return Err(Fault::Garbage(snippet(&line, 80)));
        }
        let (name, value) = (words.next(), words.next());
        let slot = match name {
            Some("cmd_get") => &mut get,
            Some("cmd_set") => &mut set,
            _ => continue,
        };
        *slot = Some(
            value
                .and_then(|v| v.parse::<u64>().ok())
                .ok_or_else(|| Fault::Garbage(snippet(&line, 80)))?,
        );
    }
    match (get, set) {
        (Some(g), Some(s)) => Ok((g + s) as f64),
        _ => Err(Fault::MetricMissing(
            "cmd_get and cmd_set (of stats)".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    /// `stats` of memcached 1.6.18 after one set and two gets.
    const CAPTURED: &[u8] = include_bytes!("testdata/memcached-stats.txt");

    #[test]
    fn the_captured_stats_give_gets_plus_sets() {
        assert_eq!(read_stats(&mut Cursor::new(CAPTURED)).unwrap(), 3.0);
    }

    #[test]
    fn an_error_line_is_garbage_and_a_missing_counter_is_named() {
        assert!(matches!(
            read_stats(&mut Cursor::new(b"ERROR\r\n")),
            Err(Fault::Garbage(g)) if g == "ERROR"
        ));
        assert!(matches!(
            read_stats(&mut Cursor::new(b"STAT pid 1\r\nSTAT cmd_get 4\r\nEND\r\n")),
            Err(Fault::MetricMissing(m)) if m.contains("cmd_set")
        ));
        assert!(matches!(
            read_stats(&mut Cursor::new(b"STAT cmd_get x\r\n")),
            Err(Fault::Garbage(_))
        ));
    }

    #[test]
    fn an_empty_or_endless_answer_gives_up() {
        assert!(matches!(
            read_stats(&mut Cursor::new(b"")),
            Err(Fault::Failed(_))
        ));
        let endless = b"STAT x 1\r\n".repeat(10_000);
        assert_eq!(
            read_stats(&mut Cursor::new(endless)),
            Err(Fault::TooLarge(STATS_LIMIT as u64))
        );
    }
}
