//! The model's own tokenizer, built from its GGUF metadata, exactly as it was trained.
//!
//! candle's `TokenizerFromGguf` supplies the vocabulary, merges and special tokens, but for
//! GPT-2-style vocabularies it pre-tokenizes with a leading space and without SmolLM's
//! one-digit-per-token split, so "3.14" and " leading" come out as the wrong ids. braid replaces
//! the pre-tokenizer with the one the model's own `tokenizer.json` declares.
//!
//! Decoding does not go through `tokenizers`: each id maps to its raw bytes once, at load, so
//! streaming can concatenate bytes and cut only at whole UTF-8 characters.

use crate::error::{ModelError, Result};
use candle_core::quantized::gguf_file::{Content, Value};
use candle_core::quantized::tokenizer::TokenizerFromGguf;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::PreTokenizerWrapper;

pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    token_bytes: Vec<Vec<u8>>,
    special: Vec<bool>,
    eos_ids: Vec<u32>,
}

/// GPT-2's reversible map from bytes to printable characters, inverted: char → byte.
fn unicode_to_byte() -> std::collections::HashMap<char, u8> {
    let mut printable: Vec<u32> = (b'!' as u32..=b'~' as u32)
        .chain(0xA1..=0xAC)
        .chain(0xAE..=0xFF)
        .collect();
    let mut chars: Vec<u32> = printable.clone();
    let mut extra = 0;
    for b in 0..=255u32 {
        if !printable.contains(&b) {
            printable.push(b);
            chars.push(256 + extra);
            extra += 1;
        }
    }
    printable
        .into_iter()
        .zip(chars)
        .map(|(b, c)| (char::from_u32(c).expect("valid char"), b as u8))
        .collect()
}

impl Tokenizer {
    pub fn from_gguf(ct: &Content) -> Result<Self> {
        let err = |e: String| ModelError::Tokenizer(e);
        let mut inner = tokenizers::Tokenizer::from_gguf(ct)
            .map_err(|e| err(crate::error::candle_message(e)))?;
        let pre = ct
            .metadata
            .get("tokenizer.ggml.pre")
            .and_then(|v| v.to_string().ok())
            .map(String::as_str);
        match pre {
            Some("smollm") | Some("starcoder") | Some("refact") => {
                let digits: PreTokenizerWrapper = Digits::new(true).into();
                let bytes: PreTokenizerWrapper = ByteLevel::new(false, true, true).into();
                inner.with_pre_tokenizer(Some(Sequence::new(vec![digits, bytes])));
            }
            Some("gpt2") | Some("default") | None => {
                inner.with_pre_tokenizer(Some(ByteLevel::new(false, true, true)));
            }
            _ => {}
        }

        let tokens: Vec<String> = match ct.metadata.get("tokenizer.ggml.tokens") {
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| v.to_string().cloned().unwrap_or_default())
                .collect(),
            _ => return Err(err("tokenizer.ggml.tokens is missing".into())),
        };
        let types: Vec<u32> = match ct.metadata.get("tokenizer.ggml.token_type") {
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| {
                    v.to_i32()
                        .map(|x| x as u32)
                        .or_else(|_| v.to_u32())
                        .unwrap_or(1)
                })
                .collect(),
            _ => vec![1; tokens.len()],
        };
        let map = unicode_to_byte();
        let mut special = Vec::with_capacity(tokens.len());
        let token_bytes = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| {
                // 3 = control, 4 = user-defined: their text is literal, not byte-mapped.
                let literal = matches!(types.get(i), Some(3) | Some(4));
                special.push(matches!(types.get(i), Some(3)));
                if literal {
                    t.as_bytes().to_vec()
                } else {
                    t.chars()
                        .map(|c| map.get(&c).copied().unwrap_or(b'?'))
                        .collect()
                }
            })
            .collect();

        let id = |key: &str| ct.metadata.get(key).and_then(|v| v.to_u32().ok());
        let mut eos_ids: Vec<u32> = id("tokenizer.ggml.eos_token_id").into_iter().collect();
        for name in ["<|endoftext|>", "<|im_end|>", "<|eot_id|>", "</s>"] {
            if let Some(i) = tokens.iter().position(|t| t == name) {
                if special[i] && !eos_ids.contains(&(i as u32)) {
                    eos_ids.push(i as u32);
                }
            }
        }
        Ok(Self {
            inner,
            token_bytes,
            special,
            eos_ids,
        })
    }

    /// Token ids of `text`; special tokens written in the text (`<|im_start|>`) become their single id.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self
            .inner
            .encode(text, false)
            .map_err(|e| ModelError::Tokenizer(e.to_string()))?;
        Ok(enc.get_ids().to_vec())
    }

    /// Text of `ids`; bytes that do not form valid UTF-8 become U+FFFD.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> String {
        let mut bytes = Vec::new();
        for &id in ids {
            if !(skip_special && self.is_special(id)) {
                bytes.extend_from_slice(self.token_bytes(id));
            }
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }

    pub fn token_bytes(&self, id: u32) -> &[u8] {
        self.token_bytes
            .get(id as usize)
            .map_or(&[], |b| b.as_slice())
    }

    pub fn is_special(&self, id: u32) -> bool {
        self.special.get(id as usize).copied().unwrap_or(false)
    }

    /// Ids that end a generation: end of turn and end of text.
    pub fn eos_token_ids(&self) -> &[u32] {
        &self.eos_ids
    }

    pub fn vocab_size(&self) -> usize {
        self.token_bytes.len()
    }

    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.inner.token_to_id(text)
    }
}

/// Turns a stream of token ids into text without ever splitting a UTF-8 character: bytes of
/// an incomplete character are held until the token that completes it arrives.
#[derive(Default)]
pub struct IncrementalDecoder {
    pending: Vec<u8>,
}

impl IncrementalDecoder {
    pub fn push(&mut self, tokenizer: &Tokenizer, id: u32, skip_special: bool) -> String {
        if !(skip_special && tokenizer.is_special(id)) {
            self.pending.extend_from_slice(tokenizer.token_bytes(id));
        }
        self.take_complete()
    }

    fn take_complete(&mut self) -> String {
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    out.push_str(s);
                    self.pending.clear();
                    return out;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    out.push_str(
                        std::str::from_utf8(&self.pending[..valid]).expect("valid prefix"),
                    );
                    match e.error_len() {
                        // Incomplete character at the end: hold it for the next token.
                        None => {
                            self.pending.drain(..valid);
                            return out;
                        }
                        // Bytes no later token can complete: say so once and move on.
                        Some(bad) => {
                            out.push('\u{FFFD}');
                            self.pending.drain(..valid + bad);
                        }
                    }
                }
            }
        }
    }

    /// Whatever is still held, replacing an unfinished character with U+FFFD.
    pub fn finish(&mut self) -> String {
        String::from_utf8_lossy(&std::mem::take(&mut self.pending)).into_owned()
    }
}
