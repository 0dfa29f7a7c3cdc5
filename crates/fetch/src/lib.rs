//! perfpilot's blocking talk with other processes, over std threads and sockets with no async
//! runtime, so that the daemon and the study link it without the load driver's tokio:
//!
//! - [`get`], [`post`](Client::post) and a keep-alive [`Client`]: the one HTTP client for single
//!   requests outside load generation (the optimizer's HTTP probes and presets, Prometheus API
//!   queries of the fleet, readiness checks of the servers studies and capacity runs start, the
//!   load driver's remote-write pushes). Load itself is driven by `perfpilot-drive`'s own
//!   HTTP/1.1 client, which this crate does not replace.
//! - [`lines`]: one JSON message per line, at most [`lines::MAX_MESSAGE`] bytes, the framing of
//!   every perfpilot protocol between a coordinator and its workers (`drive --worker`,
//!   `study worker`).

mod http;
pub mod lines;

pub use http::{BODY_LIMIT, Client, FetchError, FetchFailure, Response, get, get_capped};
