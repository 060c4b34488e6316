//! A draft model (`--draft-model`): a smaller model with the same vocabulary guesses each
//! answer's next tokens, for the step to verify beside its decode.
//!
//! Where no text predicts the answer, only a model can guess it; a model several times smaller
//! guesses most of a small model's easy tokens at a fraction of a step. Where a text does
//! (the request's prediction, its prompt, a recent answer), that draft costs no pass and comes
//! first; the draft model drafts the rest. How it fits braid:
//! - **One block table for two pools.** The draft model's KV pool has exactly the target's
//!   blocks, and a sequence holds the same block ids in both. So the scheduler's block tables,
//!   prefix cache, copies and preemption serve the draft model unchanged, and one
//!   `--kv-cache-mb` pays for both (`EngineConfig::scheduler_config`).
//! - **It reads what the target reads, in the same step.** Every prompt slice the planner sized
//!   and every decode's token also go through the draft model. A long prompt therefore costs
//!   the draft model the same slices, inside the latency target's steps, never one long pause
//!   when its sequence first drafts; and a prefix the cache holds is in both pools.
//! - **Planned before it exists.** The planner sizes each sequence's draft by its acceptance
//!   (a placeholder of `--num-speculative-tokens` stands in), then the draft model runs one pass
//!   per drafted token of the longest draft, greedily, and the tokens are written in before the
//!   target's forward. The pass that reads the step's positions grows with them, like the
//!   target's work, and the cost model learns it as part of the step; each further pass is
//!   timed on its own, and the planner makes a deeper draft pay for it (`planner_drafts.rs`).
//!
//! Its cache may fall a position behind (a fully accepted draft's last token was never fed to
//! it) or hold a guess where the target kept another token; either only makes its next guesses
//! worse. The target verifies every drafted token, so the answers are the target's alone.

// A draft is the draft model's greedy guess.
use braid_model::sampling::argmax;
use braid_model::{BatchEntry, KvDtype, KvPool, LoadedModel, Workspace};
use braid_sched::{DraftSource, Scheduler, SeqId, StepPlan};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

pub struct DraftModel {
    model: Arc<LoadedModel>,
    kv: KvPool,
    ws: Workspace,
    /// Positions of each sequence whose keys and values the draft model holds.
    computed: HashMap<SeqId, usize>,
    /// Sequences longer than the draft model's context: they never draft.
    beyond_context: HashSet<SeqId>,
}

/// Why `draft` cannot draft for `target`, naming both vocabularies; `None` when it can (the
/// same tokens under the same ids).
pub fn vocabulary_mismatch(target: &LoadedModel, draft: &LoadedModel) -> Option<String> {
    let describe = |m: &LoadedModel| {
        format!(
            "{} ({}: {} tokens)",
            m.path.display(),
            m.config().name,
            m.tokenizer.vocab_size()
        )
    };
    let (t, d) = (&target.tokenizer, &draft.tokenizer);
    let difference = if t.vocab_size() != d.vocab_size() {
        Some("their sizes differ".to_string())
    } else {
        (0..t.vocab_size() as u32)
            .find(|&id| t.token_bytes(id) != d.token_bytes(id))
            .map(|id| {
                format!(
                    "token {id} is {:?} in the first and {:?} in the second",
                    String::from_utf8_lossy(t.token_bytes(id)),
                    String::from_utf8_lossy(d.token_bytes(id))
                )
            })
    };
    difference.map(|why| {
        format!(
            "the draft model must have the model's vocabulary, and it does not ({why}): model \
             {}, draft model {}",
            describe(target),
            describe(draft)
        )
    })
}

impl DraftModel {
    /// The draft model over a pool of `num_blocks` blocks, the target's count.
    pub fn new(
        model: Arc<LoadedModel>,
        block_size: usize,
        num_blocks: usize,
        dtype: KvDtype,
    ) -> Self {
        let kv = KvPool::with_dtype(model.config(), block_size, num_blocks, dtype);
        Self {
            model,
            kv,
            ws: Workspace::default(),
            computed: HashMap::new(),
            beyond_context: HashSet::new(),
        }
    }

    /// Whether sequence `id`, `len` tokens long, can have a draft of `tokens` now: the draft
    /// model has read it (never one beyond its context), and the draft fits its context.
    pub fn can_draft(&self, id: SeqId, len: usize, tokens: usize) -> bool {
        self.computed.contains_key(&id) && len + tokens <= self.model.config().context_length
    }

    /// Applies the step's block copies to the draft model's pool too.
    pub fn copy_blocks(&mut self, copies: &[(u32, u32)]) {
        for &(src, dst) in copies {
            self.kv.copy_block(src, dst);
        }
    }

    /// Seconds one pass over a single row takes, the fastest of three: what the planner
    /// expects a pass to cost before a step has run one. Run before serving (it writes block
    /// 0's first position).
    pub fn time_pass(&mut self) -> braid_model::Result<f64> {
        let mut best = f64::INFINITY;
        for _ in 0..3 {
            let started = Instant::now();
            self.guess(&[entry(&[0], 0, &[0], true, 1)])?;
            best = best.min(started.elapsed().as_secs_f64());
        }
        Ok(best)
    }

    /// Reads the step's positions and writes the planned drafts' tokens into the scheduler.
    /// `skip` names the sequences the draft model never follows (texts read for an embedding).
    /// Returns the passes run after the first (one per drafted token past each draft's first)
    /// and the seconds they took: the planner's cost of a deeper draft.
    pub fn run(
        &mut self,
        plan: &StepPlan,
        sched: &mut Scheduler,
        skip: impl Fn(SeqId) -> bool,
    ) -> braid_model::Result<(usize, f64)> {
        self.computed.retain(|id, _| sched.sequence(*id).is_some());
        self.beyond_context
            .retain(|id| sched.sequence(*id).is_some());
        for id in &plan.preempted {
            self.computed.remove(id);
        }
        let context = self.model.config().context_length;
        // The target's own positions of the step (not its drafted rows), from wherever the draft
        // model's cache of each sequence ends; the last row samples the first guess.
        let mut reads = Vec::new();
        for c in &plan.chunks {
            if skip(c.seq) || self.beyond_context.contains(&c.seq) {
                continue;
            }
            let end = c.start + c.len - c.drafted;
            let from = match self.computed.get(&c.seq) {
                Some(&done) if done <= c.start => done,
                // New (what the prefix cache gave it is in both pools) or reading again.
                _ => c.start,
            };
            if end > context {
                self.computed.remove(&c.seq);
                self.beyond_context.insert(c.seq);
                continue;
            }
            let seq = sched.sequence(c.seq).expect("a planned sequence");
            // Other sources' drafted rows are the target's alone.
            let guesses = if seq.draft_source == DraftSource::Model {
                c.drafted
            } else {
                0
            };
            if from < end {
                reads.push((c.seq, from, end, guesses));
            }
        }
        // Each drafting sequence's guesses so far, and where its next fed token goes.
        let mut drafts: Vec<(SeqId, usize, Vec<u32>)> = Vec::new();
        if !reads.is_empty() {
            let entries: Vec<BatchEntry> = reads
                .iter()
                .map(|&(id, from, end, drafted)| {
                    let seq = sched.sequence(id).expect("a planned sequence");
                    let tokens = &seq.tokens[from..end];
                    entry(tokens, from, &seq.block_table, drafted > 0, seq.prompt_len)
                })
                .collect();
            let mut guesses = self.guess(&entries)?.into_iter();
            for &(id, _, end, drafted) in &reads {
                self.computed.insert(id, end);
                if drafted > 0 {
                    let first = guesses.next().expect("a sampled row");
                    drafts.push((id, drafted, vec![first]));
                }
            }
        }
        // One pass per further guess, each feeding every draft's latest guess.
        let started = Instant::now();
        let mut passes = 0;
        loop {
            let feeding: Vec<usize> = (0..drafts.len())
                .filter(|&i| drafts[i].2.len() < drafts[i].1)
                .collect();
            if feeding.is_empty() {
                break;
            }
            passes += 1;
            let fed: Vec<[u32; 1]> = feeding
                .iter()
                .map(|&i| [*drafts[i].2.last().expect("a first guess")])
                .collect();
            let entries: Vec<BatchEntry> = feeding
                .iter()
                .zip(&fed)
                .map(|(&i, token)| {
                    let (id, _, guesses) = &drafts[i];
                    let seq = sched.sequence(*id).expect("a planned sequence");
                    // The first guess follows the sequence's last token.
                    let at = seq.tokens.len() + guesses.len() - 1;
                    entry(token, at, &seq.block_table, true, seq.prompt_len)
                })
                .collect();
            for (&i, guess) in feeding.iter().zip(self.guess(&entries)?) {
                let (id, _, guesses) = &mut drafts[i];
                let len = sched
                    .sequence(*id)
                    .expect("a planned sequence")
                    .tokens
                    .len();
                self.computed.insert(*id, len + guesses.len());
                guesses.push(guess);
            }
        }
        let secs = started.elapsed().as_secs_f64();
        for (id, _, guesses) in drafts {
            sched.fill_draft(id, &guesses);
        }
        Ok((passes, secs))
    }

    /// Runs a pass: the greedy guess of every sampled row, in batch order.
    fn guess(&mut self, entries: &[BatchEntry]) -> braid_model::Result<Vec<u32>> {
        let logits = self
            .model
            .model
            .forward(entries, &mut self.kv, &mut self.ws)?;
        let vocab = self.model.config().vocab_size;
        Ok(logits.chunks_exact(vocab).map(argmax).collect())
    }

    /// A verified draft of `id`'s decode chunk at `start` kept `accepted` of its tokens: the
    /// draft model's cache holds only what the sequence kept.
    pub fn verified(&mut self, id: SeqId, start: usize, accepted: usize) {
        if let Some(done) = self.computed.get_mut(&id) {
            *done = (*done).min(start + 1 + accepted);
        }
    }
}

/// A draft pass's rows of one sequence (whose prompt is `prompt_len` long): logits for the
/// last row if `sample`.
fn entry<'a>(
    tokens: &'a [u32],
    start: usize,
    block_table: &'a [u32],
    sample: bool,
    prompt_len: usize,
) -> BatchEntry<'a> {
    BatchEntry {
        tokens,
        start,
        block_table,
        sample,
        all_logits: false,
        hidden: false,
        prompt_len,
    }
}
