//! `scoring-model`: writes a gradient-boosted tree ensemble as PMML (see
//! `perfpilot_scoring::generate`): `--trees` regression trees of depth `--depth`, summed, over
//! the four iris inputs, so `examples/scoring/request.json` and `requests.csv` drive it.
//!
//! The example models are a few trees: scoring one costs about as much CPU as the load driver
//! spends sending the request, so on a small machine a study of them measures the driver. A
//! production scoring model (hundreds of trees) makes the service the bottleneck, as it was in
//! the SPSS study. The output is a function of the arguments alone (seeded), so a study file
//! can regenerate it in its `setup`.

use std::path::PathBuf;

use clap::Parser;
use perfpilot_scoring::generate::Ensemble;

/// Write a seeded gradient-boosted tree ensemble (PMML) over the iris inputs.
#[derive(Parser, Debug)]
#[command(name = "scoring-model", version, about)]
struct Args {
    /// Directory to write NAME.pmml into (created if missing).
    #[arg(long)]
    out: PathBuf,
    /// Model name (file NAME.pmml, served as /score/NAME).
    #[arg(long, default_value = "iris-boost")]
    name: String,
    /// Trees in the ensemble.
    #[arg(long, default_value_t = 200)]
    trees: usize,
    /// Depth of each tree (splits from root to leaf).
    #[arg(long, default_value_t = 6)]
    depth: usize,
    /// Seed of the split and leaf values.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

fn main() {
    let a = Args::parse();
    if let Err(e) = run(&a) {
        eprintln!("scoring-model: {e}");
        std::process::exit(1);
    }
}

fn run(a: &Args) -> Result<(), String> {
    if a.trees == 0 || a.depth == 0 || a.depth > 20 {
        return Err(format!(
            "--trees must be at least 1 and --depth 1..=20 (got {} and {})",
            a.trees, a.depth
        ));
    }
    if a.name.is_empty()
        || !a
            .name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(format!(
            "--name {:?}: use letters, digits, '-' and '_' (it names the file and the URL)",
            a.name
        ));
    }
    let text = Ensemble {
        name: a.name.clone(),
        trees: a.trees,
        depth: a.depth,
        seed: a.seed,
    }
    .pmml();
    std::fs::create_dir_all(&a.out)
        .map_err(|e| format!("cannot create {}: {e}", a.out.display()))?;
    let path = a.out.join(format!("{}.pmml", a.name));
    // Write then rename, so a service starting meanwhile never reads half a model.
    let tmp = a.out.join(format!(".{}.pmml.tmp", a.name));
    std::fs::write(&tmp, text).map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, &path)
        .map_err(|e| format!("cannot rename {} to {}: {e}", tmp.display(), path.display()))?;
    Ok(())
}
