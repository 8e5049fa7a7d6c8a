//! What a store read for a search and may use again — a user's scope: its events' terms
//! tokenised, their vector copies — kept in memory, least recently used out first, bounded by
//! bytes. Each entry carries what it was read under (`S`: the SQLite store's subject stamps; the
//! PostgreSQL store's per-row versions live in the entry itself), and the store decides whether
//! it still holds: this only keeps, weighs, evicts and counts.

use hashlink::LruCache;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// What an entry weighs: about how much memory it holds.
pub trait Weighed {
    fn bytes(&self) -> usize;
}

pub struct Kept<S, V> {
    entries: Mutex<Entries<S, V>>,
    capacity: usize,
    hits: AtomicU64,
    misses: AtomicU64,
}

struct Entries<S, V> {
    lru: LruCache<String, (S, Arc<V>, usize)>,
    bytes: usize,
    /// When an entry last had to go to make room.
    evicted: Option<std::time::Instant>,
}

/// How long after an eviction the cache counts as full (`Kept::room`).
const PRESSED: std::time::Duration = std::time::Duration::from_secs(60);

impl<S: Clone, V: Weighed> Kept<S, V> {
    /// At most `mib` MiB (0: off — nothing is kept).
    pub fn new(mib: usize) -> Self {
        Self {
            entries: Mutex::new(Entries { lru: LruCache::new_unbounded(), bytes: 0, evicted: None }),
            capacity: mib << 20,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    pub fn is_off(&self) -> bool {
        self.capacity == 0
    }

    /// The entry under `key` with what it was read under, made the most recently used (not
    /// counted: the caller knows whether it served, [`Self::count`]).
    pub fn get(&self, key: &str) -> Option<(S, Arc<V>)> {
        let mut e = self.entries.lock().expect("kept scopes");
        e.lru.get(key).map(|(s, v, _)| (s.clone(), v.clone()))
    }

    /// A search served from a kept entry (`hit`) or one that read its own.
    pub fn count(&self, hit: bool) {
        let counter = if hit { &self.hits } else { &self.misses };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Keeps `value`, read under `stamp` (replacing what `key` held), and makes room.
    pub fn put(&self, key: String, stamp: S, value: Arc<V>) {
        let bytes = value.bytes();
        if bytes > self.capacity {
            return;
        }
        let mut e = self.entries.lock().expect("kept scopes");
        if let Some((_, _, old)) = e.lru.insert(key, (stamp, value, bytes)) {
            e.bytes -= old;
        }
        e.bytes += bytes;
        e.evict(self.capacity);
    }

    /// The entry's size again, when it is still `value` (which grew after it was kept).
    pub fn resize(&self, key: &str, value: &Arc<V>) {
        let bytes = value.bytes();
        let mut e = self.entries.lock().expect("kept scopes");
        let old = match e.lru.peek_mut(key) {
            Some((_, kept, size)) if Arc::ptr_eq(kept, value) => std::mem::replace(size, bytes),
            _ => return,
        };
        e.bytes = e.bytes - old + bytes;
        e.evict(self.capacity);
    }

    /// Each entry kept, in no order (the cache is locked meanwhile: `f` must not use it).
    pub fn each(&self, mut f: impl FnMut(&V)) {
        let e = self.entries.lock().expect("kept scopes");
        e.lru.iter().for_each(|(_, (_, v, _))| f(v));
    }

    /// Bytes that can be kept beyond what is without evicting anything — none while entries have
    /// had to go in the last minute (the cache holds fewer than its users: what it could take
    /// now it will need for them).
    pub fn room(&self) -> usize {
        let e = self.entries.lock().expect("kept scopes");
        match e.evicted {
            Some(t) if t.elapsed() < PRESSED => 0,
            _ => self.capacity.saturating_sub(e.bytes),
        }
    }

    /// Searches served from a kept entry and those that read their own, since start; bytes held.
    pub fn counts(&self) -> (u64, u64, usize) {
        let bytes = self.entries.lock().expect("kept scopes").bytes;
        (self.hits.load(Ordering::Relaxed), self.misses.load(Ordering::Relaxed), bytes)
    }
}

impl<S, V> Entries<S, V> {
    fn evict(&mut self, capacity: usize) {
        while self.bytes > capacity {
            let Some((_, (_, _, b))) = self.lru.remove_lru() else { break };
            self.bytes -= b;
            self.evicted = Some(std::time::Instant::now());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Blob(usize);
    impl Weighed for Blob {
        fn bytes(&self) -> usize {
            self.0
        }
    }

    #[test]
    fn it_holds_no_more_than_its_bytes_and_lets_the_least_recently_used_go() {
        let kept: Kept<u8, Blob> = Kept::new(1);
        let mib = 1 << 20;
        kept.put("a".into(), 1, Arc::new(Blob(mib / 2)));
        kept.put("b".into(), 2, Arc::new(Blob(mib / 2)));
        assert!(kept.get("a").is_some(), "a used: b is now the least recent");
        kept.put("c".into(), 3, Arc::new(Blob(mib / 4)));
        assert!(kept.get("b").is_none(), "b went to make room");
        assert_eq!(kept.get("a").map(|(s, _)| s), Some(1));
        assert_eq!(kept.counts().2, mib / 2 + mib / 4);
        kept.put("huge".into(), 4, Arc::new(Blob(2 * mib)));
        assert!(kept.get("huge").is_none(), "larger than the whole cache: not kept");
        assert_eq!(kept.room(), 0, "b was evicted just now: no room counted");
        let fresh: Kept<u8, Blob> = Kept::new(1);
        fresh.put("a".into(), 1, Arc::new(Blob(mib / 4)));
        assert_eq!(fresh.room(), mib - mib / 4, "nothing evicted: what is left");
        let off: Kept<u8, Blob> = Kept::new(0);
        off.put("a".into(), 1, Arc::new(Blob(1)));
        assert!(off.is_off() && off.get("a").is_none());
    }
}
