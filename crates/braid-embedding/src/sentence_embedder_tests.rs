//! A tiny random-weight sentence-transformers directory, written at test time, run through
//! the real loader and forward. The real model's accuracy is checked end to end against an
//! independent reference (tests/e2e/test_embeddings.py).

use super::*;
use candle_core::{DType, Device, Tensor};
use serde_json::json;
use std::collections::HashMap;
use std::path::Path;

const HIDDEN: usize = 64;
const FFN: usize = 128;
const WORDS: [&str; 12] = [
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "weather", "is", "lovely", "today", ".",
    "sun",
];

fn write_json(dir: &Path, file: &str, value: serde_json::Value) {
    let path = dir.join(file);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, serde_json::to_string_pretty(&value).unwrap()).unwrap();
}

fn tokenizer_json() -> serde_json::Value {
    let vocab: serde_json::Map<_, _> = WORDS
        .iter()
        .enumerate()
        .map(|(i, w)| (w.to_string(), json!(i)))
        .collect();
    json!({
        "version": "1.0",
        // As all-MiniLM-L6-v2's file: settings braid must turn off.
        "truncation": {"direction": "Right", "max_length": 4, "strategy": "LongestFirst", "stride": 0},
        "padding": {"strategy": {"Fixed": 16}, "direction": "Right", "pad_to_multiple_of": null,
                    "pad_id": 0, "pad_type_id": 0, "pad_token": "[PAD]"},
        "added_tokens": [],
        "normalizer": {"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true,
                       "strip_accents": null, "lowercase": true},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                       {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
            "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {
                "[CLS]": {"id": "[CLS]", "ids": [2], "tokens": ["[CLS]"]},
                "[SEP]": {"id": "[SEP]", "ids": [3], "tokens": ["[SEP]"]}
            }
        },
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": true},
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 100, "vocab": vocab}
    })
}

/// Writes a 2-layer BERT of hidden size 8 with random weights and the sentence-transformers
/// files around it.
/// Normal values of deviation `std` (Box-Muller on a fixed LCG), the same on every run so
/// that the agreement test's bound is met or missed by the code alone.
fn normal(state: &mut u64, std: f32, shape: &[usize]) -> Tensor {
    let mut uniform = || {
        *state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((*state >> 40) as f32 + 0.5) / (1u64 << 24) as f32
    };
    let n: usize = shape.iter().product();
    let values: Vec<f32> = (0..n)
        .map(|_| {
            let (u, v) = (uniform(), uniform());
            std * (-2.0 * u.ln()).sqrt() * (std::f32::consts::TAU * v).cos()
        })
        .collect();
    Tensor::from_vec(values, shape, &Device::Cpu).unwrap()
}

fn tiny_model(dir: &Path) {
    let mut state = 0x5eed_u64;
    write_json(
        dir,
        "config.json",
        json!({
            "architectures": ["BertModel"], "model_type": "bert", "hidden_act": "gelu",
            "hidden_size": HIDDEN, "intermediate_size": FFN, "num_attention_heads": 4,
            "num_hidden_layers": 2, "max_position_embeddings": 32, "type_vocab_size": 2,
            "vocab_size": WORDS.len(), "layer_norm_eps": 1e-12, "pad_token_id": 0,
            "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
            "initializer_range": 0.02, "position_embedding_type": "absolute"
        }),
    );
    write_json(
        dir,
        "modules.json",
        json!([
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}
        ]),
    );
    write_json(
        dir,
        "1_Pooling/config.json",
        json!({"word_embedding_dimension": HIDDEN, "pooling_mode_mean_tokens": true}),
    );
    write_json(
        dir,
        "sentence_bert_config.json",
        json!({"max_seq_length": 12, "do_lower_case": false}),
    );
    write_json(dir, "tokenizer.json", tokenizer_json());
    let dev = Device::Cpu;
    let mut t: HashMap<String, Tensor> = HashMap::new();
    let mut rand = |name: String, shape: &[usize]| {
        let v = normal(&mut state, 0.5, shape);
        t.insert(name, v);
    };
    rand(
        "embeddings.word_embeddings.weight".into(),
        &[WORDS.len(), HIDDEN],
    );
    rand(
        "embeddings.position_embeddings.weight".into(),
        &[32, HIDDEN],
    );
    rand(
        "embeddings.token_type_embeddings.weight".into(),
        &[2, HIDDEN],
    );
    let norm = |t: &mut HashMap<String, Tensor>, name: &str| {
        t.insert(
            format!("{name}.weight"),
            Tensor::ones(HIDDEN, DType::F32, &dev).unwrap(),
        );
        t.insert(
            format!("{name}.bias"),
            Tensor::zeros(HIDDEN, DType::F32, &dev).unwrap(),
        );
    };
    norm(&mut t, "embeddings.LayerNorm");
    for l in 0..2 {
        let p = format!("encoder.layer.{l}");
        let linear = |t: &mut HashMap<String, Tensor>,
                      state: &mut u64,
                      name: String,
                      out: usize,
                      inp: usize| {
            t.insert(format!("{name}.weight"), normal(state, 0.3, &[out, inp]));
            t.insert(format!("{name}.bias"), normal(state, 0.1, &[out]));
        };
        for w in ["query", "key", "value"] {
            linear(
                &mut t,
                &mut state,
                format!("{p}.attention.self.{w}"),
                HIDDEN,
                HIDDEN,
            );
        }
        linear(
            &mut t,
            &mut state,
            format!("{p}.attention.output.dense"),
            HIDDEN,
            HIDDEN,
        );
        linear(
            &mut t,
            &mut state,
            format!("{p}.intermediate.dense"),
            FFN,
            HIDDEN,
        );
        linear(&mut t, &mut state, format!("{p}.output.dense"), HIDDEN, FFN);
        norm(&mut t, &format!("{p}.attention.output.LayerNorm"));
        norm(&mut t, &format!("{p}.output.LayerNorm"));
    }
    candle_core::safetensors::save(&t, dir.join("model.safetensors")).unwrap();
}

fn loaded() -> (tempfile::TempDir, SentenceEmbedder) {
    let dir = tempfile::tempdir().unwrap();
    tiny_model(dir.path());
    let m = SentenceEmbedder::load(dir.path()).unwrap();
    (dir, m)
}

#[test]
fn loads_with_the_directorys_pooling_and_cut() {
    let (_dir, m) = loaded();
    assert_eq!(m.dimensions(), HIDDEN);
    assert_eq!(m.max_tokens(), 12);
    assert_eq!(m.layout().pooling, crate::Pooling::Mean);
    assert!(m.layout().normalize);
}

#[test]
fn tokenizing_adds_the_special_tokens_and_cuts_at_either_end() {
    let (_dir, m) = loaded();
    // The tokenizer file's own 4-token cut and 16-token padding are off.
    let ids = m
        .tokenize("The weather is lovely today.", Keep::First(100))
        .unwrap();
    assert_eq!(ids, vec![2, 5, 6, 7, 8, 9, 10, 3]);
    assert_eq!(
        m.tokenize("the weather is lovely", Keep::First(4)).unwrap(),
        vec![2, 5, 6, 3]
    );
    assert_eq!(
        m.tokenize("the weather is lovely", Keep::Last(4)).unwrap(),
        vec![2, 7, 8, 3]
    );
    // Never past max_seq_length.
    let long = "sun ".repeat(40);
    assert_eq!(m.tokenize(&long, Keep::First(1000)).unwrap().len(), 12);
}

#[test]
fn vectors_have_unit_length_and_do_not_depend_on_the_batch() {
    let (_dir, m) = loaded();
    let texts: Vec<Vec<u32>> = [
        "sun",
        "the weather is lovely today.",
        "the sun is lovely",
        ".",
    ]
    .iter()
    .map(|t| m.tokenize(t, Keep::First(12)).unwrap())
    .collect();
    let refs: Vec<&[u32]> = texts.iter().map(|t| t.as_slice()).collect();
    let together = m.embed(&refs).unwrap();
    for (i, t) in refs.iter().enumerate() {
        let alone = m.embed(&[t]).unwrap().remove(0);
        let norm: f32 = alone.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "text {i}: norm {norm}");
        assert_eq!(alone, together[i], "text {i} differs when batched");
    }
    // Different texts, different vectors.
    assert_ne!(together[0], together[1]);
}

/// braid's forward (bf16 products, texts stacked) against candle-transformers' `BertModel`
/// in f32 on the same weights, each text alone, pooled and normalised alike.
#[test]
fn vectors_agree_with_candles_bert() {
    use candle_nn::VarBuilder;
    use candle_transformers::models::bert::{BertModel, Config};
    let (dir, m) = loaded();
    let config: Config = serde_json::from_value(m.layout().bert_config.clone()).unwrap();
    let tensors =
        candle_core::safetensors::load(dir.path().join("model.safetensors"), &Device::Cpu).unwrap();
    let bert = BertModel::load(
        VarBuilder::from_tensors(tensors, DType::F32, &Device::Cpu),
        &config,
    )
    .unwrap();
    let texts: Vec<Vec<u32>> = [
        "sun",
        "the weather is lovely today.",
        "the sun is lovely . sun sun the",
    ]
    .iter()
    .map(|t| m.tokenize(t, Keep::First(12)).unwrap())
    .collect();
    let refs: Vec<&[u32]> = texts.iter().map(|t| t.as_slice()).collect();
    let ours = m.embed(&refs).unwrap();
    for (ids, got) in texts.iter().zip(ours) {
        let input = Tensor::new(ids.as_slice(), &Device::Cpu)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        let hidden = bert
            .forward(&input, &input.zeros_like().unwrap(), None)
            .unwrap();
        let rows: Vec<f32> = hidden.flatten_all().unwrap().to_vec1().unwrap();
        let mut want = crate::Pooling::Mean.pool(&rows, ids.len(), HIDDEN);
        crate::pooling::normalize(&mut want);
        let cosine: f32 = got.iter().zip(&want).map(|(a, b)| a * b).sum();
        assert!(
            cosine >= 0.9999,
            "{ids:?}: cosine {cosine} with candle's forward"
        );
        assert!(cosine < 1.0 + 1e-6);
    }
}

#[test]
fn a_missing_file_is_named_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    tiny_model(dir.path());
    std::fs::remove_file(dir.path().join("model.safetensors")).unwrap();
    let err = SentenceEmbedder::load(dir.path())
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("model.safetensors") && err.contains("fetch-model.sh"),
        "{err}"
    );
    let err = SentenceEmbedder::load(&dir.path().join("nowhere"))
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("nowhere"), "{err}");
}

#[test]
fn other_models_are_refused_by_name() {
    let cases: [(&str, serde_json::Value, &str); 3] = [
        (
            "1_Pooling/config.json",
            json!({"word_embedding_dimension": HIDDEN, "pooling_mode_max_tokens": true}),
            "`max`",
        ),
        (
            "modules.json",
            json!([{"path": "", "type": "sentence_transformers.models.Transformer"},
                   {"path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                   {"path": "2_Dense", "type": "sentence_transformers.models.Dense"}]),
            "Dense",
        ),
        (
            "config.json",
            json!({"model_type": "xlm-roberta", "hidden_size": HIDDEN}),
            "xlm-roberta",
        ),
    ];
    for (file, value, named) in cases {
        let dir = tempfile::tempdir().unwrap();
        tiny_model(dir.path());
        write_json(dir.path(), file, value);
        let err = SentenceEmbedder::load(dir.path())
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains(named) && err.contains("not a model braid can embed"),
            "{file}: {err}"
        );
    }
}
