//! Loading, errors, batching and the forward pass on a tiny random-weight GGUF written at test
//! time; the forward is checked against candle-transformers' quantized llama as the reference.

use braid_model::generate::{generate, GenerateOptions};
use braid_model::{
    BatchEntry, KvDtype, KvPool, LoadedModel, ModelError, SamplingParams, Workspace,
};
use std::path::{Path, PathBuf};

fn tiny(dir: &Path) -> PathBuf {
    let path = dir.join("tiny.gguf");
    braid_model::tiny_gguf::write(&path, 42).unwrap();
    path
}

fn load_err(path: &Path) -> String {
    match LoadedModel::load(path) {
        Ok(_) => panic!("{} loaded", path.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn loads_the_tiny_model() {
    let dir = tempfile::tempdir().unwrap();
    let m = LoadedModel::load(&tiny(dir.path())).unwrap();
    let c = m.config();
    assert_eq!(
        (
            c.num_layers,
            c.hidden,
            c.num_heads,
            c.num_kv_heads,
            c.head_dim
        ),
        (2, 64, 4, 2, 16)
    );
    assert_eq!(c.vocab_size, m.tokenizer.vocab_size());
    assert_eq!(
        m.tokenizer.encode("<|im_start|>the 12").unwrap(),
        vec![1, 261, 3 + 32, 3 + 49, 3 + 50]
    );
    assert_eq!(m.tokenizer.decode(&[1, 261], false), "<|im_start|>the");
    assert_eq!(m.tokenizer.decode(&[1, 261], true), "the");
    assert!(m.tokenizer.eos_token_ids().contains(&2));
}

#[test]
fn missing_file_names_the_path_and_the_fix() {
    let msg = load_err(Path::new("/nonexistent/dir/model.gguf"));
    assert!(
        msg.contains("/nonexistent/dir/model.gguf") && msg.contains("scripts/fetch-model.sh"),
        "{msg}"
    );
}

#[test]
fn corrupt_truncated_and_foreign_files_are_errors_not_panics() {
    let dir = tempfile::tempdir().unwrap();
    let good = std::fs::read(tiny(dir.path())).unwrap();

    let garbage = dir.path().join("garbage.gguf");
    std::fs::write(
        &garbage,
        (0..4096u32)
            .map(|i| (i.wrapping_mul(2654435761u32) >> 24) as u8)
            .collect::<Vec<_>>(),
    )
    .unwrap();
    assert!(load_err(&garbage).contains("not a readable GGUF"));

    for cut in [3, 64, good.len() / 3, good.len() - 10] {
        let truncated = dir.path().join(format!("truncated-{cut}.gguf"));
        std::fs::write(&truncated, &good[..cut]).unwrap();
        let msg = load_err(&truncated);
        assert!(
            msg.contains("truncated-") && msg.contains("corrupt"),
            "cut at {cut}: {msg}"
        );
    }

    let mut foreign = good.clone();
    for i in 0..foreign.len() - 5 {
        if &foreign[i..i + 5] == b"llama" {
            foreign[i..i + 5].copy_from_slice(b"mamba");
        }
    }
    let path = dir.path().join("mamba.gguf");
    std::fs::write(&path, foreign).unwrap();
    assert!(load_err(&path).contains("architecture `mamba`"));
}

#[test]
fn prompt_longer_than_the_context_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let m = LoadedModel::load(&tiny(dir.path())).unwrap();
    let prompt = vec![5u32; 500];
    let opts = GenerateOptions {
        max_tokens: 20,
        ..Default::default()
    };
    match generate(&m, &prompt, &opts, |_| true) {
        Err(ModelError::ContextOverflow { len: 520, max: 512 }) => {}
        other => panic!("expected a context overflow, got {:?}", other.map(|_| ())),
    }
    let mut kv = KvPool::new(m.config(), 16, 40);
    let table: Vec<u32> = (0..40).collect();
    let mut ws = Workspace::default();
    let err = m.model.forward(
        &[BatchEntry {
            tokens: &[5; 10],
            start: 510,
            block_table: &table,
            sample: true,
            all_logits: false,
            hidden: false,
            prompt_len: 520,
        }],
        &mut kv,
        &mut ws,
    );
    assert!(matches!(err, Err(ModelError::ContextOverflow { .. })));
    let err = m.model.forward(
        &[BatchEntry {
            tokens: &[5; 40],
            start: 0,
            block_table: &table[..2],
            sample: true,
            all_logits: false,
            hidden: false,
            prompt_len: 40,
        }],
        &mut kv,
        &mut ws,
    );
    assert!(
        matches!(err, Err(ModelError::InvalidBatch(_))),
        "a block table too short for the chunk"
    );
}

#[test]
fn forward_matches_candle_transformers_reference() {
    use candle_core::{Device, Tensor};
    let dir = tempfile::tempdir().unwrap();
    let path = tiny(dir.path());
    let m = LoadedModel::load(&path).unwrap();
    let mut file = std::fs::File::open(&path).unwrap();
    let ct = candle_core::quantized::gguf_file::Content::read(&mut file).unwrap();
    let mut reference = candle_transformers::models::quantized_llama::ModelWeights::from_gguf(
        ct,
        &mut file,
        &Device::Cpu,
    )
    .unwrap();

    let tokens: Vec<u32> = (0..37).map(|i| 3 + (i * 37 % 250)).collect();
    let input = Tensor::new(tokens.as_slice(), &Device::Cpu)
        .unwrap()
        .unsqueeze(0)
        .unwrap();
    let want: Vec<f32> = reference
        .forward(&input, 0)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
    let table: Vec<u32> = (0..3).collect();
    let mut kv = KvPool::new(m.config(), 16, 3);
    let got = m
        .model
        .forward(
            &[BatchEntry {
                tokens: &tokens,
                start: 0,
                block_table: &table,
                sample: true,
                all_logits: false,
                hidden: false,
                prompt_len: tokens.len(),
            }],
            &mut kv,
            &mut Workspace::default(),
        )
        .unwrap()
        .to_vec();
    assert_eq!(got.len(), want.len());
    let scale = want.iter().fold(0f32, |a, v| a.max(v.abs()));
    let worst = got
        .iter()
        .zip(&want)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    let rms = (got
        .iter()
        .zip(&want)
        .map(|(a, b)| (a - b) * (a - b))
        .sum::<f32>()
        / got.len() as f32)
        .sqrt();
    // Both quantize activations to 8 bits, in different places: their logits differ by about
    // 1% of the scale (root mean square), and the worst of these 262 by three times that. A
    // broken forward differs by the scale itself.
    assert!(
        rms <= 0.015 * scale && worst <= 0.04 * scale,
        "differences: root mean square {rms}, worst {worst}, against a logit scale of {scale}"
    );
}

/// Batched results are bit-identical to the same sequence alone, whoever shares the step.
#[test]
fn batch_composition_does_not_change_a_single_bit() {
    let dir = tempfile::tempdir().unwrap();
    let m = LoadedModel::load(&tiny(dir.path())).unwrap();
    let prompts: Vec<Vec<u32>> = (0..8)
        .map(|s| {
            (0..(5 + s * 9))
                .map(|i| 3 + ((i * 31 + s * 7) % 255) as u32)
                .collect()
        })
        .collect();
    let alone: Vec<Vec<f32>> = prompts
        .iter()
        .map(|p| {
            let mut kv = KvPool::new(m.config(), 16, 8);
            let t: Vec<u32> = (0..8).collect();
            m.model
                .forward(
                    &[BatchEntry {
                        tokens: p,
                        start: 0,
                        block_table: &t,
                        sample: true,
                        all_logits: false,
                        hidden: false,
                        prompt_len: p.len(),
                    }],
                    &mut kv,
                    &mut Workspace::default(),
                )
                .unwrap()
                .to_vec()
        })
        .collect();
    let mut kv = KvPool::new(m.config(), 16, 64);
    let tables: Vec<Vec<u32>> = (0..8u32)
        .map(|s| (0..8).map(|b| s * 8 + b).collect())
        .collect();
    let entries: Vec<BatchEntry> = prompts
        .iter()
        .zip(&tables)
        .map(|(p, t)| BatchEntry {
            tokens: p,
            start: 0,
            block_table: t,
            sample: true,
            all_logits: false,
            hidden: false,
            prompt_len: p.len(),
        })
        .collect();
    let batched = m
        .model
        .forward(&entries, &mut kv, &mut Workspace::default())
        .unwrap()
        .to_vec();
    let v = m.config().vocab_size;
    for (i, a) in alone.iter().enumerate() {
        assert_eq!(&batched[i * v..(i + 1) * v], a.as_slice(), "sequence {i}");
    }
}

#[test]
fn chunked_prefill_and_seeded_sampling_are_reproducible() {
    let dir = tempfile::tempdir().unwrap();
    let m = LoadedModel::load(&tiny(dir.path())).unwrap();
    let prompt: Vec<u32> = (0..40).map(|i| 3 + (i * 13 % 250)).collect();
    let run = |chunk: usize, params: SamplingParams| {
        let opts = GenerateOptions {
            max_tokens: 12,
            params,
            prefill_chunk: chunk,
            stop_at_eos: false,
        };
        generate(&m, &prompt, &opts, |_| true).unwrap()
    };
    let whole = run(0, SamplingParams::greedy());
    for chunk in [1, 3, 16] {
        assert_eq!(run(chunk, SamplingParams::greedy()), whole, "chunk {chunk}");
    }
    let seeded = SamplingParams {
        temperature: 1.0,
        seed: Some(11),
        ..Default::default()
    };
    assert_eq!(run(0, seeded.clone()), run(7, seeded));
}

#[test]
fn kv_budget_in_megabytes_sizes_the_pool() {
    let dir = tempfile::tempdir().unwrap();
    let m = LoadedModel::load(&tiny(dir.path())).unwrap();
    // 2 layers × 2 KV heads × 16 dims × (K+V) × 2 bytes (half floats) = 256 bytes per token,
    // 4 KiB per block.
    assert_eq!(
        KvPool::blocks_for_budget(m.config(), 16, 1, KvDtype::F16),
        256
    );
}
