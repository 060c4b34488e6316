//! The engine thread on the tiny model, driven directly: a failing step fails the requests in
//! it (nobody hangs), and the engine keeps serving; departed clients free their sequences.

use braid_model::{LoadedModel, SamplingParams};
use braid_server::engine::{spawn_engine, EngineConfig};
use braid_server::engine_handle::{EngineEvent, EngineHandle, EngineRequest};
use braid_server::metrics::Metrics;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

fn engine() -> (EngineHandle, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    braid_model::tiny_gguf::write(&path, 3).unwrap();
    let model = Arc::new(LoadedModel::load(&path).unwrap());
    let cfg = EngineConfig {
        kv_cache_mb: 4,
        block_size: 16,
        max_num_seqs: 8,
        max_batched_tokens: 64,
        max_waiting: 16,
        chunked_prefill: true,
        itl_target: Some(Duration::from_millis(100)),
        starvation_after: Duration::from_secs(2),
        prefix_caching: true,
    };
    (
        spawn_engine(model, cfg, Arc::new(Metrics::new())).unwrap(),
        dir,
    )
}

fn submit(h: &EngineHandle, prompt: Vec<u32>, max_tokens: usize) -> UnboundedReceiver<EngineEvent> {
    let (tx, rx) = unbounded_channel();
    let req = EngineRequest {
        id: h.next_request_id(),
        prompt,
        max_tokens,
        params: SamplingParams::greedy(),
        stop_token_ids: vec![],
        arrival: Instant::now(),
        events: tx,
    };
    h.submit(req).unwrap();
    rx
}

/// Tokens until the end, and how it ended.
async fn drain(mut rx: UnboundedReceiver<EngineEvent>) -> (usize, Option<EngineEvent>) {
    let mut tokens = 0;
    loop {
        match tokio::time::timeout(Duration::from_secs(30), rx.recv())
            .await
            .expect("the engine answered")
        {
            Some(EngineEvent::Token(_)) => tokens += 1,
            Some(end) => return (tokens, Some(end)),
            None => return (tokens, None),
        }
    }
}

#[tokio::test]
async fn a_failing_step_fails_its_requests_and_the_engine_carries_on() {
    let (h, _dir) = engine();
    let healthy = submit(&h, vec![5; 20], 200);
    // Validation keeps such ids out of real requests; here it makes the model fail mid-step.
    let poisoned = submit(&h, vec![5, 99_999, 6], 4);
    let (_, end) = drain(poisoned).await;
    assert!(
        matches!(end, Some(EngineEvent::Failed(ref m)) if m.contains("model error")),
        "{end:?}"
    );
    let (_, end) = drain(healthy).await;
    assert!(
        matches!(end, Some(EngineEvent::Failed(_))),
        "requests sharing the failed step fail too: {end:?}"
    );
    let (tokens, end) = drain(submit(&h, vec![7; 10], 5)).await;
    assert_eq!(tokens, 5);
    assert!(matches!(end, Some(EngineEvent::Done(_))), "{end:?}");
    let stats = h.stats();
    assert_eq!((stats.running, stats.waiting), (0, 0));
    assert!(h.is_alive());
}

#[tokio::test]
async fn departed_clients_free_their_sequences() {
    let (h, _dir) = engine();
    for _ in 0..12 {
        drop(submit(&h, vec![9; 30], 400));
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let s = h.stats();
        if s.running == 0 && s.waiting == 0 && s.kv_usage == 0.0 {
            break;
        }
        assert!(Instant::now() < deadline, "still held: {s:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (tokens, _) = drain(submit(&h, vec![7; 10], 3)).await;
    assert_eq!(tokens, 3);
}
