//! Prefix caching through the real engine thread on the tiny model: a request that shares a
//! prefix with an earlier one reuses its cached K/V (the hit counter moves) and still produces
//! exactly the greedy tokens it produces with the cache off, alone or in a crowd.

use braid_engine::{spawn_engine, EngineConfig, EngineEvent, EngineHandle, EngineRequest};
use braid_model::{LoadedModel, SamplingParams};
use braid_server::engine_observer::MetricsObserver;
use braid_server::metrics::Metrics;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::unbounded_channel;

struct Engine {
    handle: EngineHandle,
    metrics: Arc<Metrics>,
    _dir: tempfile::TempDir,
}

fn engine(prefix_caching: bool, kv_cache_mb: usize) -> Engine {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    braid_model::tiny_gguf::write(&path, 11).unwrap();
    let model = Arc::new(LoadedModel::load(&path).unwrap());
    let cfg = EngineConfig {
        kv_cache_mb,
        block_size: 16,
        max_num_seqs: 16,
        max_batched_tokens: 128,
        max_waiting: 32,
        chunked_prefill: true,
        itl_target: None,
        starvation_after: Duration::from_secs(2),
        prefix_caching,
        pooling: None,
        speculation: Default::default(),
        draft_model: None,
        kv_cache_dtype: Default::default(),
    };
    let metrics = Arc::new(Metrics::new());
    Engine {
        handle: spawn_engine(
            Some(model),
            None,
            cfg,
            MetricsObserver::new(metrics.clone(), None),
        )
        .unwrap(),
        metrics,
        _dir: dir,
    }
}

/// Greedy tokens for `prompt`, `n` of them.
async fn generate(h: &EngineHandle, prompt: Vec<u32>, n: usize) -> Vec<u32> {
    let (tx, mut rx) = unbounded_channel();
    h.submit(EngineRequest {
        id: h.next_request_id(),
        prompt,
        max_tokens: n,
        score_prompt: None,
        shares_prompt_with: None,
        first_of_request: None,
        params: SamplingParams::greedy(),
        constraint: None,
        prediction: None,
        stop_token_ids: vec![],
        arrival: Instant::now(),
        events: tx,
        span: tracing::Span::none(),
    })
    .unwrap();
    let mut out = Vec::new();
    loop {
        match tokio::time::timeout(Duration::from_secs(60), rx.recv())
            .await
            .expect("the engine answered")
        {
            Some(EngineEvent::Token { token, finished }) => {
                out.push(token.token);
                if finished.is_some() {
                    return out;
                }
            }
            Some(EngineEvent::Done(_)) => return out,
            other => panic!("unexpected end {other:?}"),
        }
    }
}

/// Byte tokens of the tiny vocabulary (ids 3..259), deterministic.
fn tokens(seed: u32, n: usize) -> Vec<u32> {
    (0..n as u32)
        .map(|i| 3 + (i.wrapping_mul(37).wrapping_add(seed * 101)) % 256)
        .collect()
}

#[tokio::test]
async fn a_cached_prefix_gives_the_uncached_greedy_output() {
    let system = tokens(1, 300); // 18 full blocks of 16
    let ask = |q: u32| [system.clone(), tokens(q, 9)].concat();

    let plain = engine(false, 4);
    let want1 = generate(&plain.handle, ask(1), 20).await;
    let want2 = generate(&plain.handle, ask(2), 20).await;
    assert_eq!(plain.metrics.prefix_cache_hits_total.get(), 0);
    assert_eq!(plain.metrics.prefix_cache_queries_total.get(), 0);

    let cached = engine(true, 4);
    assert_eq!(generate(&cached.handle, ask(1), 20).await, want1);
    assert_eq!(cached.metrics.prefix_cache_hits_total.get(), 0);
    assert_eq!(cached.metrics.prefix_cache_queries_total.get(), 309);
    // Another question after the same system prompt: its 18 full blocks are reused.
    assert_eq!(generate(&cached.handle, ask(2), 20).await, want2);
    assert_eq!(cached.metrics.prefix_cache_hits_total.get(), 288);
    // The first request again: all 19 full blocks of its prompt are reused.
    assert_eq!(generate(&cached.handle, ask(1), 20).await, want1);
    assert_eq!(cached.metrics.prefix_cache_hits_total.get(), 288 + 304);
    assert_eq!(cached.metrics.prefix_cache_queries_total.get(), 3 * 309);
    let text = cached.metrics.render();
    assert!(text.contains("braid_prefix_cache_hits_total 592"), "{text}");
    // The tiny model's 256 B a token: 4 MiB hold 16,384 tokens, 1,024 blocks.
    assert!(
        text.contains(r#"braid_cache_config_info{block_size="16",cache_dtype="f16",enable_prefix_caching="True",num_gpu_blocks="1024"} 1"#),
        "{text}"
    );
}

/// Sixteen requests at once over one system prompt on a pool too small for all of them:
/// blocks are shared, preempted and evicted, and every answer is still the uncached one.
#[tokio::test]
async fn a_crowd_sharing_a_prefix_on_a_small_pool_gets_the_uncached_output() {
    let system = tokens(3, 210);
    let prompts: Vec<Vec<u32>> = (0..16u32)
        .map(|q| [&system[..100 + 7 * q as usize], &tokens(q + 10, 60)[..]].concat())
        .collect();
    let plain = engine(false, 64);
    let mut want = Vec::new();
    for p in &prompts {
        want.push(generate(&plain.handle, p.clone(), 240).await);
    }
    // The tiny model holds 2 layers × 2 KV heads × 16 dims × 2 (K, V) × 2 bytes = 256 bytes
    // a token: 1 MiB is 4,096 tokens, 256 blocks; sixteen requests need ~320 even when
    // sharing (up to 205 shared prompt tokens, then ~70 own ones and 240 generated each).
    let cached = engine(true, 1);
    let answers = futures::future::join_all(
        prompts
            .iter()
            .map(|p| generate(&cached.handle, p.clone(), 240)),
    )
    .await;
    assert_eq!(answers, want);
    let hits = cached.metrics.prefix_cache_hits_total.get();
    let preemptions = cached.metrics.num_preemptions_total.get();
    println!("{hits} hit tokens, {preemptions} preemptions");
    assert!(hits >= 15 * 96, "{hits}");
    assert!(
        preemptions > 0,
        "the pool should be too small for all sixteen"
    );
}
