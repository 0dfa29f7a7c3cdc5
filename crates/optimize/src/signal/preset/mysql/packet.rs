//! MySQL packets: the framing (a 3-byte length and a sequence number before each payload),
//! the decoding of the protocol's integers and strings, and the server's ERR packet.

use std::io::{Read, Write};

pub(super) use super::super::printable;
use super::super::reader::Fault;

/// A payload of this length continues in the next packet.
const CHUNK: usize = 0xff_ffff;

/// A connection that reads and writes whole packets and keeps their sequence numbers.
pub(super) struct Packets<S> {
    stream: S,
    /// The sequence number of the next packet, read or written.
    seq: u8,
}

impl<S: Read + Write> Packets<S> {
    /// Packets over `stream`; the server speaks first, with sequence number 0.
    pub(super) fn new(stream: S) -> Packets<S> {
        Packets { stream, seq: 0 }
    }

    /// Starts a command: its packet and the answer count from 0 again.
    pub(super) fn start_command(&mut self) {
        self.seq = 0;
    }

    /// Reads one payload (joining continued packets) of at most `limit` bytes: a longer one is
    /// [`Fault::TooLarge`], a packet out of sequence is [`Fault::Garbage`] (not MySQL, or out
    /// of step).
    pub(super) fn read(&mut self, limit: usize) -> Result<Vec<u8>, Fault> {
        let mut payload = Vec::new();
        loop {
            let mut header = [0u8; 4];
            self.stream
                .read_exact(&mut header)
                .map_err(|e| Fault::io(&e))?;
            if header[3] != self.seq {
                return Err(Fault::Garbage(format!(
                    "a packet numbered {} where {} was due (header {})",
                    header[3],
                    self.seq,
                    printable(&header)
                )));
            }
            self.seq = self.seq.wrapping_add(1);
            let len =
                usize::from(header[0]) | usize::from(header[1]) << 8 | usize::from(header[2]) << 16;
            if payload.len() + len > limit {
                return Err(Fault::TooLarge(limit as u64));
            }
            let start = payload.len();
            payload.resize(start + len, 0);
            self.stream
                .read_exact(&mut payload[start..])
                .map_err(|e| Fault::io(&e))?;
            if len < CHUNK {
                return Ok(payload);
            }
        }
    }

    /// Writes `payload` as the next packet (what perfpilot sends is far below 16 MiB).
    pub(super) fn write(&mut self, payload: &[u8]) -> Result<(), Fault> {
        if payload.len() >= CHUNK {
            return Err(Fault::Failed(format!(
                "a packet of {} bytes is too long to send",
                payload.len()
            )));
        }
        let len = (payload.len() as u32).to_le_bytes();
        let mut out = Vec::with_capacity(payload.len() + 4);
        out.extend_from_slice(&[len[0], len[1], len[2], self.seq]);
        out.extend_from_slice(payload);
        self.seq = self.seq.wrapping_add(1);
        self.stream.write_all(&out).map_err(|e| Fault::io(&e))?;
        self.stream.flush().map_err(|e| Fault::io(&e))
    }

    /// The stream underneath.
    #[cfg(test)]
    pub(super) fn get_ref(&self) -> &S {
        &self.stream
    }
}

/// A reader of one payload's fields, in order.
pub(super) struct Fields<'a> {
    data: &'a [u8],
    pos: usize,
    /// What the payload is, for the error when it ends early ("the greeting").
    what: &'static str,
}

impl<'a> Fields<'a> {
    /// The fields of `data`, a payload of kind `what`.
    pub(super) fn new(data: &'a [u8], what: &'static str) -> Fields<'a> {
        Fields { data, pos: 0, what }
    }

    fn short(&self) -> Fault {
        Fault::Garbage(format!(
            "{} ends early: {}",
            self.what,
            printable(self.data)
        ))
    }

    /// The next `n` bytes.
    pub(super) fn bytes(&mut self, n: usize) -> Result<&'a [u8], Fault> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.data.len());
        let Some(end) = end else {
            return Err(self.short());
        };
        let out = &self.data[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    /// A 1-byte integer.
    pub(super) fn u8(&mut self) -> Result<u8, Fault> {
        Ok(self.bytes(1)?[0])
    }

    /// A 2-byte little-endian integer.
    pub(super) fn u16(&mut self) -> Result<u16, Fault> {
        let b = self.bytes(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    /// A 4-byte little-endian integer.
    pub(super) fn u32(&mut self) -> Result<u32, Fault> {
        let b = self.bytes(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// Bytes up to a NUL (which is skipped); without a NUL, the rest.
    pub(super) fn nul_terminated(&mut self) -> &'a [u8] {
        let rest = self.rest();
        match rest.iter().position(|&b| b == 0) {
            Some(i) => {
                self.pos -= rest.len() - i - 1;
                &rest[..i]
            }
            None => rest,
        }
    }

    /// A length-encoded integer; `None` is SQL NULL (`0xfb`).
    pub(super) fn lenenc_int(&mut self) -> Result<Option<u64>, Fault> {
        let n = match self.u8()? {
            0xfb => return Ok(None),
            0xfc => 2,
            0xfd => 3,
            0xfe => 8,
            0xff => return Err(self.short()),
            small => return Ok(Some(u64::from(small))),
        };
        let b = self.bytes(n)?;
        Ok(Some(
            b.iter()
                .rev()
                .fold(0u64, |acc, &byte| acc << 8 | u64::from(byte)),
        ))
    }

    /// A length-encoded string; `None` is SQL NULL.
    pub(super) fn lenenc_bytes(&mut self) -> Result<Option<&'a [u8]>, Fault> {
        match self.lenenc_int()? {
            None => Ok(None),
            Some(n) => {
                let n = usize::try_from(n).map_err(|_| self.short())?;
                self.bytes(n).map(Some)
            }
        }
    }

    /// Everything not read yet (consumed).
    pub(super) fn rest(&mut self) -> &'a [u8] {
        let out = &self.data[self.pos.min(self.data.len())..];
        self.pos = self.data.len();
        out
    }

    /// Whether everything was read.
    pub(super) fn is_empty(&self) -> bool {
        self.pos >= self.data.len()
    }
}

/// The first byte of an ERR packet.
pub(super) const ERR: u8 = 0xff;
/// The first byte of an OK packet.
pub(super) const OK: u8 = 0x00;
/// The first byte of an EOF packet (shorter than 9 bytes), or of an auth switch request.
pub(super) const EOF: u8 = 0xfe;

/// Whether `p` is an EOF packet (a row starting with `0xfe` is at least 9 bytes long).
pub(super) fn is_eof(p: &[u8]) -> bool {
    p.first() == Some(&EOF) && p.len() < 9
}

/// An error the server sent (an ERR packet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ServerError {
    /// The error number (1045: access denied).
    pub(super) code: u16,
    /// The message.
    pub(super) message: String,
}

/// Error numbers about who may connect or what they may run: the fix is other credentials.
const ACCESS_ERRORS: [u16; 9] = [
    1044, // ER_DBACCESS_DENIED_ERROR
    1045, // ER_ACCESS_DENIED_ERROR
    1130, // ER_HOST_NOT_PRIVILEGED
    1142, // ER_TABLEACCESS_DENIED_ERROR
    1227, // ER_SPECIFIC_ACCESS_DENIED_ERROR
    1251, // ER_NOT_SUPPORTED_AUTH_MODE
    1698, // ER_ACCESS_DENIED_NO_PASSWORD_ERROR (MySQL's auth_socket)
    3118, // ER_ACCOUNT_HAS_BEEN_LOCKED (MySQL)
    4151, // ER_ACCOUNT_HAS_BEEN_LOCKED (MariaDB)
];

impl ServerError {
    /// The ERR packet `p` (its first byte is `0xff`). The SQL state (`#28000`) is left out of
    /// the message: it is absent before the handshake and the number says more.
    pub(super) fn parse(p: &[u8]) -> Result<ServerError, Fault> {
        let mut f = Fields::new(p, "an error packet");
        if f.u8()? != ERR {
            return Err(Fault::Garbage(printable(p)));
        }
        let code = f.u16()?;
        let mut rest = f.rest();
        if rest.first() == Some(&b'#') && rest.len() >= 6 {
            rest = &rest[6..];
        }
        Ok(ServerError {
            code,
            message: String::from_utf8_lossy(rest).into_owned(),
        })
    }

    /// The fault: refused credentials or privileges name `field`, the `[[preset]]` field to
    /// set; `tried` says which credentials were used.
    pub(super) fn fault(&self, field: &'static str, tried: &str) -> Fault {
        if ACCESS_ERRORS.contains(&self.code) {
            Fault::Auth(
                field,
                format!(
                    "the server refused {tried}: {} (error {})",
                    self.message, self.code
                ),
            )
        } else {
            Fault::Failed(format!(
                "the server answered with error {}: {}",
                self.code, self.message
            ))
        }
    }
}

#[cfg(test)]
pub(super) use wire::{frame, unhex, wire};

/// A fake connection for the tests of this module and its siblings.
#[cfg(test)]
mod wire {
    use super::*;
    use crate::signal::preset::reader::Wire;

    /// The bytes of hex text (`"0a 35 2e"`; spaces and newlines ignored).
    pub(crate) fn unhex(text: &str) -> Vec<u8> {
        let digits: Vec<u8> = text.bytes().filter(u8::is_ascii_hexdigit).collect();
        digits
            .chunks(2)
            .map(|d| u8::from_str_radix(std::str::from_utf8(d).unwrap(), 16).unwrap())
            .collect()
    }

    /// A packet on the wire: length, sequence number, payload.
    pub(crate) fn frame(seq: u8, payload: &[u8]) -> Vec<u8> {
        let len = (payload.len() as u32).to_le_bytes();
        let mut out = vec![len[0], len[1], len[2], seq];
        out.extend_from_slice(payload);
        out
    }

    /// Packets over a wire that answers `input`.
    pub(crate) fn wire(input: &[u8]) -> Packets<Wire> {
        Packets::new(Wire::new(input))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packets_are_read_in_sequence_and_written_with_the_next_number() {
        let mut p = wire(b"\x02\x00\x00\x00ab\x01\x00\x00\x01c");
        assert_eq!(p.read(100).unwrap(), b"ab");
        assert_eq!(p.read(100).unwrap(), b"c");
        p.write(b"xyz").unwrap();
        assert_eq!(p.get_ref().output, b"\x03\x00\x00\x02xyz");
        p.start_command();
        p.write(b"q").unwrap();
        assert_eq!(&p.get_ref().output[7..], b"\x01\x00\x00\x00q");
    }

    #[test]
    fn a_packet_out_of_sequence_or_too_long_or_cut_short_is_refused() {
        assert!(
            matches!(wire(b"HTTP/1.1 400").read(100), Err(Fault::Garbage(g)) if g.contains("HTTP"))
        );
        assert_eq!(
            wire(b"\xff\x00\x00\x00").read(100),
            Err(Fault::TooLarge(100))
        );
        assert!(matches!(
            wire(b"\x05\x00\x00\x00ab").read(100),
            Err(Fault::Failed(w)) if w.contains("closed")
        ));
    }

    #[test]
    fn a_payload_of_sixteen_mebibytes_continues_in_the_next_packet() {
        let mut input = vec![0xff, 0xff, 0xff, 0];
        input.extend(vec![b'a'; CHUNK]);
        input.extend_from_slice(b"\x01\x00\x00\x01b");
        let got = wire(&input).read(CHUNK + 1).unwrap();
        assert_eq!(got.len(), CHUNK + 1);
        assert_eq!(got.last(), Some(&b'b'));
    }

    #[test]
    fn length_encoded_integers_and_strings_are_decoded() {
        let data = b"\x05\xfc\x34\x12\xfd\x01\x02\x03\xfe\x01\0\0\0\0\0\0\x01\xfb\x03abc\x02x";
        let mut f = Fields::new(data, "a test");
        assert_eq!(f.lenenc_int().unwrap(), Some(5));
        assert_eq!(f.lenenc_int().unwrap(), Some(0x1234));
        assert_eq!(f.lenenc_int().unwrap(), Some(0x030201));
        assert_eq!(f.lenenc_int().unwrap(), Some(0x0100_0000_0000_0001));
        assert_eq!(f.lenenc_bytes().unwrap(), None);
        assert_eq!(f.lenenc_bytes().unwrap(), Some(&b"abc"[..]));
        assert!(
            matches!(f.lenenc_bytes(), Err(Fault::Garbage(g)) if g.starts_with("a test ends early"))
        );
    }

    #[test]
    fn a_nul_terminated_string_stops_at_its_nul_or_at_the_end() {
        let mut f = Fields::new(b"root\0rest", "a test");
        assert_eq!(f.nul_terminated(), b"root");
        assert_eq!(f.nul_terminated(), b"rest");
        assert!(f.is_empty());
    }

    #[test]
    fn an_access_denied_error_names_the_field_and_another_error_does_not() {
        // Captured from MariaDB 10.11 (a wrong password, over the Unix socket).
        let p =
            b"\xff\x15\x04#28000Access denied for user 'monitor'@'localhost' (using password: YES)";
        let e = ServerError::parse(p).unwrap();
        assert_eq!(e.code, 1045);
        assert_eq!(
            e.message,
            "Access denied for user 'monitor'@'localhost' (using password: YES)"
        );
        let Fault::Auth(field, why) = e.fault("password", "user monitor") else {
            panic!("not an auth fault")
        };
        assert_eq!(field, "password");
        assert!(why.contains("refused user monitor: Access denied"), "{why}");
        // Before the handshake there is no SQL state.
        let e = ServerError::parse(b"\xff\x10\x04Too many connections").unwrap();
        assert_eq!((e.code, e.message.as_str()), (1040, "Too many connections"));
        assert!(matches!(e.fault("password", "x"), Fault::Failed(w) if w.contains("1040")));
    }

    #[test]
    fn binary_garbage_is_shown_in_hex_and_text_as_text() {
        assert_eq!(printable(b"\x00\xff"), "00 ff");
        assert_eq!(printable(b"HTTP/1.1"), "HTTP/1.1");
    }
}
