//! What the prefix cache stores and drops, in the order it happens, for whoever publishes it
//! (the server's KV-cache events, which a router routes on).
//!
//! A router that knows which prompt prefixes each replica holds sends a request where its
//! prompt is already computed. It learns that from these events rather than guessing from where
//! it sent requests before: a block the pool evicted under load is gone from the replica, and
//! the router hears so. The log is kept only when something reads it ([`CacheEvents::enable`]),
//! so a server without a publisher pays nothing.

use crate::prefix_cache::BlockHash;

/// One change to the prefix cache.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CacheEvent {
    /// A full block was registered: its chained hash, its predecessor's (None for a prompt's
    /// first block) and its tokens.
    Stored {
        hash: BlockHash,
        parent: Option<BlockHash>,
        tokens: Vec<u32>,
    },
    /// A cached block was evicted or flushed: no request can hit it any more.
    Removed { hash: BlockHash },
    /// The whole cache is gone (the engine started, or started afresh after a failure).
    AllCleared,
}

/// The events since the last [`CacheEvents::take`], when enabled.
#[derive(Clone, Debug, Default)]
pub struct CacheEvents {
    enabled: bool,
    events: Vec<CacheEvent>,
}

impl CacheEvents {
    pub fn enable(&mut self) {
        self.enabled = true;
    }

    /// Records the event `make` builds, if enabled (it is not built otherwise).
    pub fn record(&mut self, make: impl FnOnce() -> CacheEvent) {
        if self.enabled {
            self.events.push(make());
        }
    }

    /// The events recorded since the last call, oldest first.
    pub fn take(&mut self) -> Vec<CacheEvent> {
        std::mem::take(&mut self.events)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_kept_until_enabled() {
        let mut e = CacheEvents::default();
        e.record(|| unreachable!("not built while disabled"));
        assert!(e.take().is_empty());
        e.enable();
        e.record(|| CacheEvent::Removed { hash: 3 });
        assert_eq!(e.take(), vec![CacheEvent::Removed { hash: 3 }]);
        assert!(e.take().is_empty());
    }
}
