//! The store: document files and the catalog kept together, and what an ingest and a read do
//! with both.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::blobs::{Blobs, check_id};
use crate::catalog::{Catalog, DocInfo};
use crate::error::StoreError;
use crate::metrics::Metrics;

/// Where a store keeps its data and what it accepts.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// The directory of the document tree (`objects/`, `tmp/`).
    pub dir: PathBuf,
    /// The catalog database (default `DIR/catalog.sqlite`).
    pub catalog: Option<PathBuf>,
    /// The largest document accepted, bytes (413 beyond).
    pub max_doc_bytes: u64,
}

/// A running store.
pub struct Store {
    pub(crate) blobs: Blobs,
    pub(crate) catalog: Catalog,
    /// The counters behind `/metrics`.
    pub metrics: Metrics,
    pub(crate) max_doc_bytes: u64,
}

impl Store {
    /// Opens the store of `config`, creating its directories and catalog.
    pub fn open(config: &StoreConfig) -> Result<Store, StoreError> {
        let blobs = Blobs::open(&config.dir)?;
        let path = config
            .catalog
            .clone()
            .unwrap_or_else(|| config.dir.join("catalog.sqlite"));
        let catalog = Catalog::open(&path)?;
        let metrics = Metrics::new(catalog.count()?);
        Ok(Store {
            blobs,
            catalog,
            metrics,
            max_doc_bytes: config.max_doc_bytes,
        })
    }

    /// Stores document `id`: its file first (out of blocks or inodes fails here, before the
    /// catalog changes), then the catalog entry, with the file renamed into place inside the
    /// catalog's transaction. Returns whether the id is new.
    pub fn put(
        &self,
        id: &str,
        content_type: &str,
        meta: &BTreeMap<String, String>,
        content: &[u8],
    ) -> Result<bool, StoreError> {
        check_id(id)?;
        let staged = self.blobs.stage(id, content)?;
        let size = content.len() as u64;
        let new = self
            .catalog
            .put(id, size, content_type, meta, move || staged.commit())?;
        self.metrics.ingested(size, new);
        Ok(new)
    }

    /// The content type and content of document `id`.
    pub fn read(&self, id: &str) -> Result<(String, Vec<u8>), StoreError> {
        check_id(id)?;
        let Some((_, ctype)) = self.catalog.head(id)? else {
            return Err(StoreError::NotFound(id.to_string()));
        };
        match self.blobs.read(id)? {
            Some(content) => Ok((ctype, content)),
            None => Err(StoreError::Io {
                path: self.blobs.path_of(id),
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "the catalog lists this document but its file is gone (removed by hand?)",
                ),
            }),
        }
    }

    /// The catalog entry of document `id`.
    pub fn info(&self, id: &str) -> Result<DocInfo, StoreError> {
        check_id(id)?;
        self.catalog
            .get(id)?
            .ok_or_else(|| StoreError::NotFound(id.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(&StoreConfig {
            dir: dir.path().to_path_buf(),
            catalog: None,
            max_doc_bytes: 1 << 20,
        })
        .unwrap();
        (dir, s)
    }

    #[test]
    fn a_stored_document_reads_back_with_its_type_and_metadata() {
        let (_d, s) = store();
        let meta = BTreeMap::from([("dept".to_string(), "hr".to_string())]);
        assert!(s.put("memo", "text/plain", &meta, b"hello").unwrap());
        assert!(!s.put("memo", "text/plain", &meta, b"hello again").unwrap());
        assert_eq!(
            s.read("memo").unwrap(),
            ("text/plain".to_string(), b"hello again".to_vec())
        );
        assert_eq!(s.info("memo").unwrap().meta, meta);
        assert!(matches!(s.read("nope"), Err(StoreError::NotFound(_))));
        assert!(matches!(s.read("a/b"), Err(StoreError::BadRequest(_))));
    }

    #[test]
    fn a_document_file_removed_by_hand_is_a_server_error_naming_the_file() {
        let (_d, s) = store();
        s.put("x", "text/plain", &BTreeMap::new(), b"1").unwrap();
        s.blobs.remove("x").unwrap();
        let e = s.read("x").unwrap_err();
        assert_eq!(e.status(), hyper::StatusCode::INTERNAL_SERVER_ERROR);
        assert!(e.to_string().contains("its file is gone"), "{e}");
    }

    #[test]
    fn reopening_a_store_counts_the_documents_it_holds() {
        let (d, s) = store();
        for id in ["a", "b", "c"] {
            s.put(id, "text/plain", &BTreeMap::new(), id.as_bytes())
                .unwrap();
        }
        drop(s);
        let again = Store::open(&StoreConfig {
            dir: d.path().to_path_buf(),
            catalog: None,
            max_doc_bytes: 1 << 20,
        })
        .unwrap();
        assert!(
            again
                .metrics
                .render()
                .lines()
                .any(|l| l == "filestore_documents 3")
        );
    }
}
