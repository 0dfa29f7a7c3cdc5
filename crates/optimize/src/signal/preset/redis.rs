//! Redis and Valkey: `INFO stats` over RESP, `total_commands_processed`. Hand-written: one
//! command does not justify a client crate's dependencies.

use std::io::{BufRead, BufReader, Write};
use std::time::Duration;

use super::reader::{Fault, Session, Stream, read_line};
use super::{Endpoint, PresetSettings, Reading, snippet};

/// The largest `INFO` answer read (it is a few kilobytes).
const REPLY_LIMIT: usize = 1 << 20;
/// The counter read.
const COUNTER: &str = "total_commands_processed";

/// A kept connection to one Redis server.
pub(crate) struct Redis {
    endpoint: Endpoint,
    settings: PresetSettings,
    conn: Option<BufReader<Stream>>,
}

impl Redis {
    pub(crate) fn new(endpoint: Endpoint, settings: PresetSettings) -> Redis {
        Redis {
            endpoint,
            settings,
            conn: None,
        }
    }

    fn connect(&self, limit: Duration) -> Result<BufReader<Stream>, Fault> {
        let mut conn = BufReader::new(Stream::connect(&self.endpoint, limit)?);
        if let Some(password) = &self.settings.password {
            let mut args = vec!["AUTH"];
            args.extend(self.settings.user.as_deref());
            args.push(password);
            send(conn.get_mut(), &args)?;
            match read_reply(&mut conn)? {
                Reply::Simple(_) => {}
                Reply::Error(e) => {
                    let field = if self.settings.user.is_some() {
                        "user` and `password"
                    } else {
                        "password"
                    };
                    return Err(Fault::Auth(field, format!("the server refused AUTH: {e}")));
                }
                Reply::Bulk(b) => return Err(Fault::Garbage(snippet(&b, 80))),
            }
        }
        Ok(conn)
    }
}

impl Session for Redis {
    fn read(&mut self, io_limit: Duration) -> Result<Reading, Fault> {
        if self.conn.is_none() {
            self.conn = Some(self.connect(io_limit)?);
        }
        let Some(conn) = self.conn.as_mut() else {
            unreachable!("connected just above")
        };
        send(conn.get_mut(), &["INFO", "stats"])?;
        match read_reply(conn)? {
            Reply::Bulk(text) => Ok(Reading {
                value: parse_info(&String::from_utf8_lossy(&text))?,
                source: format!("{COUNTER} from INFO stats"),
            }),
            Reply::Error(e) if e.starts_with("NOAUTH") || e.starts_with("WRONGPASS") => Err(
                Fault::Auth("password", format!("the server requires a password ({e})")),
            ),
            Reply::Error(e) if e.starts_with("NOPERM") => Err(Fault::Auth(
                "user",
                format!("the user may not run INFO ({e})"),
            )),
            Reply::Error(e) => Err(Fault::Failed(format!(
                "the server answered INFO with {e:?}"
            ))),
            Reply::Simple(s) => Err(Fault::Garbage(s)),
        }
    }

    fn reset(&mut self) {
        self.conn = None;
    }
}

/// A RESP reply of the kinds `INFO` and `AUTH` give.
#[derive(Debug, PartialEq)]
pub(crate) enum Reply {
    /// `+OK`.
    Simple(String),
    /// `-ERR …`, without the `-`.
    Error(String),
    /// `$<len>` and that many bytes.
    Bulk(Vec<u8>),
}

/// Sends one command as a RESP array of bulk strings.
fn send(w: &mut impl Write, args: &[&str]) -> Result<(), Fault> {
    let mut out = format!("*{}\r\n", args.len());
    for a in args {
        out.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    w.write_all(out.as_bytes()).map_err(|e| Fault::io(&e))
}

/// Reads one reply; anything but a simple string, an error or a bulk string is garbage, and
/// a bulk string over [`REPLY_LIMIT`] is too large (not read).
pub(crate) fn read_reply(r: &mut impl BufRead) -> Result<Reply, Fault> {
    let line = read_line(r, 64 << 10)?;
    let text = String::from_utf8_lossy(&line);
    match line.first() {
        Some(b'+') => Ok(Reply::Simple(text[1..].to_string())),
        Some(b'-') => Ok(Reply::Error(text[1..].to_string())),
        Some(b'$') => {
            let len: usize = text[1..]
                .parse()
                .map_err(|_| Fault::Garbage(snippet(&line, 80)))?;
            if len > REPLY_LIMIT {
                return Err(Fault::TooLarge(REPLY_LIMIT as u64));
            }
            let mut body = vec![0; len + 2];
            r.read_exact(&mut body).map_err(|e| Fault::io(&e))?;
            if !body.ends_with(b"\r\n") {
                return Err(Fault::Garbage(snippet(&body, 80)));
            }
            body.truncate(len);
            Ok(Reply::Bulk(body))
        }
        _ => Err(Fault::Garbage(snippet(&line, 80))),
    }
}

/// `total_commands_processed` of an `INFO` text (`key:value` lines).
pub(crate) fn parse_info(text: &str) -> Result<f64, Fault> {
    let value = text
        .lines()
        .find_map(|l| l.trim_end().strip_prefix(COUNTER)?.strip_prefix(':'))
        .ok_or_else(|| Fault::MetricMissing(format!("{COUNTER} (of INFO stats)")))?;
    value
        .parse::<u64>()
        .map(|v| v as f64)
        .map_err(|_| Fault::Garbage(format!("{COUNTER}:{}", snippet(value.as_bytes(), 40))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    /// `INFO stats` of redis-server 7.0.15, as sent on the wire.
    const CAPTURED: &[u8] = include_bytes!("testdata/redis-info-stats.resp");

    #[test]
    fn the_captured_info_stats_reply_gives_total_commands_processed() {
        let Reply::Bulk(text) = read_reply(&mut Cursor::new(CAPTURED)).unwrap() else {
            panic!("not a bulk reply")
        };
        assert_eq!(parse_info(&String::from_utf8(text).unwrap()).unwrap(), 2.0);
    }

    #[test]
    fn a_noauth_error_line_is_read_as_an_error_reply() {
        let r = read_reply(&mut Cursor::new(b"-NOAUTH Authentication required.\r\n")).unwrap();
        assert_eq!(r, Reply::Error("NOAUTH Authentication required.".into()));
    }

    #[test]
    fn garbage_empty_and_huge_replies_are_refused() {
        assert!(matches!(
            read_reply(&mut Cursor::new(b"HTTP/1.1 400 Bad Request\r\n")),
            Err(Fault::Garbage(g)) if g.starts_with("HTTP/1.1 400")
        ));
        assert!(matches!(
            read_reply(&mut Cursor::new(b"")),
            Err(Fault::Failed(_))
        ));
        assert_eq!(
            read_reply(&mut Cursor::new(b"$999999999\r\n")),
            Err(Fault::TooLarge(REPLY_LIMIT as u64))
        );
        assert!(matches!(
            read_reply(&mut Cursor::new(b"$5\r\nab")),
            Err(Fault::Failed(_))
        ));
        assert!(matches!(
            read_reply(&mut Cursor::new(b"$x\r\n")),
            Err(Fault::Garbage(_))
        ));
    }

    #[test]
    fn info_without_the_counter_or_with_a_bad_value_says_so() {
        assert!(matches!(
            parse_info("# Stats\r\ntotal_connections_received:3\r\n"),
            Err(Fault::MetricMissing(w)) if w.contains(COUNTER)
        ));
        assert!(matches!(
            parse_info("total_commands_processed:lots\r\n"),
            Err(Fault::Garbage(_))
        ));
    }

    #[test]
    fn a_command_is_sent_as_a_resp_array() {
        let mut out = Vec::new();
        send(&mut out, &["INFO", "stats"]).unwrap();
        assert_eq!(out, b"*2\r\n$4\r\nINFO\r\n$5\r\nstats\r\n");
    }
}
