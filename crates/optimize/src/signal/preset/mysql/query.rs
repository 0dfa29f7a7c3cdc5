//! The query: `SHOW GLOBAL STATUS LIKE 'Questions'` as a COM_QUERY, its text result set read
//! to the end (so the kept connection stays in step), and COM_QUIT.

use std::io::{Read, Write};

use super::super::reader::Fault;
use super::packet::{ERR, Fields, OK, Packets, ServerError, is_eof, printable};

/// The query sent.
pub(super) const QUERY: &str = "SHOW GLOBAL STATUS LIKE 'Questions'";
/// The status variable read.
pub(super) const VARIABLE: &str = "Questions";
const COM_QUIT: u8 = 0x01;
const COM_QUERY: u8 = 0x03;
/// The largest packet of the answer read (a status row is tens of bytes).
const ROW_LIMIT: usize = 64 << 10;
/// The most packets read for one answer (it has a handful): a server that streams more is
/// not answering this query.
const PACKETS_LIMIT: usize = 1000;

/// Runs [`QUERY`] and gives the value of `Questions`. An error the server sends is turned
/// into a fault with [`ServerError::fault`], naming `field` and `tried`.
pub(super) fn questions<S: Read + Write>(
    p: &mut Packets<S>,
    field: &'static str,
    tried: &str,
) -> Result<u64, Fault> {
    p.start_command();
    let mut command = vec![COM_QUERY];
    command.extend_from_slice(QUERY.as_bytes());
    p.write(&command)?;
    let first = p.read(ROW_LIMIT)?;
    let columns = match first.first().copied() {
        Some(ERR) => return Err(ServerError::parse(&first)?.fault(field, tried)),
        Some(OK) | None => {
            return Err(Fault::Garbage(format!(
                "no result set for {QUERY}: {}",
                printable(&first)
            )));
        }
        Some(_) => Fields::new(&first, "the column count")
            .lenenc_int()?
            .unwrap_or(0),
    };
    if !(2..=64).contains(&columns) {
        return Err(Fault::Garbage(format!(
            "{columns} columns for {QUERY}, where SHOW STATUS has 2"
        )));
    }
    // The column definitions, then an EOF packet.
    let mut packets = 1;
    for _ in 0..columns {
        next(p, &mut packets, field, tried)?;
    }
    let end = next(p, &mut packets, field, tried)?;
    if !is_eof(&end) {
        return Err(Fault::Garbage(format!(
            "no end of the column definitions: {}",
            printable(&end)
        )));
    }
    let mut value = None;
    loop {
        let row = next(p, &mut packets, field, tried)?;
        if is_eof(&row) {
            break;
        }
        let mut f = Fields::new(&row, "a row");
        let name = f.lenenc_bytes()?.unwrap_or_default();
        let text = f.lenenc_bytes()?.unwrap_or_default();
        if name.eq_ignore_ascii_case(VARIABLE.as_bytes()) {
            let text = String::from_utf8_lossy(text);
            value =
                Some(text.trim().parse::<u64>().map_err(|_| {
                    Fault::Garbage(format!("{VARIABLE} = {:?}, not a count", text))
                })?);
        }
    }
    value.ok_or_else(|| Fault::MetricMissing(format!("{VARIABLE} (of SHOW GLOBAL STATUS)")))
}

/// The next packet of an answer; an ERR packet ends it with the server's error.
fn next<S: Read + Write>(
    p: &mut Packets<S>,
    count: &mut usize,
    field: &'static str,
    tried: &str,
) -> Result<Vec<u8>, Fault> {
    *count += 1;
    if *count > PACKETS_LIMIT {
        return Err(Fault::Garbage(format!(
            "more than {PACKETS_LIMIT} packets in the answer to {QUERY}"
        )));
    }
    let packet = p.read(ROW_LIMIT)?;
    if packet.first() == Some(&ERR) {
        return Err(ServerError::parse(&packet)?.fault(field, tried));
    }
    Ok(packet)
}

/// Says goodbye (COM_QUIT), so the server logs a clean disconnect rather than an aborted one;
/// failures do not matter, the connection is dropped anyway.
pub(super) fn quit<S: Read + Write>(p: &mut Packets<S>) {
    p.start_command();
    let _ = p.write(&[COM_QUIT]);
}

#[cfg(test)]
mod tests {
    use super::super::packet::{frame, unhex, wire};
    use super::*;

    /// MariaDB 10.11.19's answer to the query, as sent to this client (captured with socat):
    /// the column count, 2 column definitions, EOF, the row `Questions | 22`, EOF.
    const ANSWER: &str = "
        01 00 00 01 02 5e 00 00 02 03 64 65 66 12 69 6e 66 6f 72 6d 61 74 69 6f 6e 5f 73 63 68
        65 6d 61 0e 53 45 53 53 49 4f 4e 5f 53 54 41 54 55 53 0e 53 45 53 53 49 4f 4e 5f 53 54
        41 54 55 53 0d 56 61 72 69 61 62 6c 65 5f 6e 61 6d 65 0d 56 41 52 49 41 42 4c 45 5f 4e
        41 4d 45 0c 21 00 c0 00 00 00 fd 01 10 00 00 00 57 00 00 03 03 64 65 66 12 69 6e 66 6f
        72 6d 61 74 69 6f 6e 5f 73 63 68 65 6d 61 0e 53 45 53 53 49 4f 4e 5f 53 54 41 54 55 53
        0e 53 45 53 53 49 4f 4e 5f 53 54 41 54 55 53 05 56 61 6c 75 65 0e 56 41 52 49 41 42 4c
        45 5f 56 41 4c 55 45 0c 21 00 00 30 00 00 fd 01 10 00 00 00 05 00 00 04 fe 00 00 22 00
        0d 00 00 05 09 51 75 65 73 74 69 6f 6e 73 02 32 32 05 00 00 06 fe 00 00 02 00";

    /// The answer's packets from the column count up to (not including) the first row.
    fn header_of_answer() -> Vec<u8> {
        let all = unhex(ANSWER);
        let row = all
            .windows(5)
            .position(|w| w == [0x0d, 0, 0, 5, 9])
            .unwrap();
        all[..row].to_vec()
    }

    fn ask(input: &[u8]) -> (Result<u64, Fault>, Vec<u8>) {
        let mut p = wire(input);
        let r = questions(&mut p, "password", "user root");
        (r, p.get_ref().output.clone())
    }

    #[test]
    fn the_captured_answer_gives_questions_and_the_query_is_packet_zero() {
        let (r, out) = ask(&unhex(ANSWER));
        assert_eq!(r.unwrap(), 22);
        let mut expected = vec![QUERY.len() as u8 + 1, 0, 0, 0, COM_QUERY];
        expected.extend_from_slice(QUERY.as_bytes());
        assert_eq!(out, expected);
    }

    #[test]
    fn an_answer_without_the_row_is_a_missing_metric() {
        let mut input = header_of_answer();
        input.extend_from_slice(b"\x05\x00\x00\x05\xfe\x00\x00\x02\x00");
        let (r, _) = ask(&input);
        assert!(matches!(r, Err(Fault::MetricMissing(w)) if w.contains("Questions")));
    }

    #[test]
    fn a_value_that_is_not_a_count_is_garbage() {
        let mut input = header_of_answer();
        input.extend_from_slice(
            b"\x0d\x00\x00\x05\x09Questions\x02xx\x05\x00\x00\x06\xfe\x00\x00\x02\x00",
        );
        let (r, _) = ask(&input);
        assert!(matches!(r, Err(Fault::Garbage(g)) if g.contains("not a count")));
    }

    #[test]
    fn an_error_answer_is_the_servers_error_and_a_privilege_error_names_the_field() {
        let (r, _) = ask(&frame(1, b"\xff\x1d\x04#08S01Server shutdown in progress"));
        assert!(
            matches!(r, Err(Fault::Failed(w)) if w == "the server answered with error 1053: Server shutdown in progress")
        );
        let (r, _) = ask(&frame(
            1,
            b"\xff\xcb\x04#42000Access denied; you need the PROCESS privilege",
        ));
        assert!(matches!(r, Err(Fault::Auth("password", w)) if w.contains("error 1227")));
    }

    #[test]
    fn an_ok_instead_of_a_result_set_or_a_cut_answer_is_refused() {
        let (r, _) = ask(b"\x07\x00\x00\x01\x00\x00\x00\x02\x00\x00\x00");
        assert!(matches!(r, Err(Fault::Garbage(g)) if g.starts_with("no result set")));
        let all = unhex(ANSWER);
        let (r, _) = ask(&all[..all.len() - 9]);
        assert!(matches!(r, Err(Fault::Failed(w)) if w.contains("closed")));
    }

    #[test]
    fn quit_sends_com_quit_as_packet_zero() {
        let mut p = wire(b"");
        quit(&mut p);
        assert_eq!(p.get_ref().output, [1, 0, 0, 0, COM_QUIT]);
    }
}
