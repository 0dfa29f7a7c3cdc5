//! One JSON message per line: the framing of every perfpilot protocol between a coordinator and
//! its workers (`perfpilot_drive::coord::wire`'s messages, `perfpilot_study::hosts::wire`'s),
//! over any byte stream (TCP, TLS, an SSH child's pipes). A message is bounded, so a peer that
//! never ends its line cannot make the reader hold more than [`MAX_MESSAGE`] bytes.

use std::io::{BufRead, Read, Write};

use serde::Serialize;
use serde::de::DeserializeOwned;

/// The longest message read: a study file, a run's spec with its CSV data, or a measurement
/// with its histograms is far shorter; a longer line is refused before it is held whole.
pub const MAX_MESSAGE: usize = 16 << 20;

/// Writes one message as a line and flushes it.
pub fn send<T: Serialize>(w: &mut impl Write, msg: &T) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(msg).map_err(std::io::Error::other)?;
    line.push(b'\n');
    w.write_all(&line)?;
    w.flush()
}

/// Reads one message as [`send`] writes it; `Ok(None)` at the end of the stream. A line over
/// [`MAX_MESSAGE`] bytes is `InvalidData` (read no further than that), and so is a line that is
/// not a `T`.
pub fn recv<T: DeserializeOwned>(r: &mut impl BufRead) -> std::io::Result<Option<T>> {
    let mut line = Vec::new();
    let n = r
        .take(MAX_MESSAGE as u64 + 1)
        .read_until(b'\n', &mut line)?;
    if n == 0 {
        return Ok(None);
    }
    if n > MAX_MESSAGE {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "a message of more than {} (the most this protocol reads)",
                perfpilot_units::bytes(MAX_MESSAGE as u64)
            ),
        ));
    }
    serde_json::from_slice(&line).map(Some).map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("not a message of this perfpilot protocol: {e}"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    enum Note {
        Hello { version: String },
        Stop,
    }

    #[test]
    fn messages_sent_one_after_another_are_read_back_in_order_then_none() {
        let mut buf = Vec::new();
        let hello = Note::Hello {
            version: "line one\nstill one message".into(),
        };
        send(&mut buf, &hello).unwrap();
        send(&mut buf, &Note::Stop).unwrap();
        assert_eq!(buf.iter().filter(|&&b| b == b'\n').count(), 2);
        let mut r = std::io::BufReader::new(buf.as_slice());
        assert_eq!(recv::<Note>(&mut r).unwrap(), Some(hello));
        assert_eq!(recv::<Note>(&mut r).unwrap(), Some(Note::Stop));
        assert_eq!(recv::<Note>(&mut r).unwrap(), None);
    }

    #[test]
    fn a_line_longer_than_the_limit_is_refused_without_reading_it_all() {
        // An endless line: refused after MAX_MESSAGE bytes, not read to its end.
        let endless = std::io::repeat(b'x');
        let mut r = std::io::BufReader::new(endless);
        let e = recv::<Note>(&mut r).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("more than 16"), "{e}");
    }

    #[test]
    fn a_line_that_is_not_a_message_of_the_protocol_is_invalid_data() {
        let mut r = std::io::BufReader::new(&b"{\"Goodbye\":{}}\n"[..]);
        let e = recv::<Note>(&mut r).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
        assert!(
            e.to_string()
                .starts_with("not a message of this perfpilot protocol"),
            "{e}"
        );
    }
}
