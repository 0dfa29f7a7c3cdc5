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
/// an error `st` holds a partial reading.
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
    // Field numbers as in proc(5); the iterator starts at field 3 (state).
    let mut n = 0;
    for (i, tok) in rest.split_ascii_whitespace().enumerate() {
        let field = i + 3;
        n = field;
        let num = || -> Result<u64> {
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
            // Signed in the kernel; never negative in practice, read as 0 if it were.
            16 | 17 => {
                let v = tok
                    .parse::<i64>()
                    .map_err(|_| bad(format!("field {field}: {tok:?} is not a number")))?
                    .max(0) as u64;
                if field == 16 {
                    st.cutime = v;
                } else {
                    st.cstime = v;
                }
            }
            19 => {
                st.nice = tok
                    .parse()
                    .map_err(|_| bad(format!("field 19: {tok:?} is not a number")))?
            }
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
