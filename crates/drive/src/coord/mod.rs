//! Coordinated load from several driver processes on several hosts: a coordinator
//! ([`coordinate`]) and workers ([`serve`]) that speak a line-per-message JSON protocol
//! ([`wire`]) over a [`link::Link`]: SSH to a worker started for the session, mutual TLS
//! ([`secure`]) or plain TCP to one that listens ([`dial`]). The study's hosts use the same
//! links and framing; `perfpilot certs` makes the CA and certificates ([`certs`]).

pub mod certs;
mod coordinator;
pub mod dial;
pub mod link;
pub mod secure;
pub mod wire;
mod worker;

pub use coordinator::{
    Coordinated, CoordinatorConfig, WORKER_SILENCE, WorkerReport, coordinate, split,
};
pub use dial::{Dialer, Route};
pub use link::{Link, LinkReader, LinkWriter};
pub use secure::{TlsFiles, check_listen};
pub use worker::{
    Admission, Greeted, OPENING, OPENING_AT_ONCE, Opening, OpeningSlot, SessionEnd, WorkerConfig,
    greet, refused_crowd, serve, serve_session,
};
