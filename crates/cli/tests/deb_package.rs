//! The .deb: `scripts/deb` packages the binary under test (no second build), `dpkg -x` unpacks
//! it into an empty directory, and what an installed system would use is used from there: the
//! binary, `man -w` on its man pages, the bash completion, the unit and the default config.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use perfpilot_optimize::DaemonConfig;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The package built once for every test here, and the directory it was unpacked into.
struct Installed {
    deb: PathBuf,
    root: PathBuf,
    _dir: tempfile::TempDir,
}

fn installed() -> &'static Installed {
    static INSTALLED: OnceLock<Installed> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        run(Command::new(repo().join("scripts/deb"))
            .args(["--binary", env!("CARGO_BIN_EXE_perfpilot"), "--out"])
            .arg(&out));
        let debs: Vec<PathBuf> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "deb"))
            .collect();
        assert_eq!(
            debs.len(),
            1,
            "expected one .deb in {}: {debs:?}",
            out.display()
        );
        let root = dir.path().join("root");
        run(Command::new("dpkg").arg("-x").arg(&debs[0]).arg(&root));
        Installed {
            deb: debs[0].clone(),
            root,
            _dir: dir,
        }
    })
}

fn at(root: &Path, rel: &str) -> PathBuf {
    root.join(rel)
}

#[test]
fn the_packaged_binary_runs_and_tells_its_version() {
    let i = installed();
    let out = run(Command::new(at(&i.root, "usr/bin/perfpilot")).arg("--version"));
    assert_eq!(
        stdout(&out).trim(),
        format!("perfpilot {}", env!("CARGO_PKG_VERSION"))
    );
    // The packaging subcommand stays out of the help.
    let help = run(Command::new(at(&i.root, "usr/bin/perfpilot")).arg("--help"));
    let help = stdout(&help);
    assert!(
        help.contains("daemon") && !help.contains("generate"),
        "{help}"
    );
}

#[test]
fn man_finds_the_packaged_pages() {
    let i = installed();
    let manpath = at(&i.root, "usr/share/man");
    for page in ["perfpilot", "perfpilot-daemon", "perfpilot-study-run"] {
        let out = run(Command::new("man")
            .args(["-w", page])
            .env("MANPATH", &manpath));
        let found = stdout(&out);
        assert!(
            found.trim().starts_with(manpath.to_str().unwrap()),
            "man -w {page} found {found:?}, not the package's page"
        );
    }
    // The page is rendered (not only present): its NAME and the daemon's options.
    let out = run(Command::new("man")
        .args(["-P", "cat", "perfpilot-daemon"])
        .env("MANPATH", &manpath)
        .env("MANWIDTH", "100"));
    let text = stdout(&out);
    assert!(
        text.contains("--state-dir") && text.contains("NAME"),
        "{text}"
    );
}

#[test]
fn the_bash_completion_completes_subcommands() {
    let i = installed();
    let script = at(&i.root, "usr/share/bash-completion/completions/perfpilot");
    let out = run(Command::new("bash").arg("-c").arg(format!(
        "source '{}' && complete -p perfpilot && COMP_WORDS=(perfpilot dae) && COMP_CWORD=1 \
         && _perfpilot perfpilot dae perfpilot && echo \"reply: ${{COMPREPLY[*]}}\"",
        script.display()
    )));
    let text = stdout(&out);
    assert!(text.contains("-F _perfpilot perfpilot"), "{text}");
    assert!(text.contains("reply: daemon"), "{text}");
    let zsh = std::fs::read_to_string(at(&i.root, "usr/share/zsh/vendor-completions/_perfpilot"))
        .unwrap();
    assert!(zsh.starts_with("#compdef perfpilot"), "{}", &zsh[..80]);
    let fish = std::fs::read_to_string(at(
        &i.root,
        "usr/share/fish/vendor_completions.d/perfpilot.fish",
    ))
    .unwrap();
    assert!(fish.contains("complete -c perfpilot"), "{}", &fish[..80]);
}

#[test]
fn the_package_holds_the_unit_and_a_default_config_the_daemon_accepts() {
    let i = installed();
    let unit =
        std::fs::read_to_string(at(&i.root, "usr/lib/systemd/system/perfpilot.service")).unwrap();
    assert_eq!(
        unit,
        std::fs::read_to_string(repo().join("deploy/perfpilot.service")).unwrap()
    );
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .unwrap();
    // The unit starts the binary where the package puts it, with the config it ships.
    let bin = exec.split_whitespace().next().unwrap();
    assert!(at(&i.root, bin.trim_start_matches('/')).is_file(), "{exec}");
    assert!(
        exec.contains("--config /etc/perfpilot/perfpilot.toml"),
        "{exec}"
    );
    let config = at(&i.root, "etc/perfpilot/perfpilot.toml");
    DaemonConfig::load(&config).unwrap_or_else(|e| panic!("the packaged config: {e}"));
    // dpkg keeps an edited config on upgrade: it is a conffile.
    let out = run(Command::new("dpkg-deb")
        .args(["-f"])
        .arg(&i.deb)
        .arg("Package"));
    assert_eq!(stdout(&out).trim(), "perfpilot");
    let ctrl = tempfile::tempdir().unwrap();
    run(Command::new("dpkg-deb")
        .arg("--control")
        .arg(&i.deb)
        .arg(ctrl.path()));
    let conffiles = std::fs::read_to_string(ctrl.path().join("conffiles")).unwrap();
    assert!(
        conffiles
            .lines()
            .any(|l| l == "/etc/perfpilot/perfpilot.toml"),
        "{conffiles}"
    );
}
