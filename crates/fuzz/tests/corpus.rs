//! The fuzz smoke CI runs: every target over its corpus (`fuzz/corpus/TARGET/`), every crash
//! input once found (`fuzz/crashes/TARGET/`, kept as regressions), and a fixed number of
//! seeded mutations of the corpus. The coverage-guided run is `scripts/fuzz [SECONDS]`.

use std::path::{Path, PathBuf};

use perfpilot_fuzz::TARGETS;

/// Mutations per target (deterministic: a seeded generator).
const MUTATIONS: usize = 3_000;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn files(dir: &Path) -> Vec<Vec<u8>> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = rd
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    paths.sort();
    paths
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|n| n != ".gitkeep"))
        .map(|p| std::fs::read(p).unwrap())
        .collect()
}

/// One mutation of `input`, with `other` as material to splice in.
fn mutate(rng: &mut perfpilot_stats::Rng, input: &[u8], other: &[u8]) -> Vec<u8> {
    let mut v = input.to_vec();
    let below =
        |rng: &mut perfpilot_stats::Rng, n: usize| (rng.next_u64() % n.max(1) as u64) as usize;
    for _ in 0..1 + below(rng, 4) {
        match below(rng, 6) {
            0 if !v.is_empty() => {
                let i = below(rng, v.len());
                v[i] ^= 1 << below(rng, 8);
            }
            1 if !v.is_empty() => {
                let i = below(rng, v.len());
                v.truncate(i);
            }
            2 => {
                let i = below(rng, v.len() + 1);
                let b = [
                    b'0', b'9', b'-', b',', b' ', b'\n', b':', b'"', b'[', b'{', 0xff,
                ][below(rng, 11)];
                v.insert(i, b);
            }
            3 if !v.is_empty() => {
                let i = below(rng, v.len());
                let n = below(rng, 16).min(v.len() - i);
                v.drain(i..i + n);
            }
            4 if !other.is_empty() => {
                let i = below(rng, v.len() + 1);
                let a = below(rng, other.len());
                let n = below(rng, 64).min(other.len() - a);
                v.splice(i..i, other[a..a + n].iter().copied());
            }
            _ if !v.is_empty() => {
                // A number made huge or negative.
                let i = below(rng, v.len());
                v.splice(i..i, b"99999999999999999999".iter().copied());
            }
            _ => {}
        }
    }
    v
}

#[test]
fn every_target_survives_its_corpus_its_crashes_and_mutations_of_them() {
    let mut rng = perfpilot_stats::Rng::new(0x5eed);
    let mut runs = 0;
    for t in TARGETS {
        let corpus = files(&repo().join("fuzz/corpus").join(t.name));
        assert!(!corpus.is_empty(), "fuzz/corpus/{} has no seed", t.name);
        let crashes = files(&repo().join("fuzz/crashes").join(t.name));
        for input in corpus.iter().chain(&crashes) {
            (t.run)(input);
            runs += 1;
        }
        (t.run)(&[]);
        for k in 0..MUTATIONS {
            let a = &corpus[k % corpus.len()];
            let b = &corpus[(k / corpus.len()) % corpus.len()];
            (t.run)(&mutate(&mut rng, a, b));
            runs += 1;
        }
    }
    println!("{} targets, {runs} inputs, no panic", TARGETS.len());
}

#[test]
fn every_corpus_directory_belongs_to_a_target() {
    for e in std::fs::read_dir(repo().join("fuzz/corpus")).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        assert!(
            perfpilot_fuzz::run(&name, b""),
            "fuzz/corpus/{name} names no target in crates/fuzz"
        );
    }
}

#[test]
fn the_preset_seeds_are_real_sessions_that_read_to_their_counter() {
    use perfpilot_optimize::signal::preset::fuzzing;
    let seed =
        |t: &str, f: &str| std::fs::read(repo().join("fuzz/corpus").join(t).join(f)).unwrap();
    // The captured MariaDB session (auth switch, then SHOW GLOBAL STATUS): Questions = 22.
    for f in [
        "mariadb-switch-then-questions",
        "mariadb-unix-root-ok",
        "mysql8-caching-sha2-fast",
        "mysql8-full-auth-unix",
    ] {
        assert_eq!(fuzzing::mysql(&seed("mysql_session", f)), Some(22), "{f}");
    }
    assert_eq!(
        fuzzing::mysql(&seed("mysql_session", "access-denied")),
        None
    );
    // A PostgreSQL 15 session captured over its Unix socket (trust): 880 transactions; and
    // the same server refusing a database that does not exist.
    assert_eq!(
        fuzzing::postgres(&seed("postgres_session", "trust-select")),
        Some(880.0)
    );
    assert_eq!(
        fuzzing::postgres(&seed("postgres_session", "no-such-database")),
        None
    );
    assert!(fuzzing::memcached_stats(&seed("memcached_stats", "short")) == Some(12.0));
    let page = String::from_utf8(seed("nginx_stub_status", "busy")).unwrap();
    assert_eq!(fuzzing::nginx_stub_status(&page), Some(31_070_465));
}
