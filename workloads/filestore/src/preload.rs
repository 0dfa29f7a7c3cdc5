//! Generated documents for a store that starts loaded: `doc-1` … `doc-N` of a given size with
//! deterministic content and metadata, so that every trial of a study serves the same corpus.

use std::collections::BTreeMap;

use crate::error::StoreError;
use crate::store::Store;

/// Departments the generated documents are spread over (metadata `dept`).
pub const DEPARTMENTS: [&str; 8] = [
    "finance", "hr", "legal", "ops", "sales", "support", "research", "it",
];

/// The id of generated document `i` (1-based).
pub fn doc_id(i: u64) -> String {
    format!("doc-{i}")
}

/// The content of generated document `i`: `size` bytes of a pattern that depends on `i`.
pub fn content(i: u64, size: usize) -> Vec<u8> {
    let mut rng = fastrand::Rng::with_seed(i);
    (0..size).map(|_| rng.alphanumeric() as u8).collect()
}

/// Stores generated documents 1 to `n` of `size` bytes (metadata `dept` and `year`), replacing
/// any of the same id; returns how many were new.
pub fn preload(store: &Store, n: u64, size: usize) -> Result<u64, StoreError> {
    let mut new = 0;
    for i in 1..=n {
        let meta = BTreeMap::from([
            (
                "dept".to_string(),
                DEPARTMENTS[(i % DEPARTMENTS.len() as u64) as usize].to_string(),
            ),
            ("year".to_string(), (2000 + i % 25).to_string()),
        ]);
        if store.put(&doc_id(i), "text/plain", &meta, &content(i, size))? {
            new += 1;
        }
    }
    Ok(new)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreConfig;

    #[test]
    fn a_preloaded_store_holds_the_same_documents_every_time() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&StoreConfig {
            dir: dir.path().to_path_buf(),
            catalog: None,
            max_doc_bytes: 1 << 20,
        })
        .unwrap();
        assert_eq!(preload(&store, 20, 100).unwrap(), 20);
        assert_eq!(
            preload(&store, 20, 100).unwrap(),
            0,
            "a second preload replaces"
        );
        let (ctype, body) = store.read("doc-9").unwrap();
        assert_eq!((ctype.as_str(), body.len()), ("text/plain", 100));
        assert_eq!(body, content(9, 100));
        assert_ne!(content(9, 100), content(10, 100));
        let hr = store
            .catalog
            .search(&[("dept".into(), "hr".into())], "", 100)
            .unwrap();
        // i % 8 == 1: documents 1, 9 and 17.
        let ids: Vec<_> = hr.documents.iter().map(|d| d.id.as_str()).collect();
        assert_eq!(ids, ["doc-1", "doc-17", "doc-9"]);
    }
}
