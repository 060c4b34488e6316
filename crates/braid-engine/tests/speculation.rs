//! Speculative decoding in the engine, on the tiny random-weight model: verified drafts give
//! exactly the tokens, logprobs and seeded samples of plain decoding, whether the draft is right
//! throughout, right for a while, or wrong; and a `prediction` is drafted and counted.

use braid_engine::{
    spawn_engine, EngineConfig, EngineEvent, EngineHandle, EngineInfo, EngineObserver,
    EngineRequest, Finished, RequestEvent, Speculation, StepStats,
};
use braid_model::{LoadedModel, Sampled, SamplingParams};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::unbounded_channel;

#[derive(Default)]
struct Drafts(Mutex<Vec<(usize, usize)>>);

impl EngineObserver for Drafts {
    fn started(&self, _: &EngineInfo) {}
    fn step(&self, stats: &StepStats) {
        self.0.lock().unwrap().extend(&stats.drafts);
    }
    fn request(&self, _: u64, _: &RequestEvent) {}
}

fn engine(ngram: bool) -> (EngineHandle, Arc<Drafts>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    braid_model::tiny_gguf::write(&path, 3).unwrap();
    let model = Arc::new(LoadedModel::load(&path).unwrap());
    let cfg = EngineConfig {
        kv_cache_mb: 4,
        block_size: 16,
        max_num_seqs: 8,
        max_batched_tokens: 64,
        max_waiting: 16,
        chunked_prefill: true,
        itl_target: None,
        starvation_after: Duration::from_secs(2),
        prefix_caching: true,
        pooling: None,
        speculation: Speculation {
            ngram,
            max_tokens: 6,
        },
    };
    let drafts = Arc::new(Drafts::default());
    let h = spawn_engine(Some(model), None, cfg, drafts.clone()).unwrap();
    (h, drafts, dir)
}

fn params(seed: Option<u64>) -> SamplingParams {
    SamplingParams {
        temperature: if seed.is_some() { 1.0 } else { 0.0 },
        seed,
        logprobs: Some(2),
        ..SamplingParams::default()
    }
}

/// Every token of one request, and its ending.
fn generate(
    h: &EngineHandle,
    prompt: &[u32],
    params: SamplingParams,
    prediction: Option<Vec<u32>>,
) -> (Vec<Sampled>, Finished) {
    let (tx, mut rx) = unbounded_channel();
    h.submit(EngineRequest {
        id: h.next_request_id(),
        prompt: prompt.to_vec(),
        max_tokens: 40,
        score_prompt: None,
        shares_prompt_with: None,
        first_of_request: None,
        params,
        constraint: None,
        prediction,
        stop_token_ids: vec![],
        arrival: Instant::now(),
        events: tx,
        span: tracing::Span::none(),
    })
    .unwrap();
    let mut tokens = Vec::new();
    loop {
        match rx.blocking_recv().expect("the engine answered") {
            EngineEvent::Token {
                token,
                finished: None,
            } => tokens.push(token),
            EngineEvent::Token {
                token,
                finished: Some(f),
            } => {
                tokens.push(token);
                return (tokens, f);
            }
            EngineEvent::Done(f) => return (tokens, f),
            other => panic!("unexpected {other:?}"),
        }
    }
}

fn ids(tokens: &[Sampled]) -> Vec<u32> {
    tokens.iter().map(|t| t.token).collect()
}

const PROMPT: [u32; 12] = [5, 9, 14, 3, 27, 8, 5, 9, 14, 3, 27, 8];

#[test]
fn a_right_prediction_is_accepted_and_changes_no_bit() {
    let (plain, _, _d1) = engine(false);
    let (spec, drafts, _d2) = engine(true);
    for seed in [None, Some(7)] {
        let (want, _) = generate(&plain, &PROMPT, params(seed), None);
        drafts.0.lock().unwrap().clear();
        let (got, finished) = generate(&spec, &PROMPT, params(seed), Some(ids(&want)));
        assert_eq!(
            got, want,
            "seed {seed:?}: tokens and logprobs of plain decoding"
        );
        let usage = finished.prediction.expect("a prediction is reported");
        assert!(usage.accepted >= 30, "seed {seed:?}: {usage:?}");
        assert_eq!(usage.accepted + usage.rejected, want.len());
        let accepted: usize = drafts.0.lock().unwrap().iter().map(|d| d.1).sum();
        assert!(accepted >= usage.accepted, "the steps report the drafts");
    }
}

#[test]
fn a_prediction_wrong_from_its_middle_changes_nothing_either() {
    let (plain, _, _d1) = engine(false);
    let (spec, _, _d2) = engine(true);
    for seed in [None, Some(11)] {
        let (want, _) = generate(&plain, &PROMPT, params(seed), None);
        let mut guess = ids(&want);
        for t in &mut guess[15..22] {
            *t = (*t + 1) % 256;
        }
        let (got, finished) = generate(&spec, &PROMPT, params(seed), Some(guess));
        assert_eq!(got, want, "seed {seed:?}");
        let usage = finished.prediction.unwrap();
        assert!(usage.accepted >= 10 && usage.rejected >= 7, "{usage:?}");
        // Drafting from the request's own tokens alone: the same answer.
        let (own, finished) = generate(&spec, &PROMPT, params(seed), None);
        assert_eq!(own, want, "seed {seed:?}");
        assert!(finished.prediction.is_none());
    }
}

#[test]
fn requests_sharing_steps_keep_their_own_answers() {
    let (plain, _, _d1) = engine(false);
    let (spec, _, _d2) = engine(true);
    let prompts: Vec<Vec<u32>> = (0..4u32)
        .map(|k| PROMPT.iter().map(|t| (t + 3 * k) % 200).collect())
        .collect();
    let want: Vec<_> = prompts
        .iter()
        .map(|p| generate(&plain, p, params(Some(3)), None).0)
        .collect();
    let got: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = prompts
            .iter()
            .zip(&want)
            .map(|(p, w)| {
                let spec = &spec;
                s.spawn(move || generate(spec, p, params(Some(3)), Some(ids(w))).0)
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(got, want);
}
