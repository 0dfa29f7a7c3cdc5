//! `perfpilot generate man|completions DIR` (hidden): man pages and shell completions made from
//! the CLI definition itself, so the packaged documentation never drifts from the binary.
//! `scripts/deb` runs it before packaging.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, CommandFactory, Subcommand};
use clap_complete::Shell;

#[derive(Args)]
pub struct GenerateArgs {
    #[command(subcommand)]
    what: What,
}

#[derive(Subcommand)]
enum What {
    /// Man pages (section 1): perfpilot.1 and one page per subcommand (perfpilot-daemon.1, …).
    Man {
        /// Directory to write the pages to (created if missing).
        dir: PathBuf,
    },
    /// Shell completions: perfpilot.bash, _perfpilot (zsh) and perfpilot.fish.
    Completions {
        /// Directory to write the scripts to (created if missing).
        dir: PathBuf,
    },
}

/// The shells whose completions are packaged.
const SHELLS: [Shell; 3] = [Shell::Bash, Shell::Zsh, Shell::Fish];

pub fn run(a: GenerateArgs) -> anyhow::Result<()> {
    match a.what {
        What::Man { dir } => {
            let written = man_pages(&dir)?;
            println!("{written} man pages in {}", dir.display());
        }
        What::Completions { dir } => {
            for path in completions(&dir)? {
                println!("{}", path.display());
            }
        }
    }
    Ok(())
}

fn make_dir(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))
}

/// Writes perfpilot.1 and a page for every visible subcommand; returns how many.
fn man_pages(dir: &Path) -> anyhow::Result<usize> {
    make_dir(dir)?;
    clap_mangen::generate_to(crate::Cli::command(), dir)
        .with_context(|| format!("writing man pages to {}", dir.display()))?;
    let count = std::fs::read_dir(dir)
        .with_context(|| format!("listing {}", dir.display()))?
        .filter_map(Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| x == "1"))
        .count();
    Ok(count)
}

/// Writes one completion script per shell in [`SHELLS`]; returns their paths.
fn completions(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    make_dir(dir)?;
    let mut cmd = crate::Cli::command();
    SHELLS
        .iter()
        .map(|&shell| {
            clap_complete::generate_to(shell, &mut cmd, "perfpilot", dir)
                .with_context(|| format!("writing the {shell} completion to {}", dir.display()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn man_pages_cover_every_visible_subcommand_and_not_the_hidden_one() {
        let dir = tempfile::tempdir().unwrap();
        let n = man_pages(dir.path()).unwrap();
        let top = std::fs::read_to_string(dir.path().join("perfpilot.1")).unwrap();
        assert!(
            top.starts_with(".ie"),
            "not roff: {}",
            &top[..40.min(top.len())]
        );
        assert!(
            top.contains("perfpilot\\-daemon(1)"),
            "no daemon in SEE ALSO-like list"
        );
        for sub in ["daemon", "status", "revert", "study-run", "drive"] {
            assert!(
                dir.path().join(format!("perfpilot-{sub}.1")).is_file(),
                "no page for {sub}"
            );
        }
        assert!(!dir.path().join("perfpilot-generate.1").exists());
        assert!(n > 20, "only {n} pages");
    }

    #[test]
    fn completions_are_written_for_bash_zsh_and_fish() {
        let dir = tempfile::tempdir().unwrap();
        let paths = completions(dir.path()).unwrap();
        let names: Vec<String> = paths
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["perfpilot.bash", "_perfpilot", "perfpilot.fish"]);
        let bash = std::fs::read_to_string(dir.path().join("perfpilot.bash")).unwrap();
        assert!(bash.contains("complete -F _perfpilot"), "{bash}");
        assert!(bash.contains("daemon"));
    }
}
