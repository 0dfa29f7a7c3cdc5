//! Settings a process's own code or its launcher made, which perfpilot must not override: a
//! memory policy (`numactl --membind`, `mbind`, `set_mempolicy`: the policy field of
//! `/proc/<pid>/numa_maps`, which shows a range's own policy or else the process's), and
//! ranges advised `MADV_NOHUGEPAGE` (`nh` among `VmFlags` in `/proc/<pid>/smaps`).
//! `PR_SET_THP_DISABLE` and hugetlbfs mappings are in `status` (`THP_enabled`,
//! `HugetlbPages`: [`super::ProcStatus`]).

/// A memory policy other than the default, as `numa_maps` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryPolicy {
    /// The policy of the first range that has one (`bind:0`, `prefer:1`, `interleave:0-1`,
    /// `preferred-many:0-1`, `weighted-interleave:0-1`).
    pub policy: String,
    /// Ranges with a policy other than the default.
    pub ranges: usize,
    /// Ranges in all.
    pub of: usize,
}

/// The memory policy set on a process or its ranges, from the text of its `numa_maps`;
/// `None` when every range has the default (local) policy.
pub fn memory_policy(numa_maps: &str) -> Option<MemoryPolicy> {
    let mut found: Option<MemoryPolicy> = None;
    let mut of = 0;
    for line in numa_maps.lines() {
        let Some(policy) = line.split_ascii_whitespace().nth(1) else {
            continue;
        };
        of += 1;
        // `default` and `local` place pages on the node that touches them: no choice made.
        if policy == "default" || policy == "local" {
            continue;
        }
        match &mut found {
            Some(f) => f.ranges += 1,
            None => {
                found = Some(MemoryPolicy {
                    policy: policy.to_string(),
                    ranges: 1,
                    of: 0,
                })
            }
        }
    }
    found.map(|f| MemoryPolicy { of, ..f })
}

/// The ranges of at least `min_bytes` advised `MADV_NOHUGEPAGE`, from the text of `smaps`:
/// (start, end) addresses.
pub fn nohugepage_ranges(smaps: &str, min_bytes: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut current: Option<(u64, u64)> = None;
    for line in smaps.lines() {
        if let Some(flags) = line.strip_prefix("VmFlags:") {
            if let Some((a, b)) = current.take()
                && b - a >= min_bytes
                && flags.split_ascii_whitespace().any(|f| f == "nh")
            {
                out.push((a, b));
            }
            continue;
        }
        if let Some(range) = super::maps::smaps_header(line) {
            current = Some(range);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bind_policy_in_numa_maps_is_found_and_the_default_is_not() {
        let bound = "7f0000000000 bind:0 anon=512 dirty=512 N0=512 kernelpagesize_kB=4\n\
                     7f1000000000 bind:0 file=/usr/lib/libc.so.6 mapped=100 N0=100 kernelpagesize_kB=4\n\
                     7ffd00000000 bind:0 stack anon=3 dirty=3 N0=3 kernelpagesize_kB=4\n";
        assert_eq!(
            memory_policy(bound),
            Some(MemoryPolicy {
                policy: "bind:0".into(),
                ranges: 3,
                of: 3
            })
        );
        let one =
            "7f0000000000 default anon=1 N0=1\n7f2000000000 interleave:0-1 anon=8 N0=4 N1=4\n";
        let p = memory_policy(one).unwrap();
        assert_eq!(
            (p.policy.as_str(), p.ranges, p.of),
            ("interleave:0-1", 1, 2)
        );
        assert_eq!(memory_policy("7f0000000000 default anon=1 N0=1\n"), None);
        assert_eq!(memory_policy(""), None);
    }

    #[test]
    fn nohugepage_ranges_are_found_by_their_vmflags() {
        let smaps = "7f0000000000-7f0040000000 rw-p 00000000 00:00 0 \n\
                     Size:            1048576 kB\n\
                     VmFlags: rd wr mr mw me ac sd nh \n\
                     7f1000000000-7f1000001000 rw-p 00000000 00:00 0 \n\
                     Size:                  4 kB\n\
                     VmFlags: rd wr mr mw me ac nh \n\
                     7f2000000000-7f2040000000 rw-p 00000000 00:00 0 \n\
                     VmFlags: rd wr mr mw me ac hg \n";
        assert_eq!(
            nohugepage_ranges(smaps, 2 << 20),
            vec![(0x7f00_0000_0000, 0x7f00_4000_0000)],
            "the 4 KiB one is too small to matter; `hg` is MADV_HUGEPAGE"
        );
    }

    #[test]
    fn thp_disabled_and_hugetlb_pages_are_read_from_status() {
        let text = "Name:\tredis-server\nVmSize:\t  10000 kB\nHugetlbPages:\t    2048 kB\nTHP_enabled:\t0\n";
        let st =
            crate::process::parse_status(text, std::path::Path::new("/proc/1/status")).unwrap();
        assert_eq!(st.thp_enabled, Some(false));
        assert_eq!(st.hugetlb_pages, 2 << 20);
        let old =
            crate::process::parse_status("Name:\tx\nVmSize:\t1 kB\n", std::path::Path::new("s"))
                .unwrap();
        assert_eq!(
            (old.thp_enabled, old.hugetlb_pages),
            (None, 0),
            "kernels before 5.0 do not say"
        );
    }
}
