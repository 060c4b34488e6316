//! The byte-level BPE vocabulary of braid's tiny test models, so that tests of the text side
//! (tokenizing, constraints, tool calls) and the tiny GGUFs of braid-model use one tokenizer:
//! the three ChatML specials, one token per byte, a few merges and a ChatML template.

use crate::Tokenizer;
use candle_core::quantized::gguf_file::{Content, Value, VersionedMagic};

pub const SPECIAL_TOKENS: [&str; 3] = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"];

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

struct Vocabulary {
    tokens: Vec<String>,
    merges: Vec<String>,
    types: Vec<i32>,
}

/// The three ChatML specials (ids 0–2), then one token per byte, then a few merged tokens.
fn vocabulary() -> Vocabulary {
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
    let mut types = vec![3i32; SPECIAL_TOKENS.len()];
    types.resize(tokens.len(), 1);
    Vocabulary {
        tokens,
        merges,
        types,
    }
}

const CHAT_TEMPLATE: &str = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

/// How many tokens the vocabulary has.
pub fn size() -> usize {
    vocabulary().tokens.len()
}

/// The `tokenizer.*` keys of a GGUF holding this vocabulary (BOS 1, EOS 2).
pub fn metadata() -> Vec<(String, Value)> {
    let Vocabulary {
        tokens,
        merges,
        types,
    } = vocabulary();
    let strings = |v: &[String]| Value::Array(v.iter().map(|s| Value::String(s.clone())).collect());
    vec![
        ("tokenizer.ggml.model".into(), Value::String("gpt2".into())),
        ("tokenizer.ggml.pre".into(), Value::String("smollm".into())),
        ("tokenizer.ggml.tokens".into(), strings(&tokens)),
        (
            "tokenizer.ggml.token_type".into(),
            Value::Array(types.into_iter().map(Value::I32).collect()),
        ),
        ("tokenizer.ggml.merges".into(), strings(&merges)),
        ("tokenizer.ggml.bos_token_id".into(), Value::U32(1)),
        ("tokenizer.ggml.eos_token_id".into(), Value::U32(2)),
        (
            "tokenizer.chat_template".into(),
            Value::String(CHAT_TEMPLATE.into()),
        ),
    ]
}

/// The tokenizer of this vocabulary, read from its metadata as from a GGUF.
pub fn tokenizer() -> Tokenizer {
    let content = Content {
        magic: VersionedMagic::GgufV3,
        metadata: metadata().into_iter().collect(),
        tensor_infos: Default::default(),
        tensor_data_offset: 0,
    };
    Tokenizer::from_gguf(&content).expect("the tiny vocabulary is a valid tokenizer")
}
