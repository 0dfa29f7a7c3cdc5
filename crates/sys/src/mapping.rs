//! Anonymous memory mapped directly with `mmap(2)`, for synthetic loads whose memory must be
//! placed, advised and touched page by page (the allocator gives no such control).

use crate::{Error, Result};

/// A private anonymous read-write mapping; it is unmapped when dropped.
#[derive(Debug)]
pub struct AnonMapping {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
}

impl AnonMapping {
    /// Maps `len` bytes of private anonymous memory (not yet backed by pages: see
    /// [`AnonMapping::touch`]). Fails for `len == 0` and when the kernel refuses.
    pub fn new(len: usize) -> Result<AnonMapping> {
        let fail = |source| Error::Syscall {
            call: "mmap",
            target: format!("{len} bytes of anonymous memory"),
            source,
        };
        if len == 0 {
            return Err(fail(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "an empty mapping is not allowed",
            )));
        }
        // SAFETY: a new anonymous private mapping touches no existing memory; the result is
        // checked before use.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(fail(std::io::Error::last_os_error()));
        }
        let ptr = std::ptr::NonNull::new(p.cast::<u8>())
            .ok_or_else(|| fail(std::io::Error::other("mmap returned a null address")))?;
        Ok(AnonMapping { ptr, len })
    }

    /// The mapping's length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: an empty mapping cannot be made.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first address of the mapping (to find it in `/proc/<pid>/maps`).
    pub fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    /// `madvise(MADV_HUGEPAGE)`: asks for transparent huge pages when the memory is touched.
    pub fn advise_hugepage(&self) -> Result<()> {
        // SAFETY: ptr..ptr+len is this mapping, alive while self is.
        let r = unsafe { libc::madvise(self.ptr.as_ptr().cast(), self.len, libc::MADV_HUGEPAGE) };
        if r != 0 {
            return Err(Error::Syscall {
                call: "madvise(MADV_HUGEPAGE)",
                target: format!("{} bytes at {:#x}", self.len, self.addr()),
                source: std::io::Error::last_os_error(),
            });
        }
        Ok(())
    }

    /// Writes one byte in every page, so the kernel backs the whole mapping with memory.
    /// The writes are volatile: the compiler may not drop them as unread.
    pub fn touch(&mut self) {
        let page = crate::page_size().max(1) as usize;
        for off in (0..self.len).step_by(page) {
            // SAFETY: off < len, inside the writable mapping, which self owns exclusively.
            unsafe { std::ptr::write_volatile(self.ptr.as_ptr().add(off), 1) };
        }
    }
}

impl Drop for AnonMapping {
    fn drop(&mut self) {
        // SAFETY: ptr..ptr+len is the mapping made in `new`, unmapped only here.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Resident kB of the mapping (of this process) that contains `addr`, from `smaps`. The
    /// kernel may merge our mapping with an adjacent one, so only a difference is meaningful.
    fn rss_kb_around(addr: usize) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut inside = false;
        for line in smaps.lines() {
            let range = line
                .split_whitespace()
                .next()
                .and_then(|r| r.split_once('-'));
            if let Some((a, b)) = range
                && let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
            {
                inside = (a..b).contains(&addr);
            } else if inside && let Some(v) = line.strip_prefix("Rss:") {
                return v.trim().trim_end_matches("kB").trim().parse().unwrap();
            }
        }
        panic!("no mapping contains {addr:#x}");
    }

    #[test]
    fn touching_a_mapping_makes_every_page_resident() {
        let mut m = AnonMapping::new(4 << 20).unwrap();
        assert_eq!(m.len(), 4 << 20);
        let before = rss_kb_around(m.addr());
        m.touch();
        assert!(rss_kb_around(m.addr()) >= before + (4 << 10));
    }

    #[test]
    fn an_empty_mapping_is_an_error_naming_mmap() {
        let e = AnonMapping::new(0).unwrap_err();
        assert!(e.to_string().starts_with("mmap failed for 0 bytes"), "{e}");
    }
}
