//! Coordinated load from several driver processes on several hosts: a coordinator
//! ([`coordinate`]) and workers ([`serve`]) that speak a line-per-message JSON protocol over
//! TCP ([`wire`]).

mod coordinator;
pub mod wire;
mod worker;

pub use coordinator::{
    Coordinated, CoordinatorConfig, WORKER_SILENCE, WorkerReport, coordinate, split,
};
pub use worker::{SessionEnd, WorkerConfig, serve, serve_session};
