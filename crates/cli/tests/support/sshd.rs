//! An OpenSSH server in a lab host's network namespace, for the tests of workers reached over
//! SSH: throw-away host and client keys in a temporary directory, sshd with its own config on
//! port 2222 of the host's address, a known_hosts file that holds its key (so the client
//! checks it), and the `--ssh` command that uses all of it. Password authentication is on
//! (and root has none that works), so a client without the key is asked for one: what
//! `BatchMode=yes` must turn into an error instead of a prompt.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use perfpilot_lab::netns::{NetLab, NsProcess, wait_in};

/// The port sshd listens on.
pub const SSH_PORT: u16 = 2222;

/// sshd running in a host of the lab.
pub struct Sshd {
    /// The server (killed on drop).
    pub process: NsProcess,
    /// `--ssh`: the ssh command with the client key and the known host.
    pub ssh: String,
    /// `--ssh` with a key sshd does not know (it then offers a password).
    pub ssh_stranger: String,
    /// `--remote-perfpilot` for a study worker: perfpilot with a store of its own in the
    /// test's directory (a drive worker takes the perfpilot under test as it is).
    pub remote_study: PathBuf,
    /// Removes /run/sshd when this test made it.
    _run_dir: RunDir,
}

/// `/run/sshd` (sshd's privilege separation directory), removed on drop if it was made here.
struct RunDir(bool);

impl Drop for RunDir {
    fn drop(&mut self) {
        if self.0 {
            let _ = std::fs::remove_dir("/run/sshd");
        }
    }
}

fn keygen(path: &Path) {
    let ok = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(path)
        .stdout(Stdio::null())
        .status()
        .unwrap()
        .success();
    assert!(ok, "ssh-keygen -f {}", path.display());
}

/// Starts sshd on host `i` of `lab`, its files in `dir`; `exe` is the perfpilot under test.
pub fn start(lab: &NetLab, i: usize, dir: &Path, exe: &str) -> Sshd {
    let sshd = perfpilot_testkit::require("sshd");
    perfpilot_testkit::require("ssh-keygen");
    let made = !Path::new("/run/sshd").exists();
    if made {
        std::fs::create_dir_all("/run/sshd").unwrap();
    }
    let run_dir = RunDir(made);
    let d = dir.join("ssh");
    std::fs::create_dir_all(&d).unwrap();
    for k in ["host", "client", "stranger"] {
        keygen(&d.join(k));
    }
    std::fs::copy(d.join("client.pub"), d.join("authorized_keys")).unwrap();
    let addr = lab.addr(i);
    let host_pub = std::fs::read_to_string(d.join("host.pub")).unwrap();
    let mut words = host_pub.split_whitespace();
    let (kind, key) = (words.next().unwrap(), words.next().unwrap());
    std::fs::write(
        d.join("known_hosts"),
        format!("[{addr}]:{SSH_PORT} {kind} {key}\n"),
    )
    .unwrap();
    let dd = d.display();
    std::fs::write(
        d.join("sshd_config"),
        format!(
            "Port {SSH_PORT}\nListenAddress {addr}\nHostKey {dd}/host\nPidFile {dd}/sshd.pid\n\
             AuthorizedKeysFile {dd}/authorized_keys\nStrictModes no\nUsePAM no\n\
             PermitRootLogin yes\nPubkeyAuthentication yes\nPasswordAuthentication yes\n\
             KbdInteractiveAuthentication no\nLogLevel VERBOSE\n"
        ),
    )
    .unwrap();
    let child = lab
        .command(lab.host(i), &sshd.display().to_string())
        .args(["-D", "-e", "-f"])
        .arg(d.join("sshd_config"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(d.join("sshd.log")).unwrap())
        .spawn()
        .unwrap();
    let process = NsProcess(child);
    if let Err(e) = wait_in(lab, lab.hub(), &addr, SSH_PORT) {
        let log = std::fs::read_to_string(d.join("sshd.log")).unwrap_or_default();
        panic!("{e}: sshd said:\n{log}");
    }
    let ssh = |key: &str| {
        format!(
            "ssh -F /dev/null -i {dd}/{key} -o IdentitiesOnly=yes -o UserKnownHostsFile={dd}/known_hosts -o StrictHostKeyChecking=yes -o LogLevel=ERROR"
        )
    };
    let remote = d.join("remote-perfpilot-study");
    std::fs::write(
        &remote,
        format!("#!/bin/sh\nexec '{exe}' \"$@\" --store '{dd}/remote.db'\n"),
    )
    .unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&remote, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    Sshd {
        process,
        ssh: ssh("client"),
        ssh_stranger: ssh("stranger"),
        remote_study: remote,
        _run_dir: run_dir,
    }
}
