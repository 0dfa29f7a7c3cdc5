//! [`ProcReader`]: reads the per-process files of `/proc` with reused buffers.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::kept::{KeptFds, KeptRead};
use super::{
    MapRange, NumaRange, ProcIo, ProcStatus, ShmAttach, SmapsRollup, TaskStat, parse_io,
    parse_maps, parse_maps_shm, parse_numa_maps, parse_smaps_rollup, parse_stat, parse_stat_into,
    parse_status,
};
use crate::fs::{numeric_entries, read_pid_file, read_single};
use crate::{Error, Fs, Result};

/// Reads `/proc` files with reused buffers.
#[derive(Debug)]
pub struct ProcReader {
    fs: Fs,
    proc_root: String,
    path: String,
    buf: Vec<u8>,
    /// Directory entries as `getdents64` returns them.
    dir_buf: Vec<u8>,
    /// `stat` descriptors kept open between passes, when asked for.
    kept: Option<KeptFds>,
}

impl ProcReader {
    /// A reader of `fs`'s `/proc`.
    pub fn new(fs: &Fs) -> Self {
        ProcReader {
            proc_root: fs.path("proc").to_string_lossy().into_owned(),
            fs: fs.clone(),
            path: String::with_capacity(64),
            buf: Vec::with_capacity(4096),
            dir_buf: Vec::new(),
            kept: None,
        }
    }

    /// Keeps up to `limit` descriptors of single-record files (`stat` of processes and threads,
    /// `status`, `io`) open between passes and re-reads them from the start instead of opening
    /// the files again; 0 turns it off. Only
    /// on the live system: a captured tree's files are plain files that tests replace.
    /// [`end_pass`](Self::end_pass) closes those not read since the previous pass.
    pub fn keep_stat_open(&mut self, limit: usize) {
        self.kept = (limit > 0 && self.fs.is_live()).then(|| KeptFds::new(limit));
    }

    /// Ends a pass over the processes: closes the kept descriptors not read in it.
    pub fn end_pass(&mut self) {
        if let Some(k) = &mut self.kept {
            k.end_pass();
        }
    }

    /// Descriptors kept open now.
    pub fn kept_open(&self) -> usize {
        self.kept.as_ref().map_or(0, KeptFds::len)
    }

    /// The filesystem this reader reads.
    pub fn fs(&self) -> &Fs {
        &self.fs
    }

    fn set_path(&mut self, pid: i32, tid: Option<i32>, file: &str) {
        self.path.clear();
        let _ = match tid {
            Some(t) => write!(self.path, "{}/{pid}/task/{t}/{file}", self.proc_root),
            None => write!(self.path, "{}/{pid}/{file}", self.proc_root),
        };
    }

    fn load(&mut self, pid: i32, tid: Option<i32>, file: &str) -> Result<&Path> {
        self.set_path(pid, tid, file);
        read_pid_file(Path::new(&self.path), &mut self.buf)?;
        Ok(Path::new(&self.path))
    }

    fn load_str(&mut self, pid: i32, tid: Option<i32>, file: &str) -> Result<(&str, &Path)> {
        self.load(pid, tid, file)?;
        self.text()
    }

    /// Loads a small single-record file (`stat`, `status`, `io`) with one `read`, through its
    /// kept descriptor when there is one.
    fn load_single(&mut self, pid: i32, tid: Option<i32>, file: &'static str) -> Result<&Path> {
        self.set_path(pid, tid, file);
        let key = (pid, tid.unwrap_or(0), file);
        if let Some(k) = &mut self.kept
            && let KeptRead::Read = k.read(key, &mut self.buf)
        {
            return Ok(Path::new(&self.path));
        }
        let f = read_single(None, Path::new(&self.path), "", &mut self.buf)?;
        if let Some(k) = &mut self.kept {
            k.keep(key, f);
        }
        Ok(Path::new(&self.path))
    }

    fn text(&self) -> Result<(&str, &Path)> {
        let path = Path::new(&self.path);
        let text = std::str::from_utf8(&self.buf)
            .map_err(|_| Error::parse(path, 1, "file is not UTF-8"))?;
        Ok((text, path))
    }

    /// Reads the `stat` of every thread of `pid`, handing each result to `each` (a thread that
    /// exits meanwhile gives a [`Error::Vanished`] there). Fails only when the process is gone
    /// or its task directory cannot be listed. The task directory is opened once: listed
    /// through its descriptor, and the threads' files opened relative to it, which saves the
    /// path walk per thread.
    pub fn task_stats(&mut self, pid: i32, mut each: impl FnMut(Result<TaskStat>)) -> Result<()> {
        let (dir, dir_path, mut tids) = self.task_dir(pid)?;
        tids.sort_unstable();
        if let Some(k) = &mut self.kept {
            k.threads_are(pid, &tids);
        }
        let r = self.thread_stats(pid, &dir, &dir_path, tids, &mut each);
        self.give_back_task_dir(pid, dir);
        r
    }

    fn thread_stats(
        &mut self,
        pid: i32,
        dir: &std::fs::File,
        dir_path: &Path,
        tids: Vec<i32>,
        each: &mut impl FnMut(Result<TaskStat>),
    ) -> Result<()> {
        let mut rel = String::with_capacity(24);
        // The file's path, for errors only: one buffer, not an allocation per thread.
        let mut file = dir_path.to_path_buf();
        for tid in tids {
            rel.clear();
            let _ = write!(rel, "{tid}/stat");
            file.push(&rel);
            if let Some(k) = &mut self.kept
                && let KeptRead::Read = k.read((pid, tid, "stat"), &mut self.buf)
            {
                each(parse_stat(&self.buf, &file));
            } else {
                let r = read_single(Some(dir), dir_path, &rel, &mut self.buf);
                let r = r.and_then(|f| {
                    if let Some(k) = &mut self.kept {
                        k.keep((pid, tid, "stat"), f);
                    }
                    parse_stat(&self.buf, &file)
                });
                each(r);
            }
            file.pop();
            file.pop();
        }
        Ok(())
    }

    /// Keeps `pid`'s task directory open for the next listing, where its descriptors are kept.
    fn give_back_task_dir(&mut self, pid: i32, dir: std::fs::File) {
        if let Some(k) = &mut self.kept {
            k.keep_task_dir(pid, dir);
        }
    }

    /// Opens `pid`'s task directory (or rewinds its kept descriptor) and lists its thread ids
    /// (unsorted).
    fn task_dir(&mut self, pid: i32) -> Result<(std::fs::File, PathBuf, Vec<i32>)> {
        self.set_path(pid, None, "task");
        let dir_path = PathBuf::from(&self.path);
        if let Some(dir) = self.kept.as_mut().and_then(|k| k.take_task_dir(pid)) {
            let mut tids = Vec::new();
            // A dead process's directory fails (ENOENT): it is closed, and the path tells
            // whether the pid now names another process.
            if numeric_entries(&dir, &mut self.dir_buf, &mut tids).is_ok() {
                return Ok((dir, dir_path, tids));
            }
        }
        let gone = |source: std::io::Error| {
            if source.kind() == std::io::ErrorKind::NotFound
                || source.raw_os_error() == Some(libc::ESRCH)
            {
                Error::Vanished {
                    path: dir_path.clone(),
                }
            } else {
                Error::Io {
                    path: dir_path.clone(),
                    source,
                }
            }
        };
        let dir = std::fs::File::open(&dir_path).map_err(gone)?;
        let mut tids = Vec::new();
        numeric_entries(&dir, &mut self.dir_buf, &mut tids).map_err(gone)?;
        Ok((dir, dir_path, tids))
    }

    /// The process ids in `/proc`, sorted.
    pub fn pids(&self) -> Result<Vec<i32>> {
        let path = Path::new(&self.proc_root);
        let err = |source| Error::Io {
            path: path.to_path_buf(),
            source,
        };
        let dir = std::fs::File::open(path).map_err(err)?;
        let mut v = Vec::new();
        numeric_entries(&dir, &mut Vec::new(), &mut v).map_err(err)?;
        v.sort_unstable();
        Ok(v)
    }

    /// The thread ids of a process, sorted.
    pub fn tids(&mut self, pid: i32) -> Result<Vec<i32>> {
        let (dir, _, mut v) = self.task_dir(pid)?;
        self.give_back_task_dir(pid, dir);
        v.sort_unstable();
        Ok(v)
    }

    /// `/proc/<pid>/stat`.
    pub fn stat(&mut self, pid: i32) -> Result<TaskStat> {
        self.load_single(pid, None, "stat")?;
        parse_stat(&self.buf, Path::new(&self.path))
    }

    /// `/proc/<pid>/stat` into `st`, reusing its command name's allocation.
    pub fn stat_into(&mut self, pid: i32, st: &mut TaskStat) -> Result<()> {
        self.load_single(pid, None, "stat")?;
        parse_stat_into(&self.buf, Path::new(&self.path), st)
    }

    /// `/proc/<pid>/task/<tid>/stat`.
    pub fn task_stat(&mut self, pid: i32, tid: i32) -> Result<TaskStat> {
        self.load_single(pid, Some(tid), "stat")?;
        parse_stat(&self.buf, Path::new(&self.path))
    }

    /// `/proc/<pid>/status`.
    pub fn status(&mut self, pid: i32) -> Result<ProcStatus> {
        self.load_single(pid, None, "status")?;
        let (text, path) = self.text()?;
        parse_status(text, path)
    }

    /// `/proc/<pid>/task/<tid>/status`.
    pub fn task_status(&mut self, pid: i32, tid: i32) -> Result<ProcStatus> {
        let (text, path) = self.load_str(pid, Some(tid), "status")?;
        parse_status(text, path)
    }

    /// `/proc/<pid>/cmdline` split at NULs (empty for kernel threads).
    pub fn cmdline(&mut self, pid: i32) -> Result<Vec<String>> {
        self.load(pid, None, "cmdline")?;
        Ok(self
            .buf
            .split(|&b| b == 0)
            .filter(|s| !s.is_empty())
            .map(|s| String::from_utf8_lossy(s).into_owned())
            .collect())
    }

    /// The value of one variable of `/proc/<pid>/environ`.
    pub fn environ_var(&mut self, pid: i32, name: &str) -> Result<Option<String>> {
        self.load(pid, None, "environ")?;
        let prefix = format!("{name}=");
        Ok(self
            .buf
            .split(|&b| b == 0)
            .find_map(|kv| kv.strip_prefix(prefix.as_bytes()))
            .map(|v| String::from_utf8_lossy(v).into_owned()))
    }

    /// The executable (`/proc/<pid>/exe`); `None` for kernel threads.
    pub fn exe(&mut self, pid: i32) -> Result<Option<PathBuf>> {
        self.set_path(pid, None, "exe");
        match std::fs::read_link(&self.path) {
            Ok(p) => Ok(Some(p)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // A kernel thread has an exe link that cannot be read; a dead process has none.
                let dir = Path::new(&self.path).parent().map(Path::to_path_buf);
                match dir {
                    Some(d) if d.exists() => Ok(None),
                    _ => Err(Error::Vanished {
                        path: PathBuf::from(&self.path),
                    }),
                }
            }
            // A captured tree stores `exe` as a plain file holding the target.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                let (text, _) = self.load_str(pid, None, "exe")?;
                Ok(Some(PathBuf::from(text.trim())))
            }
            Err(source) => Err(Error::Io {
                path: PathBuf::from(&self.path),
                source,
            }),
        }
    }

    /// `/proc/<pid>/io` (root, or the process's owner, only).
    pub fn io(&mut self, pid: i32) -> Result<ProcIo> {
        self.load_single(pid, None, "io")?;
        let (text, path) = self.text()?;
        parse_io(text, path)
    }

    /// `/proc/<pid>/smaps_rollup` (walks the page tables: an expensive reading).
    pub fn smaps_rollup(&mut self, pid: i32) -> Result<SmapsRollup> {
        let (text, path) = self.load_str(pid, None, "smaps_rollup")?;
        parse_smaps_rollup(text, path)
    }

    /// `/proc/<pid>/numa_maps` (walks the page tables: an expensive reading).
    pub fn numa_maps(&mut self, pid: i32) -> Result<Vec<NumaRange>> {
        let (text, path) = self.load_str(pid, None, "numa_maps")?;
        parse_numa_maps(text, path)
    }

    /// `/proc/<pid>/maps`.
    pub fn maps(&mut self, pid: i32) -> Result<Vec<MapRange>> {
        let (text, path) = self.load_str(pid, None, "maps")?;
        parse_maps(text, path)
    }

    /// `/proc/<pid>/maps` and the shared-memory segments it shows, from one reading.
    pub fn maps_and_shm(&mut self, pid: i32) -> Result<(Vec<MapRange>, Vec<ShmAttach>)> {
        let (text, path) = self.load_str(pid, None, "maps")?;
        Ok((parse_maps(text, path)?, parse_maps_shm(text, path)?))
    }

    /// The shared-memory segments `/proc/<pid>/maps` shows.
    pub fn shm_attachments(&mut self, pid: i32) -> Result<Vec<ShmAttach>> {
        let (text, path) = self.load_str(pid, None, "maps")?;
        parse_maps_shm(text, path)
    }
}
