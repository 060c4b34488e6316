//! A tiny llama-architecture GGUF with random weights and a byte-level tokenizer, written at
//! test time, so tests of loading, the KV pool, batching and the server do not need the 98 MB
//! model. Deterministic for a given seed.

use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use rand::{Rng, SeedableRng};
use std::path::Path;

pub const SPECIAL_TOKENS: [&str; 3] = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"];
pub const HIDDEN: usize = 64;
pub const LAYERS: usize = 2;
pub const CONTEXT: usize = 512;

/// GPT-2's byte-to-character map, in byte order.
fn byte_chars() -> Vec<char> {
    let printable: Vec<u32> = (b'!' as u32..=b'~' as u32)
        .chain(0xA1..=0xAC)
        .chain(0xAE..=0xFF)
        .collect();
    let mut extra = 0;
    (0..=255u32)
        .map(|b| {
            if printable.contains(&b) {
                char::from_u32(b).unwrap()
            } else {
                extra += 1;
                char::from_u32(255 + extra).unwrap()
            }
        })
        .collect()
}

/// Writes the model to `path`. Vocabulary: the three ChatML specials (ids 0–2), then one token
/// per byte, then a few merged tokens.
pub fn write(path: &Path, seed: u64) -> candle_core::Result<()> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let chars = byte_chars();
    let mut tokens: Vec<String> = SPECIAL_TOKENS.iter().map(|s| s.to_string()).collect();
    tokens.extend(chars.iter().map(|c| c.to_string()));
    let merges = vec![
        format!("{} t", chars[b' ' as usize]),
        "h e".to_string(),
        "t he".to_string(),
    ];
    tokens.extend([
        format!("{}t", chars[b' ' as usize]),
        "he".into(),
        "the".into(),
    ]);
    let vocab = tokens.len();
    let mut types = vec![3i32; SPECIAL_TOKENS.len()];
    types.resize(vocab, 1);

    let (h, ffn, heads, kv_heads) = (HIDDEN, 128usize, 4usize, 2usize);
    let kv = kv_heads * (h / heads);
    let dev = Device::Cpu;
    let mut mat = |rows: usize, cols: usize, scale: f32| -> candle_core::Result<QTensor> {
        let data: Vec<f32> = (0..rows * cols)
            .map(|_| rng.random_range(-scale..scale))
            .collect();
        QTensor::quantize(
            &Tensor::from_vec(data, (rows, cols), &dev)?,
            GgmlDType::Q8_0,
        )
    };
    let mut tensors: Vec<(String, QTensor)> =
        vec![("token_embd.weight".into(), mat(vocab, h, 1.0)?)];
    let ones = |n: usize| {
        QTensor::quantize(
            &Tensor::ones(n, candle_core::DType::F32, &dev)?,
            GgmlDType::F32,
        )
    };
    tensors.push(("output_norm.weight".into(), ones(h)?));
    for i in 0..LAYERS {
        let p = |s: &str| format!("blk.{i}.{s}.weight");
        tensors.push((p("attn_norm"), ones(h)?));
        tensors.push((p("ffn_norm"), ones(h)?));
        tensors.push((p("attn_q"), mat(h, h, 0.3)?));
        tensors.push((p("attn_k"), mat(kv, h, 0.3)?));
        tensors.push((p("attn_v"), mat(kv, h, 0.3)?));
        tensors.push((p("attn_output"), mat(h, h, 0.3)?));
        tensors.push((p("ffn_gate"), mat(ffn, h, 0.3)?));
        tensors.push((p("ffn_up"), mat(ffn, h, 0.3)?));
        tensors.push((p("ffn_down"), mat(h, ffn, 0.3)?));
    }

    let strings = |v: &[String]| Value::Array(v.iter().map(|s| Value::String(s.clone())).collect());
    let template = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
    let metadata: Vec<(&str, Value)> = vec![
        ("general.architecture", Value::String("llama".into())),
        ("general.name", Value::String("tiny-random-llama".into())),
        ("llama.block_count", Value::U32(LAYERS as u32)),
        ("llama.context_length", Value::U32(CONTEXT as u32)),
        ("llama.embedding_length", Value::U32(h as u32)),
        ("llama.feed_forward_length", Value::U32(ffn as u32)),
        ("llama.attention.head_count", Value::U32(heads as u32)),
        ("llama.attention.head_count_kv", Value::U32(kv_heads as u32)),
        ("llama.rope.freq_base", Value::F32(10_000.0)),
        ("llama.rope.dimension_count", Value::U32((h / heads) as u32)),
        ("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-5)),
        ("llama.vocab_size", Value::U32(vocab as u32)),
        ("tokenizer.ggml.model", Value::String("gpt2".into())),
        ("tokenizer.ggml.pre", Value::String("smollm".into())),
        ("tokenizer.ggml.tokens", strings(&tokens)),
        (
            "tokenizer.ggml.token_type",
            Value::Array(types.into_iter().map(Value::I32).collect()),
        ),
        ("tokenizer.ggml.merges", strings(&merges)),
        ("tokenizer.ggml.bos_token_id", Value::U32(1)),
        ("tokenizer.ggml.eos_token_id", Value::U32(2)),
        ("tokenizer.chat_template", Value::String(template.into())),
    ];
    let md: Vec<(&str, &Value)> = metadata.iter().map(|(k, v)| (*k, v)).collect();
    let ts: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let mut f = std::fs::File::create(path)?;
    gguf_file::write(&mut f, &md, &ts)
}
