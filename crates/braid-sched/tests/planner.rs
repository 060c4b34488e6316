//! Planner rules (ordering, chunking, FIFO, KV blocks, preemption, admission, commit), one
//! scripted scenario each, no model. The latency target has its own file.

mod common;

use braid_sched::{
    FinishReason, Scheduler, SchedulerConfig, SeqState, StepFeatures, StopConditions,
};
use common::{check_plan, drain, prompt, sample, small_cfg, step};

fn sched(cfg: SchedulerConfig) -> Scheduler {
    Scheduler::new(cfg)
}

#[test]
fn decodes_come_first_one_token_each() {
    let mut s = sched(small_cfg());
    s.add(1, prompt(1, 3), 20, 0.0);
    s.add(2, prompt(2, 5), 20, 0.0);
    let (p, _) = step(&mut s, 0.0);
    assert_eq!(p.num_prefill_tokens(), 8);
    assert_eq!(p.num_samples(), 2, "both prompts read whole, both sample");
    assert_eq!(s.sequence(1).unwrap().state, SeqState::Decoding);
    s.add(3, prompt(3, 40), 20, 0.1);
    let (p, _) = step(&mut s, 0.1);
    let ids: Vec<_> = p
        .chunks
        .iter()
        .map(|c| (c.seq, c.len, c.is_decode))
        .collect();
    assert_eq!(ids, vec![(1, 1, true), (2, 1, true), (3, 14, false)]);
    assert!(!p.chunks[2].sample, "a partial prompt slice is not sampled");
    assert_eq!((p.num_decodes(), p.num_tokens()), (2, 16));
}

#[test]
fn chunks_respect_token_cap_and_seq_limit() {
    let mut cfg = small_cfg();
    cfg.max_num_seqs = 3;
    let mut s = sched(cfg);
    for id in 0..6 {
        s.add(id, prompt(id, 7), 3, 0.0);
    }
    let (p, _) = step(&mut s, 0.0);
    // 7 + 7 + 2 = 16: the third prompt is split at the cap.
    let lens: Vec<_> = p.chunks.iter().map(|c| (c.seq, c.len)).collect();
    assert_eq!(lens, vec![(0, 7), (1, 7), (2, 2)]);
    let (p, _) = step(&mut s, 0.1);
    assert_eq!(s.num_running(), 3, "max_num_seqs bounds the running set");
    assert!(p.chunks.len() <= 3 && p.num_tokens() <= 16);
    assert_eq!(p.chunk(2).map(|c| (c.start, c.len)), Some((2, 5)));
    let mut now = 0.2;
    while !s.is_idle() {
        let (p, _) = step(&mut s, now);
        assert!(p.num_tokens() <= 16 && p.chunks.len() <= 3);
        now += 0.1;
    }
}

#[test]
fn the_request_read_least_reads_first() {
    let mut s = sched(small_cfg());
    s.add(1, prompt(1, 2), 50, 0.0);
    step(&mut s, 0.0); // 1 decodes from now on
    s.add(2, prompt(2, 40), 5, 0.1);
    let (p, _) = step(&mut s, 0.1);
    assert_eq!(p.chunk(2).unwrap().len, 15);
    s.add(3, prompt(3, 2), 5, 0.2);
    let (p, _) = step(&mut s, 0.2);
    assert_eq!(
        p.chunk(3).unwrap().len,
        2,
        "the new prompt, read least, goes first"
    );
    assert_eq!(
        p.chunk(2).unwrap().len,
        13,
        "the prompt in progress takes what is left"
    );
}

#[test]
fn a_request_of_many_prompts_does_not_hold_back_a_later_one() {
    let mut cfg = small_cfg();
    cfg.max_num_seqs = 8;
    let mut s = sched(cfg);
    for id in 1..=4 {
        s.add(id, prompt(id, 40), 2, 0.0);
        if id > 1 {
            s.same_request(id, 1);
        }
    }
    let (p, _) = step(&mut s, 0.0);
    assert_eq!(p.chunk(1).unwrap().len, 16, "the request's first prompt");
    s.add(9, prompt(9, 5), 2, 0.1);
    let (p, _) = step(&mut s, 0.1);
    assert_eq!(
        p.chunk(9).unwrap().len,
        5,
        "the later request is read first"
    );
    assert_eq!(
        p.chunk(1).unwrap().len,
        11,
        "then the big request, in its own order"
    );
    assert!(p.chunk(2).is_none());
    // Alone, each of the four prompts would have been a request that had read nothing.
    let mut s = sched(SchedulerConfig {
        max_num_seqs: 8,
        ..small_cfg()
    });
    for id in 1..=4 {
        s.add(id, prompt(id, 40), 2, 0.0);
    }
    step(&mut s, 0.0);
    s.add(9, prompt(9, 5), 2, 0.1);
    let (p, _) = step(&mut s, 0.1);
    assert!(p.chunk(9).is_none(), "behind the three unread prompts");
}

#[test]
fn admission_is_fifo() {
    let mut cfg = small_cfg();
    cfg.max_num_seqs = 8;
    let mut s = sched(cfg);
    for id in [5, 3, 9, 1] {
        s.add(id, prompt(id, 6), 2, 0.0);
    }
    let (p, _) = step(&mut s, 0.0);
    let order: Vec<_> = p.chunks.iter().map(|c| c.seq).collect();
    assert_eq!(order, vec![5, 3, 9], "arrival order, not id order");
    assert_eq!(s.running_ids(), &[5, 3, 9]);
    assert_eq!(s.waiting_ids().collect::<Vec<_>>(), vec![1]);
}

#[test]
fn fifo_head_that_does_not_fit_blocks_those_behind() {
    let mut cfg = small_cfg();
    cfg.chunked_prefill = false;
    let mut s = sched(cfg);
    s.add(1, prompt(1, 2), 50, 0.0);
    step(&mut s, 0.0);
    s.add(2, prompt(2, 30), 5, 0.1); // > 15 tokens left next to one decode
    s.add(3, prompt(3, 2), 5, 0.1); // would fit, but is behind
    let (p, _) = step(&mut s, 0.2);
    assert_eq!((p.num_decodes(), p.num_prefill_tokens()), (1, 0));
    assert_eq!(s.num_waiting(), 2);
}

#[test]
fn without_chunking_prompts_are_read_whole() {
    let mut cfg = small_cfg();
    cfg.chunked_prefill = false;
    let mut s = sched(cfg);
    s.add(1, prompt(1, 10), 3, 0.0);
    s.add(2, prompt(2, 10), 3, 0.0);
    let (p, _) = step(&mut s, 0.0);
    assert_eq!(
        p.chunks.len(),
        1,
        "10 + 10 > 16: the second waits rather than split"
    );
    assert_eq!(p.chunks[0].len, 10);
    // An oversized prompt runs whole when nobody decodes (it could never fit otherwise).
    let mut s = sched({
        let mut c = small_cfg();
        c.chunked_prefill = false;
        c
    });
    s.add(7, prompt(7, 40), 3, 0.0);
    let (p, _) = step(&mut s, 0.0);
    assert_eq!((p.chunks.len(), p.num_tokens()), (1, 40));
    assert!(p.chunks[0].sample);
    drain(&mut s, 0.1, 0.1);
}

#[test]
fn oversized_whole_prompt_waits_for_decoders_until_it_starves() {
    let mut cfg = small_cfg();
    cfg.chunked_prefill = false;
    let mut s = sched(cfg);
    s.add(1, prompt(1, 2), 100, 0.0);
    step(&mut s, 0.0);
    s.add(2, prompt(2, 40), 3, 0.0);
    let (p, _) = step(&mut s, 1.0);
    assert!(
        p.chunk(2).is_none(),
        "does not fit next to a decode, not starving"
    );
    let (p, _) = step(&mut s, 2.5);
    assert_eq!(
        p.chunk(2).map(|c| c.len),
        Some(40),
        "starving: read whole, alone"
    );
    assert_eq!(p.num_decodes(), 1, "the decode still rides along");
}

#[test]
fn decode_that_runs_out_of_blocks_preempts_the_youngest() {
    let cfg = SchedulerConfig {
        num_blocks: 6,
        max_batched_tokens: 32,
        ..small_cfg()
    };
    let mut s = sched(cfg);
    // Each needs 8 + 12 - 1 = 19 positions = 5 blocks; the pool has 6.
    s.add(1, prompt(1, 8), 12, 0.0);
    s.add(2, prompt(2, 8), 12, 0.0);
    let mut now = 0.0;
    let mut preempted = Vec::new();
    let mut finished = Vec::new();
    while !s.is_idle() {
        let (p, done) = step(&mut s, now);
        assert!(s.allocator().num_used() <= 6);
        for &v in &p.preempted {
            preempted.push(v);
            let seq = s.sequence(v).unwrap();
            assert_eq!(seq.state, SeqState::Preempted);
            assert!(seq.block_table.is_empty() && seq.num_computed == 0);
            assert_eq!(
                s.waiting_ids().next(),
                Some(v),
                "back at the front of the queue"
            );
        }
        finished.extend(done);
        now += 0.1;
    }
    assert_eq!(
        preempted.first(),
        Some(&2),
        "the most recently admitted goes first"
    );
    assert!(s.num_preemptions() >= 1);
    assert_eq!(
        finished.len(),
        2,
        "both complete (step() checks every token is right)"
    );
    assert_eq!(s.allocator().num_free(), 6);
}

#[test]
fn a_decode_that_is_itself_the_youngest_preempts_itself() {
    let cfg = SchedulerConfig {
        num_blocks: 3,
        ..small_cfg()
    };
    let mut s = sched(cfg);
    s.add(1, prompt(1, 5), 3, 0.0); // 2 blocks; next positions 5, 6 stay in block 2
    s.add(2, prompt(2, 4), 3, 0.0); // 1 block; position 4 needs a new one
    step(&mut s, 0.0);
    let (p, _) = step(&mut s, 0.1);
    assert_eq!(p.preempted, vec![2]);
    assert_eq!(p.chunks.iter().map(|c| c.seq).collect::<Vec<_>>(), vec![1]);
    let seq2 = s.sequence(2).unwrap();
    assert_eq!(
        (seq2.num_generated(), seq2.num_preemptions),
        (1, 1),
        "its token is kept"
    );
    drain(&mut s, 0.2, 0.1);
    assert_eq!(s.allocator().num_free(), 3);
}

#[test]
fn preempted_sequence_recomputes_prompt_and_generated_tokens() {
    let cfg = SchedulerConfig {
        num_blocks: 3,
        ..small_cfg()
    };
    let mut s = sched(cfg);
    s.add(1, prompt(1, 5), 3, 0.0);
    s.add(2, prompt(2, 4), 3, 0.0);
    step(&mut s, 0.0);
    step(&mut s, 0.1); // 2 preempted with 5 tokens (4 prompt + 1 generated)
                       // Recomputation reads all 5 tokens as a prompt (in slices as blocks free up), samples
                       // only at the end, then decodes on.
    let mut now = 0.2;
    let mut covered = 0;
    while covered < 5 {
        let (p, _) = step(&mut s, now);
        now += 0.1;
        if let Some(c) = p.chunk(2) {
            assert_eq!((c.start, c.is_decode), (covered, false));
            covered += c.len;
            assert_eq!(c.sample, covered == 5);
        }
    }
    let seq2 = s.sequence(2).unwrap();
    assert_eq!((seq2.num_generated(), seq2.state), (2, SeqState::Decoding));
    drain(&mut s, now, 0.1);
}

#[test]
fn abort_frees_blocks_at_once() {
    let mut s = sched(small_cfg());
    s.add(1, prompt(1, 10), 5, 0.0);
    s.add(2, prompt(2, 30), 5, 0.0);
    let plan = s.plan(0.0);
    let used = s.allocator().num_used();
    assert_eq!(used, 3 + 2, "10 tokens + 6 tokens of 4-token blocks");
    assert!(s.abort(2));
    assert_eq!(s.allocator().num_used(), 3);
    assert!(s.sequence(2).is_none());
    assert!(!s.abort(2), "unknown now");
    s.commit(&plan, &sample(&plan)); // the aborted sequence's chunk is skipped
    s.check_invariants().unwrap();
    s.add(3, prompt(3, 4), 5, 0.1);
    assert!(s.abort(3), "waiting sequences can be aborted too");
    assert!(s.abort(1));
    assert_eq!((s.allocator().num_used(), s.is_idle()), (0, true));
}

#[test]
fn admits_only_what_can_run() {
    let cfg = SchedulerConfig {
        num_blocks: 8, // 32 positions
        max_model_len: 40,
        ..small_cfg()
    };
    assert!(!cfg.admits(0, 5), "no prompt");
    assert!(!cfg.admits(1, 0), "nothing to generate");
    assert!(!cfg.admits(30, 11), "past the context");
    assert_eq!(cfg.exceeds_kv_pool(30, 11), Some(40));
    assert!(!cfg.admits(30, 4), "more than the pool");
    assert_eq!(cfg.exceeds_kv_pool(30, 4), Some(33));
    assert!(cfg.admits(30, 3), "32 positions: exactly the pool");
    assert_eq!(cfg.exceeds_kv_pool(30, 3), None);
    let mut s = sched(cfg);
    s.add(1, prompt(1, 30), 3, 0.0);
    s.add(2, prompt(2, 3), 3, 0.0);
    assert_eq!(s.num_waiting(), 2);
    drain(&mut s, 0.0, 0.1);
}

#[test]
fn commit_advances_and_switches_to_decoding() {
    let mut s = sched(small_cfg());
    s.add(1, prompt(1, 20), 2, 0.0);
    let p = s.plan(0.0);
    check_plan(&s, &p);
    assert_eq!(s.sequence(1).unwrap().state, SeqState::Prefilling);
    s.commit(&p, &[]);
    let seq = s.sequence(1).unwrap();
    assert_eq!(
        (seq.num_computed, seq.tokens.len(), seq.state),
        (16, 20, SeqState::Prefilling)
    );
    let p = s.plan(0.1);
    assert!(p.chunks[0].sample);
    s.commit(&p, &[(1, 77)]);
    let seq = s.sequence(1).unwrap();
    assert_eq!(
        (seq.num_computed, seq.tokens.len(), seq.state),
        (20, 21, SeqState::Decoding)
    );
    assert_eq!(seq.tokens[20], 77);
    assert_eq!(seq.first_scheduled, Some(0.0));
}

#[test]
fn the_commit_of_the_last_token_finishes_the_sequence() {
    let mut s = sched(small_cfg());
    s.add(1, prompt(1, 3), 2, 0.0);
    let p = s.plan(0.0);
    assert!(s.commit(&p, &sample(&p)).is_empty());
    let p = s.plan(1.0);
    let finished = s.commit(&p, &sample(&p));
    assert_eq!(finished.len(), 1);
    assert_eq!(finished[0].reason, FinishReason::Length);
    assert_eq!(finished[0].seq.num_generated(), 2);
    assert_eq!(finished[0].seq.state, SeqState::Finished);
    assert!(s.sequence(1).is_none(), "gone, its blocks freed");
    assert_eq!((s.allocator().num_used(), s.is_idle()), (0, true));
}

#[test]
fn a_stop_token_finishes_the_sequence_and_the_context_end_bounds_it() {
    let mut s = sched(small_cfg());
    let stop = StopConditions {
        max_new_tokens: 5,
        stop_token_ids: vec![77],
    };
    s.add(1, prompt(1, 3), stop, 0.0);
    let p = s.plan(0.0);
    assert!(s.commit(&p, &[(1, 5)]).is_empty());
    let p = s.plan(1.0);
    let finished = s.commit(&p, &[(1, 77)]);
    assert_eq!(finished[0].reason, FinishReason::Stop);
    assert_eq!(finished[0].seq.tokens[3..], [5, 77]);
    assert!(s.is_idle());
    let max_model_len = s.config().max_model_len;
    assert!(
        !s.config().admits(3, max_model_len),
        "a token limit past the context is never admitted, so the limit is reached first"
    );
}

#[test]
fn features_of_a_plan_count_attention() {
    let mut s = sched(small_cfg());
    s.add(1, prompt(1, 3), 5, 0.0);
    step(&mut s, 0.0);
    s.add(2, prompt(2, 4), 5, 0.0);
    let p = s.plan(0.1);
    let f = StepFeatures::of(&p);
    // Decode at position 3 attends 4; prompt rows 0..4 attend 1+2+3+4.
    assert_eq!(
        f,
        StepFeatures {
            prefill_tokens: 4,
            decode_seqs: 1,
            attended_tokens: 4 + 10,
            embed_tokens: 0,
        }
    );
}

#[test]
fn preempted_sequence_goes_back_ahead_of_new_arrivals() {
    let cfg = SchedulerConfig {
        num_blocks: 6,
        max_num_seqs: 2,
        max_batched_tokens: 32,
        ..small_cfg()
    };
    let mut s = sched(cfg);
    s.add(1, prompt(1, 8), 12, 0.0);
    s.add(2, prompt(2, 8), 12, 0.0);
    s.add(3, prompt(3, 4), 2, 0.0); // waits for a running slot
    let mut now = 0.0;
    loop {
        let (p, _) = step(&mut s, now);
        now += 0.1;
        if !p.preempted.is_empty() {
            assert_eq!(p.preempted, vec![2]);
            assert!(p.chunk(3).is_none(), "the freed slot is not given away");
            break;
        }
    }
    assert_eq!(s.waiting_ids().collect::<Vec<_>>(), vec![2, 3]);
    loop {
        let (p, _) = step(&mut s, now);
        now += 0.1;
        assert!(p.chunk(3).is_none(), "3 must not overtake the preempted 2");
        if p.chunk(2).is_some() {
            break;
        }
    }
    drain(&mut s, now, 0.1);
}

#[test]
fn a_sampled_chunk_without_a_token_is_fed_again() {
    let mut s = sched(small_cfg());
    s.add(1, prompt(1, 6), 3, 0.0);
    let p = s.plan(0.0);
    s.commit(&p, &[]); // the engine produced no token for it
    let seq = s.sequence(1).unwrap();
    assert_eq!((seq.num_computed, seq.num_generated()), (5, 0));
    let p = s.plan(0.1);
    check_plan(&s, &p);
    assert_eq!(
        p.chunk(1).map(|c| (c.start, c.len, c.sample)),
        Some((5, 1, true))
    );
    s.commit(&p, &sample(&p));
    assert_eq!(s.sequence(1).unwrap().num_generated(), 1);
    drain(&mut s, 0.2, 0.1);
}
