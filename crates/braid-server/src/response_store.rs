//! The Responses API's stored responses: what `store` keeps and `previous_response_id` reads.
//!
//! OpenAI keeps a response for 30 days on disk. braid keeps it in memory, so the store is
//! bounded twice: by age (`--response-store-secs`) and by size (`--response-store-mb`), the
//! oldest leaving first when a new one would not fit. A response that has left reads as
//! never stored: `previous_response_id` naming it is a 400 that says it may have expired, so
//! a client learns to resend its conversation rather than get an answer without it.
//!
//! An entry holds the response as the client saw it and the conversation that produced it,
//! in chat messages, its own output included: the next turn continues from that.

use serde_json::Value;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A stored response.
#[derive(Clone, Debug)]
pub struct Stored {
    /// The response object, as GET /v1/responses/{id} returns it.
    pub response: Value,
    /// The chat messages of the whole conversation, the response's own output last; its
    /// `instructions` not among them (they do not carry over to the next response).
    pub conversation: Vec<Value>,
}

struct Entry {
    stored: Stored,
    at: Instant,
    bytes: usize,
}

#[derive(Default)]
struct Entries {
    by_id: HashMap<String, Entry>,
    /// Ids oldest first.
    order: VecDeque<String>,
    bytes: usize,
}

pub struct ResponseStore {
    entries: Mutex<Entries>,
    max_bytes: usize,
    ttl: Duration,
}

/// Why a response was not kept.
#[derive(Debug, PartialEq, Eq)]
pub enum NotStored {
    /// The store is off (`--response-store-mb 0`).
    Off,
    /// The response alone is larger than the whole store.
    TooLarge { bytes: usize, max_bytes: usize },
}

impl ResponseStore {
    pub fn new(max_bytes: usize, ttl: Duration) -> Self {
        Self {
            entries: Mutex::default(),
            max_bytes,
            ttl,
        }
    }

    pub fn is_on(&self) -> bool {
        self.max_bytes > 0
    }

    /// How long a response is kept.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Keeps `stored` under `id`, dropping expired responses and then the oldest until it
    /// fits.
    pub fn insert(&self, id: String, stored: Stored) -> Result<(), NotStored> {
        if !self.is_on() {
            return Err(NotStored::Off);
        }
        let bytes = size_of(&stored);
        if bytes > self.max_bytes {
            return Err(NotStored::TooLarge {
                bytes,
                max_bytes: self.max_bytes,
            });
        }
        let now = Instant::now();
        let mut e = self.lock();
        e.remove(&id);
        e.expire(now, self.ttl);
        while e.bytes + bytes > self.max_bytes {
            let Some(oldest) = e.order.pop_front() else {
                break;
            };
            e.remove(&oldest);
        }
        e.order.push_back(id.clone());
        e.bytes += bytes;
        e.by_id.insert(
            id,
            Entry {
                stored,
                at: now,
                bytes,
            },
        );
        Ok(())
    }

    /// The response stored under `id`, if it is still kept.
    pub fn get(&self, id: &str) -> Option<Stored> {
        let mut e = self.lock();
        e.expire(Instant::now(), self.ttl);
        e.by_id.get(id).map(|entry| entry.stored.clone())
    }

    /// Forgets `id`; false when it was not kept.
    pub fn delete(&self, id: &str) -> bool {
        self.lock().remove(id)
    }

    /// Responses kept, and their bytes.
    pub fn usage(&self) -> (usize, usize) {
        let e = self.lock();
        (e.by_id.len(), e.bytes)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        // The map is valid after any panic mid-update: a poisoned lock is still usable.
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Entries {
    fn remove(&mut self, id: &str) -> bool {
        match self.by_id.remove(id) {
            Some(entry) => {
                self.bytes -= entry.bytes;
                self.order.retain(|kept| kept != id);
                true
            }
            None => false,
        }
    }

    /// Drops responses older than `ttl` (they are in arrival order).
    fn expire(&mut self, now: Instant, ttl: Duration) {
        while let Some(id) = self.order.front().cloned() {
            match self.by_id.get(&id) {
                Some(entry) if now.duration_since(entry.at) < ttl => break,
                _ => {
                    self.order.pop_front();
                    self.remove(&id);
                }
            }
        }
    }
}

/// What an entry costs, as the length of its JSON (the strings dominate).
fn size_of(stored: &Stored) -> usize {
    let json = |v: &Value| serde_json::to_string(v).map_or(0, |s| s.len());
    json(&stored.response) + stored.conversation.iter().map(json).sum::<usize>()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn stored(text: &str) -> Stored {
        Stored {
            response: json!({"text": text}),
            conversation: vec![json!({"role": "user", "content": text})],
        }
    }

    #[test]
    fn the_oldest_leave_first_when_a_new_one_does_not_fit() {
        let one = size_of(&stored("aaaa"));
        let store = ResponseStore::new(3 * one, Duration::from_secs(60));
        for id in ["a", "b", "c", "d"] {
            store.insert(id.into(), stored("aaaa")).unwrap();
        }
        assert!(store.get("a").is_none());
        assert!(store.get("b").is_some() && store.get("d").is_some());
        assert_eq!(store.usage(), (3, 3 * one));
    }

    #[test]
    fn a_deleted_response_frees_its_bytes_once() {
        let store = ResponseStore::new(1 << 20, Duration::from_secs(60));
        store.insert("a".into(), stored("x")).unwrap();
        assert!(store.delete("a"));
        assert!(!store.delete("a"));
        assert_eq!(store.usage(), (0, 0));
        store.insert("a".into(), stored("x")).unwrap();
        store.insert("a".into(), stored("x")).unwrap();
        assert_eq!(store.usage().0, 1);
        assert_eq!(store.get("a").unwrap().conversation.len(), 1);
    }

    #[test]
    fn responses_expire() {
        let store = ResponseStore::new(1 << 20, Duration::from_millis(30));
        store.insert("a".into(), stored("x")).unwrap();
        assert!(store.get("a").is_some());
        std::thread::sleep(Duration::from_millis(60));
        assert!(store.get("a").is_none());
        assert_eq!(store.usage(), (0, 0));
    }

    #[test]
    fn off_or_too_large_is_said() {
        let off = ResponseStore::new(0, Duration::from_secs(60));
        assert_eq!(off.insert("a".into(), stored("x")), Err(NotStored::Off));
        let small = ResponseStore::new(10, Duration::from_secs(60));
        assert!(matches!(
            small.insert("a".into(), stored("a long answer")),
            Err(NotStored::TooLarge { max_bytes: 10, .. })
        ));
    }
}
