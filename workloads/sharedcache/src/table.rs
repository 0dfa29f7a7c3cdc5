//! The in-memory table and the shared counter block: mapping them (private anonymous memory or
//! a System V shared-memory segment), filling them, and the lookup loop.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use perfpilot_stats::rng::mix64;

/// Size of a PMD-mapped transparent huge page on x86-64 and arm64 with 4 KiB base pages. The
/// table is placed on this boundary so that every 2 MiB of it can be collapsed to one huge page.
pub const HUGE_PAGE: usize = 2 << 20;

/// Where the table lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// One private anonymous `mmap` (the in-memory cache case).
    Private,
    /// A System V shared-memory segment (the database buffer pool case).
    Sysv,
}

impl Mode {
    /// The flag value, as shown in logs and the `sharedcache_info` metric.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Private => "private",
            Mode::Sysv => "sysv",
        }
    }
}

/// The mapped table. It lives until the process exits, so it is `Copy` and handed to threads
/// by value.
#[derive(Clone, Copy, Debug)]
pub struct Table {
    addr: usize,
    /// Bytes mapped (a whole number of records; may be a little less than requested).
    pub bytes: usize,
    /// Number of `u64` words per record.
    words_per_record: usize,
    /// Number of records.
    pub records: u64,
}

/// A System V segment that this process created.
#[derive(Clone, Copy, Debug)]
pub struct Segment {
    pub shmid: i32,
    /// `Some(key)` when the segment was created with `--shm-key` and is removed on a clean exit;
    /// `None` when it was created `IPC_PRIVATE` and marked for removal right after attaching.
    pub key: Option<i32>,
}

impl Table {
    /// Start address of the table (2 MiB aligned).
    pub fn addr(&self) -> usize {
        self.addr
    }

    /// Maps `bytes` of private anonymous memory at a 2 MiB boundary. Deliberately no
    /// `madvise(MADV_HUGEPAGE)`: with THP `enabled=madvise` the table starts on 4 KiB pages.
    pub fn map_private(bytes: usize, record_bytes: usize) -> Result<Table> {
        let addr = reserve_aligned(bytes).map_err(|e| {
            anyhow::anyhow!(
                "cannot map a {} MiB table ({e}); lower --table-mib (MemAvailable is {} MiB)",
                bytes >> 20,
                mem_available_mib().map_or("unknown".to_string(), |m| m.to_string())
            )
        })?;
        // SAFETY: `reserve_aligned` returned a PROT_NONE reservation of exactly `bytes` at
        // `addr`; MAP_FIXED replaces it with a private anonymous read-write mapping.
        let p = unsafe {
            libc::mmap(
                addr as *mut libc::c_void,
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            let e = io::Error::last_os_error();
            unmap(addr, bytes);
            bail!(
                "cannot map a {} MiB table ({e}); lower --table-mib (MemAvailable is {} MiB)",
                bytes >> 20,
                mem_available_mib().map_or("unknown".to_string(), |m| m.to_string())
            );
        }
        Ok(Table::at(addr, bytes, record_bytes))
    }

    /// Creates a System V shared-memory segment of `bytes` and attaches it at a 2 MiB boundary.
    ///
    /// Without a key the segment is `IPC_PRIVATE` and marked for removal (`IPC_RMID`) as soon as
    /// it is attached: it stays usable by this process and the workers it forks (they inherit
    /// the attachment) and disappears when the last of them detaches, even after `SIGKILL`.
    /// With a key it stays findable by that key until [`Segment::remove`] on a clean exit,
    /// as a database's buffer pool does.
    pub fn map_sysv(
        bytes: usize,
        record_bytes: usize,
        key: Option<i32>,
    ) -> Result<(Table, Segment)> {
        if let Some(max) = read_sysctl("/proc/sys/kernel/shmmax")
            && (bytes as u128) > max
        {
            bail!(
                "--table-mib {} is larger than kernel.shmmax ({max} bytes = {} MiB); lower \
                 --table-mib, use --mode private, or raise the limit: sysctl -w kernel.shmmax={bytes}",
                bytes >> 20,
                max >> 20
            );
        }
        let shm_key = key.unwrap_or(libc::IPC_PRIVATE);
        // SAFETY: plain syscall with integer arguments.
        let shmid =
            unsafe { libc::shmget(shm_key, bytes, libc::IPC_CREAT | libc::IPC_EXCL | 0o600) };
        if shmid < 0 {
            let e = io::Error::last_os_error();
            let what = match e.raw_os_error() {
                Some(libc::EEXIST) => format!(
                    "a segment with --shm-key {k} (0x{k:08x}) already exists; remove it with \
                     `ipcrm -M {k}` or choose another --shm-key",
                    k = key.unwrap_or(0)
                ),
                Some(libc::EINVAL) => format!(
                    "the size is outside kernel.shmmin..kernel.shmmax (shmmax = {}); lower \
                     --table-mib or raise kernel.shmmax",
                    read_sysctl("/proc/sys/kernel/shmmax")
                        .map_or("unknown".into(), |m| m.to_string())
                ),
                Some(libc::ENOSPC) => format!(
                    "kernel.shmall ({} pages) or kernel.shmmni would be exceeded; lower \
                     --table-mib, remove stale segments (ipcs -m / ipcrm), or raise the limits",
                    read_sysctl("/proc/sys/kernel/shmall")
                        .map_or("unknown".into(), |m| m.to_string())
                ),
                Some(libc::ENOMEM) => format!(
                    "not enough memory to back the segment; lower --table-mib (MemAvailable is {} MiB)",
                    mem_available_mib().map_or("unknown".to_string(), |m| m.to_string())
                ),
                Some(libc::EPERM) | Some(libc::EACCES) => "permission denied".to_string(),
                _ => "unexpected error".to_string(),
            };
            bail!(
                "shmget of a {} MiB segment (--mode sysv) failed: {e}: {what}",
                bytes >> 20
            );
        }
        let seg = Segment { shmid, key };
        let addr = match reserve_aligned(bytes) {
            Ok(a) => a,
            Err(e) => {
                seg.remove();
                bail!(
                    "cannot reserve {} MiB of address space for the segment: {e}",
                    bytes >> 20
                );
            }
        };
        // SAFETY: attaches over our own PROT_NONE reservation (SHM_REMAP replaces it), at an
        // address that is a multiple of SHMLBA (a page).
        let p = unsafe { libc::shmat(shmid, addr as *const libc::c_void, libc::SHM_REMAP) };
        if p as isize == -1 {
            let e = io::Error::last_os_error();
            unmap(addr, bytes);
            seg.remove();
            bail!("shmat of segment {shmid} failed: {e}");
        }
        if key.is_none() {
            seg.remove();
        }
        Ok((Table::at(addr, bytes, record_bytes), seg))
    }

    fn at(addr: usize, bytes: usize, record_bytes: usize) -> Table {
        let words_per_record = record_bytes / 8;
        let records = (bytes / record_bytes) as u64;
        Table {
            addr,
            bytes,
            words_per_record,
            records,
        }
    }

    /// `madvise(MADV_HUGEPAGE)` over the table (comparison runs only).
    pub fn madvise_hugepage(&self) -> io::Result<()> {
        // SAFETY: advice over our own mapping; does not change its contents.
        let r = unsafe {
            libc::madvise(
                self.addr as *mut libc::c_void,
                self.bytes,
                libc::MADV_HUGEPAGE,
            )
        };
        if r == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// Writes every record (touching every page), using up to `threads` threads.
    pub fn fill(&self, threads: usize) {
        let per = self.records.div_ceil(threads as u64);
        std::thread::scope(|s| {
            for t in 0..threads as u64 {
                let lo = (t * per).min(self.records);
                let hi = ((t + 1) * per).min(self.records);
                let table = *self;
                s.spawn(move || {
                    let w = table.words_per_record as u64;
                    for rec in lo..hi {
                        let base = table.record_ptr(rec);
                        for i in 0..w {
                            // SAFETY: `rec < records` and `i < words_per_record`, so the word
                            // is inside the mapping; ranges of different threads are disjoint.
                            unsafe { base.add(i as usize).write(mix64(rec * w + i)) };
                        }
                    }
                });
            }
        });
    }

    fn record_ptr(&self, rec: u64) -> *mut u64 {
        (self.addr as *mut u64).wrapping_add(rec as usize * self.words_per_record)
    }

    /// Runs lookups forever, storing the running count in `slot`.
    ///
    /// Each lookup picks a record from an xorshift stream mixed with the hash of the previous
    /// record, so the next address depends on the last load: the loop is a dependent chain of
    /// random memory accesses, bound by memory latency (cache misses and, on 4 KiB pages, a TLB
    /// miss and page walk per access) like a hash-table or B-tree probe.
    pub fn lookup_loop(&self, slot: &AtomicU64, seed: u64, ops_per_sec: Option<f64>) -> ! {
        let mut rng = seed | 1;
        let mut h: u64 = 0;
        let mut ops: u64 = 0;
        let words = self.words_per_record;
        let batch: u64 = match ops_per_sec {
            None => 1024,
            // Sleep granularity of about a millisecond.
            Some(r) => ((r / 1000.0) as u64).clamp(1, 1024),
        };
        let start = Instant::now();
        loop {
            for _ in 0..batch {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let idx = (((rng ^ h) as u128 * self.records as u128) >> 64) as u64;
                let rec = self.record_ptr(idx);
                let mut x = h;
                for i in 0..words {
                    // SAFETY: `idx < records` and `i < words_per_record`: inside the mapping.
                    // Nobody writes the table after `fill`.
                    x = (x ^ unsafe { rec.add(i).read() }).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                }
                h = x ^ (x >> 29);
                ops += 1;
                slot.store(ops, Ordering::Relaxed);
            }
            std::hint::black_box(h);
            if let Some(r) = ops_per_sec {
                let due = start + Duration::from_secs_f64(ops as f64 / r);
                let now = Instant::now();
                if due > now {
                    std::thread::sleep(due - now);
                }
            }
        }
    }

    /// KiB of the table currently mapped by PMD (huge) pages, from `/proc/self/smaps`
    /// (`AnonHugePages` for private memory, `ShmemPmdMapped` for the segment).
    pub fn huge_kib(&self) -> Option<u64> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let mut inside = false;
        let mut total = 0;
        for line in smaps.lines() {
            let first = line.split_whitespace().next().unwrap_or("");
            if let Some((lo, hi)) = first.split_once('-')
                && let (Ok(lo), Ok(hi)) =
                    (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
            {
                inside = lo < self.addr + self.bytes && hi > self.addr;
                continue;
            }
            if inside
                && let Some((k, v)) = line.split_once(':')
                && (k == "AnonHugePages" || k == "ShmemPmdMapped")
            {
                total += v
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .unwrap_or(0);
            }
        }
        Some(total)
    }
}

impl Segment {
    /// `shmctl(IPC_RMID)`: the segment goes away when the last process detaches.
    pub fn remove(&self) {
        // SAFETY: plain syscall; a null buffer is allowed for IPC_RMID.
        unsafe { libc::shmctl(self.shmid, libc::IPC_RMID, std::ptr::null_mut()) };
    }
}

/// One operation counter per lookup thread, each on its own cache line.
#[repr(align(128))]
pub struct Slot(pub AtomicU64);

/// Maps `n` counter slots in `MAP_SHARED` anonymous memory, so worker processes forked later
/// write into the same block the parent sums on scrape.
pub fn map_counters(n: usize) -> Result<&'static [Slot]> {
    let bytes = n * size_of::<Slot>();
    // SAFETY: fresh anonymous mapping, zero-filled; zero is a valid AtomicU64.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error()).context("mapping the counter block");
    }
    // SAFETY: the mapping is page aligned (≥ 128), `bytes` long, zeroed, never unmapped.
    Ok(unsafe { std::slice::from_raw_parts(p as *const Slot, n) })
}

/// Sum of all counters.
pub fn total_ops(slots: &[Slot]) -> u64 {
    slots.iter().map(|s| s.0.load(Ordering::Relaxed)).sum()
}

/// Reserves `bytes` of address space (PROT_NONE) starting on a 2 MiB boundary.
fn reserve_aligned(bytes: usize) -> io::Result<usize> {
    let len = bytes
        .checked_add(HUGE_PAGE)
        .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))?;
    // SAFETY: fresh PROT_NONE reservation; trimmed below.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let start = p as usize;
    let aligned = start.next_multiple_of(HUGE_PAGE);
    if aligned > start {
        unmap(start, aligned - start);
    }
    let end = start + len;
    if end > aligned + bytes {
        unmap(aligned + bytes, end - aligned - bytes);
    }
    Ok(aligned)
}

fn unmap(addr: usize, len: usize) {
    // SAFETY: only called on ranges this module mapped and nobody references.
    unsafe { libc::munmap(addr as *mut libc::c_void, len) };
}

fn read_sysctl(path: &str) -> Option<u128> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn mem_available_mib() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = s.lines().find(|l| l.starts_with("MemAvailable:"))?;
    Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? / 1024)
}
