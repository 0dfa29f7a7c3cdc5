//! `filestore`: the reference content-store workload (seed `004_…`, an ECM content store
//! loaded by virtual users). Documents are ingested, retrieved, listed and searched by
//! metadata over HTTP; each document is a file under a hashed directory tree on the store's
//! path, so the file system's blocks, inodes and page cache are what a study varies; the
//! metadata lives in SQLite. A full file system (blocks or inodes) makes ingest answer
//! 507 Insufficient Storage while reads go on. See [`service`] for the routes.

pub mod blobs;
pub mod catalog;
pub mod error;
pub mod metrics;
pub mod preload;
pub mod query;
pub mod service;
pub mod store;

pub use error::StoreError;
pub use service::serve;
pub use store::{Store, StoreConfig};
