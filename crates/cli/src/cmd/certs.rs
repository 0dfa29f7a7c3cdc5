//! `perfpilot certs`: a private CA and the certificates it signs, for mutual TLS between
//! study or drive workers and their coordinators, and for the daemon's exporter.

use std::path::PathBuf;
use std::time::SystemTime;

use anyhow::{Result, bail};
use clap::{Args, Subcommand};
use perfpilot_drive::coord::certs::{self, Role, Validity, Written};

/// Make a CA and certificates for mutual TLS (workers, coordinators, the exporter).
///
///   perfpilot certs ca /etc/perfpilot/tls
///   perfpilot certs server /etc/perfpilot/tls worker1 --host worker1.example,10.0.0.2
///   perfpilot certs client /etc/perfpilot/tls coordinator
///
/// A worker then listens with --tls-cert DIR/worker1.pem --tls-key DIR/worker1.key --tls-ca
/// DIR/ca.pem, and a coordinator dials with its own client certificate and the same CA. Copy
/// only a host's own .pem, .key and ca.pem to it; ca.key stays where certificates are made.
#[derive(Args, Debug)]
pub struct CertsArgs {
    #[command(subcommand)]
    sub: CertsSub,
}

#[derive(Args, Debug)]
struct Dates {
    /// Valid for this many days.
    #[arg(long, default_value_t = 825)]
    days: u32,
    /// Valid from this time (RFC 3339: YYYY-MM-DDThh:mm:ssZ); default: now.
    #[arg(long, value_name = "TIME", value_parser = humantime::parse_rfc3339_weak)]
    not_before: Option<SystemTime>,
}

impl Dates {
    fn validity(&self) -> Validity {
        Validity {
            not_before: self.not_before,
            days: self.days,
        }
    }
}

#[derive(Subcommand, Debug)]
enum CertsSub {
    /// Make a CA: DIR/ca.pem (give it to every host) and DIR/ca.key (keep it here).
    Ca {
        /// The directory (created if needed).
        dir: PathBuf,
        /// The CA's common name.
        #[arg(long, default_value = "perfpilot CA")]
        name: String,
        #[command(flatten)]
        dates: Dates,
    },
    /// A listener's certificate (a study or drive worker, the exporter): DIR/NAME.pem and .key.
    Server {
        /// The CA's directory.
        dir: PathBuf,
        /// The certificate's name (its common name and file name).
        name: String,
        /// The host names and IP addresses it is reached by, comma-separated (a coordinator
        /// checks the one it dialled).
        #[arg(long, value_delimiter = ',', required = true, value_name = "NAME,…")]
        host: Vec<String>,
        #[command(flatten)]
        dates: Dates,
    },
    /// A client's certificate (a coordinator, a Prometheus server): DIR/NAME.pem and .key.
    Client {
        /// The CA's directory.
        dir: PathBuf,
        /// The certificate's name: what workers log as the coordinator served.
        name: String,
        #[command(flatten)]
        dates: Dates,
    },
}

fn wrote(w: &Written) {
    println!("{}", w.cert.display());
    println!("{}", w.key.display());
}

pub fn run(a: CertsArgs) -> Result<()> {
    let out = match a.sub {
        CertsSub::Ca { dir, name, dates } => certs::make_ca(&dir, &name, dates.validity()),
        CertsSub::Server {
            dir,
            name,
            host,
            dates,
        } => certs::issue(&dir, &name, &Role::Server(host), dates.validity()),
        CertsSub::Client { dir, name, dates } => {
            certs::issue(&dir, &name, &Role::Client, dates.validity())
        }
    };
    match out {
        Ok(w) => {
            wrote(&w);
            Ok(())
        }
        Err(e) => bail!("{e}"),
    }
}
