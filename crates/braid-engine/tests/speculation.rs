//! Speculative decoding in the engine, on the tiny random-weight model: verified drafts give
//! exactly the tokens, logprobs and seeded samples of plain decoding, whether the draft is right
//! throughout, right for a while, or wrong; a `prediction` is drafted and counted; and a draft
//! model (another random-weight GGUF over the same vocabulary) drafts, or is refused when its
//! vocabulary differs.

use braid_engine::{
    spawn_engine, EngineConfig, EngineEvent, EngineHandle, EngineInfo, EngineObserver,
    EngineRequest, Finished, RequestEvent, Speculation, StepStats,
};
use braid_model::tiny_gguf::{Arch, TinyModel};
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
    let (h, drafts) = engine_with(&dir, ngram, None).unwrap();
    (h, drafts, dir)
}

/// The tiny model (written into `dir`), with `draft` drafting for it.
fn engine_with(
    dir: &tempfile::TempDir,
    ngram: bool,
    draft: Option<Arc<LoadedModel>>,
) -> anyhow::Result<(EngineHandle, Arc<Drafts>)> {
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
        draft_model: draft,
        kv_cache_dtype: Default::default(),
    };
    let drafts = Arc::new(Drafts::default());
    let h = spawn_engine(Some(model), None, cfg, drafts.clone())?;
    Ok((h, drafts))
}

/// A random-weight GGUF of `arch` over the tiny vocabulary, loaded from `dir`.
fn draft_model(dir: &tempfile::TempDir, model: TinyModel) -> Arc<LoadedModel> {
    let path = dir.path().join("draft.gguf");
    model.write(&path).unwrap();
    Arc::new(LoadedModel::load(&path).unwrap())
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

#[test]
fn a_draft_model_that_is_the_model_guesses_every_greedy_token() {
    let (plain, _, _d1) = engine(false);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("same.gguf");
    braid_model::tiny_gguf::write(&path, 3).unwrap();
    let same = Arc::new(LoadedModel::load(&path).unwrap());
    // Only the draft model drafts (the n-gram sources would come first where they match).
    let (spec, drafts) = engine_with(&dir, false, Some(same)).unwrap();
    for seed in [None, Some(5)] {
        let (want, _) = generate(&plain, &PROMPT, params(seed), None);
        drafts.0.lock().unwrap().clear();
        let (got, finished) = generate(&spec, &PROMPT, params(seed), None);
        assert_eq!(
            got, want,
            "seed {seed:?}: plain decoding's tokens and logprobs"
        );
        assert!(finished.prediction.is_none());
        let (drafted, accepted) = drafts
            .0
            .lock()
            .unwrap()
            .iter()
            .fold((0, 0), |s, d| (s.0 + d.0, s.1 + d.1));
        if seed.is_none() {
            // Its greedy guess is the model's own greedy choice.
            assert_eq!(accepted, drafted, "every guess is right");
            // How deep depends on what a pass costs against a step (here as much: the same
            // model), but the first guess comes with the pass that reads the step anyway.
            assert!(
                accepted >= want.len() / 4,
                "{accepted} of {} tokens drafted",
                want.len()
            );
        } else {
            assert!(drafted > 0, "sampled text is drafted too");
        }
        // A prediction comes first; where it goes wrong, the draft model's cache (behind by
        // the prediction's accepted tokens) catches up and drafts on.
        let mut guess = ids(&want);
        for t in &mut guess[10..14] {
            *t = (*t + 1) % 256;
        }
        let (got, finished) = generate(&spec, &PROMPT, params(seed), Some(guess));
        assert_eq!(got, want, "seed {seed:?}, with a prediction");
        assert!(finished.prediction.unwrap().accepted >= 5);
    }
}

#[test]
fn a_draft_model_of_another_shape_changes_no_bit() {
    let (plain, _, _d1) = engine(false);
    let dir = tempfile::tempdir().unwrap();
    let other = draft_model(&dir, TinyModel::arch(Arch::Qwen3, 9).unwrap());
    let (spec, drafts) = engine_with(&dir, true, Some(other)).unwrap();
    let prompts: Vec<Vec<u32>> = (0..4u32)
        .map(|k| PROMPT.iter().map(|t| (t + 5 * k) % 200).collect())
        .collect();
    for seed in [None, Some(13)] {
        let want: Vec<_> = prompts
            .iter()
            .map(|p| generate(&plain, p, params(seed), None).0)
            .collect();
        // Side by side, so prompt slices and drafts of several sequences share steps; then
        // once more, with the prompts in the prefix cache of both models' pools.
        for _ in 0..2 {
            let got: Vec<_> = std::thread::scope(|s| {
                let handles: Vec<_> = prompts
                    .iter()
                    .map(|p| {
                        let spec = &spec;
                        s.spawn(move || generate(spec, p, params(seed), None).0)
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            assert_eq!(got, want, "seed {seed:?}");
        }
    }
    assert!(
        drafts.0.lock().unwrap().iter().any(|d| d.0 > 0),
        "the draft model drafted"
    );
}

#[test]
fn a_draft_model_with_another_vocabulary_is_refused_naming_both() {
    let dir = tempfile::tempdir().unwrap();
    let mut other = TinyModel::arch(Arch::Llama, 1).unwrap();
    let tokens = other
        .metadata
        .iter_mut()
        .find(|(k, _)| k == "tokenizer.ggml.tokens")
        .map(|(_, v)| v)
        .unwrap();
    let candle_core::quantized::gguf_file::Value::Array(tokens) = tokens else {
        panic!("the tokens are an array");
    };
    tokens.swap(40, 41);
    let draft = draft_model(&dir, other);
    let err = engine_with(&dir, true, Some(draft)).err().expect("refused");
    let message = err.to_string();
    for part in ["tiny.gguf", "draft.gguf", "token 40"] {
        assert!(message.contains(part), "{part:?} in {message}");
    }
}
