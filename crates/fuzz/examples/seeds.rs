//! Writes the corpus seeds that are easier made than found: a Measurement's JSON (from the
//! pgbench fixture) and a stored sample (a small synthetic one, encoded as the store does).
//! Run from the repository: `cargo run -p perfpilot-fuzz --example seeds`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let stdout = std::fs::read_to_string("crates/drive/tests/fixtures/pgbench.stdout")?;
    let stderr = std::fs::read_to_string("crates/drive/tests/fixtures/pgbench.stderr")?;
    let m = perfpilot_drive::adapters::parse_pgbench(&stdout, &stderr)?;
    std::fs::write("fuzz/corpus/measurement_json/pgbench.json", m.to_json())?;
    let fs = perfpilot_sys::Fs::at("tests/fixtures/vm-1node");
    let sample = perfpilot_observe::sample::Sampler::new(&fs, Default::default()).sample()?;
    let (raw_len, blob) = perfpilot_store::samples::encode(&sample)?;
    // The target's framing: encoding, then the length (three bytes used), then the blob.
    let mut framed = vec![1u8];
    framed.extend_from_slice(&(raw_len as u32).to_le_bytes());
    framed.extend_from_slice(&blob);
    std::fs::write("fuzz/corpus/store_blob/vm-1node", framed)?;
    Ok(())
}
