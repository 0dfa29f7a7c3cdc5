//! nginx: one worker process with its configuration, pid file, error log and temporary files
//! in a directory of the caller's; the caller gives what is served (`server` blocks: a static
//! root, fixed answers, TLS, a reverse proxy over upstream instances).

use std::path::{Path, PathBuf};
use std::process::Command;

use super::ServerError;

/// The Debian package with the server.
pub const PACKAGE: &str = "nginx-light";

/// An nginx configuration.
#[derive(Clone, Debug)]
pub struct Conf {
    /// Its directory (configuration, pid file).
    pub dir: PathBuf,
    /// A master process above the worker (`false`: the process started is the one serving,
    /// so signals and CPU groups reach it directly).
    pub master: bool,
    /// The user the worker runs as (with a master started as root).
    pub user: Option<String>,
    /// Its error log.
    pub error_log: PathBuf,
    /// Where request bodies and proxied responses are buffered.
    pub temp: PathBuf,
    /// Connections the worker takes.
    pub worker_connections: u32,
    /// Directives and blocks inside `http` after the common ones (`server { … }`).
    pub http: String,
}

impl Conf {
    /// No master, no user, `DIR/error.log`, temporary files in `DIR`, 1,024 connections,
    /// nothing served yet.
    pub fn new(dir: &Path) -> Conf {
        Conf {
            dir: dir.to_path_buf(),
            master: false,
            user: None,
            error_log: dir.join("error.log"),
            temp: dir.to_path_buf(),
            worker_connections: 1024,
            http: String::new(),
        }
    }

    /// The configuration's text: no access log, keep-alive connections kept for a million
    /// requests (load, not connection set-up, is measured).
    pub fn text(&self) -> String {
        let d = self.dir.display();
        let t = self.temp.display();
        let master = if self.master {
            ""
        } else {
            "master_process off;\n"
        };
        let user = self
            .user
            .as_ref()
            .map(|u| format!("user {u};\n"))
            .unwrap_or_default();
        format!(
            "daemon off;\n{master}{user}worker_processes 1;\npid {d}/nginx.pid;\nerror_log {};\n\
             events {{ worker_connections {}; }}\n\
             http {{\n  access_log off;\n  client_body_temp_path {t}; proxy_temp_path {t}; fastcgi_temp_path {t};\n  uwsgi_temp_path {t}; scgi_temp_path {t};\n  keepalive_requests 1000000;\n{}}}\n",
            self.error_log.display(),
            self.worker_connections,
            self.http
        )
    }

    /// Writes the configuration to `DIR/nginx.conf` and returns the command that serves it.
    pub fn command(&self) -> Result<Command, ServerError> {
        let bin = crate::tool::require("nginx", PACKAGE)?;
        let path = self.dir.join("nginx.conf");
        super::write(&path, &self.text())?;
        let mut c = Command::new(bin);
        c.arg("-c").arg(&path).arg("-p").arg(&self.dir);
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_configuration_without_a_master_says_so_and_one_with_a_user_names_it() {
        let mut c = Conf::new(Path::new("/w"));
        c.http = "  server { listen 127.0.0.1:8080; }\n".into();
        let text = c.text();
        assert!(text.starts_with("daemon off;\nmaster_process off;\nworker_processes 1;"));
        assert!(text.contains("error_log /w/error.log;"), "{text}");
        assert!(
            text.ends_with("  server { listen 127.0.0.1:8080; }\n}\n"),
            "{text}"
        );
        c.master = true;
        c.user = Some("www-data".into());
        assert!(
            c.text()
                .starts_with("daemon off;\nuser www-data;\nworker_processes 1;")
        );
    }
}
