//! The model's own tokenizer, built from its GGUF metadata, giving the ids llama.cpp gives.
//!
//! A model reads whatever ids it is fed: a tokenizer that is almost right produces fluent
//! output from a slightly different prompt, which no test of the forward pass would notice.
//! So braid follows llama.cpp's `llama-vocab.cpp` step by step: special tokens written in the
//! text are cut out first ([`special`]), the rest goes to the vocabulary's own algorithm
//! (byte-level BPE with the family's pre-tokenizer in [`bpe`], or SentencePiece scores in
//! [`spm`]), and the metadata's `add_bos_token` and `add_space_prefix` are honoured as
//! llama.cpp reads them. Vocabularies or pre-tokenizers braid does not know are refused by
//! name instead of being approximated.
//!
//! Decoding does not go through `tokenizers`: each id maps to its raw bytes once, at load, so
//! streaming can concatenate bytes and cut only at whole UTF-8 characters.

mod bpe;
mod incremental;
mod plain_marks;
mod special;
mod spm;
#[cfg(test)]
mod tests;

pub use incremental::IncrementalDecoder;
pub use plain_marks::PlainMarks;

use crate::error::{Result, TextError};
use candle_core::quantized::gguf_file::{Content, Value};
use special::{Piece, SpecialTokens};
use std::collections::HashMap;

/// llama.cpp's token types (`tokenizer.ggml.token_type`).
const NORMAL: i32 = 1;
const UNKNOWN: i32 = 2;
const CONTROL: i32 = 3;
const USER_DEFINED: i32 = 4;
const BYTE: i32 = 6;

/// Texts llama.cpp treats as the end of a generation whatever the file says (its
/// `special_eog_ids`), and the fill-in-the-middle tokens it adds to them.
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];
const FIM_PAD_TEXTS: &[&str] = &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"];
const FIM_REP_TEXTS: &[&str] = &[
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
];
const FIM_SEP_TEXTS: &[&str] = &["<|file_sep|>"];

enum Model {
    Bpe(Box<bpe::Bpe>),
    Spm {
        spm: spm::Spm,
        add_space_prefix: bool,
    },
}

pub struct Tokenizer {
    model: Model,
    specials: SpecialTokens,
    /// Control tokens alone (not user-defined ones): what a user's text must not produce.
    controls: SpecialTokens,
    token_to_id: HashMap<String, u32>,
    token_bytes: Vec<Vec<u8>>,
    special: Vec<bool>,
    /// The first id of a `decode`d normal piece loses its leading space (SentencePiece
    /// vocabularies that add one when encoding).
    strip_leading_space: bool,
    eos_ids: Vec<u32>,
    bos_id: Option<u32>,
    add_bos: bool,
    named: NamedTokens,
}

/// The tokens the GGUF names for their roles, as Hugging Face's tokenizer config names
/// them: clients that tokenize on their own (lm-evaluation-harness) ask for these.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NamedTokens {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub pad: Option<u32>,
    pub unk: Option<u32>,
    /// Whether a prompt gets BOS in front (`tokenizer.ggml.add_bos_token`).
    pub add_bos: bool,
}

fn strings(ct: &Content, key: &str) -> Result<Option<Vec<String>>> {
    match ct.metadata.get(key) {
        None => Ok(None),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| v.to_string().cloned())
            .collect::<std::result::Result<Vec<_>, _>>()
            .map(Some)
            .map_err(|_| TextError::Tokenizer(format!("{key} is not an array of strings"))),
        Some(_) => Err(TextError::Tokenizer(format!("{key} is not an array"))),
    }
}

fn numbers<T>(ct: &Content, key: &str, f: impl Fn(&Value) -> Option<T>) -> Result<Option<Vec<T>>> {
    match ct.metadata.get(key) {
        None => Ok(None),
        Some(Value::Array(a)) => a
            .iter()
            .map(&f)
            .collect::<Option<Vec<_>>>()
            .map(Some)
            .ok_or_else(|| TextError::Tokenizer(format!("{key} holds a value of another type"))),
        Some(_) => Err(TextError::Tokenizer(format!("{key} is not an array"))),
    }
}

fn score(v: &Value) -> Option<f32> {
    v.to_f32()
        .ok()
        .or_else(|| v.to_i32().ok().map(|x| x as f32))
}

fn token_type(v: &Value) -> Option<i32> {
    v.to_i32()
        .ok()
        .or_else(|| v.to_u32().ok().map(|x| x as i32))
}

impl Tokenizer {
    pub fn from_gguf(ct: &Content) -> Result<Self> {
        let err = |e: String| TextError::Tokenizer(e);
        let meta = |key: &str| ct.metadata.get(key);
        let text = |key: &str| {
            meta(key)
                .and_then(|v| v.to_string().ok())
                .map(String::as_str)
        };
        let flag = |key: &str| meta(key).and_then(|v| v.to_bool().ok());
        let id = |key: &str| meta(key).and_then(|v| v.to_u32().ok());

        let tokens = strings(ct, "tokenizer.ggml.tokens")?
            .ok_or_else(|| err("tokenizer.ggml.tokens is missing".into()))?;
        let n = tokens.len();
        let mut types = numbers(ct, "tokenizer.ggml.token_type", token_type)?
            .unwrap_or_else(|| vec![NORMAL; n]);
        types.resize(n, NORMAL);
        let mut token_to_id = HashMap::with_capacity(n);
        for (i, t) in tokens.iter().enumerate() {
            token_to_id.insert(t.clone(), i as u32);
        }

        let kind = text("tokenizer.ggml.model").unwrap_or("");
        let (model, default_add_bos, spm_vocab) = match kind {
            "gpt2" => {
                let name = text("tokenizer.ggml.pre").unwrap_or("default");
                let pre = bpe::find_pre(name).ok_or_else(|| {
                    err(format!(
                        "unsupported pre-tokenizer `{name}` (tokenizer.ggml.pre); braid reads: {}",
                        bpe::supported_pre_names()
                    ))
                })?;
                let merges = strings(ct, "tokenizer.ggml.merges")?
                    .ok_or_else(|| err("tokenizer.ggml.merges is missing".into()))?;
                (
                    Model::Bpe(Box::new(bpe::Bpe::new(&tokens, &merges, pre).map_err(err)?)),
                    pre.add_bos,
                    false,
                )
            }
            "llama" => {
                let mut scores = numbers(ct, "tokenizer.ggml.scores", score)?.unwrap_or_default();
                scores.resize(n, 0.0);
                let unk = id("tokenizer.ggml.unknown_token_id").filter(|&u| (u as usize) < n);
                (
                    Model::Spm {
                        spm: spm::Spm::new(&token_to_id, scores, unk),
                        add_space_prefix: flag("tokenizer.ggml.add_space_prefix").unwrap_or(true),
                    },
                    true,
                    true,
                )
            }
            other => {
                return Err(err(format!(
                    "unsupported tokenizer model `{other}` (tokenizer.ggml.model); braid reads: \
                     gpt2 (byte-level BPE), llama (SentencePiece)"
                )))
            }
        };

        let eos_ids = end_of_generation(ct, &tokens, &token_to_id);
        // llama.cpp marks every end-of-generation token a control token, whatever its type.
        for &e in &eos_ids {
            types[e as usize] = CONTROL;
        }
        let of_types = |wanted: &[i32]| {
            SpecialTokens::new(
                tokens
                    .iter()
                    .zip(&types)
                    .filter(|(_, ty)| wanted.contains(ty))
                    .map(|(t, _)| (t.clone(), token_to_id[t]))
                    .collect(),
            )
            .map_err(err)
        };
        let specials = of_types(&[CONTROL, USER_DEFINED, UNKNOWN])?;
        let controls = of_types(&[CONTROL, UNKNOWN])?;

        let byte_map = bpe::unicode_to_byte();
        let token_bytes = tokens
            .iter()
            .zip(&types)
            .map(|(t, &ty)| match ty {
                UNKNOWN | CONTROL | USER_DEFINED => t.as_bytes().to_vec(),
                BYTE => t
                    .strip_prefix("<0x")
                    .and_then(|h| h.strip_suffix('>'))
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .map_or_else(Vec::new, |b| vec![b]),
                NORMAL if spm_vocab => t.replace('▁', " ").into_bytes(),
                NORMAL => t
                    .chars()
                    .map(|c| byte_map.get(&c).copied().unwrap_or(b'?'))
                    .collect(),
                // Unused and undefined pieces: llama.cpp writes nothing for them.
                _ => Vec::new(),
            })
            .collect();
        let special = types
            .iter()
            .map(|&ty| matches!(ty, CONTROL | UNKNOWN))
            .collect();

        let bos_id = id("tokenizer.ggml.bos_token_id").filter(|&b| (b as usize) < n);
        let add_bos = flag("tokenizer.ggml.add_bos_token").unwrap_or(default_add_bos);
        let in_vocab = |key: &str| id(key).filter(|&t| (t as usize) < n);
        let named = NamedTokens {
            bos: bos_id,
            eos: in_vocab("tokenizer.ggml.eos_token_id"),
            pad: in_vocab("tokenizer.ggml.padding_token_id"),
            unk: in_vocab("tokenizer.ggml.unknown_token_id"),
            add_bos,
        };
        let strip_leading_space = matches!(
            model,
            Model::Spm {
                add_space_prefix: true,
                ..
            }
        );
        Ok(Self {
            model,
            specials,
            controls,
            token_to_id,
            token_bytes,
            special,
            strip_leading_space,
            eos_ids,
            bos_id,
            add_bos,
            named,
        })
    }

    pub fn named_tokens(&self) -> NamedTokens {
        self.named
    }

    /// Token ids of `text` as it is, without BOS; special tokens written in the text
    /// (`<|im_start|>`, `<start_of_turn>`) become their single id.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        self.encode_pieces(self.specials.split(text))
    }

    /// Where control tokens (`<|im_start|>`, not user-defined ones) are written in `text`: a
    /// chat message's spans to [`PlainMarks::mark`].
    pub fn control_spans(&self, text: &str) -> Vec<std::ops::Range<usize>> {
        self.controls.spans(text)
    }

    /// [`encode`](Self::encode) of a rendered template in which `marks` enclose text a user
    /// wrote: the control tokens written there are read as plain text (see `plain_marks.rs`).
    pub fn encode_marked(&self, text: &str, marks: &PlainMarks) -> Result<Vec<u32>> {
        let (clean, plain) = marks.unmark(text);
        self.encode_pieces(self.specials.split_outside(&clean, &plain))
    }

    fn encode_pieces(&self, pieces: Vec<Piece>) -> Result<Vec<u32>> {
        let mut out = Vec::new();
        let mut after_special = true;
        for piece in pieces {
            match piece {
                Piece::Token(id) => {
                    out.push(id);
                    after_special = true;
                }
                Piece::Text(t) => {
                    match &self.model {
                        Model::Bpe(b) => b.encode(t, &mut out).map_err(TextError::Tokenizer)?,
                        Model::Spm {
                            spm,
                            add_space_prefix,
                        } => {
                            // llama.cpp prefixes a space to every stretch of text that starts
                            // the input or follows a special token, when the file asks for it.
                            let prefix = if *add_space_prefix && after_special {
                                "▁"
                            } else {
                                ""
                            };
                            let escaped = format!("{prefix}{}", t.replace(' ', "▁"));
                            spm.encode(&self.token_to_id, &escaped, &mut out);
                        }
                    }
                    after_special = false;
                }
            }
        }
        Ok(out)
    }

    /// Token ids of a prompt the model reads from its start: [`encode`](Self::encode) with BOS
    /// in front when the file asks for it (`tokenizer.ggml.add_bos_token`, Gemma), as
    /// llama.cpp's server does for a completion prompt, unless the text already begins with
    /// BOS (a chat template that writes `{{ bos_token }}`).
    pub fn encode_prompt(&self, text: &str) -> Result<Vec<u32>> {
        Ok(self.with_prompt_bos(self.encode(text)?))
    }

    /// `ids` with BOS in front as [`encode_prompt`](Self::encode_prompt) puts it.
    pub fn with_prompt_bos(&self, mut ids: Vec<u32>) -> Vec<u32> {
        if let Some(bos) = self.bos_id.filter(|_| self.add_bos) {
            if ids.first() != Some(&bos) {
                ids.insert(0, bos);
            }
        }
        ids
    }

    /// The id [`encode_prompt`](Self::encode_prompt) puts in front of a prompt, if any.
    pub fn prompt_bos(&self) -> Option<u32> {
        self.bos_id.filter(|_| self.add_bos)
    }

    /// Text of `ids`; bytes that do not form valid UTF-8 become U+FFFD.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> String {
        let mut bytes = Vec::new();
        for (i, &id) in ids.iter().enumerate() {
            if skip_special && self.is_special(id) {
                continue;
            }
            let piece = self.token_bytes(id);
            let piece = match piece {
                [b' ', rest @ ..] if i == 0 && self.strip_leading_space && !self.is_special(id) => {
                    rest
                }
                _ => piece,
            };
            bytes.extend_from_slice(piece);
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
        self.token_to_id.get(text).copied()
    }
}

/// llama.cpp's `special_eog_ids`: the file's EOS, EOT and EOM ids, its fill-in-the-middle pad,
/// repo and separator tokens (from the metadata, else found by text), and every token whose
/// text is a known end of turn. EOS comes first.
fn end_of_generation(ct: &Content, tokens: &[String], vocab: &HashMap<String, u32>) -> Vec<u32> {
    let n = tokens.len();
    let id = |key: &str| {
        ct.metadata
            .get(key)
            .and_then(|v| v.to_u32().ok())
            .filter(|&i| (i as usize) < n)
    };
    let by_text = |texts: &[&str]| texts.iter().find_map(|t| vocab.get(*t).copied());
    let mut ids: Vec<u32> = Vec::new();
    let mut add = |i: Option<u32>| {
        if let Some(i) = i {
            if !ids.contains(&i) {
                ids.push(i);
            }
        }
    };
    add(id("tokenizer.ggml.eos_token_id"));
    add(id("tokenizer.ggml.eot_token_id"));
    add(id("tokenizer.ggml.eom_token_id"));
    add(id("tokenizer.ggml.fim_pad_token_id").or_else(|| by_text(FIM_PAD_TEXTS)));
    add(id("tokenizer.ggml.fim_rep_token_id").or_else(|| by_text(FIM_REP_TEXTS)));
    add(id("tokenizer.ggml.fim_sep_token_id").or_else(|| by_text(FIM_SEP_TEXTS)));
    for t in EOG_TEXTS {
        add(vocab.get(*t).copied());
    }
    let has = |text: &str| ids.iter().any(|&i| tokens[i as usize] == text);
    // gpt-oss and Solar Open: `<|end|>` ends a message, not the generation.
    let drop_end = (has("<|return|>") && has("<|call|>")) || (has("<|calls|>") && has("<|flush|>"));
    // Gemma 4 and PLaMo 2: `</s>` is ordinary text.
    let drop_s = has("<|tool_response>") || has("<|plamo:eos|>");
    ids.retain(|&i| {
        let t = tokens[i as usize].as_str();
        !((drop_end && t == "<|end|>") || (drop_s && t == "</s>"))
    });
    ids
}
