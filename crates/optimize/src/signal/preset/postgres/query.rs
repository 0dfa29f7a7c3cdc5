//! The query: [`QUERY`] as a simple Query, its one row read and the answer read to
//! ReadyForQuery (so the kept connection stays in step), and Terminate.

use std::io::{Read, Write};

use fallible_iterator::FallibleIterator;
use postgres_protocol::message::backend::Message;
use postgres_protocol::message::frontend;

use super::super::reader::Fault;
use super::wire::{Messages, ServerError};

/// The query: every database's committed and rolled-back transactions.
pub const QUERY: &str = "SELECT sum(xact_commit + xact_rollback)::float8 FROM pg_stat_database";
/// The largest message of the answer read (its row is tens of bytes).
const ROW_LIMIT: usize = 64 << 10;
/// The most messages read for one answer (it has four): a server that streams more is not
/// answering this query.
const MESSAGES_LIMIT: usize = 1000;
/// The message types of a simple query's answer, with the asynchronous ones.
const ANSWER_TAGS: &[u8] = b"TDCZEINSA";

/// Runs [`QUERY`] and gives its value; NULL (no databases) is a missing metric. An error the
/// server sends is turned into a fault with [`ServerError::fault`], naming `tried`.
pub(super) fn transactions<S: Read + Write>(
    m: &mut Messages<S>,
    tried: &str,
) -> Result<f64, Fault> {
    m.send("query", |b| frontend::query(QUERY, b))?;
    let mut value: Option<Option<f64>> = None;
    let mut error = None;
    for _ in 0..MESSAGES_LIMIT {
        match m.read(ANSWER_TAGS, ROW_LIMIT)? {
            Message::ReadyForQuery(_) => {
                if let Some(e) = error {
                    return Err(e);
                }
                return value
                    .ok_or_else(|| Fault::Garbage(format!("no row in the answer to {QUERY}")))?
                    .ok_or_else(|| {
                        Fault::MetricMissing(
                            "xact_commit + xact_rollback (pg_stat_database is empty)".into(),
                        )
                    });
            }
            Message::DataRow(row) if value.is_none() => value = Some(first_column(&row)?),
            Message::DataRow(_) => {
                return Err(Fault::Garbage(format!("more than one row for {QUERY}")));
            }
            Message::ErrorResponse(e) => {
                // The first error is the one to report; the answer still ends with
                // ReadyForQuery, read so the connection stays usable.
                let e = ServerError::parse(e.fields())?.fault(tried);
                error.get_or_insert(e);
            }
            Message::EmptyQueryResponse => {
                return Err(Fault::Garbage(format!("an empty answer to {QUERY}")));
            }
            // The row's description, the command's tag, and what may come at any time
            // (notices, parameter changes, notifications).
            _ => {}
        }
    }
    Err(Fault::Garbage(format!(
        "more than {MESSAGES_LIMIT} messages in the answer to {QUERY}"
    )))
}

/// The first column of a text-format row as a number; `None` for NULL.
fn first_column(
    row: &postgres_protocol::message::backend::DataRowBody,
) -> Result<Option<f64>, Fault> {
    let garbage = |why: String| Fault::Garbage(format!("the row of {QUERY} {why}"));
    let range = row
        .ranges()
        .next()
        .map_err(|e| garbage(format!("does not parse: {e}")))?
        .ok_or_else(|| garbage("has no columns".into()))?;
    let Some(range) = range else {
        return Ok(None);
    };
    let text = String::from_utf8_lossy(&row.buffer()[range]);
    text.trim()
        .parse::<f64>()
        .map(Some)
        .map_err(|_| garbage(format!("holds {text:?}, not a number")))
}

/// Says goodbye (Terminate), so the server logs a clean disconnect rather than an aborted
/// one; failures do not matter, the connection is dropped anyway.
pub(super) fn terminate<S: Read + Write>(m: &mut Messages<S>) {
    let _ = m.send("terminate message", |b| {
        frontend::terminate(b);
        Ok(())
    });
}

#[cfg(test)]
mod tests {
    use super::super::wire::fake::{error, msg, ready, wire};
    use super::*;

    /// A row of one text column (`None`: NULL).
    fn data_row(value: Option<&str>) -> Vec<u8> {
        let mut body = 1u16.to_be_bytes().to_vec();
        match value {
            Some(v) => {
                body.extend_from_slice(&(v.len() as i32).to_be_bytes());
                body.extend_from_slice(v.as_bytes());
            }
            None => body.extend_from_slice(&(-1i32).to_be_bytes()),
        }
        msg(b'D', &body)
    }

    /// The RowDescription PostgreSQL 15 sends for [`QUERY`]: one float8 column named `sum`.
    fn row_description() -> Vec<u8> {
        let mut body = 1u16.to_be_bytes().to_vec();
        body.extend_from_slice(b"sum\0");
        body.extend_from_slice(&0u32.to_be_bytes()); // table oid
        body.extend_from_slice(&0i16.to_be_bytes()); // column
        body.extend_from_slice(&701u32.to_be_bytes()); // float8
        body.extend_from_slice(&8i16.to_be_bytes());
        body.extend_from_slice(&(-1i32).to_be_bytes());
        body.extend_from_slice(&0i16.to_be_bytes()); // text
        msg(b'T', &body)
    }

    fn answer(value: Option<&str>) -> Vec<u8> {
        let mut input = row_description();
        input.extend(data_row(value));
        input.extend(msg(b'C', b"SELECT 1\0"));
        input.extend(ready());
        input
    }

    fn ask(input: &[u8]) -> (Result<f64, Fault>, Vec<u8>) {
        let mut m = wire(input);
        let r = transactions(&mut m, "user postgres");
        (r, m.get_ref().output.clone())
    }

    #[test]
    fn the_answer_gives_the_sum_and_the_query_is_one_simple_query_message() {
        let (r, out) = ask(&answer(Some("123456")));
        assert_eq!(r.unwrap(), 123456.0);
        let mut expected = vec![b'Q'];
        expected.extend_from_slice(&(QUERY.len() as u32 + 5).to_be_bytes());
        expected.extend_from_slice(QUERY.as_bytes());
        expected.push(0);
        assert_eq!(out, expected);
    }

    #[test]
    fn a_notice_before_the_row_is_skipped() {
        let mut input = msg(b'N', b"SNOTICE\0Mhello\0\0");
        input.extend(answer(Some("7")));
        assert_eq!(ask(&input).0.unwrap(), 7.0);
    }

    #[test]
    fn null_is_a_missing_metric_and_text_is_garbage() {
        assert!(
            matches!(ask(&answer(None)).0, Err(Fault::MetricMissing(w)) if w.contains("empty"))
        );
        assert!(
            matches!(ask(&answer(Some("lots"))).0, Err(Fault::Garbage(g)) if g.contains("\"lots\", not a number"))
        );
    }

    #[test]
    fn a_cancelled_query_is_a_timeout_once_the_server_is_ready_again() {
        let mut input = error("57014", "canceling statement due to statement timeout");
        input.extend(ready());
        let mut m = wire(&input);
        assert_eq!(transactions(&mut m, "x"), Err(Fault::Timeout));
        assert_eq!(
            m.get_ref().input.position() as usize,
            input.len(),
            "read to the end"
        );
    }

    #[test]
    fn a_cut_answer_or_one_without_a_row_is_refused() {
        let all = answer(Some("5"));
        let (r, _) = ask(&all[..all.len() - 3]);
        assert!(matches!(r, Err(Fault::Failed(w)) if w.contains("closed")));
        let mut input = row_description();
        input.extend(msg(b'C', b"SELECT 0\0"));
        input.extend(ready());
        assert!(matches!(ask(&input).0, Err(Fault::Garbage(g)) if g.starts_with("no row")));
        let mut two = row_description();
        two.extend(data_row(Some("1")));
        two.extend(data_row(Some("2")));
        assert!(
            matches!(ask(&two).0, Err(Fault::Garbage(g)) if g.starts_with("more than one row"))
        );
        // A row that says it has a column and holds none.
        let mut input = row_description();
        input.extend(msg(b'D', b"\x00\x01\x00\x00\x00\x09ab"));
        assert!(matches!(ask(&input).0, Err(Fault::Garbage(g)) if g.contains("does not parse")));
    }

    #[test]
    fn terminate_sends_x() {
        let mut m = wire(b"");
        terminate(&mut m);
        assert_eq!(m.get_ref().output, b"X\x00\x00\x00\x04");
    }
}
