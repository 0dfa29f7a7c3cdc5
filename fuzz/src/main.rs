//! One libFuzzer binary for every target of `perfpilot-fuzz`; `PERFPILOT_FUZZ_TARGET` picks
//! the target (`scripts/fuzz` sets it).

#![no_main]

use std::sync::OnceLock;

static TARGET: OnceLock<String> = OnceLock::new();

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let name = TARGET.get_or_init(|| {
        std::env::var("PERFPILOT_FUZZ_TARGET").unwrap_or_else(|_| {
            eprintln!("set PERFPILOT_FUZZ_TARGET to a directory name of fuzz/corpus");
            std::process::exit(2)
        })
    });
    if !perfpilot_fuzz::run(name, data) {
        eprintln!("no fuzz target {name}: see fuzz/corpus for the names");
        std::process::exit(2);
    }
});
