//! The model cache: parsed models kept in memory up to a capacity, the least recently used
//! evicted first; a model that is not cached is parsed from its `NAME.pmml` file again.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::pmml::{self, Model, PmmlError};

/// Why a model could not be had.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// No `NAME.pmml` file (or a name that cannot be a file name).
    #[error("unknown model {name:?}: no file {path} (known models: {known})")]
    Unknown {
        /// The name asked for.
        name: String,
        /// The file it would be.
        path: PathBuf,
        /// The models the directory has, comma-separated.
        known: String,
    },
    /// The file is malformed or uses what the PMML subset does not support.
    #[error(transparent)]
    Pmml(#[from] PmmlError),
}

/// An LRU cache of parsed models.
pub struct ModelCache {
    dir: PathBuf,
    capacity: usize,
    inner: Mutex<CacheInner>,
    hits: AtomicU64,
    misses: AtomicU64,
    evictions: AtomicU64,
}

/// The entries and the clock that orders their last uses.
struct CacheInner {
    tick: u64,
    entries: HashMap<String, (Arc<Model>, u64)>,
}

/// A model name that maps to a file in the directory: no path separators, no hidden files.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
        && !name.starts_with('.')
}

impl ModelCache {
    /// A cache of the models in `dir` holding at most `capacity` of them (at least 1).
    pub fn new(dir: &Path, capacity: usize) -> Self {
        ModelCache {
            dir: dir.to_path_buf(),
            capacity: capacity.max(1),
            inner: Mutex::new(CacheInner {
                tick: 0,
                entries: HashMap::new(),
            }),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
        }
    }

    /// Model names in the directory, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&self.dir)
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .filter_map(|e| {
                        let p = e.path();
                        (p.extension().is_some_and(|x| x == "pmml"))
                            .then(|| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
                            .flatten()
                    })
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    /// The model `name`, from the cache or parsed from its file.
    pub fn get(&self, name: &str) -> Result<Arc<Model>, ModelError> {
        {
            let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            g.tick += 1;
            let tick = g.tick;
            if let Some(e) = g.entries.get_mut(name) {
                e.1 = tick;
                self.hits.fetch_add(1, Ordering::Relaxed);
                return Ok(e.0.clone());
            }
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        let path = self.dir.join(format!("{name}.pmml"));
        if !valid_name(name) || !path.is_file() {
            return Err(ModelError::Unknown {
                name: name.to_string(),
                path,
                known: self.names().join(", "),
            });
        }
        // Parse outside the lock: a miss costs the requesting worker, not everyone.
        let model = Arc::new(pmml::load(&path)?);
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        g.tick += 1;
        let tick = g.tick;
        g.entries.insert(name.to_string(), (model.clone(), tick));
        while g.entries.len() > self.capacity {
            let oldest = g
                .entries
                .iter()
                .min_by_key(|(_, (_, t))| *t)
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => {
                    g.entries.remove(&k);
                    self.evictions.fetch_add(1, Ordering::Relaxed);
                }
                None => break,
            }
        }
        Ok(model)
    }

    /// (hits, misses, evictions).
    pub fn stats(&self) -> (u64, u64, u64) {
        (
            self.hits.load(Ordering::Relaxed),
            self.misses.load(Ordering::Relaxed),
            self.evictions.load(Ordering::Relaxed),
        )
    }
}
