//! One sequence, start to end, without a scheduler: what `braid generate`, `braid chat` and the
//! engine benchmark use, and the "alone" reference that batched results are tested against.

use crate::error::{ModelError, Result};
use crate::model::{BatchEntry, Workspace};
use crate::sampling::{Sampler, SamplingParams};
use crate::LoadedModel;
use braid_kernels::KvPool;

pub struct GenerateOptions {
    pub max_tokens: usize,
    pub params: SamplingParams,
    /// Prompt tokens read per forward; 0 reads the prompt in one piece.
    pub prefill_chunk: usize,
    pub stop_at_eos: bool,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        Self {
            max_tokens: 16,
            params: SamplingParams::greedy(),
            prefill_chunk: 0,
            stop_at_eos: true,
        }
    }
}

/// Generates up to `max_tokens` after `prompt`, calling `on_token` with each new id; it returns
/// false to stop early. Returns the generated ids.
pub fn generate(
    m: &LoadedModel,
    prompt: &[u32],
    opts: &GenerateOptions,
    mut on_token: impl FnMut(u32) -> bool,
) -> Result<Vec<u32>> {
    let cfg = m.config();
    let total = prompt.len() + opts.max_tokens;
    if prompt.is_empty() {
        return Err(ModelError::InvalidBatch("the prompt is empty".into()));
    }
    if total > cfg.context_length {
        return Err(ModelError::ContextOverflow {
            len: total,
            max: cfg.context_length,
        });
    }
    let block_size = 16;
    let blocks = total.div_ceil(block_size);
    let mut kv = KvPool::new(cfg, block_size, blocks);
    let table: Vec<u32> = (0..blocks as u32).collect();
    let mut ws = Workspace::default();
    let mut sampler = Sampler::new(opts.params.clone(), prompt);

    let chunk = if opts.prefill_chunk == 0 {
        prompt.len()
    } else {
        opts.prefill_chunk
    };
    let mut start = 0;
    let mut logits = Vec::new();
    while start < prompt.len() {
        let end = (start + chunk).min(prompt.len());
        let entry = BatchEntry {
            tokens: &prompt[start..end],
            start,
            block_table: &table,
            sample: end == prompt.len(),
            all_logits: false,
            hidden: false,
            prompt_len: prompt.len(),
        };
        let out = m.model.forward(&[entry], &mut kv, &mut ws)?;
        if entry.sample {
            logits = out.to_vec();
        }
        start = end;
    }
    let mut generated = Vec::new();
    let mut pos = prompt.len();
    while generated.len() < opts.max_tokens {
        let token = sampler.sample(&logits).token;
        generated.push(token);
        if (opts.stop_at_eos && m.tokenizer.eos_token_ids().contains(&token)) || !on_token(token) {
            break;
        }
        if generated.len() == opts.max_tokens {
            break;
        }
        let entry = BatchEntry {
            tokens: std::slice::from_ref(&token),
            start: pos,
            block_table: &table,
            sample: true,
            all_logits: false,
            hidden: false,
            prompt_len: prompt.len(),
        };
        logits = m.model.forward(&[entry], &mut kv, &mut ws)?.to_vec();
        pos += 1;
    }
    Ok(generated)
}
