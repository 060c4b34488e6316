//! The step planner: who runs in the next engine step, and how much of each prompt.
//!
//! Decoding is memory-bound and prompt reading arithmetic-bound, so a step can carry a
//! slice of prompt almost for free next to the decodes, but a whole long prompt in one step
//! stops every stream that is mid-sentence. Each step is therefore built in this order:
//!
//! 1. **Every decoding sequence, one token each.** A decode that needs a new KV block when
//!    none is free preempts the most recently admitted running sequence (possibly itself):
//!    its blocks go back to the pool, it returns to the *front* of the queue and its prompt
//!    plus generated tokens are recomputed later. Youngest-first keeps the oldest streams
//!    moving, and recomputation loses nothing.
//! 2. **Prompts, the request read least first** (`prompt_shares.rs`): a request that has had
//!    fewer of its prompt tokens read goes before one that has had more, so a short request
//!    that arrives while a long one is read is read in the next step, and a request of many
//!    prompts counts as one. Ties keep prompts in progress (in admission order) before
//!    queued ones. Sequences preempted earlier go first of all: they had their turn and lost
//!    it only to memory. Queued sequences keep their relative order otherwise, and if one
//!    cannot be admitted, nobody queued behind it is.
//!
//! Prompt slices share what is left of `max_batched_tokens` after the decodes. When a
//! latency target is set and somebody decodes, each slice is also cut to the longest one
//! whose predicted step time (cost model, given everything already in the step) stays
//! under the target (or the share of it that the cost model's recent error leaves, see
//! `step_headroom.rs`); a target-limited slice shorter than `min_prefill_chunk` is not worth
//! its overhead and is skipped. When nobody decodes there is nobody to stall, and prompts
//! get the whole token cap.
//!
//! **Starvation.** A target can be so tight that no slice worth its overhead fits next to the
//! decodes. So the prompt that arrived first among those waiting longer than
//! `starvation_after` is guaranteed a slice anyway (within the token cap and the free KV
//! blocks) when the target leaves it less than `min_prefill_chunk`: as much as fits under the
//! target, at least one token; or `min_prefill_chunk` tokens when the decodes alone already
//! exceed the target. Measured in time rather than tokens, the step stays near the target on
//! a CPU where 16 prompt tokens cost more than the decodes (where a fixed 16-token slice made
//! steps far longer than a tight target); the overshoot the target tolerates is left to the
//! cost model's error (`step_headroom.rs`), not spent here as well (spent twice, it put the
//! decoders' ITL p99 over the tolerance: `braid bench interference`, the 2026-12-04 runs in
//! docs/benchmarks/HISTORY.md). One such
//! prompt per step, which still guarantees everyone progress, because once that prompt is read
//! the next starving one is the oldest (a closed queue does not hold it back). New prompts are admitted whenever a running slot and blocks are free, and
//! running sequences end (every sequence has a token limit), so the queue always drains.
//!
//! **Without chunked prefill** a prompt is read whole or not at all. It runs when it fits
//! the remaining token budget (cap and target). A prompt that cannot fit runs anyway, alone
//! among prompts (decodes still ride along), when nobody decodes or when it is starving;
//! only then may a step exceed `max_batched_tokens`. This is the baseline that stalls.
//!
//! **KV blocks.** A slice is scheduled only when the sequence's block table can grow to
//! cover it; new prompts are admitted only when blocks for their first slice are free (a
//! slice may shrink to fit them). A prompt in progress that cannot get a single block
//! preempts younger, not-yet-scheduled running sequences, so prompts that each hold part of
//! the pool cannot wait on one another forever. New prompts never preempt anybody.
//!
//! **Prefix caching** (when on). A new prompt is admitted with the longest chain of its full
//! blocks already in the cache (shared, reference counted) and reads only the rest; if it
//! then cannot be admitted after all, the blocks go straight back. After each step, blocks
//! that became full and computed (prompt or generated tokens) are registered. Preempted,
//! finished and cancelled sequences free their blocks as always: cached ones stay findable
//! until the pool needs them, so a preempted sequence usually finds its own prefix again.
//! Cached blocks nobody holds count as free, so none of the rules above change. The rules
//! live in `planner_prefix.rs`.
//!
//! **Embeddings** (`embedding_queue.rs`) are texts for a second model, read whole, with no
//! sequence and no KV blocks. They join a step the way a prompt slice does: as many of the
//! oldest texts as keep the predicted step under the target (the cost model has a term for
//! them), and at most `max_batched_tokens` padded tokens of them, counted apart from the
//! generation model's. Prompts and embeddings go in the order they arrived: when the oldest
//! waiting text came before every prompt still being read, embeddings are planned first,
//! otherwise after the prompts, so a bulk indexing job neither starves a chat's prompt nor
//! is starved by a stream of them. The oldest text waiting past `starvation_after` runs
//! anyway, as does the oldest text of a step that would otherwise be empty.
//!
//! `now` is only used for starvation and `first_scheduled`; the planner has no clock.

use std::collections::{HashMap, VecDeque};

use crate::block_allocator::BlockAllocator;
use crate::cache_events::CacheEvent;
use crate::cost_model::{CostModel, StepFeatures};
use crate::embedding_queue::{EmbedRequestId, EmbedText, EmbeddingBatch, EmbeddingQueue};
use crate::prefix_cache::{BlockHasher, PrefixCacheStats};
use crate::prompt_shares::PromptShares;
use crate::sequence::{FinishedSeq, SeqId, SeqState, Sequence, StopConditions};
use crate::step_headroom::StepHeadroom;

pub use crate::config::SchedulerConfig;
pub use crate::step_plan::{ScheduledChunk, StepPlan};

/// Owns every live sequence and the KV block pool; plans and commits engine steps.
#[derive(Debug, Clone)]
pub struct Scheduler {
    cfg: SchedulerConfig,
    allocator: BlockAllocator,
    cost: CostModel,
    seqs: HashMap<SeqId, Sequence>,
    /// Admitted sequences, oldest admission first; the last one is the preemption victim.
    running: Vec<SeqId>,
    /// Waiting and preempted sequences; the front is admitted next.
    waiting: VecDeque<SeqId>,
    total_preemptions: u64,
    hasher: BlockHasher,
    prefix_stats: PrefixCacheStats,
    headroom: StepHeadroom,
    shares: PromptShares,
    embeddings: EmbeddingQueue,
    /// Every sequence's drafts together, per source: where a new sequence's estimate starts.
    acceptance: [crate::DraftAcceptance; crate::DraftSource::COUNT],
    /// Seconds a draft model's pass takes, as measured (`Scheduler::observe_draft_passes`).
    draft_pass_secs: Option<f64>,
}

/// Running totals while one step is assembled.
struct StepBudget {
    used_tokens: usize,
    features: StepFeatures,
    decodes: usize,
    target_secs: Option<f64>,
    /// The starvation guarantee has not been handed out yet in this step.
    guarantee_left: bool,
    /// The prompt the guarantee is for: the oldest starving one.
    starving: Option<SeqId>,
}

impl Scheduler {
    /// A scheduler with the default (pessimistic) cost-model prior.
    ///
    /// # Panics
    /// If `cfg` is inconsistent (see [`SchedulerConfig::validate`]).
    pub fn new(cfg: SchedulerConfig) -> Self {
        Self::with_cost_model(cfg, CostModel::default())
    }

    /// A scheduler starting from a given cost model (e.g. a prior measured at startup).
    ///
    /// # Panics
    /// If `cfg` is inconsistent (see [`SchedulerConfig::validate`]).
    pub fn with_cost_model(cfg: SchedulerConfig, cost: CostModel) -> Self {
        if let Err(e) = cfg.validate() {
            panic!("invalid scheduler config: {e}");
        }
        Self {
            allocator: BlockAllocator::new(cfg.num_blocks),
            cfg,
            cost,
            seqs: HashMap::new(),
            running: Vec::new(),
            waiting: VecDeque::new(),
            total_preemptions: 0,
            hasher: BlockHasher::new(),
            prefix_stats: PrefixCacheStats::default(),
            headroom: StepHeadroom::default(),
            shares: PromptShares::default(),
            embeddings: EmbeddingQueue::default(),
            acceptance: Default::default(),
            draft_pass_secs: None,
        }
    }

    pub fn config(&self) -> &SchedulerConfig {
        &self.cfg
    }

    /// Queues a request that arrived at `now`, to end by `stop` (a bare token limit converts:
    /// no stop tokens). The caller has refused every request the planner could never run
    /// ([`SchedulerConfig::admits`]) and gives each its own id; both are only debug-asserted.
    pub fn add(&mut self, id: SeqId, prompt: Vec<u32>, stop: impl Into<StopConditions>, now: f64) {
        let stop = stop.into();
        debug_assert!(!self.seqs.contains_key(&id), "sequence id {id} is in use");
        debug_assert!(
            self.cfg.admits(prompt.len(), stop.max_new_tokens),
            "a request of {} prompt tokens and {} to generate can never run",
            prompt.len(),
            stop.max_new_tokens
        );
        self.seqs.insert(id, Sequence::new(id, prompt, stop, now));
        self.shares.add(id);
        self.waiting.push_back(id);
    }

    /// Queues a text for the embedding model (validated by the caller: non-empty, within the
    /// model's length).
    pub fn add_embedding(&mut self, text: EmbedText) {
        self.embeddings.push(text);
    }

    /// Forgets a request's texts still waiting to be embedded (its client left); how many.
    pub fn abort_embedding(&mut self, request: EmbedRequestId) -> usize {
        self.embeddings.remove_request(request)
    }

    /// Texts waiting to be embedded.
    pub fn num_embed_waiting(&self) -> usize {
        self.embeddings.len()
    }

    /// Makes waiting sequence `id` part of the same request as `first` (another prompt or
    /// choice of one request), whose prompt reading is shared with the others' as one
    /// request's (`prompt_shares.rs`).
    pub fn same_request(&mut self, id: SeqId, first: SeqId) {
        if self
            .seqs
            .get(&id)
            .is_some_and(|s| s.state == SeqState::Waiting)
        {
            self.shares.join(id, first);
        }
    }

    /// Makes waiting sequence `id` one whose prompt is scored (`echo` with `logprobs`): each of
    /// its prompt chunks asks for every row's logits, and it skips the prefix cache, since a
    /// cached prefix would leave those rows uncomputed.
    pub fn score_prompt(&mut self, id: SeqId) {
        if let Some(seq) = self.seqs.get_mut(&id) {
            if seq.state == SeqState::Waiting {
                seq.score_prompt = true;
            }
        }
    }

    /// Makes waiting sequence `id` (another choice of `leader`'s prompt, `n` > 1) wait until
    /// `leader` has read its prompt, then start from the prefix cache: the prompt is read once,
    /// its full blocks are shared and its last partial block is copied, so only the prompt's
    /// last token is computed again (for the logits of the first sample). Without prefix
    /// caching there is nothing to share and nothing changes.
    pub fn share_prompt(&mut self, id: SeqId, leader: SeqId) {
        if let Some(seq) = self.seqs.get_mut(&id) {
            if self.cfg.prefix_caching && seq.state == SeqState::Waiting {
                seq.shares_prompt_of = Some(leader);
            }
        }
    }

    /// Whether `id` still waits for the sequence whose prompt it shares.
    fn waits_for_shared_prompt(&self, id: SeqId) -> bool {
        let leader = self.seqs[&id]
            .shares_prompt_of
            .and_then(|l| self.seqs.get(&l));
        leader.is_some_and(|l| l.num_computed < l.prompt_len)
    }

    /// Ends `id` from outside a step (its client went away, or the server ended it: a stop
    /// string, its deadline): frees its blocks at once and forgets it. `false` if unknown.
    pub fn abort(&mut self, id: SeqId) -> bool {
        self.remove(id, SeqState::Cancelled).is_some()
    }

    /// Removes a sequence in any state, returning it with `state` set (`Finished` or
    /// `Cancelled`) and its blocks already freed.
    fn remove(&mut self, id: SeqId, state: SeqState) -> Option<Sequence> {
        let mut seq = self.seqs.remove(&id)?;
        self.shares.leave(id);
        self.allocator.free_table(&seq.block_table);
        seq.block_table.clear();
        seq.num_cached_blocks = 0;
        if let Some(i) = self.running.iter().position(|&r| r == id) {
            self.running.remove(i);
        } else if let Some(i) = self.waiting.iter().position(|&w| w == id) {
            self.waiting.remove(i);
        }
        seq.state = state;
        Some(seq)
    }

    /// Plans the next step; see the module docs for the rules. Allocates the blocks the
    /// step writes and performs any preemption, so the plan must be executed and then
    /// passed to [`Scheduler::commit`] before the next `plan`.
    pub fn plan(&mut self, now: f64) -> StepPlan {
        let mut plan = StepPlan::default();
        self.plan_decodes(&mut plan);
        self.plan_drafts(&mut plan);
        let decodes = plan.chunks.len();
        let mut budget = StepBudget {
            used_tokens: plan.num_tokens(),
            features: StepFeatures::of(&plan),
            decodes,
            target_secs: self
                .cfg
                .itl_target
                .filter(|_| decodes > 0)
                .map(|t| t.as_secs_f64() * self.headroom.share()),
            guarantee_left: true,
            starving: self.oldest_starving(now),
        };

        // Running prompts and queued sequences, least-read request first; ties keep running
        // prompts before queued ones, each in its own order.
        let mut candidates: Vec<(usize, bool, usize, SeqId)> = self
            .running
            .iter()
            .enumerate()
            .filter(|(_, id)| self.seqs[id].state == SeqState::Prefilling)
            .map(|(i, &id)| (self.shares.served(id), false, i, id))
            .chain(self.waiting.iter().enumerate().map(|(i, &id)| {
                // A sequence being recomputed after preemption lost a place it had: it keeps
                // its place at the front.
                let preempted = self.seqs[&id].state == SeqState::Preempted;
                let served = if preempted { 0 } else { self.shares.served(id) };
                (served, true, i, id)
            }))
            .collect();
        candidates.sort();
        let embed_first = self.embeddings.oldest_arrival().is_some_and(|text| {
            candidates
                .iter()
                .all(|&(_, _, _, id)| self.seqs[&id].arrival > text)
        });
        if embed_first {
            self.plan_embeddings(now, &mut budget, &mut plan);
        }
        // Once a queued sequence cannot be admitted, no queued one behind it is.
        let mut queue_open = true;
        for (_, queued, _, id) in candidates {
            if budget.used_tokens >= self.cfg.max_batched_tokens {
                break;
            }
            if queued {
                // The starving prompt is never held back by a closed queue: nobody else could
                // give it the guarantee.
                let open = queue_open || budget.starving == Some(id);
                if open && !self.admit(id, now, &mut budget, &mut plan) {
                    queue_open = false;
                }
            } else {
                self.continue_prompt(id, now, &mut budget, &mut plan);
            }
        }

        if !embed_first {
            self.plan_embeddings(now, &mut budget, &mut plan);
        }

        if !plan.is_empty() {
            plan.predicted_secs = Some(self.cost.predict(budget.features));
            plan.planned_to_secs = budget.target_secs;
        }
        plan
    }

    /// The texts this step embeds: the oldest that fit the target and the token cap (see the
    /// module docs).
    fn plan_embeddings(&mut self, now: f64, budget: &mut StepBudget, plan: &mut StepPlan) {
        let Some(oldest) = self.embeddings.oldest_arrival() else {
            return;
        };
        let (base, target, cap) = (
            budget.features,
            budget.target_secs,
            self.cfg.max_batched_tokens,
        );
        let cost = &self.cost;
        let fit = |tokens: usize| {
            tokens <= cap
                && target.is_none_or(|t| cost.predict(base.with_embed_tokens(tokens)) <= t)
        };
        let starving = now - oldest >= self.cfg.starvation_after.as_secs_f64();
        let batch = self
            .embeddings
            .take(fit, starving || plan.chunks.is_empty());
        budget.features.embed_tokens += batch.as_ref().map_or(0, EmbeddingBatch::tokens);
        plan.embeddings = batch;
    }

    /// The prompt the starvation guarantee goes to: of the prompts waiting longer than
    /// `starvation_after` (in progress or queued), the one that arrived first. By arrival, not
    /// by the fair order, so that a stream of new requests, each starving in turn, cannot
    /// keep it from an old one forever.
    fn oldest_starving(&self, now: f64) -> Option<SeqId> {
        let after = self.cfg.starvation_after.as_secs_f64();
        self.running
            .iter()
            .filter(|id| self.seqs[id].state == SeqState::Prefilling)
            .chain(
                self.waiting
                    .iter()
                    .filter(|&&id| !self.waits_for_shared_prompt(id)),
            )
            .map(|id| &self.seqs[id])
            .filter(|seq| seq.can_generate() && seq.age(now) >= after)
            .min_by(|a, b| a.arrival.total_cmp(&b.arrival))
            .map(|seq| seq.id)
    }

    /// Step 2 for a prompt in progress: its next slice, preempting younger sequences that are
    /// not in the step when its blocks run out.
    fn continue_prompt(
        &mut self,
        id: SeqId,
        now: f64,
        budget: &mut StepBudget,
        plan: &mut StepPlan,
    ) {
        if self.seqs[&id].state != SeqState::Prefilling || !self.seqs[&id].can_generate() {
            return; // preempted earlier in this pass, or nothing left to do
        }
        let want = self.slice_len(id, budget);
        if want.len == 0 {
            return;
        }
        let min_len = self.least_slice(&want);
        while self.block_limit(id) < min_len {
            if !self.preempt_younger_unscheduled(id, plan) {
                break;
            }
        }
        let len = want.len.min(self.block_limit(id));
        if len >= min_len {
            self.schedule_slice(id, len, want.starving, now, budget, plan);
        }
    }

    /// Step 2 for a queued sequence: admits it with its first slice. `false` when it cannot
    /// be admitted (no running slot, no blocks, no budget), which closes the queue for this
    /// step; a sequence that waits for its prompt's other choice, or was preempted in this
    /// step, is passed over without closing it.
    fn admit(&mut self, id: SeqId, now: f64, budget: &mut StepBudget, plan: &mut StepPlan) -> bool {
        if plan.preempted.contains(&id) {
            return false;
        }
        if self.running.len() >= self.cfg.max_num_seqs {
            return false;
        }
        if !self.seqs[&id].can_generate() || self.waits_for_shared_prompt(id) {
            // Preempted after a sample never committed, or held for its prompt's other
            // choice: either way it blocks nobody.
            return true;
        }
        let (reused, copy) = self.reuse_cached_prefix(id);
        let want = self.slice_len(id, budget);
        let min_len = self.least_slice(&want);
        let len = want.len.min(self.block_limit(id));
        if want.len == 0 || len < min_len {
            self.return_cached_prefix(id);
            return false;
        }
        self.count_prefix_lookup(id, reused, plan);
        plan.block_copies.extend(copy);
        let pos = self
            .waiting
            .iter()
            .position(|&w| w == id)
            .expect("queued id");
        self.waiting.remove(pos);
        self.running.push(id);
        self.seqs.get_mut(&id).expect("waiting id is live").state = SeqState::Prefilling;
        self.schedule_slice(id, len, want.starving, now, budget, plan);
        true
    }

    /// Step 1: one token for every decoding sequence, preempting the youngest when blocks
    /// run out.
    fn plan_decodes(&mut self, plan: &mut StepPlan) {
        let mut i = 0;
        while i < self.running.len() {
            let id = self.running[i];
            let seq = &self.seqs[&id];
            if seq.state != SeqState::Decoding || !seq.can_generate() {
                i += 1;
                continue;
            }
            let start = seq.num_computed;
            let mut preempted_self = false;
            while !self.grow_blocks(id, start + 1) {
                let victim = *self.running.last().expect("`id` itself is running");
                self.preempt(victim, plan);
                if victim == id {
                    preempted_self = true;
                    break;
                }
            }
            if preempted_self {
                break; // everyone younger is already preempted
            }
            plan.chunks.push(ScheduledChunk {
                seq: id,
                start,
                len: 1,
                sample: true,
                is_decode: true,
                all_logits: false,
                drafted: 0,
            });
            i += 1;
        }
    }

    /// How long a prompt slice `id` should get in this step, ignoring KV blocks.
    fn slice_len(&self, id: SeqId, b: &StepBudget) -> Slice {
        let seq = &self.seqs[&id];
        let start = seq.num_computed;
        let remaining = seq.num_uncomputed();
        let cap_left = self.cfg.max_batched_tokens.saturating_sub(b.used_tokens);
        let target_limit = match b.target_secs {
            Some(t) => self.cost.max_chunk_len(b.features, start, t, cap_left),
            None => cap_left,
        };
        let starving = b.guarantee_left && b.starving == Some(id);
        let budget = cap_left.min(target_limit);
        if !self.cfg.chunked_prefill {
            // A prompt that cannot fit runs only as the step's only prompt.
            let alone = b.features.prefill_tokens == 0;
            let len = if remaining <= budget || (alone && (b.decodes == 0 || starving)) {
                remaining
            } else {
                0
            };
            return Slice { len, starving };
        }
        let mut len = remaining.min(budget);
        if target_limit < remaining.min(cap_left) && len < self.cfg.min_prefill_chunk {
            len = 0; // the target binds and the slice is too small to be worth a row of work
        }
        if starving && len < self.cfg.min_prefill_chunk {
            let guaranteed = match b.target_secs {
                Some(t) if target_limit > 0 || self.cost.predict(b.features) <= t => {
                    target_limit.max(1)
                }
                _ => self.cfg.min_prefill_chunk,
            };
            len = len.max(remaining.min(guaranteed).min(cap_left));
        }
        if seq.score_prompt {
            len = len.min(Self::SCORED_ROWS_PER_STEP);
        }
        Slice { len, starving }
    }

    /// The shortest slice worth scheduling of `want`: one token with chunked prefill, the
    /// whole prompt without.
    fn least_slice(&self, want: &Slice) -> usize {
        if self.cfg.chunked_prefill {
            1
        } else {
            want.len
        }
    }

    /// Most rows of a scored prompt ([`Scheduler::score_prompt`]) fed in one step: each also runs the output layer
    /// and holds `vocab_size` logits, 64 MB at 64 rows of a 262k vocabulary.
    pub const SCORED_ROWS_PER_STEP: usize = 64;

    /// Longest slice (in tokens) the sequence's blocks plus the free pool can cover.
    fn block_limit(&self, id: SeqId) -> usize {
        let seq = &self.seqs[&id];
        let blocks = seq.block_table.len() + self.allocator.num_free();
        (blocks * self.cfg.block_size).saturating_sub(seq.num_computed)
    }

    /// Grows `id`'s block table to cover `tokens` positions; `false` (nothing taken) if the
    /// pool is short.
    fn grow_blocks(&mut self, id: SeqId, tokens: usize) -> bool {
        let seq = self.seqs.get_mut(&id).expect("live id");
        let needed = BlockAllocator::blocks_for(tokens, self.cfg.block_size);
        if needed <= seq.block_table.len() {
            return true;
        }
        match self.allocator.allocate(needed - seq.block_table.len()) {
            Some(blocks) => {
                seq.block_table.extend(blocks);
                true
            }
            None => false,
        }
    }

    fn schedule_slice(
        &mut self,
        id: SeqId,
        len: usize,
        starving: bool,
        now: f64,
        budget: &mut StepBudget,
        plan: &mut StepPlan,
    ) {
        let start = self.seqs[&id].num_computed;
        let grown = self.grow_blocks(id, start + len);
        debug_assert!(grown, "slice was sized to the free blocks");
        let seq = self.seqs.get_mut(&id).expect("live id");
        seq.first_scheduled.get_or_insert(now);
        plan.chunks.push(ScheduledChunk {
            seq: id,
            start,
            len,
            sample: start + len == seq.tokens.len(),
            is_decode: false,
            all_logits: seq.score_prompt,
            drafted: 0,
        });
        self.shares.read(id, len);
        budget.used_tokens += len;
        budget.features.add_chunk(start, len, false);
        if starving {
            budget.guarantee_left = false;
        }
    }

    /// Preempts the youngest running sequence that is younger than `id` and has no chunk
    /// in `plan`; `false` if there is none.
    fn preempt_younger_unscheduled(&mut self, id: SeqId, plan: &mut StepPlan) -> bool {
        let Some(pos) = self.running.iter().position(|&r| r == id) else {
            return false;
        };
        let victim = self.running[pos + 1..]
            .iter()
            .rev()
            .copied()
            .find(|v| plan.chunk(*v).is_none());
        match victim {
            Some(v) => {
                self.preempt(v, plan);
                true
            }
            None => false,
        }
    }

    fn preempt(&mut self, id: SeqId, plan: &mut StepPlan) {
        let pos = self
            .running
            .iter()
            .position(|&r| r == id)
            .expect("running id");
        self.running.remove(pos);
        let seq = self.seqs.get_mut(&id).expect("live id");
        self.allocator.free_table(&seq.block_table);
        seq.block_table.clear();
        seq.num_cached_blocks = 0;
        seq.num_computed = 0;
        seq.draft.clear();
        seq.state = SeqState::Preempted;
        seq.num_preemptions += 1;
        self.total_preemptions += 1;
        self.waiting.push_front(id);
        plan.preempted.push(id);
    }

    /// Records that `plan` ran: each chunk's sequence advances `num_computed` by the chunk's
    /// length, and each sampled chunk appends its token from `sampled` (one `(seq, token)`
    /// per chunk with `sample`). A prompt whose last token was just read becomes Decoding.
    /// Chunks of sequences aborted since planning are skipped. A sampled chunk left without a
    /// token (say, the engine could not sample it) keeps its last row uncomputed, so the next
    /// step feeds and samples it again. With prefix caching, blocks that are now full and
    /// computed join the cache.
    ///
    /// Returns the sequences the new tokens ended ([`Sequence::finish_reason`]), in plan
    /// order, already removed with their blocks freed.
    pub fn commit(&mut self, plan: &StepPlan, sampled: &[(SeqId, u32)]) -> Vec<FinishedSeq> {
        let mut by_seq: HashMap<SeqId, Vec<u32>> = HashMap::new();
        for &(id, token) in sampled {
            by_seq.entry(id).or_default().push(token);
        }
        let mut ended = Vec::new();
        for chunk in &plan.chunks {
            let Some(seq) = self.seqs.get_mut(&chunk.seq) else {
                continue;
            };
            // The rows before the one sampled first, which are the sequence's own tokens.
            let before_sampled = chunk.len - 1 - chunk.drafted;
            let stale = !seq.is_running()
                || seq.num_computed != chunk.start
                || chunk.start + before_sampled >= seq.tokens.len()
                || seq.draft.len() < chunk.drafted;
            if stale {
                debug_assert!(
                    false,
                    "commit of a stale chunk {chunk:?} (plan committed twice?)"
                );
                continue;
            }
            let tokens = by_seq.remove(&chunk.seq).unwrap_or_default();
            if !chunk.sample {
                debug_assert!(tokens.is_empty(), "token for an unsampled chunk");
                seq.num_computed += chunk.len;
                continue;
            }
            debug_assert!(
                tokens.len() <= 1 + chunk.drafted,
                "more tokens than rows sampled"
            );
            // The fed token's row counts once sampled, and each accepted draft's row with it: a
            // token sampled after row i agreed with the draft fed at row i + 1.
            seq.num_computed += before_sampled + tokens.len().min(1 + chunk.drafted);
            if chunk.start + before_sampled + 1 == seq.tokens.len() {
                seq.state = SeqState::Decoding;
            }
            if !tokens.is_empty() {
                seq.acceptance.observe(chunk.drafted, tokens.len() - 1);
                self.acceptance[seq.draft_source.index()].observe(chunk.drafted, tokens.len() - 1);
            }
            seq.draft.clear();
            // No token: the last row is fed (and sampled) again next step.
            for token in tokens {
                debug_assert!(seq.can_generate(), "planned a sample past max_new_tokens");
                seq.tokens.push(token);
                if let Some(reason) = seq.finish_reason(self.cfg.max_model_len) {
                    ended.push((chunk.seq, reason));
                    break;
                }
            }
        }
        for chunk in &plan.chunks {
            self.register_computed_blocks(chunk.seq);
        }
        ended
            .into_iter()
            .filter_map(|(id, reason)| {
                let seq = self.remove(id, SeqState::Finished)?;
                Some(FinishedSeq { reason, seq })
            })
            .collect()
    }

    pub fn sequence(&self, id: SeqId) -> Option<&Sequence> {
        self.seqs.get(&id)
    }

    /// Admitted sequences (prefilling or decoding).
    pub fn num_running(&self) -> usize {
        self.running.len()
    }

    /// Queued sequences, new and preempted.
    pub fn num_waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Running ids, oldest admission first.
    pub fn running_ids(&self) -> &[SeqId] {
        &self.running
    }

    /// Waiting ids, next to be admitted first.
    pub fn waiting_ids(&self) -> impl Iterator<Item = SeqId> + '_ {
        self.waiting.iter().copied()
    }

    /// Fraction of KV blocks in use.
    /// Keeps a log of what the prefix cache stores and drops, from now on, for
    /// [`Scheduler::take_cache_events`].
    pub fn enable_cache_events(&mut self) {
        self.allocator.events.enable();
    }

    /// The prefix cache's stores and evictions since the last call, in order.
    pub fn take_cache_events(&mut self) -> Vec<CacheEvent> {
        self.allocator.events.take()
    }

    /// Drops the prefix cache's blocks no sequence holds; returns how many.
    pub fn flush_prefix_cache(&mut self) -> usize {
        self.allocator.drop_unheld_cached()
    }

    pub fn kv_usage(&self) -> f64 {
        self.allocator.usage()
    }

    pub fn allocator(&self) -> &BlockAllocator {
        &self.allocator
    }

    /// Preemptions since creation.
    pub fn num_preemptions(&self) -> u64 {
        self.total_preemptions
    }

    /// Prefix-cache lookups and hits since creation, in tokens.
    pub fn prefix_cache_stats(&self) -> PrefixCacheStats {
        self.prefix_stats
    }

    /// Nothing running or waiting.
    pub fn is_idle(&self) -> bool {
        self.running.is_empty() && self.waiting.is_empty() && self.embeddings.is_empty()
    }

    /// Feeds the cost model one measured step (`features` from [`StepFeatures::of`]).
    pub fn observe_step(&mut self, features: StepFeatures, secs: f64) {
        // Embedding texts are sized to the target like prompt slices.
        let sized =
            (features.prefill_tokens > 0 || features.embed_tokens > 0) && features.decode_seqs > 0;
        if sized && self.cfg.itl_target.is_some() {
            self.headroom.observe(self.cost.predict(features), secs);
        }
        self.cost.observe(features, secs);
    }

    /// The share of the latency target steps are planned to ([`StepHeadroom`]).
    pub fn target_share(&self) -> f64 {
        self.headroom.share()
    }

    pub fn cost_model(&self) -> &CostModel {
        &self.cost
    }
}

/// A sized prompt slice, and whether it used up the step's starvation guarantee.
struct Slice {
    len: usize,
    starving: bool,
}

#[path = "planner_invariants.rs"]
mod invariants;

#[path = "planner_prefix.rs"]
mod prefix;

#[path = "planner_drafts.rs"]
mod drafts;

#[cfg(test)]
#[path = "planner_tests.rs"]
mod tests;
