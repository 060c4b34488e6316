//! Sampled tokens' log-probabilities in the two shapes OpenAI uses, the legacy parallel arrays
//! of /v1/completions and the per-token objects of /v1/chat/completions, and the prompt's in
//! vLLM's `prompt_logprobs` shape.

use crate::openai_types::{
    ChatLogprobs, ChatTokenLogprob, CompletionLogprobs, PromptLogprob, PromptLogprobs, TopLogprob,
};
use braid_model::Sampled;
use braid_text::Tokenizer;
use std::collections::BTreeMap;

/// A token's text as OpenAI shows it: the text when its bytes are valid UTF-8, else
/// `bytes:\xe2\x80` (part of a character), so distinct tokens never look alike.
pub fn token_text(tokenizer: &Tokenizer, id: u32) -> String {
    let bytes = tokenizer.token_bytes(id);
    match std::str::from_utf8(bytes) {
        Ok(s) => s.to_string(),
        Err(_) => bytes.iter().fold(String::from("bytes:"), |mut out, b| {
            out.push_str(&format!("\\x{b:02x}"));
            out
        }),
    }
}

/// JSON has no -inf; OpenAI reports impossible tokens as -9999.
fn finite(lp: f32) -> f32 {
    if lp.is_nan() {
        -9999.0
    } else {
        lp.max(-9999.0)
    }
}

/// Builds legacy logprobs token by token; `text_offset` counts characters of the token texts
/// before each token.
#[derive(Default)]
pub struct CompletionLogprobsBuilder {
    offset: usize,
}

impl CompletionLogprobsBuilder {
    /// A token without a logprob is a prompt's first: OpenAI shows it with nulls.
    pub fn build<'a>(
        &mut self,
        tokenizer: &Tokenizer,
        tokens: impl IntoIterator<Item = &'a Sampled>,
    ) -> CompletionLogprobs {
        let mut out = CompletionLogprobs::default();
        for s in tokens {
            let text = token_text(tokenizer, s.token);
            out.text_offset.push(self.offset);
            self.offset += text.chars().count();
            let mut top: BTreeMap<String, f32> = s
                .top
                .iter()
                .map(|&(id, lp)| (token_text(tokenizer, id), finite(lp)))
                .collect();
            if let Some(lp) = s.logprob {
                top.entry(text.clone()).or_insert(finite(lp));
            }
            out.tokens.push(text);
            out.token_logprobs.push(s.logprob.map(finite));
            out.top_logprobs.push(s.logprob.is_some().then_some(top));
        }
        out
    }
}

pub fn chat_logprobs(tokenizer: &Tokenizer, tokens: &[Sampled]) -> ChatLogprobs {
    let entry = |id: u32| {
        (
            token_text(tokenizer, id),
            tokenizer.token_bytes(id).to_vec(),
        )
    };
    ChatLogprobs {
        content: tokens
            .iter()
            .map(|s| {
                let (token, bytes) = entry(s.token);
                ChatTokenLogprob {
                    token,
                    logprob: finite(s.logprob.unwrap_or(f32::NEG_INFINITY)),
                    bytes,
                    top_logprobs: s
                        .top
                        .iter()
                        .map(|&(id, logprob)| {
                            let (token, bytes) = entry(id);
                            TopLogprob {
                                token,
                                logprob: finite(logprob),
                                bytes,
                            }
                        })
                        .collect(),
                }
            })
            .collect(),
    }
}

/// A scored prompt in vLLM's shape: each token's own entry (with its rank) and its `top`
/// most likely alternatives (ranks 1 to `top`), keyed by token id; null for the first token.
pub fn prompt_logprobs(tokenizer: &Tokenizer, scored: &[Sampled], top: usize) -> PromptLogprobs {
    let entry = |id: u32, logprob: f32, rank: u32| {
        let decoded_token = token_text(tokenizer, id);
        (
            id.to_string(),
            PromptLogprob {
                logprob: finite(logprob),
                rank,
                decoded_token,
            },
        )
    };
    scored
        .iter()
        .map(|s| {
            let logprob = s.logprob?;
            let mut out: BTreeMap<String, PromptLogprob> = s
                .top
                .iter()
                .take(top)
                .zip(1..)
                .map(|(&(id, lp), rank)| entry(id, lp, rank))
                .collect();
            let (key, own) = entry(s.token, logprob, s.rank.unwrap_or(1));
            out.insert(key, own);
            Some(out)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_characters_are_shown_as_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tiny.gguf");
        braid_model::tiny_gguf::write(&path, 1).unwrap();
        let model = braid_model::LoadedModel::load(&path).unwrap();
        let id = |b: u8| {
            (0..model.tokenizer.vocab_size() as u32)
                .find(|&i| model.tokenizer.token_bytes(i) == [b])
                .unwrap()
        };
        assert_eq!(token_text(&model.tokenizer, id(b'a')), "a");
        assert_eq!(token_text(&model.tokenizer, id(0xe2)), "bytes:\\xe2");
    }
}
