//! The metadata catalog in SQLite: one row per document (size, content type, when stored) and
//! its metadata fields as key/value rows indexed for search. Pages are keyset pages ordered by
//! id (`after` the last id of the previous page), so a deep page costs what the first does.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};

use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, params, params_from_iter};
use serde::Serialize;

use crate::error::StoreError;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS documents (
    id TEXT PRIMARY KEY,
    size INTEGER NOT NULL,
    content_type TEXT NOT NULL,
    stored_ms INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta (
    doc TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (doc, key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS meta_by_value ON meta (key, value, doc);
";

/// A document as the catalog knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DocInfo {
    /// The document id.
    pub id: String,
    /// Its size, bytes.
    pub size: u64,
    /// The content type it was ingested with.
    pub content_type: String,
    /// When it was stored, milliseconds since the Unix epoch (SQLite's clock).
    pub stored_ms: i64,
    /// Its metadata fields.
    pub meta: BTreeMap<String, String>,
}

/// One page of a listing or search.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Page {
    /// The documents, ordered by id.
    pub documents: Vec<DocInfo>,
    /// The id to pass as `after` for the next page; `None` on the last page.
    pub next: Option<String>,
}

/// Connections that only read, so that lookups, pages and searches go on beside each other
/// and beside a write (WAL mode lets readers run during a write transaction).
const READERS: usize = 4;

/// The catalog database: one writing connection (SQLite has one writer at a time anyway) and
/// [`READERS`] reading ones.
pub struct Catalog {
    writer: Mutex<Connection>,
    readers: Vec<Mutex<Connection>>,
    next: AtomicUsize,
}

impl Catalog {
    /// Opens (creating) the catalog at `path`, in WAL mode so that reads go on during a write.
    pub fn open(path: &Path) -> Result<Catalog, StoreError> {
        let open = || {
            Connection::open(path)
                .map_err(|e| StoreError::Catalog(format!("cannot open {}: {e}", path.display())))
        };
        let setup = |e: rusqlite::Error| {
            StoreError::Catalog(format!("cannot set up {}: {e}", path.display()))
        };
        let writer = open()?;
        writer
            .pragma_update(None, "journal_mode", "WAL")
            .and_then(|()| writer.pragma_update(None, "synchronous", "NORMAL"))
            .and_then(|()| writer.execute_batch(SCHEMA))
            .map_err(setup)?;
        let readers = (0..READERS)
            .map(|_| {
                let r = open()?;
                r.pragma_update(None, "query_only", true).map_err(setup)?;
                Ok(Mutex::new(r))
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        Ok(Catalog {
            writer: Mutex::new(writer),
            readers,
            next: AtomicUsize::new(0),
        })
    }

    fn writer(&self) -> MutexGuard<'_, Connection> {
        self.writer.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A free reading connection (or, when all are busy, the next in turn, waited for).
    fn reader(&self) -> MutexGuard<'_, Connection> {
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        for i in 0..self.readers.len() {
            match self.readers[(start + i) % self.readers.len()].try_lock() {
                Ok(g) => return g,
                Err(TryLockError::Poisoned(p)) => return p.into_inner(),
                Err(TryLockError::WouldBlock) => {}
            }
        }
        self.readers[start % self.readers.len()]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Records document `id` with its metadata (replacing an older version's); runs `place`
    /// (which puts the file in place) inside the transaction, so a document whose file could
    /// not be placed is not recorded. Returns whether the id is new.
    pub fn put(
        &self,
        id: &str,
        size: u64,
        content_type: &str,
        meta: &BTreeMap<String, String>,
        place: impl FnOnce() -> Result<(), StoreError>,
    ) -> Result<bool, StoreError> {
        let mut conn = self.writer();
        let tx = conn.transaction().map_err(StoreError::from_sqlite)?;
        let existed = tx
            .query_row("SELECT 1 FROM documents WHERE id = ?1", [id], |_| Ok(()))
            .optional()
            .map_err(StoreError::from_sqlite)?
            .is_some();
        tx.execute(
            "INSERT OR REPLACE INTO documents (id, size, content_type, stored_ms)
             VALUES (?1, ?2, ?3, CAST(unixepoch('subsec') * 1000 AS INTEGER))",
            params![id, size as i64, content_type],
        )
        .and_then(|_| tx.execute("DELETE FROM meta WHERE doc = ?1", [id]))
        .map_err(StoreError::from_sqlite)?;
        {
            let mut ins = tx
                .prepare_cached("INSERT INTO meta (doc, key, value) VALUES (?1, ?2, ?3)")
                .map_err(StoreError::from_sqlite)?;
            for (k, v) in meta {
                ins.execute(params![id, k, v])
                    .map_err(StoreError::from_sqlite)?;
            }
        }
        place()?;
        tx.commit().map_err(StoreError::from_sqlite)?;
        Ok(!existed)
    }

    /// The size and content type of document `id` (the GET path: no metadata).
    pub fn head(&self, id: &str) -> Result<Option<(u64, String)>, StoreError> {
        let conn = self.reader();
        let mut st = conn
            .prepare_cached("SELECT size, content_type FROM documents WHERE id = ?1")
            .map_err(StoreError::from_sqlite)?;
        st.query_row([id], |r| Ok((r.get::<_, i64>(0)? as u64, r.get(1)?)))
            .optional()
            .map_err(StoreError::from_sqlite)
    }

    /// Document `id` with its metadata.
    pub fn get(&self, id: &str) -> Result<Option<DocInfo>, StoreError> {
        let conn = self.reader();
        let found = conn
            .prepare_cached("SELECT id, size, content_type, stored_ms FROM documents WHERE id = ?1")
            .and_then(|mut st| st.query_row([id], row_to_doc).optional())
            .map_err(StoreError::from_sqlite)?;
        match found {
            Some(mut d) => {
                d.meta = meta_of(&conn, id)?;
                Ok(Some(d))
            }
            None => Ok(None),
        }
    }

    /// Up to `limit` documents with ids after `after`.
    pub fn list(&self, after: &str, limit: usize) -> Result<Page, StoreError> {
        self.page(
            "SELECT id, size, content_type, stored_ms FROM documents
             WHERE id > ?1 ORDER BY id LIMIT ?2",
            vec![Value::Text(after.to_string()), page_size(limit)],
            limit,
        )
    }

    /// Up to `limit` documents after `after` whose metadata has every `key = value` of
    /// `filters` (all documents when there are none).
    pub fn search(
        &self,
        filters: &[(String, String)],
        after: &str,
        limit: usize,
    ) -> Result<Page, StoreError> {
        // The first field drives the query through meta_by_value (key, value, doc), which
        // yields its documents in id order from `after` on; the others are checked by key.
        let Some(((k0, v0), rest)) = filters.split_first() else {
            return self.list(after, limit);
        };
        let mut sql = String::from(
            "SELECT d.id, d.size, d.content_type, d.stored_ms FROM meta f
             JOIN documents d ON d.id = f.doc
             WHERE f.key = ?1 AND f.value = ?2 AND f.doc > ?3",
        );
        let mut args = vec![
            Value::Text(k0.clone()),
            Value::Text(v0.clone()),
            Value::Text(after.to_string()),
        ];
        for (k, v) in rest {
            let n = args.len();
            sql.push_str(&format!(
                " AND EXISTS (SELECT 1 FROM meta m WHERE m.doc = f.doc AND m.key = ?{} AND m.value = ?{})",
                n + 1,
                n + 2
            ));
            args.push(Value::Text(k.clone()));
            args.push(Value::Text(v.clone()));
        }
        sql.push_str(&format!(" ORDER BY f.doc LIMIT ?{}", args.len() + 1));
        args.push(page_size(limit));
        self.page(&sql, args, limit)
    }

    /// Runs a page query (its last argument is `limit + 1`, to tell whether a next page exists).
    fn page(&self, sql: &str, args: Vec<Value>, limit: usize) -> Result<Page, StoreError> {
        let conn = self.reader();
        let mut documents = conn
            .prepare_cached(sql)
            .and_then(|mut st| {
                st.query_map(params_from_iter(args), row_to_doc)?
                    .collect::<Result<Vec<_>, _>>()
            })
            .map_err(StoreError::from_sqlite)?;
        let next = if documents.len() > limit {
            documents.truncate(limit);
            documents.last().map(|d| d.id.clone())
        } else {
            None
        };
        for d in &mut documents {
            d.meta = meta_of(&conn, &d.id)?;
        }
        Ok(Page { documents, next })
    }

    /// How many documents the catalog holds.
    pub fn count(&self) -> Result<u64, StoreError> {
        self.reader()
            .query_row("SELECT count(*) FROM documents", [], |r| r.get::<_, i64>(0))
            .map(|n| n as u64)
            .map_err(StoreError::from_sqlite)
    }
}

/// The LIMIT of a page query: one more row than the page shows, to tell whether a next page
/// exists.
fn page_size(limit: usize) -> Value {
    Value::Integer(i64::try_from(limit).unwrap_or(i64::MAX).saturating_add(1))
}

fn row_to_doc(r: &rusqlite::Row<'_>) -> rusqlite::Result<DocInfo> {
    Ok(DocInfo {
        id: r.get(0)?,
        size: r.get::<_, i64>(1)? as u64,
        content_type: r.get(2)?,
        stored_ms: r.get(3)?,
        meta: BTreeMap::new(),
    })
}

fn meta_of(conn: &Connection, id: &str) -> Result<BTreeMap<String, String>, StoreError> {
    conn.prepare_cached("SELECT key, value FROM meta WHERE doc = ?1")
        .and_then(|mut st| {
            st.query_map([id], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<Result<BTreeMap<_, _>, _>>()
        })
        .map_err(StoreError::from_sqlite)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn catalog() -> (tempfile::TempDir, Catalog) {
        let dir = tempfile::tempdir().unwrap();
        let c = Catalog::open(&dir.path().join("catalog.sqlite")).unwrap();
        (dir, c)
    }

    #[test]
    fn a_replaced_document_keeps_only_its_new_metadata() {
        let (_d, c) = catalog();
        let ok = || Ok(());
        assert!(
            c.put(
                "a",
                3,
                "text/plain",
                &meta(&[("dept", "hr"), ("year", "2024")]),
                ok
            )
            .unwrap()
        );
        assert!(
            !c.put("a", 5, "text/csv", &meta(&[("dept", "sales")]), ok)
                .unwrap()
        );
        let d = c.get("a").unwrap().unwrap();
        assert_eq!((d.size, d.content_type.as_str()), (5, "text/csv"));
        assert_eq!(d.meta, meta(&[("dept", "sales")]));
        assert!(d.stored_ms > 1_600_000_000_000, "{}", d.stored_ms);
        assert_eq!(c.head("a").unwrap(), Some((5, "text/csv".to_string())));
        assert_eq!(c.count().unwrap(), 1);
        assert!(
            c.search(&[("dept".into(), "hr".into())], "", 10)
                .unwrap()
                .documents
                .is_empty()
        );
    }

    #[test]
    fn a_document_whose_file_cannot_be_placed_is_not_recorded() {
        let (_d, c) = catalog();
        let e = c
            .put("x", 1, "text/plain", &meta(&[("k", "v")]), || {
                Err(StoreError::Full {
                    what: "document".into(),
                    cause: "No space left on device".into(),
                })
            })
            .unwrap_err();
        assert!(matches!(e, StoreError::Full { .. }));
        assert_eq!(c.get("x").unwrap(), None);
        assert_eq!(c.count().unwrap(), 0);
        assert!(
            c.search(&[("k".into(), "v".into())], "", 10)
                .unwrap()
                .documents
                .is_empty()
        );
    }

    #[test]
    fn pages_follow_each_other_without_gaps_or_repeats() {
        let (_d, c) = catalog();
        for i in 0..25 {
            let dept = if i % 2 == 0 { "even" } else { "odd" };
            c.put(
                &format!("d{i:02}"),
                i,
                "text/plain",
                &meta(&[("dept", dept), ("n", &i.to_string())]),
                || Ok(()),
            )
            .unwrap();
        }
        let (mut seen, mut after, mut pages) = (Vec::new(), String::new(), 0);
        loop {
            let p = c.list(&after, 10).unwrap();
            pages += 1;
            seen.extend(p.documents.iter().map(|d| d.id.clone()));
            match p.next {
                Some(n) => after = n,
                None => break,
            }
        }
        assert_eq!(pages, 3);
        let want: Vec<_> = (0..25).map(|i| format!("d{i:02}")).collect();
        assert_eq!(seen, want);

        let even = c
            .search(&[("dept".into(), "even".into())], "", 100)
            .unwrap();
        assert_eq!(even.documents.len(), 13);
        assert_eq!(even.next, None);
        let both = c
            .search(
                &[("dept".into(), "odd".into()), ("n".into(), "7".into())],
                "",
                100,
            )
            .unwrap();
        assert_eq!(both.documents.len(), 1);
        assert_eq!(both.documents[0].id, "d07");
        assert_eq!(both.documents[0].meta["n"], "7");
        let paged = c
            .search(&[("dept".into(), "odd".into())], "d10", 3)
            .unwrap();
        let ids: Vec<_> = paged.documents.iter().map(|d| d.id.as_str()).collect();
        assert_eq!(ids, ["d11", "d13", "d15"]);
        assert_eq!(paged.next.as_deref(), Some("d15"));
    }
}
