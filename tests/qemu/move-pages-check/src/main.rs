//! `move-pages-check PID NODE`: move every page of PID's private anonymous writable
//! mappings (and its heap) to NUMA node NODE with `move_pages(2)`, and print how many pages
//! were on each node before and after (from move_pages' own status answers).
//! Exit status 0 when every present page ended on NODE, 1 otherwise, 2 on a usage error.
//! Used by scripts/qemu/smoke-guest.sh inside the two-node QEMU guest.

use std::collections::BTreeMap;
use std::os::raw::{c_int, c_long, c_ulong, c_void};

extern "C" {
    fn syscall(number: c_long, ...) -> c_long;
    fn __errno_location() -> *mut c_int;
}

const SYS_MOVE_PAGES: c_long = 279; // x86_64
const MPOL_MF_MOVE: c_int = 1 << 1;
const PAGE: u64 = 4096;
const CHUNK: usize = 4096;

fn move_pages(pid: i32, pages: &[u64], node: Option<i32>) -> Result<Vec<i32>, String> {
    let mut status = vec![0i32; pages.len()];
    let ptrs: Vec<*mut c_void> = pages.iter().map(|&a| a as *mut c_void).collect();
    let nodes = node.map(|n| vec![n; pages.len()]);
    let nodes_ptr = nodes.as_ref().map_or(std::ptr::null(), |v| v.as_ptr());
    // SAFETY: arrays of pages.len() elements, as move_pages(2) expects.
    let r = unsafe {
        syscall(
            SYS_MOVE_PAGES,
            pid as c_long,
            pages.len() as c_ulong,
            ptrs.as_ptr(),
            nodes_ptr,
            status.as_mut_ptr(),
            MPOL_MF_MOVE as c_long,
        )
    };
    if r < 0 {
        // SAFETY: errno of this thread.
        let e = unsafe { *__errno_location() };
        return Err(format!(
            "move_pages(pid {pid}, {} pages, node {node:?}): {}",
            pages.len(),
            std::io::Error::from_raw_os_error(e)
        ));
    }
    Ok(status)
}

fn census(pid: i32, pages: &[u64]) -> Result<BTreeMap<i32, u64>, String> {
    let mut m = BTreeMap::new();
    for c in pages.chunks(CHUNK) {
        for s in move_pages(pid, c, None)? {
            *m.entry(s).or_insert(0) += 1;
        }
    }
    Ok(m)
}

fn show(m: &BTreeMap<i32, u64>) -> String {
    m.iter()
        .map(|(k, v)| if *k >= 0 { format!("N{k}={v}") } else { format!("errno{}={v}", -k) })
        .collect::<Vec<_>>()
        .join(" ")
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(pid), Some(node)) = (
        args.get(1).and_then(|s| s.parse::<i32>().ok()),
        args.get(2).and_then(|s| s.parse::<i32>().ok()),
    ) else {
        eprintln!("usage: move-pages-check PID NODE");
        std::process::exit(2);
    };
    let maps = match std::fs::read_to_string(format!("/proc/{pid}/maps")) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("reading /proc/{pid}/maps: {e}");
            std::process::exit(2);
        }
    };
    let mut pages = Vec::new();
    for line in maps.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let anon = f.len() == 5 || (f.len() == 6 && f[5] == "[heap]");
        if f.len() < 5 || !anon || !f[1].starts_with("rw") || !f[1].ends_with('p') {
            continue;
        }
        let (a, b) = f[0].split_once('-').unwrap();
        let (a, b) = (u64::from_str_radix(a, 16).unwrap(), u64::from_str_radix(b, 16).unwrap());
        pages.extend((a..b).step_by(PAGE as usize));
    }
    let run = || -> Result<bool, String> {
        let before = census(pid, &pages)?;
        println!("pid {pid}: {} pages in anonymous mappings", pages.len());
        println!("before move_pages: {}", show(&before));
        let mut moved = BTreeMap::new();
        for c in pages.chunks(CHUNK) {
            for s in move_pages(pid, c, Some(node))? {
                *moved.entry(s).or_insert(0) += 1;
            }
        }
        println!("move_pages to node {node} status: {}", show(&moved));
        let after = census(pid, &pages)?;
        println!("after move_pages:  {}", show(&after));
        Ok(after.iter().all(|(k, _)| *k == node || *k < 0))
    };
    match run() {
        Ok(true) => {}
        Ok(false) => {
            eprintln!("some present pages are not on node {node}");
            std::process::exit(1);
        }
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    }
}
