//! Descriptors of single-record `/proc` files (`stat`, `status`, `io`) kept open between
//! sampling passes: re-reading an open `/proc/PID/stat` with `pread` at offset 0 regenerates
//! it, and saves the path walk, the `open` and the `close`
//! of every pass (about half of a thread's reading cost; figures in `docs/reliability.md`).
//!
//! A descriptor stays bound to the task it was opened on: once that task has exited, reading
//! it fails with `ESRCH`, so a recycled pid or tid is never read through an old descriptor. The
//! caller then opens the new task's file as usual. A process's `task/` directory is kept the
//! same way and listed again after a rewind (listing a dead task's directory fails with
//! `ENOENT`).

use std::collections::{HashMap, HashSet};
use std::fs::File;

/// Looked up once or twice per file read: a fast hash (foldhash) rather than the default
/// SipHash, whose resistance to chosen keys is not needed for the kernel's pids.
type Hasher = foldhash::fast::RandomState;

/// Where a kept descriptor's reading stands.
pub(crate) enum KeptRead {
    /// The file's text is in the buffer.
    Read,
    /// No descriptor kept for this task: open the file.
    Missing,
    /// The task the descriptor was opened on is gone (or the read failed): it was closed; open
    /// the file again to find out whether the pid now names another task.
    Stale,
}

/// Whose file a kept descriptor reads: pid, tid (0 for the process's own) and file name.
pub(crate) type Key = (i32, i32, &'static str);

/// One process's kept descriptors, the pass that kept the first of them and the last pass that
/// read any of them.
#[derive(Debug)]
struct ProcFds {
    since: u64,
    seen: u64,
    files: HashMap<(i32, &'static str), File, Hasher>,
    /// Its `task/` directory (no seq_file page behind it: a few hundred bytes of kernel memory).
    task_dir: Option<File>,
}

/// Open descriptors by [`Key`], at most `limit` of them. A process's own files (`stat`,
/// `status`, `io`) and its task directory are kept from their first reading: every pass reads
/// its `stat` again, and a sampler reads the others at each refresh, where opening them cost
/// more than the rest of the refresh; a process seen once holds them until the next pass
/// ends. A thread's file is kept once it was opened in two passes in a row, or at once when
/// its process has had kept descriptors since an earlier pass: an open procfs file holds about
/// 4.4 KiB of kernel memory once read (its seq_file page), worth it for threads read every
/// pass (busy ones), not for the threads of a process seen once. A process's descriptors stay
/// while any of its files is read in a pass (a sampler that carries an idle process over still
/// reads its `stat`), so its threads' and refresh files' descriptors outlive the passes that
/// skip them.
#[derive(Debug)]
pub(crate) struct KeptFds {
    procs: HashMap<i32, ProcFds, Hasher>,
    count: usize,
    limit: usize,
    pass: u64,
    /// Files opened (not kept) in this pass and in the previous one.
    opened: HashSet<Key, Hasher>,
    opened_before: HashSet<Key, Hasher>,
}

impl KeptFds {
    pub fn new(limit: usize) -> Self {
        KeptFds {
            procs: HashMap::default(),
            count: 0,
            limit,
            pass: 0,
            opened: HashSet::default(),
            opened_before: HashSet::default(),
        }
    }

    /// Reads the kept descriptor of `key` into `buf` (cleared first).
    pub fn read(&mut self, key: Key, buf: &mut Vec<u8>) -> KeptRead {
        let (pid, tid, name) = key;
        let Some(p) = self.procs.get_mut(&pid) else {
            return KeptRead::Missing;
        };
        let Some(file) = p.files.get(&(tid, name)) else {
            return KeptRead::Missing;
        };
        match read_from_start(file, buf) {
            Ok(n) if n > 0 => {
                p.seen = self.pass;
                KeptRead::Read
            }
            // ESRCH (the task exited), an empty reading, or anything else: start afresh.
            _ => {
                p.files.remove(&(tid, name));
                self.count -= 1;
                KeptRead::Stale
            }
        }
    }

    /// Keeps `file` (just opened and read) for the next passes, if the rules above keep it and
    /// there is room; else it is closed.
    pub fn keep(&mut self, key: Key, file: File) {
        let (pid, tid, name) = key;
        let known = self.procs.get(&pid).is_some_and(|p| p.since < self.pass);
        if tid != 0 && !known && !self.opened_before.contains(&key) {
            self.opened.insert(key);
            return;
        }
        let p = self.procs.entry(pid).or_insert_with(|| ProcFds {
            since: self.pass,
            seen: self.pass,
            files: HashMap::default(),
            task_dir: None,
        });
        p.seen = self.pass;
        if self.count < self.limit && p.files.insert((tid, name), file).is_none() {
            self.count += 1;
        }
    }

    /// Takes `pid`'s kept task directory, rewound to its start, to list it; give it back with
    /// [`keep_task_dir`](Self::keep_task_dir). `None` when none is kept or it cannot be rewound.
    pub fn take_task_dir(&mut self, pid: i32) -> Option<File> {
        use std::io::Seek;
        let p = self.procs.get_mut(&pid)?;
        let mut dir = p.task_dir.take()?;
        self.count -= 1;
        p.seen = self.pass;
        dir.rewind().ok()?;
        Some(dir)
    }

    /// Keeps `pid`'s task directory (just listed) if the process has kept descriptors and there
    /// is room; else it is closed.
    pub fn keep_task_dir(&mut self, pid: i32, dir: File) {
        if self.count >= self.limit {
            return;
        }
        if let Some(p) = self.procs.get_mut(&pid)
            && p.task_dir.is_none()
        {
            p.task_dir = Some(dir);
            p.seen = self.pass;
            self.count += 1;
        }
    }

    /// The threads `pid` has now: descriptors of the others (threads that exited) are closed.
    pub fn threads_are(&mut self, pid: i32, tids: &[i32]) {
        if let Some(p) = self.procs.get_mut(&pid) {
            let before = p.files.len();
            p.files
                .retain(|(tid, _), _| *tid == 0 || tids.binary_search(tid).is_ok());
            self.count -= before - p.files.len();
        }
    }

    /// Ends a pass: the descriptors of processes none of whose files were read in it (gone,
    /// or no longer looked at) are closed.
    pub fn end_pass(&mut self) {
        let pass = self.pass;
        let mut closed = 0;
        self.procs.retain(|_, p| {
            let keep = p.seen == pass;
            if !keep {
                closed += p.files.len() + usize::from(p.task_dir.is_some());
            }
            keep
        });
        self.count -= closed;
        self.pass += 1;
        std::mem::swap(&mut self.opened_before, &mut self.opened);
        self.opened.clear();
    }

    /// Descriptors kept now.
    pub fn len(&self) -> usize {
        self.count
    }
}

/// Reads `file` whole from offset 0 into `buf` (cleared first); returns the bytes read.
fn read_from_start(file: &File, buf: &mut Vec<u8>) -> std::io::Result<usize> {
    crate::fs::fill_single(buf, file)?;
    Ok(buf.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keeps `file` as a file opened in two passes in a row is.
    fn keep_now(k: &mut KeptFds, key: Key, file: File) {
        k.opened_before.insert(key);
        k.keep(key, file);
    }

    fn temp(name: &str, text: &str) -> (std::path::PathBuf, File) {
        let p = std::env::temp_dir().join(format!("perfpilot-kept-{}-{name}", std::process::id()));
        std::fs::write(&p, text).unwrap();
        let f = File::open(&p).unwrap();
        (p, f)
    }

    #[test]
    fn a_kept_descriptor_is_read_again_from_the_start() {
        let (p, f) = temp("again", "1 (x) S 0");
        let mut k = KeptFds::new(8);
        keep_now(&mut k, (1, 0, "stat"), f);
        let mut buf = Vec::new();
        assert!(matches!(k.read((1, 0, "stat"), &mut buf), KeptRead::Read));
        assert!(matches!(k.read((1, 0, "stat"), &mut buf), KeptRead::Read));
        assert_eq!(buf, b"1 (x) S 0");
        std::fs::remove_file(p).unwrap();
    }

    #[test]
    fn descriptors_not_read_in_a_pass_are_closed_at_its_end() {
        let (p1, f1) = temp("pass1", "a");
        let (p2, f2) = temp("pass2", "b");
        let mut k = KeptFds::new(8);
        keep_now(&mut k, (1, 0, "stat"), f1);
        keep_now(&mut k, (2, 0, "stat"), f2);
        k.end_pass();
        let mut buf = Vec::new();
        assert!(matches!(k.read((1, 0, "stat"), &mut buf), KeptRead::Read));
        k.end_pass();
        assert_eq!(k.len(), 1);
        assert!(matches!(
            k.read((2, 0, "stat"), &mut buf),
            KeptRead::Missing
        ));
        std::fs::remove_file(p1).unwrap();
        std::fs::remove_file(p2).unwrap();
    }

    #[test]
    fn the_descriptors_of_threads_that_exited_are_closed_when_the_threads_are_listed() {
        let (p, f) = temp("threads", "a");
        let mut k = KeptFds::new(8);
        keep_now(&mut k, (1, 0, "stat"), f.try_clone().unwrap());
        keep_now(&mut k, (1, 2, "stat"), f.try_clone().unwrap());
        keep_now(&mut k, (1, 3, "stat"), f);
        k.threads_are(1, &[1, 3]);
        assert_eq!(k.len(), 2);
        let mut buf = Vec::new();
        assert!(matches!(
            k.read((1, 2, "stat"), &mut buf),
            KeptRead::Missing
        ));
        assert!(matches!(k.read((1, 3, "stat"), &mut buf), KeptRead::Read));
        std::fs::remove_file(p).unwrap();
    }

    #[test]
    fn a_process_read_in_a_pass_keeps_its_threads_descriptors_unread_in_it() {
        let (p, f) = temp("idle", "a");
        let mut k = KeptFds::new(8);
        keep_now(&mut k, (1, 0, "stat"), f.try_clone().unwrap());
        keep_now(&mut k, (1, 5, "stat"), f);
        k.end_pass();
        let mut buf = Vec::new();
        assert!(matches!(k.read((1, 0, "stat"), &mut buf), KeptRead::Read));
        k.end_pass();
        assert_eq!(k.len(), 2);
        std::fs::remove_file(p).unwrap();
    }

    #[test]
    fn a_processs_own_files_are_kept_from_their_first_reading() {
        let (p, f) = temp("own", "a");
        let mut k = KeptFds::new(8);
        k.keep((1, 0, "stat"), f.try_clone().unwrap());
        k.keep((1, 0, "status"), f.try_clone().unwrap());
        assert_eq!(k.len(), 2, "a new process's stat and status");
        // Its threads' first opens in the same pass are not kept: the process may be seen once.
        k.keep((1, 7, "stat"), f.try_clone().unwrap());
        assert_eq!(k.len(), 2);
        k.end_pass();
        let mut buf = Vec::new();
        assert!(matches!(k.read((1, 0, "stat"), &mut buf), KeptRead::Read));
        // Seen again in the next pass: a thread of it is kept at its first open.
        k.keep((1, 8, "stat"), f);
        assert_eq!(k.len(), 3);
        std::fs::remove_file(p).unwrap();
    }

    #[test]
    fn the_descriptors_of_a_process_seen_once_are_closed_when_the_next_pass_ends() {
        let (p, f) = temp("once", "a");
        let mut k = KeptFds::new(8);
        k.keep((1, 0, "stat"), f.try_clone().unwrap());
        k.keep((1, 0, "io"), f);
        k.end_pass();
        assert_eq!(k.len(), 2, "kept through the pass that read them");
        k.end_pass();
        assert_eq!(k.len(), 0);
        std::fs::remove_file(p).unwrap();
    }

    #[test]
    fn a_file_of_a_process_with_kept_descriptors_is_kept_at_once() {
        let (p, f) = temp("refresh", "a");
        let mut k = KeptFds::new(8);
        keep_now(&mut k, (1, 0, "stat"), f.try_clone().unwrap());
        k.end_pass();
        // An idle process's refresh: its status opened for the first time in a while.
        k.keep((1, 0, "status"), f.try_clone().unwrap());
        assert_eq!(k.len(), 2);
        let mut buf = Vec::new();
        assert!(matches!(k.read((1, 0, "status"), &mut buf), KeptRead::Read));
        std::fs::remove_file(p).unwrap();
    }

    #[test]
    fn a_kept_task_directory_lists_the_threads_again_and_is_closed_once_the_process_exits() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let stat = File::open(format!("/proc/{pid}/stat")).unwrap();
        let mut k = KeptFds::new(8);
        keep_now(&mut k, (pid, 0, "stat"), stat);
        let list = |dir: &File| {
            let (mut buf, mut out) = (Vec::new(), Vec::new());
            crate::fs::numeric_entries(dir, &mut buf, &mut out).map(|()| out)
        };
        let dir = File::open(format!("/proc/{pid}/task")).unwrap();
        assert_eq!(list(&dir).unwrap(), vec![pid]);
        k.keep_task_dir(pid, dir);
        assert_eq!(k.len(), 2);
        for _ in 0..2 {
            let dir = k.take_task_dir(pid).expect("kept");
            assert_eq!(
                list(&dir).unwrap(),
                vec![pid],
                "listed again from the start"
            );
            k.keep_task_dir(pid, dir);
        }
        child.kill().unwrap();
        child.wait().unwrap();
        let dir = k.take_task_dir(pid).expect("still kept");
        let e = list(&dir).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "{e}");
        // Not given back: closed, and the process's other descriptors go at the pass's end.
        assert_eq!(k.len(), 1);
        k.end_pass();
        k.end_pass();
        assert_eq!(k.len(), 0);
    }

    #[test]
    fn a_threads_file_is_kept_only_once_it_was_opened_in_two_passes_in_a_row() {
        let (p, f) = temp("twice", "a");
        let mut k = KeptFds::new(8);
        k.keep((1, 7, "stat"), f.try_clone().unwrap());
        assert_eq!(k.len(), 0, "opened once");
        k.end_pass();
        k.end_pass();
        k.keep((1, 7, "stat"), f.try_clone().unwrap());
        assert_eq!(k.len(), 0, "opened again, but not in the pass before");
        k.end_pass();
        k.keep((1, 7, "stat"), f);
        assert_eq!(k.len(), 1, "opened in two passes in a row");
        std::fs::remove_file(p).unwrap();
    }

    #[test]
    fn no_more_than_the_limit_are_kept() {
        let (p, f) = temp("limit", "a");
        let mut k = KeptFds::new(1);
        keep_now(&mut k, (1, 0, "stat"), f.try_clone().unwrap());
        keep_now(&mut k, (2, 0, "stat"), f);
        assert_eq!(k.len(), 1);
        std::fs::remove_file(p).unwrap();
    }

    #[test]
    fn the_descriptor_of_an_exited_process_is_stale_and_closed() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let f = File::open(format!("/proc/{pid}/stat")).unwrap();
        let mut k = KeptFds::new(8);
        keep_now(&mut k, (pid, 0, "stat"), f);
        let mut buf = Vec::new();
        assert!(matches!(k.read((pid, 0, "stat"), &mut buf), KeptRead::Read));
        assert!(buf.starts_with(format!("{pid} (sleep)").as_bytes()));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(matches!(
            k.read((pid, 0, "stat"), &mut buf),
            KeptRead::Stale
        ));
        assert_eq!(k.len(), 0);
    }
}
