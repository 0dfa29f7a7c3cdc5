//! PostgreSQL's wire protocol (version 3) over a blocking stream: frontend messages written
//! with `postgres-protocol`'s serializers, backend messages read whole (a type byte and a
//! 4-byte big-endian length that counts itself) under a size cap and parsed by
//! `postgres-protocol`, and the server's ErrorResponse turned into a [`Fault`].

use std::io::{Read, Write};

use bytes::BytesMut;
use fallible_iterator::FallibleIterator;
use postgres_protocol::message::backend::{ErrorFields, Message};

use super::super::printable;
use super::super::reader::Fault;

/// A connection that writes frontend messages and reads whole backend messages.
pub(super) struct Messages<S> {
    stream: S,
    out: BytesMut,
}

impl<S: Read + Write> Messages<S> {
    pub(super) fn new(stream: S) -> Messages<S> {
        Messages {
            stream,
            out: BytesMut::new(),
        }
    }

    /// Sends one message, serialized by `write` (one of `postgres_protocol`'s frontend
    /// functions); `what` names it for the error when it cannot be serialized (a NUL in a
    /// user name or password).
    pub(super) fn send(
        &mut self,
        what: &str,
        write: impl FnOnce(&mut BytesMut) -> std::io::Result<()>,
    ) -> Result<(), Fault> {
        self.out.clear();
        write(&mut self.out).map_err(|e| Fault::Failed(format!("cannot send the {what}: {e}")))?;
        self.stream
            .write_all(&self.out)
            .map_err(|e| Fault::io(&e))?;
        self.stream.flush().map_err(|e| Fault::io(&e))
    }

    /// Reads the next message, of one of the types `expected` (their tag bytes) and at most
    /// `limit` bytes: another type is [`Fault::Garbage`] showing what came (not PostgreSQL,
    /// or out of step), a longer one [`Fault::TooLarge`], one that does not parse Garbage.
    pub(super) fn read(&mut self, expected: &[u8], limit: usize) -> Result<Message, Fault> {
        let mut header = [0u8; 5];
        self.stream
            .read_exact(&mut header)
            .map_err(|e| Fault::io(&e))?;
        let tag = header[0];
        if !expected.contains(&tag) {
            return Err(Fault::Garbage(format!(
                "a message of type {} where one of {} was due: {}",
                shown(tag),
                expected
                    .iter()
                    .map(|&t| shown(t))
                    .collect::<Vec<_>>()
                    .join(", "),
                printable(&header)
            )));
        }
        let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
        let Some(body) = len.checked_sub(4) else {
            return Err(Fault::Garbage(format!(
                "a message of type {} claims {len} bytes, fewer than its own length field",
                shown(tag)
            )));
        };
        if body > limit {
            return Err(Fault::TooLarge(limit as u64));
        }
        let mut buf = BytesMut::with_capacity(5 + body);
        buf.extend_from_slice(&header);
        buf.resize(5 + body, 0);
        self.stream
            .read_exact(&mut buf[5..])
            .map_err(|e| Fault::io(&e))?;
        let whole = buf.clone();
        match Message::parse(&mut buf) {
            Ok(Some(m)) => Ok(m),
            Ok(None) => Err(Fault::Garbage(format!(
                "a message of type {} cut short: {}",
                shown(tag),
                printable(&whole)
            ))),
            Err(e) => Err(Fault::Garbage(format!(
                "a message of type {} that does not parse ({e}): {}",
                shown(tag),
                printable(&whole)
            ))),
        }
    }

    /// The stream underneath.
    #[cfg(test)]
    pub(super) fn get_ref(&self) -> &S {
        &self.stream
    }
}

/// A tag byte as the protocol's documentation writes it (`'R'`), or in hex.
fn shown(tag: u8) -> String {
    if tag.is_ascii_graphic() {
        format!("'{}'", tag as char)
    } else {
        format!("0x{tag:02x}")
    }
}

/// An error the server sent (an ErrorResponse).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ServerError {
    /// The SQLSTATE (`28P01`: a wrong password).
    pub(super) code: String,
    /// The primary message.
    pub(super) message: String,
}

/// SQLSTATE 28P01, invalid_password.
const INVALID_PASSWORD: &str = "28P01";
/// SQLSTATE 28000, invalid_authorization_specification: no such role, or refused by pg_hba.
const INVALID_AUTHORIZATION: &str = "28000";
/// SQLSTATE 3D000, invalid_catalog_name: no such database.
const INVALID_CATALOG_NAME: &str = "3D000";
/// SQLSTATE 57014, query_canceled: `statement_timeout` ended the query.
const QUERY_CANCELED: &str = "57014";

impl ServerError {
    /// The error of an ErrorResponse's fields (`C` the SQLSTATE, `M` the message).
    pub(super) fn parse(mut fields: ErrorFields<'_>) -> Result<ServerError, Fault> {
        let mut e = ServerError {
            code: String::new(),
            message: String::new(),
        };
        while let Some(f) = fields
            .next()
            .map_err(|err| Fault::Garbage(format!("an error message that does not parse: {err}")))?
        {
            let text = String::from_utf8_lossy(f.value_bytes()).into_owned();
            match f.type_() {
                b'C' => e.code = text,
                b'M' => e.message = text,
                _ => {}
            }
        }
        Ok(e)
    }

    /// The fault: refused credentials name the `[[preset]]` field to set (`28P01` the
    /// password, `28000` the user and password), a missing database names `dbname`, a query
    /// the server cancelled for taking too long is a timeout; `tried` says which credentials
    /// were used.
    pub(super) fn fault(&self, tried: &str) -> Fault {
        let said = format!("{} (SQLSTATE {})", self.message, self.code);
        match self.code.as_str() {
            INVALID_PASSWORD => {
                Fault::Auth("password", format!("the server refused {tried}: {said}"))
            }
            INVALID_AUTHORIZATION => Fault::Auth(
                "user` and `password",
                format!("the server refused {tried}: {said}"),
            ),
            INVALID_CATALOG_NAME => Fault::Failed(format!(
                "the server answered: {said}; set `dbname` in its [[preset]]"
            )),
            QUERY_CANCELED => Fault::Timeout,
            _ => Fault::Failed(format!("the server answered: {said}")),
        }
    }
}

/// Backend messages built by hand, for the tests of this module and its siblings.
#[cfg(test)]
pub(super) mod fake {
    use super::Messages;
    use crate::signal::preset::reader::Wire;

    /// Messages over a wire that answers `input`.
    pub(crate) fn wire(input: &[u8]) -> Messages<Wire> {
        Messages::new(Wire::new(input))
    }

    /// A message on the wire: type, length (counting itself), body.
    pub(crate) fn msg(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        out.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
        out.extend_from_slice(body);
        out
    }

    /// An Authentication message of `kind` (0 ok, 3 cleartext, 5 md5, 10 SASL, …).
    pub(crate) fn auth(kind: u32, rest: &[u8]) -> Vec<u8> {
        let mut body = kind.to_be_bytes().to_vec();
        body.extend_from_slice(rest);
        msg(b'R', &body)
    }

    /// An ErrorResponse with severity FATAL, SQLSTATE `code` and `message`.
    pub(crate) fn error(code: &str, message: &str) -> Vec<u8> {
        let mut body = Vec::new();
        for (t, v) in [(b'S', "FATAL"), (b'C', code), (b'M', message)] {
            body.push(t);
            body.extend_from_slice(v.as_bytes());
            body.push(0);
        }
        body.push(0);
        msg(b'E', &body)
    }

    /// ReadyForQuery, idle.
    pub(crate) fn ready() -> Vec<u8> {
        msg(b'Z', b"I")
    }
}

#[cfg(test)]
mod tests {
    use super::fake::{error, msg, wire};
    use super::*;

    #[test]
    fn a_message_is_read_whole_and_parsed() {
        let mut input = msg(b'S', b"server_version\x0015.14\0");
        input.extend(msg(b'Z', b"I"));
        let mut w = wire(&input);
        let Message::ParameterStatus(p) = w.read(b"SZ", 100).unwrap() else {
            panic!("not a ParameterStatus")
        };
        assert_eq!(p.name().unwrap(), "server_version");
        assert_eq!(p.value().unwrap(), "15.14");
        assert!(matches!(w.read(b"Z", 100), Ok(Message::ReadyForQuery(_))));
    }

    #[test]
    fn a_frontend_message_is_written_by_postgres_protocol() {
        let mut w = wire(b"");
        w.send("query", |b| {
            postgres_protocol::message::frontend::query("SELECT 1", b)
        })
        .unwrap();
        assert_eq!(w.get_ref().output, b"Q\x00\x00\x00\x0dSELECT 1\0");
        let e = w
            .send("password", |b| {
                postgres_protocol::message::frontend::password_message(b"a\0b", b)
            })
            .unwrap_err();
        assert!(matches!(e, Fault::Failed(m) if m.contains("cannot send the password")));
    }

    /// The fault of reading one message of types `tags` from `input`.
    fn fails(input: &[u8], tags: &[u8], limit: usize) -> Fault {
        match wire(input).read(tags, limit) {
            Ok(_) => panic!("read a message from {input:?}"),
            Err(f) => f,
        }
    }

    #[test]
    fn another_protocol_an_unexpected_type_a_bad_length_or_a_cut_message_is_refused() {
        let e = fails(b"HTTP/1.1 400 Bad Request", b"RE", 100);
        assert!(
            matches!(&e, Fault::Garbage(g) if g.contains("type 'H'") && g.contains("HTTP/")),
            "{e:?}"
        );
        let e = fails(&msg(b'D', b""), b"TC", 100);
        assert!(
            matches!(&e, Fault::Garbage(g) if g.contains("one of 'T', 'C'")),
            "{e:?}"
        );
        let e = fails(b"R\x00\x00\x00\x02", b"R", 100);
        assert!(
            matches!(&e, Fault::Garbage(g) if g.contains("claims 2 bytes")),
            "{e:?}"
        );
        assert_eq!(fails(b"R\x7f\xff\xff\xff", b"R", 100), Fault::TooLarge(100));
        let e = fails(b"R\x00\x00\x00\x08\x00", b"R", 100);
        assert!(
            matches!(&e, Fault::Failed(w) if w.contains("closed")),
            "{e:?}"
        );
        // A ReadyForQuery with no status byte: the parser's error, as Garbage.
        let e = fails(&msg(b'Z', b""), b"Z", 100);
        assert!(
            matches!(&e, Fault::Garbage(g) if g.contains("does not parse")),
            "{e:?}"
        );
        let e = fails(&msg(b'R', b"\x00\x00\x00\x63"), b"R", 100);
        assert!(
            matches!(&e, Fault::Garbage(g) if g.contains("authentication tag")),
            "{e:?}"
        );
    }

    fn server_error(bytes: &[u8]) -> ServerError {
        let Message::ErrorResponse(body) = wire(bytes).read(b"E", 1000).unwrap() else {
            panic!("not an ErrorResponse")
        };
        ServerError::parse(body.fields()).unwrap()
    }

    #[test]
    fn sqlstates_map_to_the_field_to_set_a_timeout_or_the_servers_message() {
        let tried = "user monitor with the configured password";
        let e = server_error(&error(
            "28P01",
            "password authentication failed for user \"monitor\"",
        ));
        assert_eq!(e.code, "28P01");
        assert!(
            matches!(e.fault(tried), Fault::Auth("password", w) if w.starts_with("the server refused user monitor") && w.contains("SQLSTATE 28P01"))
        );
        let e = server_error(&error("28000", "role \"nobody\" does not exist"));
        assert!(matches!(
            e.fault(tried),
            Fault::Auth("user` and `password", _)
        ));
        let e = server_error(&error("3D000", "database \"nope\" does not exist"));
        assert!(
            matches!(e.fault(tried), Fault::Failed(w) if w.contains("database \"nope\"") && w.ends_with("set `dbname` in its [[preset]]"))
        );
        let e = server_error(&error(
            "57014",
            "canceling statement due to statement timeout",
        ));
        assert_eq!(e.fault(tried), Fault::Timeout);
        let e = server_error(&error("53300", "sorry, too many clients already"));
        assert_eq!(
            e.fault(tried),
            Fault::Failed(
                "the server answered: sorry, too many clients already (SQLSTATE 53300)".into()
            )
        );
    }

    #[test]
    fn an_error_message_with_unterminated_fields_is_garbage() {
        let Message::ErrorResponse(body) = wire(&msg(b'E', b"C28P01")).read(b"E", 100).unwrap()
        else {
            panic!("not an ErrorResponse")
        };
        assert!(matches!(
            ServerError::parse(body.fields()),
            Err(Fault::Garbage(_))
        ));
    }
}
