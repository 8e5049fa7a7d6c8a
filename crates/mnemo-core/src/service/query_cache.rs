//! Repeated queries are free: a bounded, least-recently-used cache of query vectors, keyed by the
//! embedding model (its id names its preprocessing), the kind of text (a query has its own prompt)
//! and the text. An agent that asks with the same words again, or a `get_context` whose query
//! repeats, pays only the store path. Failures are not cached.

use hashlink::LruCache;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

pub struct QueryCache {
    entries: Mutex<LruCache<String, Vec<f32>>>,
    capacity: usize,
    /// Lookups answered from the cache, and those that had to embed, since start.
    pub hits: AtomicU64,
    pub misses: AtomicU64,
}

impl QueryCache {
    /// At most `capacity` vectors (0: off; each is 3 KB at 768 dimensions).
    pub fn new(capacity: usize) -> Self {
        Self {
            entries: Mutex::new(LruCache::new(capacity.max(1))),
            capacity,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    fn key(model: &str, text: &str) -> String {
        format!("{model}\u{1f}query\u{1f}{text}")
    }

    /// The vector of `text` as a query of `model`, if cached (counted as a hit or a miss).
    pub fn get(&self, model: &str, text: &str) -> Option<Vec<f32>> {
        if self.capacity == 0 {
            return None;
        }
        let found = self.entries.lock().expect("query cache").get(&Self::key(model, text)).cloned();
        let counter = if found.is_some() { &self.hits } else { &self.misses };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    pub fn put(&self, model: &str, text: &str, vector: &[f32]) {
        if self.capacity > 0 {
            self.entries.lock().expect("query cache").insert(Self::key(model, text), vector.to_vec());
        }
    }

    /// Forgets every vector (benchmarks that measure the embedding itself).
    pub fn clear(&self) {
        self.entries.lock().expect("query cache").clear();
    }

    /// Vectors held now.
    pub fn len(&self) -> usize {
        if self.capacity == 0 { 0 } else { self.entries.lock().expect("query cache").len() }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_least_recently_used_and_keyed_by_model_and_text() {
        let c = QueryCache::new(2);
        assert_eq!(c.get("m", "a"), None);
        c.put("m", "a", &[1.0]);
        c.put("m", "b", &[2.0]);
        assert_eq!(c.get("m", "a"), Some(vec![1.0]), "a is now the most recent");
        c.put("m", "c", &[3.0]);
        assert_eq!(c.get("m", "b"), None, "b was the least recently used: evicted");
        assert_eq!(c.get("m", "c"), Some(vec![3.0]));
        assert_eq!(c.get("other-model", "c"), None, "another model's vector is another entry");
        assert_eq!(c.len(), 2);
        assert_eq!((c.hits.load(Ordering::Relaxed), c.misses.load(Ordering::Relaxed)), (2, 3));
        let off = QueryCache::new(0);
        off.put("m", "a", &[1.0]);
        assert_eq!(off.get("m", "a"), None);
        assert_eq!((off.len(), off.misses.load(Ordering::Relaxed)), (0, 0), "off: nothing kept, nothing counted");
    }
}
