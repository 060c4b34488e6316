//! KV-cache events for routers (`braid serve --kv-events tcp://HOST:PORT`), in vLLM's wire
//! format: what the prefix cache stores and evicts, published on a ZeroMQ PUB socket.
//!
//! A router that routes on cache contents (vllm-router's `kv_aware`, llm-d's precise prefix
//! scorer) subscribes, and sends each request to the replica that really holds its prompt's
//! blocks, evictions included, instead of guessing from where it sent requests before.
//!
//! Each message is three frames: the topic (`--kv-events-topic`, empty by default, as
//! vllm-router subscribes; llm-d's router reads `kv@POD:PORT@MODEL`), a sequence number (8 bytes, big-endian,
//! from 0, one per message: a subscriber that sees a gap knows it missed something and starts
//! its index for this source afresh), and a MessagePack `[timestamp, [event, ...]]`. Events
//! are maps with a `type`: `BlockStored` (`block_hashes`, `parent_block_hash`, `token_ids`,
//! `block_size`, `lora_id`, `medium`, `lora_name`), `BlockRemoved` (`block_hashes`,
//! `medium`) and `AllBlocksCleared`. Hashes are the low 64 bits of braid's chained block hash,
//! as an unsigned integer: subscribers use them only to link a block to its parent and to
//! match a removal, and hash the tokens themselves. `medium` is nil, the engine's own cache.
//!
//! The engine hands events over without waiting; a task on the server's runtime encodes and
//! sends them. A PUB socket drops messages nobody subscribes to, so a replica started before
//! its router loses nothing the router could have used: the router cannot link blocks whose
//! parents it never saw, and routes on what it hears from then on.

use anyhow::Context;
use braid_engine::CacheEvent;
use serde::Serialize;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use zeromq::{Socket, SocketSend, ZmqMessage};

/// At most this many events per message (vllm-router refuses larger batches).
const MAX_EVENTS_PER_MESSAGE: usize = 4096;

/// Publishes the engine's cache events on a bound PUB socket.
pub struct KvEventPublisher {
    pub endpoint: String,
    pub topic: String,
    events: UnboundedSender<Vec<CacheEvent>>,
}

impl KvEventPublisher {
    /// Binds a PUB socket at `endpoint` (`tcp://HOST:PORT`) and starts publishing, from a task
    /// on the current runtime, what [`publish`](Self::publish) is given.
    pub async fn bind(endpoint: &str, topic: &str, block_size: usize) -> anyhow::Result<Self> {
        if !endpoint.starts_with("tcp://") {
            anyhow::bail!("--kv-events takes a tcp://HOST:PORT endpoint, got `{endpoint}`");
        }
        let mut socket = zeromq::PubSocket::new();
        socket.bind(endpoint).await.with_context(|| {
            format!(
                "cannot publish KV-cache events on {endpoint} (--kv-events); is the port in use?"
            )
        })?;
        let (events, rx) = unbounded_channel();
        tokio::spawn(publish_all(
            socket,
            rx,
            topic.to_string(),
            block_size as u32,
        ));
        tracing::info!(endpoint, topic, "publishing KV-cache events");
        Ok(Self {
            endpoint: endpoint.to_string(),
            topic: topic.to_string(),
            events,
        })
    }

    /// Queues `events` for publishing; never waits.
    pub fn publish(&self, events: &[CacheEvent]) {
        let _ = self.events.send(events.to_vec());
    }
}

async fn publish_all(
    mut socket: zeromq::PubSocket,
    mut events: UnboundedReceiver<Vec<CacheEvent>>,
    topic: String,
    block_size: u32,
) {
    let mut seq: i64 = 0;
    while let Some(batch) = events.recv().await {
        for part in batch.chunks(MAX_EVENTS_PER_MESSAGE) {
            let mut message = ZmqMessage::from(topic.clone().into_bytes());
            message.push_back(seq.to_be_bytes().to_vec().into());
            message.push_back(encode(part, block_size, unix_secs()).into());
            match socket.send(message).await {
                Ok(()) => tracing::debug!(seq, events = part.len(), "KV-cache events published"),
                Err(e) => tracing::warn!(seq, "a KV-cache event message was not sent: {e}"),
            }
            seq += 1;
        }
    }
}

fn unix_secs() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

#[derive(Serialize)]
#[serde(untagged)]
enum WireEvent<'a> {
    Stored {
        #[serde(rename = "type")]
        kind: &'static str,
        block_hashes: [u64; 1],
        parent_block_hash: Option<u64>,
        token_ids: &'a [u32],
        block_size: u32,
        lora_id: Option<u32>,
        medium: Option<&'static str>,
        lora_name: Option<&'static str>,
    },
    Removed {
        #[serde(rename = "type")]
        kind: &'static str,
        block_hashes: [u64; 1],
        medium: Option<&'static str>,
    },
    Cleared {
        #[serde(rename = "type")]
        kind: &'static str,
    },
}

/// One message's MessagePack payload: `[ts, [event, ...]]`.
pub fn encode(events: &[CacheEvent], block_size: u32, ts: f64) -> Vec<u8> {
    // The low half of the chained 128-bit hash, as vLLM's integer hashes are 64 bits.
    let short = |h: u128| h as u64;
    let wire: Vec<WireEvent> = events
        .iter()
        .map(|e| match e {
            CacheEvent::Stored {
                hash,
                parent,
                tokens,
            } => WireEvent::Stored {
                kind: "BlockStored",
                block_hashes: [short(*hash)],
                parent_block_hash: parent.map(short),
                token_ids: tokens,
                block_size,
                lora_id: None,
                medium: None,
                lora_name: None,
            },
            CacheEvent::Removed { hash } => WireEvent::Removed {
                kind: "BlockRemoved",
                block_hashes: [short(*hash)],
                medium: None,
            },
            CacheEvent::AllCleared => WireEvent::Cleared {
                kind: "AllBlocksCleared",
            },
        })
        .collect();
    rmp_serde::to_vec_named(&(ts, wire)).expect("events encode as MessagePack")
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmpv::Value as Mp;

    fn decode(bytes: &[u8]) -> Mp {
        rmpv::decode::read_value(&mut &bytes[..]).unwrap()
    }

    fn field<'a>(event: &'a Mp, key: &str) -> &'a Mp {
        event
            .as_map()
            .unwrap()
            .iter()
            .find(|(k, _)| k.as_str() == Some(key))
            .map(|(_, v)| v)
            .unwrap_or_else(|| panic!("no {key} in {event}"))
    }

    #[test]
    fn events_encode_as_vllms_batches() {
        let events = [
            CacheEvent::AllCleared,
            CacheEvent::Stored {
                hash: (7u128 << 64) | 42,
                parent: None,
                tokens: vec![1, 2, 3, 4],
            },
            CacheEvent::Stored {
                hash: 43,
                parent: Some((7u128 << 64) | 42),
                tokens: vec![5, 6, 7, 8],
            },
            CacheEvent::Removed { hash: 43 },
        ];
        let batch = decode(&encode(&events, 4, 12.5));
        let batch = batch.as_array().unwrap();
        assert_eq!(batch.len(), 2);
        assert_eq!(batch[0].as_f64(), Some(12.5));
        let events = batch[1].as_array().unwrap();
        let kinds: Vec<_> = events
            .iter()
            .map(|e| field(e, "type").as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            [
                "AllBlocksCleared",
                "BlockStored",
                "BlockStored",
                "BlockRemoved"
            ]
        );
        assert_eq!(events[0].as_map().unwrap().len(), 1);
        let stored = &events[1];
        let mut keys: Vec<_> = stored
            .as_map()
            .unwrap()
            .iter()
            .map(|(k, _)| k.as_str().unwrap())
            .collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "block_hashes",
                "block_size",
                "lora_id",
                "lora_name",
                "medium",
                "parent_block_hash",
                "token_ids",
                "type"
            ]
        );
        assert_eq!(
            field(stored, "block_hashes").as_array().unwrap()[0].as_u64(),
            Some(42)
        );
        assert!(field(stored, "parent_block_hash").is_nil());
        assert!(field(stored, "medium").is_nil() && field(stored, "lora_name").is_nil());
        assert_eq!(field(stored, "block_size").as_u64(), Some(4));
        assert_eq!(field(&events[2], "parent_block_hash").as_u64(), Some(42));
        let tokens: Vec<_> = field(&events[2], "token_ids")
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_u64().unwrap())
            .collect();
        assert_eq!(tokens, [5, 6, 7, 8]);
        assert_eq!(events[3].as_map().unwrap().len(), 3);
    }
}
