//! Preflight: what can be checked of a parsed study before a run, without running anything —
//! the programs its command lines start (`programs`), the files it names, the knobs it writes
//! and the ports its instances will take (`ports`).
//!
//! `Study::parse` checks the file's own consistency; [`preflight`] checks the machine it is
//! about to run on, so that `study validate` does not call "valid" a study whose every trial
//! would fail with `sh: 1: target/release/app: not found`.

mod ports;
mod programs;

use std::collections::BTreeSet;
use std::fmt;
use std::fs::File;
use std::io::ErrorKind;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::raw::RawStudy;
use super::{Config, DEFAULT_ALLOCATORS, LoadKind, Study, render};

/// How much a finding matters to a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    /// The run would fail as the study stands: every trial, or every trial of some
    /// configurations.
    Error,
    /// The run goes on, but not as the study says (a busy port skipped, a teardown failing).
    Warning,
    /// Worth knowing, nothing to fix (a program that a setup step makes).
    Note,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Note => "note",
        })
    }
}

/// Who holds a busy port, as far as `/proc/net/tcp{,6}` and `/proc/*/fd` tell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortHolder {
    /// The user id owning the socket.
    pub uid: u32,
    /// The process holding the socket and its name (`comm`), when this user may read its
    /// file descriptors.
    pub process: Option<(u32, String)>,
}

impl fmt::Display for PortHolder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.process {
            Some((pid, name)) => write!(f, "pid {pid} ({name})"),
            None => write!(
                f,
                "a socket of uid {} whose process this user cannot see",
                self.uid
            ),
        }
    }
}

/// What is wrong, with the path or port it concerns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FindingKind {
    /// A file, program or directory that does not exist.
    Missing {
        /// The path looked for (relative paths joined to their directory).
        path: PathBuf,
    },
    /// A program named without a `/` that no directory of `PATH` holds as an executable.
    NotOnPath {
        /// The program's name.
        program: String,
    },
    /// A program file that is not executable.
    NotExecutable {
        /// The file.
        path: PathBuf,
    },
    /// A path that should name a regular file but names a directory or something else.
    NotAFile {
        /// The path.
        path: PathBuf,
    },
    /// A path that should name a directory but names something else.
    NotADirectory {
        /// The path.
        path: PathBuf,
    },
    /// A path that exists but cannot be read or looked at.
    Unreadable {
        /// The path.
        path: PathBuf,
        /// The operating system's reason.
        reason: String,
    },
    /// A knob file this user cannot write.
    NotWritable {
        /// The knob's file.
        path: PathBuf,
        /// The effective user id this process runs as.
        uid: u32,
    },
    /// A program that does not exist yet but a setup step mentions: setup runs first and may
    /// make it.
    MadeBySetup {
        /// The program as the command line names it (joined to its directory when relative).
        path: PathBuf,
        /// The setup step's field (`deployment.setup[0]`).
        by: String,
    },
    /// A port an instance will take is in use on 127.0.0.1.
    PortBusy {
        /// The port.
        port: u16,
        /// The instance that would take it (`deployment.base_port + instance`).
        instance: usize,
        /// Who holds it, when `/proc` tells.
        holder: Option<PortHolder>,
    },
}

impl fmt::Display for FindingKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FindingKind::Missing { path } => write!(f, "{} does not exist", path.display()),
            FindingKind::NotOnPath { program } => {
                write!(f, "{program} is not found in any directory of PATH")
            }
            FindingKind::NotExecutable { path } => {
                write!(f, "{} is not executable", path.display())
            }
            FindingKind::NotAFile { path } => {
                write!(f, "{} is not a regular file", path.display())
            }
            FindingKind::NotADirectory { path } => {
                write!(f, "{} is not a directory", path.display())
            }
            FindingKind::Unreadable { path, reason } => {
                write!(f, "{} cannot be read: {reason}", path.display())
            }
            FindingKind::NotWritable { path, uid } => {
                write!(f, "{} is not writable by uid {uid}", path.display())
            }
            FindingKind::MadeBySetup { path, by } => write!(
                f,
                "{} does not exist yet: made by setup ({by} mentions it and runs first)",
                path.display()
            ),
            FindingKind::PortBusy {
                port,
                instance,
                holder,
            } => {
                write!(
                    f,
                    "port {port} (instance {instance}: deployment.base_port + {instance}) is in use on 127.0.0.1"
                )?;
                match holder {
                    Some(h) => write!(f, " by {h}"),
                    None => Ok(()),
                }
            }
        }
    }
}

/// One thing found about a study before its run: which field, what is wrong, what to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// How much it matters.
    pub severity: Severity,
    /// The study file's field it concerns (`deployment.command`, `deployment.setup[0]`,
    /// `load.body_file`, `deployment.base_port`).
    pub field: String,
    /// What is wrong, with the path or port.
    pub kind: FindingKind,
    /// What to do about it.
    pub fix: String,
}

impl Finding {
    /// Whether the run would fail as the study stands.
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {}: {}; {}",
            self.severity, self.field, self.kind, self.fix
        )
    }
}

/// Checks what a run of `study` needs from this machine, without running anything; errors
/// first, then warnings, then notes (empty: nothing found).
///
/// `workdir` is the directory the study runs from (the caller's current directory): relative
/// `deployment.workdir`, `load.body_file` and `load.data` paths, and the programs of
/// `load.command`, start from it. Instances, setup and teardown run in `deployment.workdir`
/// when the study sets it, so their relative programs and allocator libraries start from
/// there. Checked:
/// - the first word of `deployment.command` and of every `deployment.setup`,
///   `deployment.teardown` and `load.command` line, placeholders filled with each
///   configuration's levels (an iterated search's representatives: every level of every
///   parameter, a range's bounds) and harmless values: an executable file, or a name on `PATH`; a
///   program that does not exist but that a setup step mentions is a [`Severity::Note`];
/// - `taskset` on `PATH` when a `binding` level binds CPUs;
/// - `deployment.workdir` (a directory), `load.body_file` and `load.data` (readable files),
///   the allocator libraries `LD_PRELOAD` will name, the knobs' files (existing; writable
///   unless running as root);
/// - the ports from `deployment.base_port` up to the largest `instances` level: free to bind
///   on 127.0.0.1, else a [`Severity::Warning`] naming the holder (the runner skips a busy
///   port).
pub fn preflight(study: &Study, workdir: &Path) -> Vec<Finding> {
    let mut out = Findings::default();
    let configs = study.representatives();
    let dir = deployment_dir(study, workdir, &mut out);
    programs::check(study, &configs, dir.as_deref(), workdir, &mut out);
    load_files(study, workdir, &mut out);
    allocator_libraries(study, dir.as_deref(), &mut out);
    knobs(study, &configs, &mut out);
    ports::check(study, &configs, &mut out);
    let mut found = out.0;
    found.sort_by_key(|f| f.severity);
    found
}

/// Findings without repeats (one program checked for many configurations is named once).
#[derive(Default)]
struct Findings(Vec<Finding>);

impl Findings {
    fn push(
        &mut self,
        severity: Severity,
        field: impl Into<String>,
        kind: FindingKind,
        fix: impl Into<String>,
    ) {
        let f = Finding {
            severity,
            field: field.into(),
            kind,
            fix: fix.into(),
        };
        if !self.0.contains(&f) {
            self.0.push(f);
        }
    }
}

/// The directory instances, setup and teardown run in; `None` (and a finding) when
/// `deployment.workdir` is not a directory, so relative programs are not looked for in it.
fn deployment_dir(study: &Study, workdir: &Path, out: &mut Findings) -> Option<PathBuf> {
    let Some(w) = &study.deployment.workdir else {
        return Some(workdir.to_path_buf());
    };
    let path = workdir.join(w);
    let fix =
        "create it or fix the path (a relative one starts from the directory the study runs from)";
    match std::fs::metadata(&path) {
        Ok(m) if m.is_dir() => return Some(path),
        Ok(_) => out.push(
            Severity::Error,
            "deployment.workdir",
            FindingKind::NotADirectory { path },
            fix,
        ),
        Err(e) if e.kind() == ErrorKind::NotFound => out.push(
            Severity::Error,
            "deployment.workdir",
            FindingKind::Missing { path },
            fix,
        ),
        Err(e) => out.push(
            Severity::Error,
            "deployment.workdir",
            FindingKind::Unreadable {
                path,
                reason: e.to_string(),
            },
            "check its permissions, or fix the path",
        ),
    }
    None
}

/// `load.body_file` (its text was read when the study was, so this finds one moved since)
/// and `load.data` (read by each trial's driver).
fn load_files(study: &Study, workdir: &Path, out: &mut Findings) {
    let fix =
        "create it or fix the path (a relative one starts from the directory the study runs from)";
    // The study keeps the body's text, not its file's name: the source text has it.
    let body_file = RawStudy::parse(&study.source, &study.path)
        .ok()
        .and_then(|raw| raw.load.into_inner().body_file);
    if let Some(f) = body_file
        && let Err(kind) = readable_file(&workdir.join(f.get_ref()))
    {
        out.push(Severity::Error, "load.body_file", kind, fix);
    }
    if let LoadKind::Builtin { data: Some(d), .. } = &study.load.kind
        && let Err(kind) = readable_file(&workdir.join(d))
    {
        out.push(Severity::Error, "load.data", kind, fix);
    }
}

/// The libraries the `allocator` factor's levels preload; a name without a `/` is left to
/// the dynamic loader's search.
fn allocator_libraries(study: &Study, dir: Option<&Path>, out: &mut Findings) {
    let Some(factor) = study.factors.iter().find(|f| f.name == "allocator") else {
        return;
    };
    for level in factor.levels().unwrap_or_default() {
        let name = level.to_string();
        let Some(lib) = study.allocator_path(&name) else {
            continue;
        };
        if !lib.contains('/') {
            continue;
        }
        let path = match dir {
            _ if Path::new(lib).is_absolute() => PathBuf::from(lib),
            Some(d) => d.join(lib),
            None => continue,
        };
        let Err(kind) = readable_file(&path) else {
            continue;
        };
        let default = DEFAULT_ALLOCATORS
            .iter()
            .any(|(n, p)| *n == name && *p == lib);
        let (field, fix) = if default {
            (
                "factors.allocator".to_string(),
                format!(
                    "allocator {name:?} preloads it: install it (Debian: libjemalloc2, libgoogle-perftools4, libmimalloc2.0) or name its library in [allocators]"
                ),
            )
        } else {
            (
                format!("allocators.{name}"),
                "install the library or fix its path".to_string(),
            )
        };
        out.push(Severity::Error, field, kind, fix);
    }
}

/// Each knob's file exists (else this kernel lacks the knob) and, unless running as root,
/// is writable by this user: its path rendered for every configuration, a scratch file
/// system's `{device}` standing for any loop device this machine has (each trial makes its
/// own); with none yet, such a knob is checked when its trial makes the device.
fn knobs(study: &Study, configs: &[Config], out: &mut Findings) {
    let uid = perfpilot_sys::user::euid();
    let stand_in = study.storage.as_ref().and_then(|_| loop_device());
    for (i, k) in study.deployment.knobs.iter().enumerate() {
        let field = format!("deployment.knobs[{i}]");
        let mut paths = BTreeSet::new();
        for config in configs {
            let mut values = programs::harmless_values(study, config);
            if let Some(st) = &study.storage {
                values.insert("mount".into(), st.mount.display().to_string());
            }
            if let Some(d) = &stand_in {
                values.insert("device".into(), d.clone());
            }
            let rendered = render(&k.path, &values);
            if rendered.contains("{device}") {
                continue;
            }
            paths.insert(Path::new("/").join(rendered.trim_start_matches('/')));
        }
        for path in paths {
            knob_file(path, &field, uid, out);
        }
    }
}

/// The name of a loop device (`loop0`) under `/sys/block`, if any.
fn loop_device() -> Option<String> {
    let mut names: Vec<String> = std::fs::read_dir("/sys/block")
        .ok()?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("loop"))
        .collect();
    names.sort();
    names.into_iter().next()
}

/// One knob file: existing, readable, and writable by `uid` unless root.
fn knob_file(path: PathBuf, field: &str, uid: u32, out: &mut Findings) {
    match metadata(&path) {
        Err(kind @ FindingKind::Missing { .. }) => out.push(
            Severity::Error,
            field,
            kind,
            "this kernel has no such knob: remove it or fix the path",
        ),
        Err(kind) => out.push(
            Severity::Error,
            field,
            kind,
            "run the study as root, or remove the knob",
        ),
        Ok(m) if uid != 0 && !may_write(&m, uid) => out.push(
            Severity::Error,
            field,
            FindingKind::NotWritable { path, uid },
            "run the study as root (knobs under /sys and /proc need it), or remove the knob",
        ),
        Ok(_) => {}
    }
}

/// Whether a non-root `uid` may write a file by its mode bits; group-writable counts as
/// writable, since this process's groups are not known here.
fn may_write(m: &std::fs::Metadata, uid: u32) -> bool {
    let mode = m.permissions().mode();
    mode & 0o022 != 0 || (m.uid() == uid && mode & 0o200 != 0)
}

/// `path`'s metadata, or the finding: missing, or unreadable with the reason.
fn metadata(path: &Path) -> Result<std::fs::Metadata, FindingKind> {
    std::fs::metadata(path).map_err(|e| {
        let path = path.to_path_buf();
        if e.kind() == ErrorKind::NotFound {
            FindingKind::Missing { path }
        } else {
            FindingKind::Unreadable {
                path,
                reason: e.to_string(),
            }
        }
    })
}

/// Ok when `path` is a regular file this process can open for reading.
fn readable_file(path: &Path) -> Result<(), FindingKind> {
    let path = path.to_path_buf();
    if !metadata(&path)?.is_file() {
        return Err(FindingKind::NotAFile { path });
    }
    match File::open(&path) {
        Ok(_) => Ok(()),
        Err(e) => Err(FindingKind::Unreadable {
            path,
            reason: e.to_string(),
        }),
    }
}
