//! Deploying one trial: knobs (set through `perfpilot_sys::change`, each with its undo record,
//! restored by a guard that also runs on panic), setup and teardown commands, free ports, the
//! instances (bound with `taskset`/`numactl`), readiness checks, and stopping it all again.

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use perfpilot_fetch as fetch;
use perfpilot_lab::process::StopSignal;
use perfpilot_lab::server::Server;
use perfpilot_lab::server::command::{self, Stdout, split_words};
use perfpilot_sys::Fs;
use perfpilot_sys::change::{self, Change, Undo};
use perfpilot_sys::failpoint::kill_point;

use crate::error::{KnobError, ProbeError, ShellError, TrialError};
use crate::layout::{InstanceLayout, Layout};
use crate::spec::{Config, Ready, Study, render};

/// Knobs set for one trial; dropping the guard restores them (in reverse order), also when the
/// trial fails, is interrupted or panics.
#[derive(Debug)]
pub struct KnobGuard {
    fs: Fs,
    undo: Vec<Undo>,
    /// Where the undo records are written before each change (see [`recover_knobs`]).
    journal: Option<std::path::PathBuf>,
}

impl KnobGuard {
    /// A guard with nothing set yet; knob paths are relative to `fs`'s root.
    pub fn new(fs: &Fs) -> KnobGuard {
        KnobGuard {
            fs: fs.clone(),
            undo: Vec::new(),
            journal: None,
        }
    }

    /// A guard that writes its undo records to `journal` (durably) before every change, so a
    /// study killed with SIGKILL leaves a record [`recover_knobs`] restores at the next run.
    pub fn journaled(fs: &Fs, journal: &std::path::Path) -> KnobGuard {
        KnobGuard {
            fs: fs.clone(),
            undo: Vec::new(),
            journal: Some(journal.to_path_buf()),
        }
    }

    fn write_journal(&self) -> Result<(), KnobError> {
        let Some(path) = &self.journal else {
            return Ok(());
        };
        let tmp = path.with_extension("tmp");
        let body = serde_json::to_vec(&self.undo).map_err(|source| KnobError::Encode {
            path: path.clone(),
            source,
        })?;
        let write = || -> std::io::Result<()> {
            use std::io::Write;
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&body)?;
            f.sync_all()?;
            std::fs::rename(&tmp, path)
        };
        write().map_err(|source| KnobError::Journal {
            path: path.clone(),
            source,
        })
    }

    /// Sets knob `rel` to `value`: reads the previous value (the undo record, kept before the
    /// write), then writes. An error names the knob; whatever was set before stays restorable.
    pub fn set(&mut self, rel: &str, value: &str) -> Result<(), KnobError> {
        let rel = rel.trim_start_matches('/').to_string();
        let c = Change::Sysfs {
            rel: rel.clone(),
            value: value.to_string(),
        };
        let u = change::prepare(&self.fs, &c).map_err(|source| KnobError::Read {
            rel: rel.clone(),
            source,
        })?;
        self.undo.push(u);
        // The undo record is on disk before the knob changes.
        if let Err(e) = self.write_journal() {
            self.undo.pop();
            return Err(e);
        }
        kill_point("study.knob.journaled");
        change::apply(&self.fs, &c).map_err(|source| KnobError::Set {
            rel,
            value: value.to_string(),
            source,
        })?;
        kill_point("study.knob.applied");
        Ok(())
    }

    /// Makes change `c` the same way as [`KnobGuard::set`]: its undo record is kept (and
    /// journaled) before it is applied, so [`KnobGuard::restore`] undoes it in reverse order
    /// with the knobs (a scratch file system made before the knobs of its loop device is
    /// removed after them).
    pub fn change(&mut self, c: &Change) -> Result<change::Applied, KnobError> {
        let u = change::prepare(&self.fs, c).map_err(KnobError::Change)?;
        self.undo.push(u);
        if let Err(e) = self.write_journal() {
            self.undo.pop();
            return Err(e);
        }
        change::apply(&self.fs, c).map_err(KnobError::Change)
    }

    /// The undo records of what was set, in order.
    pub fn records(&self) -> &[Undo] {
        &self.undo
    }

    /// Restores every knob (last set first); returns the knobs that could not be restored.
    pub fn restore(&mut self) -> Vec<String> {
        let mut failed = Vec::new();
        while let Some(u) = self.undo.pop() {
            if let Err(e) = change::undo(&self.fs, &u) {
                failed.push(e.to_string());
            }
            kill_point("study.knob.restoring");
        }
        if failed.is_empty()
            && let Some(path) = &self.journal
        {
            let _ = std::fs::remove_file(path);
        }
        failed
    }
}

/// Restores the knobs a killed study left changed, from its journal (if there is one), and
/// removes the journal. Returns a line per knob.
pub fn recover_knobs(fs: &Fs, journal: &std::path::Path) -> Result<Vec<String>, KnobError> {
    let path = || journal.to_path_buf();
    let text = match std::fs::read(journal) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(KnobError::ReadJournal {
                path: path(),
                source,
            });
        }
    };
    let undo: Vec<Undo> =
        serde_json::from_slice(&text).map_err(|source| KnobError::NotJournal {
            path: path(),
            source,
        })?;
    let mut lines = Vec::new();
    for u in undo.iter().rev() {
        let r = change::undo(fs, u).map_err(|source| KnobError::Restore {
            path: path(),
            source,
        })?;
        lines.push(format!("restored after an interrupted study: {r:?}"));
    }
    std::fs::remove_file(journal).map_err(|source| KnobError::RemoveJournal {
        path: path(),
        source,
    })?;
    Ok(lines)
}

impl Drop for KnobGuard {
    fn drop(&mut self) {
        for e in self.restore() {
            eprintln!("perfpilot study: could not restore a knob: {e}");
        }
    }
}

/// One running instance; dropping it stops it (SIGTERM, then SIGKILL after 5 s) and removes
/// its log.
#[derive(Debug)]
pub struct Instance {
    /// Its number in the layout, from 0.
    pub index: usize,
    /// The port it was given.
    pub port: u16,
    /// Its process id (`taskset` and `numactl` exec the command, so it is the command's).
    pub pid: u32,
    /// The command line as started (after the binding wrapper).
    pub argv: Vec<String>,
    /// The process.
    pub server: Server,
    /// Its output (stderr; a batch's stdout too).
    pub log: PathBuf,
}

impl Drop for Instance {
    fn drop(&mut self) {
        self.server.stop();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// How a trial's instances run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Servers, stopped when the trial ends; their stdout is dropped.
    Server,
    /// A batch run to its end, each instance in its own process group (so that an early end
    /// kills what it started) with its stdout logged too.
    Batch,
}

/// Starts the deployment's command on every instance of `layout` (`ports[i]` for the i-th),
/// behind its binding wrapper, with its environment, working directory and a log of its own;
/// `notes` get what could not be bound. An instance that cannot start stops those before it.
pub fn start_instances(
    study: &Study,
    config: &Config,
    layout: &Layout,
    ports: &[u16],
    role: Role,
    notes: &mut Vec<String>,
) -> Result<Vec<Instance>, TrialError> {
    use std::os::unix::process::CommandExt;
    use std::sync::atomic::AtomicU64;
    // Unique per process and call: trials of concurrent studies in one process (tests) must
    // not share an output file.
    static STARTS: AtomicU64 = AtomicU64::new(0);
    let n = layout.instances.len();
    let numactl = perfpilot_lab::tool::find("numactl").is_some();
    let start = STARTS.fetch_add(1, Ordering::Relaxed);
    let mut started: Vec<Instance> = Vec::with_capacity(n);
    for (il, &port) in layout.instances.iter().zip(ports) {
        let values = values_for(config, n, Some((il, port)));
        let line = render(&study.deployment.command, &values);
        let words = split_words(&line).map_err(|source| TrialError::Command { line, source })?;
        let mut argv = wrapper(il, numactl, notes);
        argv.extend(words);
        let log = std::env::temp_dir().join(format!(
            "perfpilot-study-{}-{start}-{}.log",
            std::process::id(),
            il.instance
        ));
        let stdout = match role {
            Role::Server => Stdout::Dropped,
            Role::Batch => Stdout::Logged,
        };
        let mut cmd = command::command(&argv);
        command::log_to(&mut cmd, &log, stdout)?;
        if role == Role::Batch {
            cmd.process_group(0);
        }
        for (k, v) in environment(study, config, &values) {
            cmd.env(k, v);
        }
        if let Some(w) = &study.deployment.workdir {
            cmd.current_dir(w);
        }
        let child = cmd.spawn().map_err(|source| TrialError::Start {
            instance: il.instance,
            program: argv[0].clone(),
            source,
        })?;
        let name = format!("instance {}", il.instance);
        started.push(Instance {
            index: il.instance,
            port,
            pid: child.id(),
            argv,
            server: Server::adopt(&name, child)
                .stopped_by(StopSignal::Terminate, Duration::from_secs(5)),
            log,
        });
    }
    Ok(started)
}

/// A trial's running deployment; dropping it stops the instances (SIGTERM, then SIGKILL after
/// 5 s) and runs the teardown commands.
#[derive(Debug)]
pub struct Deployed {
    /// The running instances, in layout order.
    pub instances: Vec<Instance>,
    /// Remarks for the trial record (ports moved, memory not bound, ...).
    pub notes: Vec<String>,
    teardown: Vec<String>,
    workdir: Option<PathBuf>,
    values: BTreeMap<String, String>,
}

impl Deployed {
    /// The first instance that has exited, with how.
    pub fn exited(&mut self) -> Option<String> {
        for inst in &mut self.instances {
            if let Some(status) = inst.server.exit_status() {
                return Some(format!(
                    "instance {} (pid {}) exited ({status}){}",
                    inst.index,
                    inst.pid,
                    perfpilot_lab::log::ends(&inst.log, "stderr")
                ));
            }
        }
        None
    }

    /// Stops the instances and runs the teardown commands; returns what went wrong.
    pub fn stop(&mut self) -> Vec<String> {
        let mut problems = Vec::new();
        // Each stops and its log goes as it drops.
        self.instances.clear();
        for cmd in std::mem::take(&mut self.teardown) {
            let cmd = render(&cmd, &self.values);
            if let Err(e) = shell(&cmd, self.workdir.as_deref()) {
                problems.push(format!("teardown {cmd:?}: {e}"));
            }
        }
        problems
    }
}

impl Drop for Deployed {
    fn drop(&mut self) {
        for p in self.stop() {
            eprintln!("perfpilot study: {p}");
        }
    }
}

/// Runs `cmd` with `sh -c` in `workdir`; an error gives the exit status and stderr.
pub fn shell(cmd: &str, workdir: Option<&Path>) -> Result<(), ShellError> {
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg(cmd)
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    if let Some(w) = workdir {
        c.current_dir(w);
    }
    let out = c.output().map_err(ShellError::Spawn)?;
    if out.status.success() {
        Ok(())
    } else {
        Err(ShellError::Failed {
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

/// The template values of instance `inst` of `config`.
pub fn values_for(
    config: &Config,
    instances: usize,
    inst: Option<(&InstanceLayout, u16)>,
) -> BTreeMap<String, String> {
    let mut v: BTreeMap<String, String> = config
        .0
        .iter()
        .map(|(n, l)| (n.clone(), l.to_string()))
        .collect();
    v.insert("instances".into(), instances.to_string());
    if let Some((il, port)) = inst {
        v.insert("port".into(), port.to_string());
        v.insert("instance".into(), il.instance.to_string());
        v.insert("cpus".into(), il.cpus.to_string());
        v.insert("cpuset".into(), il.cpuset.to_string());
        v.insert(
            "nodes".into(),
            il.membind
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(","),
        );
    }
    v
}

/// The binding wrapper of an instance: `taskset -c CPUS`, or `numactl --physcpubind=CPUS
/// --membind=NODES` when memory is bound too (and numactl is installed).
pub fn wrapper(il: &InstanceLayout, numactl: bool, notes: &mut Vec<String>) -> Vec<String> {
    if !il.bound {
        return Vec::new();
    }
    if !il.membind.is_empty() {
        let nodes = il
            .membind
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",");
        if numactl {
            return vec![
                "numactl".into(),
                format!("--physcpubind={}", il.cpuset),
                format!("--membind={nodes}"),
            ];
        }
        notes.push(format!(
            "instance {}: memory not bound to node(s) {nodes}: numactl is not installed",
            il.instance
        ));
    }
    vec!["taskset".into(), "-c".into(), il.cpuset.to_string()]
}

/// The environment of instance `values` of a configuration (templates filled, `LD_PRELOAD`
/// for the allocator).
pub fn environment(
    study: &Study,
    config: &Config,
    values: &BTreeMap<String, String>,
) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = study
        .deployment
        .env
        .iter()
        .map(|(k, v)| (k.clone(), render(v, values)))
        .collect();
    if config.get("allocator").is_some() {
        let lib = study.allocator_path(&config.allocator()).unwrap_or("");
        if !lib.is_empty() {
            env.push(("LD_PRELOAD".into(), lib.to_string()));
        }
    }
    env
}

/// Starts the instances of `config` with `layout` on `ports` and waits until each is ready.
/// Fails with the reason (an instance that exits, or never becomes ready) after stopping what
/// was started; `stop` aborts the wait.
pub fn deploy(
    study: &Study,
    config: &Config,
    layout: &Layout,
    ports: &[u16],
    stop: &AtomicBool,
    mut notes: Vec<String>,
) -> Result<Deployed, TrialError> {
    let n = layout.instances.len();
    let mut dep = Deployed {
        instances: Vec::new(),
        notes: Vec::new(),
        teardown: study.deployment.teardown.clone(),
        workdir: study.deployment.workdir.clone(),
        values: values_for(config, n, None),
    };
    for cmd in &study.deployment.setup {
        let cmd = render(cmd, &dep.values);
        shell(&cmd, dep.workdir.as_deref()).map_err(|source| TrialError::Setup { cmd, source })?;
    }
    dep.instances = start_instances(study, config, layout, ports, Role::Server, &mut notes)?;
    // Readiness.
    let deadline = Instant::now() + study.deployment.ready_timeout;
    for i in 0..dep.instances.len() {
        let port = dep.instances[i].port;
        let url = match &study.deployment.ready {
            Ready::Http { url } => Some(render(
                url,
                &values_for(config, n, Some((&layout.instances[i], port))),
            )),
            Ready::Tcp => None,
        };
        let mut last: ProbeError;
        loop {
            if stop.load(Ordering::SeqCst) {
                return Err(TrialError::Interrupted);
            }
            if let Some(exit) = dep.exited() {
                return Err(TrialError::Exited {
                    exit,
                    when: "before it was ready",
                });
            }
            let r = match &url {
                Some(u) => http_ok(u),
                None => tcp_ok(port),
            };
            match r {
                Ok(()) => break,
                Err(e) => last = e,
            }
            if Instant::now() >= deadline {
                return Err(TrialError::NotReady {
                    instance: i,
                    pid: dep.instances[i].pid,
                    within: study.deployment.ready_timeout,
                    probe: url
                        .as_deref()
                        .map_or_else(|| format!("tcp port {port}"), |u| format!("GET {u}")),
                    last,
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    dep.notes = notes;
    Ok(dep)
}

/// How long one readiness GET may take, connecting included.
const READY_GET_TIMEOUT: Duration = Duration::from_secs(2);

fn tcp_ok(port: u16) -> Result<(), ProbeError> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    TcpStream::connect_timeout(&addr, Duration::from_millis(300))
        .map(|_| ())
        .map_err(ProbeError::Tcp)
}

/// GET `url` (http://host:port/path); Ok on a 2xx status, else what went wrong (`status 503`,
/// `cannot connect: …`), without the URL, which the caller's message gives.
pub fn http_ok(url: &str) -> Result<(), ProbeError> {
    fetch::get(url, READY_GET_TIMEOUT)
        .map(|_| ())
        .map_err(|e| ProbeError::Http(e.failure))
}
