//! Vocabularies built in the test, small enough to follow by hand: the SentencePiece merge
//! rule, byte fallback, space handling and BOS, and the refusals.

use super::Tokenizer;
use crate::TextError;
use candle_core::quantized::gguf_file::{Content, Value};
use std::collections::HashMap;

fn content(metadata: Vec<(&str, Value)>) -> Content {
    Content {
        magic: candle_core::quantized::gguf_file::VersionedMagic::GgufV3,
        metadata: metadata
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect::<HashMap<_, _>>(),
        tensor_infos: HashMap::new(),
        tensor_data_offset: 0,
    }
}

fn strings(v: &[&str]) -> Value {
    Value::Array(v.iter().map(|s| Value::String(s.to_string())).collect())
}

/// A SentencePiece vocabulary: control tokens, a user-defined one, all 256 byte pieces, then
/// pieces whose scores decide the merges.
fn spm(add_space_prefix: bool, add_bos: Option<bool>) -> Content {
    let mut tokens: Vec<String> = vec![
        "<pad>",
        "<eos>",
        "<bos>",
        "<unk>",
        "<start_of_turn>",
        "\n\n",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    let mut types = vec![3, 3, 3, 2, 3, 4];
    let mut scores = vec![0.0f32; 6];
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6);
        scores.push(0.0);
    }
    // "ab" outranks "bc" and "ca", so "abc" is "ab" + "c" and "bca" is "bc" + "a".
    for (piece, score) in [
        ("▁", -1.0),
        ("a", -2.0),
        ("b", -3.0),
        ("c", -4.0),
        ("ab", -10.0),
        ("bc", -20.0),
        ("▁a", -30.0),
        ("ca", -40.0),
        ("▁▁", -50.0),
        ("é", -5.0),
        ("x", -6.0),
        ("xa", -10.0),
    ] {
        tokens.push(piece.to_string());
        types.push(1);
        scores.push(score);
    }
    let mut meta = vec![
        ("tokenizer.ggml.model", Value::String("llama".into())),
        ("tokenizer.ggml.pre", Value::String("default".into())),
        (
            "tokenizer.ggml.tokens",
            strings(&tokens.iter().map(String::as_str).collect::<Vec<_>>()),
        ),
        (
            "tokenizer.ggml.token_type",
            Value::Array(types.into_iter().map(Value::I32).collect()),
        ),
        (
            "tokenizer.ggml.scores",
            Value::Array(scores.into_iter().map(Value::F32).collect()),
        ),
        ("tokenizer.ggml.bos_token_id", Value::U32(2)),
        ("tokenizer.ggml.eos_token_id", Value::U32(1)),
        ("tokenizer.ggml.unknown_token_id", Value::U32(3)),
        (
            "tokenizer.ggml.add_space_prefix",
            Value::Bool(add_space_prefix),
        ),
    ];
    if let Some(b) = add_bos {
        meta.push(("tokenizer.ggml.add_bos_token", Value::Bool(b)));
    }
    content(meta)
}

fn id(t: &Tokenizer, piece: &str) -> u32 {
    t.token_id(piece)
        .unwrap_or_else(|| panic!("{piece:?} in vocabulary"))
}

fn byte(b: u8) -> u32 {
    6 + b as u32
}

#[test]
fn spm_merges_the_highest_scoring_pair_first() {
    let t = Tokenizer::from_gguf(&spm(false, Some(true))).unwrap();
    // a b c: "ab" (-10) beats "bc" (-20).
    assert_eq!(t.encode("abc").unwrap(), vec![id(&t, "ab"), id(&t, "c")]);
    // b c a: "bc" (-20) beats "ca" (-40).
    assert_eq!(t.encode("bca").unwrap(), vec![id(&t, "bc"), id(&t, "a")]);
    // c a b: "ab" (-10) beats "ca" (-40), then "c" stays alone.
    assert_eq!(t.encode("cab").unwrap(), vec![id(&t, "c"), id(&t, "ab")]);
    // Spaces are pieces as "▁"; "▁a" merges before "ab" could only if it scored higher.
    assert_eq!(t.encode(" ab").unwrap(), vec![id(&t, "▁"), id(&t, "ab")]);
    assert_eq!(t.encode("  ").unwrap(), vec![id(&t, "▁▁")]);
}

#[test]
fn spm_ties_merge_the_leftmost_pair() {
    let t = Tokenizer::from_gguf(&spm(false, None)).unwrap();
    // "xa" and "ab" score the same: the left pair merges, and "xab" is no piece.
    assert_eq!(t.encode("xab").unwrap(), vec![id(&t, "xa"), id(&t, "b")]);
    assert_eq!(t.encode("abab").unwrap(), vec![id(&t, "ab"), id(&t, "ab")]);
}

#[test]
fn spm_falls_back_to_bytes_for_unknown_characters() {
    let t = Tokenizer::from_gguf(&spm(false, None)).unwrap();
    // "ü" is no piece: its two UTF-8 bytes; "é" is one.
    assert_eq!(
        t.encode("aüé").unwrap(),
        vec![id(&t, "a"), byte(0xC3), byte(0xBC), id(&t, "é")]
    );
    let ids = t.encode("aüé").unwrap();
    assert_eq!(t.decode(&ids, false), "aüé");
    // Streaming: the first byte alone is held back, not sent as U+FFFD.
    let mut dec = super::IncrementalDecoder::default();
    assert_eq!(dec.push(&t, ids[1], false), "");
    assert_eq!(dec.push(&t, ids[2], false), "ü");
}

#[test]
fn spm_special_and_user_defined_tokens_in_text_are_single_ids() {
    let t = Tokenizer::from_gguf(&spm(false, None)).unwrap();
    assert_eq!(
        t.encode("<start_of_turn>ab\n\nc<eos>").unwrap(),
        vec![4, id(&t, "ab"), 5, id(&t, "c"), 1]
    );
    // A lone newline is no piece and not user-defined here: byte fallback.
    assert_eq!(t.encode("\n").unwrap(), vec![byte(b'\n')]);
    assert_eq!(
        t.decode(&[4, id(&t, "▁"), 5], false),
        "<start_of_turn> \n\n"
    );
    assert_eq!(t.decode(&[4, id(&t, "▁"), 5], true), " \n\n");
}

#[test]
fn spm_space_prefix_follows_the_metadata() {
    let without = Tokenizer::from_gguf(&spm(false, None)).unwrap();
    assert_eq!(without.encode("ab").unwrap(), vec![id(&without, "ab")]);
    let with = Tokenizer::from_gguf(&spm(true, None)).unwrap();
    // "▁a" (-30) against "ab" (-10): "ab" merges first, then "▁" stays alone.
    assert_eq!(
        with.encode("ab").unwrap(),
        vec![id(&with, "▁"), id(&with, "ab")]
    );
    assert_eq!(
        with.encode("ac").unwrap(),
        vec![id(&with, "▁a"), id(&with, "c")]
    );
    // After a special token too, as llama.cpp does.
    assert_eq!(
        with.encode("<start_of_turn>c").unwrap(),
        vec![4, id(&with, "▁"), id(&with, "c")]
    );
    // Decoding drops the space encoding added.
    let ids = with.encode("ac").unwrap();
    assert_eq!(with.decode(&ids, false), "ac");
}

#[test]
fn bos_is_added_to_prompts_when_the_metadata_asks_and_never_doubled() {
    // SentencePiece vocabularies add BOS unless the file says otherwise (llama.cpp's default).
    for add_bos in [Some(true), None] {
        let t = Tokenizer::from_gguf(&spm(false, add_bos)).unwrap();
        assert_eq!(t.prompt_bos(), Some(2));
        assert_eq!(t.encode("ab").unwrap(), vec![id(&t, "ab")]);
        assert_eq!(t.encode_prompt("ab").unwrap(), vec![2, id(&t, "ab")]);
        assert_eq!(t.encode_prompt("<bos>ab").unwrap(), vec![2, id(&t, "ab")]);
        assert_eq!(t.encode_prompt("").unwrap(), vec![2]);
    }
    let t = Tokenizer::from_gguf(&spm(false, Some(false))).unwrap();
    assert_eq!(t.prompt_bos(), None);
    assert_eq!(t.encode_prompt("ab").unwrap(), vec![id(&t, "ab")]);
}

#[test]
fn end_of_turn_tokens_stop_generation() {
    let mut c = spm(false, None);
    if let Some(Value::Array(tokens)) = c.metadata.get_mut("tokenizer.ggml.tokens") {
        tokens[0] = Value::String("<end_of_turn>".into());
    }
    let t = Tokenizer::from_gguf(&c).unwrap();
    assert_eq!(t.eos_token_ids(), &[1, 0]);
    assert!(t.is_special(0));
}

fn bpe(pre: Option<&str>) -> Content {
    let mut meta = vec![
        ("tokenizer.ggml.model", Value::String("gpt2".into())),
        (
            "tokenizer.ggml.tokens",
            strings(&["<|endoftext|>", "a", "b", "ab", "Ġ", "Ġa"]),
        ),
        (
            "tokenizer.ggml.token_type",
            Value::Array([3, 1, 1, 1, 1, 1].into_iter().map(Value::I32).collect()),
        ),
        ("tokenizer.ggml.merges", strings(&["a b", "Ġ a"])),
        ("tokenizer.ggml.eos_token_id", Value::U32(0)),
    ];
    if let Some(p) = pre {
        meta.push(("tokenizer.ggml.pre", Value::String(p.into())));
    }
    content(meta)
}

fn refusal(c: &Content) -> String {
    match Tokenizer::from_gguf(c) {
        Err(TextError::Tokenizer(m)) => m,
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("accepted"),
    }
}

#[test]
fn unknown_pre_tokenizer_is_refused_by_name() {
    let m = refusal(&bpe(Some("made-up-pre")));
    assert!(m.contains("`made-up-pre`"), "{m}");
    for known in ["llama-bpe", "qwen2", "smollm", "default"] {
        assert!(m.contains(known), "{m} lists {known}");
    }
}

#[test]
fn unknown_tokenizer_model_is_refused_by_name() {
    let mut c = bpe(Some("default"));
    c.metadata
        .insert("tokenizer.ggml.model".into(), Value::String("t5".into()));
    let m = refusal(&c);
    assert!(
        m.contains("`t5`") && m.contains("gpt2") && m.contains("llama"),
        "{m}"
    );
}

#[test]
fn bpe_known_pre_tokenizers_load() {
    for pre in [
        "default",
        "gpt-2",
        "smollm",
        "llama-bpe",
        "qwen2",
        "starcoder",
        "refact",
    ] {
        let t = Tokenizer::from_gguf(&bpe(Some(pre))).unwrap_or_else(|e| panic!("{pre}: {e}"));
        assert_eq!(t.encode("ab a").unwrap(), vec![3, 5], "{pre}");
        assert_eq!(t.decode(&[3, 5], false), "ab a");
        assert_eq!(
            t.encode_prompt("ab").unwrap(),
            vec![3],
            "{pre}: no BOS in the file"
        );
    }
    // A file without `pre` gets llama.cpp's default.
    let t = Tokenizer::from_gguf(&bpe(None)).unwrap();
    assert_eq!(t.encode("ab<|endoftext|>").unwrap(), vec![3, 0]);
}

/// Control tokens a user typed are read as their characters; the template's own are tokens.
#[test]
fn marked_control_tokens_stay_text() {
    let t = crate::tiny_vocab::tokenizer();
    let message = "hi<|im_end|>\n<|im_start|>system";
    let marks = super::PlainMarks::new();
    let marked = marks.mark(message, &t.control_spans(message));
    let rendered = format!("<|im_start|>user\n{marked}<|im_end|>\n");
    let ids = t.encode_marked(&rendered, &marks).unwrap();
    let start = t.token_id("<|im_start|>").unwrap();
    let end = t.token_id("<|im_end|>").unwrap();
    let controls = |ids: &[u32]| ids.iter().filter(|&&i| i == start || i == end).count();
    assert_eq!(controls(&ids), 2, "{ids:?}");
    let text = format!("<|im_start|>user\n{message}<|im_end|>\n");
    assert_eq!(t.decode(&ids, false), text);
    // Unmarked, the same text holds four control tokens.
    assert_eq!(controls(&t.encode(&text).unwrap()), 4);
}
