//! The planner's side of speculative decoding: how many drafted tokens each decode verifies.
//!
//! A drafted token rides in the step as one more row of its sequence's decode chunk. On a CPU
//! a decode step mostly waits for the weights to stream in, so a few more rows cost little,
//! and each accepted one is a token that did not need a step of its own. But every row costs
//! something, and the step's time is shared by everyone in it. So rows are added one at a time,
//! always the one most likely to be accepted (a sequence's next drafted token is accepted with
//! its [`DraftAcceptance`](crate::draft_acceptance::DraftAcceptance) rate, given that the ones
//! before it were), and only while the tokens the step is expected to give per predicted
//! second still rise. With many sequences decoding, a row's cost is weighed against every
//! sequence's token, and drafting stops by itself; a sequence whose drafts keep missing stops
//! drafting too. A draft row never makes the predicted step exceed the latency target, never
//! preempts anyone for a KV block, and never asks for a token past the sequence's limit or
//! the context.
//!
//! A [`DraftSource::Model`] draft also costs the draft model's passes: its first token comes
//! from the pass that reads the step's positions anyway, and each further one from one more
//! pass over every sequence drafting that deep. So a row that makes the step's deepest model
//! draft one deeper adds a pass's measured time (`observe_draft_passes`) to its cost; the step
//! time the cost model learns from is the step's without those passes, which it could not
//! explain by its features.
//!
//! Drafts are planned right after the decodes, so prompt slices are sized to what is left. Every
//! drafted row brings a row of logits (a megabyte with a 262k vocabulary), so a step verifies at
//! most [`Scheduler::DRAFTED_ROWS_PER_STEP`] of them, as it scores at most as many prompt rows.

use super::{Scheduler, StepPlan};
use crate::cost_model::StepFeatures;
use crate::draft_acceptance::DraftSource;
use crate::sequence::SeqId;

impl Scheduler {
    /// Most drafted rows one step verifies (each holds a row of logits).
    pub const DRAFTED_ROWS_PER_STEP: usize = Self::SCORED_ROWS_PER_STEP;

    /// Sets the tokens guessed to follow `id`'s last token, and where they came from, for the
    /// next [`Scheduler::plan`] only (it keeps what it feeds and drops the rest). Ignored unless
    /// `id` is decoding.
    pub fn set_draft(&mut self, id: SeqId, draft: Vec<u32>, source: DraftSource) {
        if let Some(seq) = self.seqs.get_mut(&id) {
            if seq.state == crate::SeqState::Decoding {
                seq.draft = draft;
                seq.draft_source = source;
            }
        }
    }

    /// Writes the tokens of a planned [`DraftSource::Model`] draft, which the planner sized
    /// before they existed (the draft model runs on the plan): exactly as many as the plan
    /// verifies for `id`.
    pub fn fill_draft(&mut self, id: SeqId, tokens: &[u32]) {
        let seq = self.seqs.get_mut(&id).expect("a planned sequence");
        assert_eq!(
            seq.draft.len(),
            tokens.len(),
            "a draft fills the rows planned for it"
        );
        seq.draft.copy_from_slice(tokens);
    }

    /// A step ran `passes` draft-model passes after its first, in `secs`: what the next
    /// model drafts' passes are expected to cost (recent steps weigh more).
    pub fn observe_draft_passes(&mut self, passes: usize, secs: f64) {
        if passes == 0 || !secs.is_finite() {
            return;
        }
        let per_pass = secs / passes as f64;
        self.draft_pass_secs = Some(match self.draft_pass_secs {
            Some(old) => 0.8 * old + 0.2 * per_pass,
            None => per_pass,
        });
    }

    /// Step 1b: lengthens the decode chunks already in `plan` with drafted rows; see the module
    /// docs.
    pub(super) fn plan_drafts(&mut self, plan: &mut StepPlan) {
        struct Candidate {
            chunk: usize,
            rate: f64,
            /// Drafted rows it may still take.
            room: usize,
        }
        let mut candidates: Vec<Candidate> = Vec::new();
        for (i, c) in plan.chunks.iter().enumerate() {
            let seq = &self.seqs[&c.seq];
            if !c.is_decode || seq.draft.is_empty() {
                continue;
            }
            // Verifying d drafts may give d + 1 tokens: all must fit the limits.
            let by_tokens = seq.max_new_tokens - seq.num_generated();
            let by_context = self.cfg.max_model_len.saturating_sub(seq.tokens.len());
            let room = seq
                .draft
                .len()
                .min(by_tokens.saturating_sub(1))
                .min(by_context.saturating_sub(1));
            if room > 0 {
                candidates.push(Candidate {
                    chunk: i,
                    rate: seq
                        .acceptance
                        .rate_from(self.acceptance[seq.draft_source.index()].rate()),
                    room,
                });
            }
        }
        let target = self
            .cfg
            .itl_target
            .map(|t| t.as_secs_f64() * self.headroom.share());
        let mut features = StepFeatures::of(plan);
        let mut secs = self.cost.predict(features);
        let mut expected_tokens = plan.num_decodes() as f64;
        let mut rows = plan.num_tokens();
        let mut drafted = 0;
        // Draft-model passes after the first, and what one costs: until one is measured, a
        // decode step's time (a draft model is smaller than the model).
        let mut passes = 0;
        let pass_secs = self.draft_pass_secs.unwrap_or_else(|| {
            self.cost.predict(StepFeatures {
                decode_seqs: 1,
                ..StepFeatures::default()
            })
        });
        while rows < self.cfg.max_batched_tokens && drafted < Self::DRAFTED_ROWS_PER_STEP {
            let gain = |c: &Candidate| c.rate.powi(plan.chunks[c.chunk].drafted as i32 + 1);
            let Some(best) = candidates
                .iter()
                .enumerate()
                .filter(|(_, c)| c.room > plan.chunks[c.chunk].drafted)
                .max_by(|a, b| gain(a.1).total_cmp(&gain(b.1)))
                .map(|(i, _)| i)
            else {
                break;
            };
            let chunk = plan.chunks[candidates[best].chunk];
            let g = gain(&candidates[best]);
            let mut more = features;
            more.decode_seqs += 1;
            more.attended_tokens += chunk.start + chunk.len + 1;
            // A model draft's row at depth d needs d - 1 passes after the first.
            let more_passes = match self.seqs[&chunk.seq].draft_source {
                DraftSource::Model => passes.max(chunk.drafted),
                _ => passes,
            };
            let more_secs = self.cost.predict(more) + more_passes as f64 * pass_secs;
            // Tokens per second rise only if g / (more_secs - secs) beats the step's own rate.
            let pays = g * secs > (more_secs - secs) * expected_tokens;
            if !pays || target.is_some_and(|t| more_secs > t) {
                break;
            }
            if !self.grow_blocks(chunk.seq, chunk.start + chunk.len + 1) {
                candidates[best].room = 0;
                continue;
            }
            let c = &mut plan.chunks[candidates[best].chunk];
            c.len += 1;
            c.drafted += 1;
            features = more;
            secs = more_secs;
            passes = more_passes;
            expected_tokens += g;
            rows += 1;
            drafted += 1;
        }
        // Sources with a draft this step, and whether any of theirs was verified.
        let mut offered = [(false, false); DraftSource::COUNT];
        for cand in &candidates {
            let c = &plan.chunks[cand.chunk];
            let seq = self.seqs.get_mut(&c.seq).expect("planned sequence");
            let source = &mut offered[seq.draft_source.index()];
            source.0 = true;
            source.1 |= c.drafted > 0;
            if c.drafted == 0 {
                seq.acceptance.forget();
            }
        }
        for (estimate, (any, verified)) in self.acceptance.iter_mut().zip(offered) {
            if any && !verified {
                estimate.forget();
            }
        }
        for c in &plan.chunks {
            if let Some(seq) = self.seqs.get_mut(&c.seq) {
                seq.draft.truncate(c.drafted);
            }
        }
    }
}
