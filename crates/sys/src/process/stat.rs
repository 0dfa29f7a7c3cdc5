//! `/proc/<pid>/stat` and `/proc/<pid>/task/<tid>/stat`.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// The fields of `/proc/<pid>/stat` (or `/proc/<pid>/task/<tid>/stat`) that perfpilot uses.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskStat {
    /// The process (or thread) id.
    pub pid: i32,
    /// The command name (at most 15 bytes, may contain spaces and parentheses).
    pub comm: String,
    /// The scheduling state: `R` running, `S` sleeping, `D` in uninterruptible wait, …
    pub state: char,
    /// The parent's process id.
    pub ppid: i32,
    /// Minor page faults (no I/O needed).
    pub minflt: u64,
    /// Major page faults (the page was read from storage).
    pub majflt: u64,
    /// User CPU time in clock ticks (for a process: all its threads, live and dead).
    pub utime: u64,
    /// System CPU time in clock ticks (for a process: all its threads, live and dead).
    pub stime: u64,
    /// User CPU ticks of its children that exited and were waited for (with theirs).
    pub cutime: u64,
    /// System CPU ticks of its children that exited and were waited for (with theirs).
    pub cstime: u64,
    /// The nice value, -20 (favoured) to 19.
    pub nice: i64,
    /// Threads in the process.
    pub num_threads: u32,
    /// Start time in clock ticks after boot.
    pub starttime: u64,
    /// Virtual memory size in bytes.
    pub vsize: u64,
    /// Resident set size in pages.
    pub rss_pages: u64,
    /// The CPU it last ran on.
    pub processor: Option<u32>,
    /// Ticks spent waiting for block I/O (delay accounting).
    pub blkio_ticks: u64,
}

/// Parses the text of a `stat` file. The command name may contain spaces and parentheses: it is
/// everything between the first `(` and the last `)`.
pub fn parse_stat(text: &[u8], path: &Path) -> Result<TaskStat> {
    let mut st = TaskStat::default();
    parse_stat_into(text, path, &mut st)?;
    Ok(st)
}

/// [`parse_stat`] into `st`, whose command name's allocation is reused: a sampler reading
/// every process's `stat` each pass allocates nothing for it. Every field is overwritten; on
/// an error `st` holds a partial reading. The fields are cut and their numbers read from the
/// bytes (a sampler parses tens of thousands of these a pass), with the rules of `str::parse`:
/// an optional sign, decimal digits, overflow an error.
pub fn parse_stat_into(text: &[u8], path: &Path, st: &mut TaskStat) -> Result<()> {
    let bad = |msg: String| Error::parse(path, 1, msg);
    let open = text
        .iter()
        .position(|&b| b == b'(')
        .ok_or_else(|| bad("no '(' before the command name".into()))?;
    let close = text
        .iter()
        .rposition(|&b| b == b')')
        .ok_or_else(|| bad("no ')' after the command name".into()))?;
    if close < open {
        return Err(bad("')' before '('".into()));
    }
    let pid: i32 = std::str::from_utf8(&text[..open])
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .ok_or_else(|| bad("the pid is not a number".into()))?;
    let rest =
        std::str::from_utf8(&text[close + 1..]).map_err(|_| bad("fields are not UTF-8".into()))?;
    let mut comm = std::mem::take(&mut st.comm);
    comm.clear();
    comm.push_str(&String::from_utf8_lossy(&text[open + 1..close]));
    *st = TaskStat {
        pid,
        comm,
        ..TaskStat::default()
    };
    // Field numbers as in proc(5); the fields start at field 3 (state).
    let mut n = 0;
    for (i, tok) in Fields::new(rest).enumerate() {
        let field = i + 3;
        n = field;
        let num = || -> Result<u64> {
            unsigned(tok.as_bytes())
                .ok_or_else(|| bad(format!("field {field}: {tok:?} is not a number")))
        };
        let signed = || -> Result<i64> {
            signed(tok.as_bytes())
                .ok_or_else(|| bad(format!("field {field}: {tok:?} is not a number")))
        };
        match field {
            3 => st.state = tok.chars().next().unwrap_or('?'),
            4 => {
                st.ppid = signed()
                    .ok()
                    .and_then(|v| i32::try_from(v).ok())
                    .ok_or_else(|| bad(format!("field 4: {tok:?} is not a pid")))?
            }
            10 => st.minflt = num()?,
            12 => st.majflt = num()?,
            14 => st.utime = num()?,
            15 => st.stime = num()?,
            // Signed in the kernel; never negative in practice, read as 0 if it were.
            16 => st.cutime = signed()?.max(0) as u64,
            17 => st.cstime = signed()?.max(0) as u64,
            19 => st.nice = signed()?,
            20 => st.num_threads = num()? as u32,
            22 => st.starttime = num()?,
            23 => st.vsize = num()?,
            24 => st.rss_pages = num()?,
            39 => st.processor = Some(num()? as u32),
            42 => {
                st.blkio_ticks = num()?;
                break;
            }
            _ => {}
        }
    }
    if n < 24 {
        return Err(bad(format!("only {n} fields; expected at least 24")));
    }
    Ok(())
}

/// The fields of a line split at ASCII whitespace, empty ones skipped (as
/// `split_ascii_whitespace`, without its per-character closure).
struct Fields<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> Fields<'a> {
    fn new(text: &'a str) -> Self {
        Fields { text, at: 0 }
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        let b = self.text.as_bytes();
        let mut i = self.at;
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        if i == b.len() {
            self.at = i;
            return None;
        }
        let start = i;
        while i < b.len() && !b[i].is_ascii_whitespace() {
            i += 1;
        }
        self.at = i;
        // ASCII whitespace never falls inside a multi-byte character: both ends are
        // character boundaries.
        self.text.get(start..i)
    }
}

/// A decimal `u64` as `str::parse` reads it (an optional `+`); `None` when it is not one or
/// overflows.
fn unsigned(b: &[u8]) -> Option<u64> {
    let digits = b.strip_prefix(b"+").unwrap_or(b);
    if digits.is_empty() {
        return None;
    }
    let mut v: u64 = 0;
    for &c in digits {
        let d = c.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(d))?;
    }
    Some(v)
}

/// A decimal `i64` as `str::parse` reads it (an optional sign); `None` when it is not one or
/// overflows.
fn signed(b: &[u8]) -> Option<i64> {
    match b.split_first() {
        Some((b'-', digits)) if !digits.starts_with(b"+") => {
            // i64::MIN has no positive counterpart: negate through i128.
            let v = unsigned(digits)?;
            i64::try_from(-i128::from(v)).ok()
        }
        _ => unsigned(b).and_then(|v| i64::try_from(v).ok()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: &str = "/proc/1/x";

    #[test]
    fn stat_with_spaces_and_parens_in_comm() {
        let line = b"4626 (my (odd) cmd) R 4622 4622 1409 0 -1 4194304 99 0 7 0 150 25 40 9 20 -5 4 0 43929 3133440 359 18446744073709551615 1 2 3 0 0 0 0 0 0 0 0 0 17 1 0 0 12 0 0 9 9 9";
        let st = parse_stat(line, Path::new(P)).unwrap();
        assert_eq!(st.pid, 4626);
        assert_eq!(st.comm, "my (odd) cmd");
        assert_eq!(st.state, 'R');
        assert_eq!(st.ppid, 4622);
        assert_eq!(st.minflt, 99);
        assert_eq!(st.majflt, 7);
        assert_eq!(st.utime, 150);
        assert_eq!(st.stime, 25);
        assert_eq!((st.cutime, st.cstime), (40, 9));
        assert_eq!(st.nice, -5);
        assert_eq!(st.num_threads, 4);
        assert_eq!(st.starttime, 43929);
        assert_eq!(st.rss_pages, 359);
        assert_eq!(st.processor, Some(1));
        assert_eq!(st.blkio_ticks, 12);
    }

    #[test]
    fn a_stat_parsed_into_an_earlier_reading_replaces_every_field() {
        let busy = b"4626 (my (odd) cmd) R 4622 4622 1409 0 -1 4194304 99 0 7 0 150 25 40 9 20 -5 4 0 43929 3133440 359 18446744073709551615 1 2 3 0 0 0 0 0 0 0 0 0 17 1 0 0 12 0 0 9 9 9";
        // Shorter: no processor or delay-accounting fields, which must not keep busy's.
        let idle = b"17 (sh) S 1 17 17 0 -1 0 3 0 0 0 1 2 0 0 20 0 1 0 500 1000 10";
        let mut st = parse_stat(busy, Path::new(P)).unwrap();
        parse_stat_into(idle, Path::new(P), &mut st).unwrap();
        assert_eq!(st, parse_stat(idle, Path::new(P)).unwrap());
        assert_eq!(
            (st.comm.as_str(), st.processor, st.blkio_ticks),
            ("sh", None, 0)
        );
    }

    /// The parser as it was written over `str` (`split_ascii_whitespace`, `str::parse`): the
    /// reference the byte parser is held to.
    fn parse_stat_text(text: &[u8], path: &Path) -> Result<TaskStat> {
        let bad = |msg: String| Error::parse(path, 1, msg);
        let open = text
            .iter()
            .position(|&b| b == b'(')
            .ok_or_else(|| bad("no '(' before the command name".into()))?;
        let close = text
            .iter()
            .rposition(|&b| b == b')')
            .ok_or_else(|| bad("no ')' after the command name".into()))?;
        if close < open {
            return Err(bad("')' before '('".into()));
        }
        let pid: i32 = std::str::from_utf8(&text[..open])
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .ok_or_else(|| bad("the pid is not a number".into()))?;
        let rest = std::str::from_utf8(&text[close + 1..])
            .map_err(|_| bad("fields are not UTF-8".into()))?;
        let mut st = TaskStat {
            pid,
            comm: String::from_utf8_lossy(&text[open + 1..close]).into_owned(),
            ..TaskStat::default()
        };
        let mut n = 0;
        for (i, tok) in rest.split_ascii_whitespace().enumerate() {
            let field = i + 3;
            n = field;
            let num = || -> Result<u64> {
                tok.parse()
                    .map_err(|_| bad(format!("field {field}: {tok:?} is not a number")))
            };
            let signed = || -> Result<i64> {
                tok.parse()
                    .map_err(|_| bad(format!("field {field}: {tok:?} is not a number")))
            };
            match field {
                3 => st.state = tok.chars().next().unwrap_or('?'),
                4 => {
                    st.ppid = tok
                        .parse()
                        .map_err(|_| bad(format!("field 4: {tok:?} is not a pid")))?
                }
                10 => st.minflt = num()?,
                12 => st.majflt = num()?,
                14 => st.utime = num()?,
                15 => st.stime = num()?,
                16 => st.cutime = signed()?.max(0) as u64,
                17 => st.cstime = signed()?.max(0) as u64,
                19 => st.nice = signed()?,
                20 => st.num_threads = num()? as u32,
                22 => st.starttime = num()?,
                23 => st.vsize = num()?,
                24 => st.rss_pages = num()?,
                39 => st.processor = Some(num()? as u32),
                42 => {
                    st.blkio_ticks = num()?;
                    break;
                }
                _ => {}
            }
        }
        if n < 24 {
            return Err(bad(format!("only {n} fields; expected at least 24")));
        }
        Ok(st)
    }

    #[test]
    fn the_byte_parser_reads_every_mutated_line_as_the_text_parser_does() {
        let lines: [&[u8]; 3] = [
            b"4626 (my (odd) cmd) R 4622 4622 1409 0 -1 4194304 99 0 7 0 150 25 40 9 20 -5 4 0 43929 3133440 359 18446744073709551615 1 2 3 0 0 0 0 0 0 0 0 0 17 1 0 0 12 0 0 9 9 9",
            b"17 (sh) S 1 17 17 0 -1 0 3 0 0 0 1 2 0 0 20 0 1 0 500 1000 10",
            b"1 (systemd) S 0 1 1 0 -1 4194560 52134 1887412 118 1240 377 412 4242 1795 20 0 1 0 24 23007232 3311 18446744073709551615 1 1 0 0 0 0 671173123 4096 1260 0 0 0 17 1 0 0 7 0 0 0 0 0 0 0 0 0 0\n",
        ];
        // What mutations put in: digits, signs, separators, the name's brackets, a byte that
        // is not UTF-8 and one of a two-byte character.
        let alphabet: &[u8] = b"0123456789+- \t\n()xa\xff\xc3\xa9\x0b";
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut rand = move |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        let (mut agreed_ok, mut agreed_err) = (0, 0);
        for round in 0..30_000 {
            let mut line = lines[round % lines.len()].to_vec();
            for _ in 0..1 + rand(3) {
                let at = rand(line.len() + 1);
                match rand(5) {
                    0 if at < line.len() => line[at] = alphabet[rand(alphabet.len())],
                    1 => line.insert(at, alphabet[rand(alphabet.len())]),
                    2 if at < line.len() => {
                        line.remove(at);
                    }
                    // A run of digits: numbers near and past the types' limits.
                    3 => {
                        for _ in 0..rand(22) {
                            line.insert(at, b'0' + rand(10) as u8);
                        }
                    }
                    _ => line.truncate(at),
                }
            }
            let want = parse_stat_text(&line, Path::new(P));
            let mut st = TaskStat::default();
            let got = parse_stat_into(&line, Path::new(P), &mut st).map(|()| st);
            match (&want, &got) {
                (Ok(a), Ok(b)) => {
                    assert_eq!(a, b, "{}", String::from_utf8_lossy(&line));
                    agreed_ok += 1;
                }
                (Err(a), Err(b)) => {
                    assert_eq!(
                        a.to_string(),
                        b.to_string(),
                        "{}",
                        String::from_utf8_lossy(&line)
                    );
                    agreed_err += 1;
                }
                _ => panic!(
                    "{:?}: text parser {want:?}, byte parser {got:?}",
                    String::from_utf8_lossy(&line)
                ),
            }
        }
        // Both outcomes were exercised, not only the failures.
        assert!(
            agreed_ok > 3_000 && agreed_err > 3_000,
            "{agreed_ok} {agreed_err}"
        );
    }

    #[test]
    fn truncated_stat_is_a_parse_error_with_path() {
        let e = parse_stat(b"12 (x) S 1 2 3", Path::new(P)).unwrap_err();
        assert!(matches!(e, Error::Parse { .. }));
        assert!(e.to_string().starts_with("/proc/1/x:1:"), "{e}");
        let e = parse_stat(
            b"12 (x) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 zz",
            Path::new(P),
        )
        .unwrap_err();
        assert!(e.to_string().contains("field 24"), "{e}");
    }
}
