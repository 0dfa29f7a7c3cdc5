//! The programs a study's command lines start, looked for without running them: the first
//! word of `deployment.command` (started directly, with `deployment.env`) and of each line
//! `sh -c` runs (`deployment.setup`, `deployment.teardown`, `load.command`), placeholders
//! filled with each configuration's levels and harmless values for the rest.

use std::collections::{BTreeMap, HashSet};
use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use super::{FindingKind, Findings, Severity};
use perfpilot_lab::server::command::split_words;

use crate::spec::{Binding, Config, LoadKind, Study, render};

/// Words `sh` runs itself (builtins and keywords): there is no program to look for.
const SHELL_WORDS: [&str; 53] = [
    "!", ".", ":", "[", "[[", "{", "}", "alias", "bg", "break", "builtin", "case", "cd", "command",
    "continue", "declare", "do", "done", "echo", "elif", "else", "esac", "eval", "exit", "export",
    "false", "fg", "fi", "for", "function", "getopts", "hash", "if", "jobs", "kill", "local",
    "printf", "pwd", "read", "readonly", "return", "set", "shift", "source", "test", "then",
    "trap", "true", "type", "umask", "unset", "until", "while",
];

/// One command line of the study, rendered for one configuration.
struct Line {
    field: String,
    text: String,
}

/// Looks for programs, each (field, program) once over all configurations.
struct Programs<'a> {
    /// Where setup runs, from which its words name paths.
    setup_dir: Option<&'a Path>,
    out: &'a mut Findings,
    seen: HashSet<(String, String)>,
}

/// Checks the programs of every command line for every configuration; `dir` is where
/// instances, setup and teardown run (`None`: `deployment.workdir` is missing, so their
/// relative programs are not looked for), `workdir` where `load.command` runs.
pub(super) fn check(
    study: &Study,
    configs: &[Config],
    dir: Option<&Path>,
    workdir: &Path,
    out: &mut Findings,
) {
    let mut p = Programs {
        setup_dir: dir,
        out,
        seen: HashSet::new(),
    };
    for config in configs {
        let values = harmless_values(study, config);
        let setup: Vec<Line> = study
            .deployment
            .setup
            .iter()
            .enumerate()
            .map(|(i, s)| Line {
                field: format!("deployment.setup[{i}]"),
                text: render(s, &values),
            })
            .collect();
        // Instances get `deployment.env`; a PATH there is where their program is looked for.
        let env_path: Option<OsString> = study
            .deployment
            .env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| render(v, &values).into());
        for (i, line) in setup.iter().enumerate() {
            if let Some(program) = shell_program(&line.text) {
                let earlier = &setup[..i];
                p.check(&line.field, &program, dir, None, earlier, Severity::Error);
            }
        }
        let command = render(&study.deployment.command, &values);
        if let Some(program) = split_words(&command)
            .ok()
            .and_then(|w| w.into_iter().next())
        {
            let path = env_path.as_deref();
            p.check(
                "deployment.command",
                &program,
                dir,
                path,
                &setup,
                Severity::Error,
            );
        }
        for (i, t) in study.deployment.teardown.iter().enumerate() {
            if let Some(program) = shell_program(&render(t, &values)) {
                // A failing teardown is noted in the trial's record; the run goes on.
                let field = format!("deployment.teardown[{i}]");
                p.check(&field, &program, dir, None, &setup, Severity::Warning);
            }
        }
        if let LoadKind::Command { command, .. } = &study.load.kind
            && let Some(program) = shell_program(&render(command, &load_values(study, config)))
        {
            let at = Some(workdir);
            p.check("load.command", &program, at, None, &setup, Severity::Error);
        }
        if config.binding() != Binding::None {
            let path = env_path.as_deref();
            p.check(
                "factors.binding",
                "taskset",
                dir,
                path,
                &[],
                Severity::Error,
            );
        }
    }
}

impl Programs<'_> {
    /// Looks for `program` as `field`'s command line names it: a path from `at`, or a name on
    /// `path_var` (default: this process's `PATH`). A missing program that a line of `setup`
    /// mentions is a note; otherwise it is a finding of `severity`.
    fn check(
        &mut self,
        field: &str,
        program: &str,
        at: Option<&Path>,
        path_var: Option<&std::ffi::OsStr>,
        setup: &[Line],
        severity: Severity,
    ) {
        if !self.seen.insert((field.to_string(), program.to_string())) {
            return;
        }
        let found = if program.contains('/') {
            if at.is_none() && Path::new(program).is_relative() {
                return;
            }
            executable(&normal(program, at))
        } else {
            on_path(program, path_var, at)
        };
        let Err(kind) = found else {
            return;
        };
        if matches!(
            kind,
            FindingKind::Missing { .. } | FindingKind::NotOnPath { .. }
        ) && let Some(by) = made_by(setup, self.setup_dir, program, at)
        {
            let path = match at {
                Some(_) if program.contains('/') => normal(program, at),
                _ => PathBuf::from(program),
            };
            self.out.push(
                Severity::Note,
                field,
                FindingKind::MadeBySetup { path, by },
                "nothing to do if that step makes it; otherwise build or install it",
            );
            return;
        }
        let fix = fix(&kind);
        self.out.push(severity, field, kind, fix);
    }
}

/// What to do about a program that cannot be started.
fn fix(kind: &FindingKind) -> String {
    match kind {
        FindingKind::Missing { path } => build_hint(path)
            .unwrap_or_else(|| "build or install it, or fix the path".to_string()),
        FindingKind::NotOnPath { program } if program == "taskset" => {
            "install util-linux, which has taskset (binding CPUs needs it), or use binding = \"none\""
                .to_string()
        }
        FindingKind::NotOnPath { .. } => "install it, or give its path".to_string(),
        FindingKind::NotExecutable { path } => format!(
            "make it executable (chmod +x {}) or fix the path",
            path.display()
        ),
        FindingKind::NotAFile { .. } => "name the program's file, or fix the path".to_string(),
        _ => "check the path's permissions, or fix the path".to_string(),
    }
}

/// For a Cargo binary (`…/target/release/NAME`, `…/target/debug/NAME`): the build command.
fn build_hint(path: &Path) -> Option<String> {
    let name = path.file_name()?.to_str()?;
    let profile_dir = path.parent()?;
    let profile = profile_dir.file_name()?.to_str()?;
    let target = profile_dir.parent()?;
    if target.file_name()? != "target" {
        return None;
    }
    let flag = match profile {
        "release" => " --release",
        "debug" => "",
        _ => return None,
    };
    let workspace = target.parent()?;
    Some(format!(
        "build it first: cargo build{flag} --bin {name} (in {}), or fix the path",
        workspace.display()
    ))
}

/// Ok when `path` is a file with an execute bit.
fn executable(path: &Path) -> Result<(), FindingKind> {
    let m = super::metadata(path)?;
    let path = path.to_path_buf();
    match m {
        m if !m.is_file() => Err(FindingKind::NotAFile { path }),
        m if m.permissions().mode() & 0o111 == 0 => Err(FindingKind::NotExecutable { path }),
        _ => Ok(()),
    }
}

/// Ok when a directory of `path_var` (default: this process's `PATH`; relative entries from
/// `at`) holds `program` as an executable file, as `execvp` looks for it.
fn on_path(
    program: &str,
    path_var: Option<&std::ffi::OsStr>,
    at: Option<&Path>,
) -> Result<(), FindingKind> {
    let var = path_var
        .map(OsString::from)
        .or_else(|| std::env::var_os("PATH"))
        .unwrap_or_default();
    let base = at.unwrap_or(Path::new("."));
    if std::env::split_paths(&var).any(|d| executable(&base.join(d).join(program)).is_ok()) {
        Ok(())
    } else {
        Err(FindingKind::NotOnPath {
            program: program.to_string(),
        })
    }
}

/// The field of the first `setup` line (run in `setup_dir`) with a word naming `program` (run
/// from `at`): the same path as written, after a `--flag=`, or once both are joined to their
/// directories. Setup runs first and may make it.
fn made_by(
    setup: &[Line],
    setup_dir: Option<&Path>,
    program: &str,
    at: Option<&Path>,
) -> Option<String> {
    let want = normal(program, at);
    setup.iter().find_map(|line| {
        let words = split_words(&line.text).unwrap_or_default();
        let mentions = words.iter().any(|w| {
            let value = w.rsplit_once('=').map_or(w.as_str(), |(_, v)| v);
            normal(w, setup_dir) == want || normal(value, setup_dir) == want
        });
        mentions.then(|| line.field.clone())
    })
}

/// A path compared by its components (`./a//b` is `a/b`), joined to `at` when relative.
fn normal(p: &str, at: Option<&Path>) -> PathBuf {
    let joined = match at {
        Some(d) => d.join(p),
        None => PathBuf::from(p),
    };
    joined
        .components()
        .filter(|c| *c != Component::CurDir)
        .collect()
}

/// The program `sh -c LINE` starts first: the first word after `NAME=value` assignments and
/// an `exec`; `None` for a builtin or keyword, or a word the shell would expand (`$`, globs,
/// `~`) or a line `split_words` cannot split, which cannot be judged without a shell.
fn shell_program(line: &str) -> Option<String> {
    let words = split_words(line).ok()?;
    let mut words = words.iter().skip_while(|w| is_assignment(w)).peekable();
    if words.peek().is_some_and(|w| *w == "exec") {
        words.next();
    }
    let first = words.next()?;
    // `make;` and `app&&` end the command at the operator.
    let word = first.split([';', '&', '|', '<', '>', '(', ')']).next()?;
    if word.is_empty()
        || word.starts_with('~')
        || word.contains(['$', '`', '*', '?', '[', '{'])
        || SHELL_WORDS.contains(&word)
    {
        return None;
    }
    Some(word.to_string())
}

/// Whether a shell word is a `NAME=value` assignment.
fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// Values for a configuration's deployment and trial placeholders: its levels, its instance
/// count, and instance 0's port, CPUs and nodes as if unbound.
pub(super) fn harmless_values(study: &Study, config: &Config) -> BTreeMap<String, String> {
    let mut v: BTreeMap<String, String> = config
        .0
        .iter()
        .map(|(n, l)| (n.clone(), l.to_string()))
        .collect();
    v.insert("instances".into(), config.instances().to_string());
    v.insert("port".into(), study.deployment.base_port.to_string());
    v.insert("instance".into(), "0".into());
    v.insert("cpus".into(), "1".into());
    v.insert("cpuset".into(), "0".into());
    v.insert("nodes".into(), "0".into());
    v
}

/// [`harmless_values`] plus the load command's placeholders.
fn load_values(study: &Study, config: &Config) -> BTreeMap<String, String> {
    let mut v = harmless_values(study, config);
    let port = study.deployment.base_port;
    let users = study.load.users_per_instance * config.instances();
    v.insert("targets".into(), format!("http://127.0.0.1:{port}"));
    v.insert("ports".into(), port.to_string());
    v.insert("users".into(), users.to_string());
    v.insert("duration_s".into(), study.run.measure.as_secs().to_string());
    v.insert("warmup_s".into(), study.run.warmup.as_secs().to_string());
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shell_program_skips_assignments_exec_and_builtins() {
        assert_eq!(
            shell_program("A=1 B=2 exec ./app -x").as_deref(),
            Some("./app")
        );
        assert_eq!(shell_program("make; ./run").as_deref(), Some("make"));
        assert_eq!(shell_program("cd build && make"), None);
        assert_eq!(shell_program("$HOME/bin/x"), None);
        assert_eq!(shell_program("'open"), None);
    }

    #[test]
    fn a_setup_word_naming_the_same_path_makes_the_program() {
        let setup = [Line {
            field: "deployment.setup[1]".into(),
            text: "cc -o ./bin//app --out=target/release/x app.c".into(),
        }];
        let at = Some(Path::new("/w"));
        assert_eq!(
            made_by(&setup, at, "bin/app", at).as_deref(),
            Some("deployment.setup[1]")
        );
        assert_eq!(
            made_by(&setup, at, "/w/target/release/x", None).as_deref(),
            Some("deployment.setup[1]")
        );
        assert_eq!(made_by(&setup, at, "bin/other", at), None);
    }

    #[test]
    fn a_cargo_binary_gets_its_build_command() {
        let hint = build_hint(Path::new("/w/target/release/scoring-model")).unwrap();
        assert!(
            hint.starts_with("build it first: cargo build --release --bin scoring-model (in /w)"),
            "{hint}"
        );
        assert_eq!(build_hint(Path::new("/usr/bin/app")), None);
    }
}
