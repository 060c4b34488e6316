//! The generation model as an embedder (`--pooling`): a text is read like a prompt, in slices
//! over several steps, and its final hidden states (after the output norm) pooled and
//! normalised. Held to llama.cpp's `llama-server --embedding --pooling P` on the same tiny
//! random-weight GGUFs (tests/data/tiny-pooling-references.json, written by
//! scripts/tiny-pooling-references.py), an implementation independent of braid's.

use braid_engine::{
    spawn_engine, EmbedRequest, EmbeddingModel, EngineConfig, EngineHandle, EngineInfo,
    EngineObserver, Pooling, RequestEvent, StepStats,
};
use braid_model::tiny_gguf::{write_arch, Arch};
use braid_model::LoadedModel;
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Quiet;

impl EngineObserver for Quiet {
    fn started(&self, _: &EngineInfo) {}
    fn step(&self, _: &StepStats) {}
    fn request(&self, _: u64, _: &RequestEvent) {}
}

/// braid quantizes weights and activations to int8 where llama.cpp keeps the tiny files' f32,
/// so the vectors are close, not equal (the test prints each cosine); another pooling's vector
/// falls below this bound, which the test checks too.
const MIN_COSINE: f64 = 0.999;

fn reference() -> serde_json::Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/tiny-pooling-references.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn engine(arch: Arch, seed: u64, pooling: Pooling) -> (EngineHandle, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    write_arch(&path, arch, seed).unwrap();
    let model = Arc::new(LoadedModel::load(&path).unwrap());
    let cfg = EngineConfig {
        kv_cache_mb: 4,
        block_size: 16,
        max_num_seqs: 8,
        // 12 tokens a step: the 43-token text is read in four slices.
        max_batched_tokens: 12,
        max_waiting: 16,
        chunked_prefill: true,
        itl_target: None,
        starvation_after: Duration::from_secs(2),
        prefix_caching: true,
        pooling: Some(pooling),
        speculation: Default::default(),
        draft_model: None,
        kv_cache_dtype: Default::default(),
    };
    let h = spawn_engine(Some(model), None, cfg, Arc::new(Quiet)).unwrap();
    (h, dir)
}

fn embed(h: &EngineHandle, texts: Vec<Vec<u32>>) -> Vec<Vec<f32>> {
    let (answer, answered) = tokio::sync::oneshot::channel();
    h.embed(EmbedRequest {
        id: h.next_request_id(),
        model: EmbeddingModel::Generation,
        texts,
        arrival: Instant::now(),
        answer,
        span: tracing::Span::none(),
    })
    .unwrap();
    answered.blocking_recv().unwrap().unwrap().vectors
}

fn cosine(a: &[f32], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(&x, &y)| f64::from(x) * y).sum();
    let na: f64 = a.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|y| y * y).sum::<f64>().sqrt();
    dot / (na * nb)
}

/// The reference's text, as token ids.
fn prompt(r: &serde_json::Value) -> Vec<u32> {
    let ids = r["prompt"].as_array().unwrap();
    ids.iter().map(|t| t.as_u64().unwrap() as u32).collect()
}

fn vector(v: &serde_json::Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

#[test]
fn pooled_hidden_states_match_llama_cpp() {
    let r = reference();
    let seed = r["seed"].as_u64().unwrap();
    let prompt = prompt(&r);
    let poolings = [
        ("mean", Pooling::Mean),
        ("last", Pooling::Last),
        ("cls", Pooling::Cls),
    ];
    let mut worst = 1.0f64;
    for (arch_name, by_pooling) in r["embeddings"].as_object().unwrap() {
        let arch = Arch::from_name(arch_name).unwrap();
        for (name, pooling) in poolings {
            let (h, _dir) = engine(arch, seed, pooling);
            let got = embed(&h, vec![prompt.clone()]).remove(0);
            let norm: f64 = got
                .iter()
                .map(|&x| f64::from(x).powi(2))
                .sum::<f64>()
                .sqrt();
            assert!((norm - 1.0).abs() < 1e-5, "{arch_name} {name}: norm {norm}");
            let c = cosine(&got, &vector(&by_pooling[name]));
            println!("{arch_name} {name}: cosine {c:.6}");
            assert!(
                c >= MIN_COSINE,
                "{arch_name} {name}: cosine {c} with llama.cpp's"
            );
            worst = worst.min(c);
            // The reference tells poolings apart: another pooling's vector is far off.
            let other = if name == "mean" { "last" } else { "mean" };
            let c_other = cosine(&got, &vector(&by_pooling[other]));
            assert!(
                c_other < MIN_COSINE,
                "{arch_name} {name} also matches {other}: {c_other}"
            );
        }
    }
    println!("worst cosine {worst:.6}");
}

#[test]
fn a_text_gets_the_same_vector_alone_and_among_others() {
    let r = reference();
    let prompt = prompt(&r);
    let (h, _dir) = engine(Arch::Llama, 7, Pooling::Mean);
    let alone = embed(&h, vec![prompt.clone()]).remove(0);
    let texts = vec![prompt[..5].to_vec(), prompt.clone(), prompt[10..].to_vec()];
    let together = embed(&h, texts);
    // braid's forward is batch-invariant: bit-identical, not merely close.
    assert_eq!(together[1], alone);
    assert_ne!(together[0], together[1]);
}
