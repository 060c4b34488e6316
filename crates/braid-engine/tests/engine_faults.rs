//! The engine thread on the tiny model, driven directly: a failing step fails the requests in
//! it (nobody hangs), and the engine keeps serving; departed clients free their sequences;
//! a request the KV pool can never hold is refused at submission; the scheduler's finishing
//! rules reach the request as events; a request the server finishes is reported once, and a
//! departed client never; and the reports add up.

use braid_engine::{
    spawn_engine, EngineConfig, EngineEvent, EngineHandle, EngineInfo, EngineObserver,
    EngineRequest, FinishReason, RequestEvent, StepStats, SubmitError,
};
use braid_model::{LoadedModel, SamplingParams};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

/// Keeps every report.
#[derive(Default)]
struct Recorder {
    steps: Mutex<Vec<StepStats>>,
    requests: Mutex<Vec<(u64, RequestEvent)>>,
}

impl EngineObserver for Recorder {
    fn started(&self, _: &EngineInfo) {}
    fn step(&self, stats: &StepStats) {
        self.steps.lock().unwrap().push(stats.clone());
    }
    fn request(&self, id: u64, event: &RequestEvent) {
        self.requests.lock().unwrap().push((id, event.clone()));
    }
}

fn engine() -> (EngineHandle, tempfile::TempDir) {
    let (h, _, dir) = engine_with(4, 16);
    (h, dir)
}

fn engine_with(
    kv_cache_mb: usize,
    max_waiting: usize,
) -> (EngineHandle, Arc<Recorder>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    braid_model::tiny_gguf::write(&path, 3).unwrap();
    let model = Arc::new(LoadedModel::load(&path).unwrap());
    let cfg = EngineConfig {
        kv_cache_mb,
        block_size: 16,
        max_num_seqs: 8,
        max_batched_tokens: 64,
        max_waiting,
        chunked_prefill: true,
        itl_target: Some(Duration::from_millis(100)),
        starvation_after: Duration::from_secs(2),
        prefix_caching: true,
        pooling: None,
        speculation: Default::default(),
        draft_model: None,
        kv_cache_dtype: Default::default(),
    };
    let recorder = Arc::new(Recorder::default());
    let h = spawn_engine(Some(model), None, cfg, recorder.clone()).unwrap();
    (h, recorder, dir)
}

fn request(
    h: &EngineHandle,
    prompt: Vec<u32>,
    max_tokens: usize,
    stop_token_ids: Vec<u32>,
) -> (EngineRequest, UnboundedReceiver<EngineEvent>) {
    let (tx, rx) = unbounded_channel();
    let req = EngineRequest {
        id: h.next_request_id(),
        prompt,
        max_tokens,
        score_prompt: None,
        shares_prompt_with: None,
        first_of_request: None,
        params: SamplingParams::greedy(),
        constraint: None,
        prediction: None,
        stop_token_ids,
        arrival: Instant::now(),
        events: tx,
        span: tracing::Span::none(),
    };
    (req, rx)
}

fn submit(h: &EngineHandle, prompt: Vec<u32>, max_tokens: usize) -> UnboundedReceiver<EngineEvent> {
    let (req, rx) = request(h, prompt, max_tokens, vec![]);
    h.submit(req).unwrap();
    rx
}

/// Tokens until the end, and how it ended (the last token's ending counts as the end).
async fn drain(mut rx: UnboundedReceiver<EngineEvent>) -> (Vec<u32>, Option<EngineEvent>) {
    let mut tokens = Vec::new();
    loop {
        match tokio::time::timeout(Duration::from_secs(30), rx.recv())
            .await
            .expect("the engine answered")
        {
            Some(EngineEvent::Token {
                token,
                finished: None,
            }) => tokens.push(token.token),
            Some(EngineEvent::Token {
                token,
                finished: Some(f),
            }) => {
                tokens.push(token.token);
                return (tokens, Some(EngineEvent::Done(f)));
            }
            Some(end) => return (tokens, Some(end)),
            None => return (tokens, None),
        }
    }
}

#[tokio::test]
async fn a_failing_step_fails_its_requests_and_the_engine_carries_on() {
    let (h, _dir) = engine();
    let healthy = submit(&h, vec![5; 20], 200);
    // Validation keeps such ids out of real requests; here it makes the model fail mid-step.
    let poisoned = submit(&h, vec![5, 99_999, 6], 4);
    let (_, end) = drain(poisoned).await;
    assert!(
        matches!(end, Some(EngineEvent::Failed(ref m)) if m.contains("model error")),
        "{end:?}"
    );
    let (_, end) = drain(healthy).await;
    assert!(
        matches!(end, Some(EngineEvent::Failed(_))),
        "requests sharing the failed step fail too: {end:?}"
    );
    let (tokens, end) = drain(submit(&h, vec![7; 10], 5)).await;
    assert_eq!(tokens.len(), 5);
    assert!(matches!(end, Some(EngineEvent::Done(_))), "{end:?}");
    let stats = h.stats();
    assert_eq!((stats.running, stats.waiting), (0, 0));
    assert!(h.is_alive());
}

/// Waits until the engine holds nothing: no request running or waiting, no KV block in use.
async fn until_idle(h: &EngineHandle) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let s = h.stats();
        if s.running == 0 && s.waiting == 0 && s.kv_usage == 0.0 {
            return;
        }
        assert!(Instant::now() < deadline, "still held: {s:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn departed_clients_free_their_sequences() {
    let (h, _dir) = engine();
    for _ in 0..12 {
        drop(submit(&h, vec![9; 30], 400));
    }
    until_idle(&h).await;
    let (tokens, _) = drain(submit(&h, vec![7; 10], 3)).await;
    assert_eq!(tokens.len(), 3);
}

/// Each `Finished` report: (request id, reason, completion tokens).
fn finished_reports(rec: &Recorder) -> Vec<(u64, FinishReason, usize)> {
    rec.requests
        .lock()
        .unwrap()
        .iter()
        .filter_map(|(id, e)| match e {
            RequestEvent::Finished {
                reason,
                completion_tokens,
                ..
            } => Some((*id, *reason, *completion_tokens)),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_request_the_server_finishes_is_reported_once_and_freed() {
    let (h, rec, _dir) = engine_with(4, 16);
    let (req, mut rx) = request(&h, vec![8; 12], 400, vec![]);
    let id = req.id;
    h.submit(req).unwrap();
    // Two tokens passed on, as by a server whose stop string matched in the second.
    for _ in 0..2 {
        let event = tokio::time::timeout(Duration::from_secs(30), rx.recv()).await;
        assert!(
            matches!(event, Ok(Some(EngineEvent::Token { finished: None, .. }))),
            "{event:?}"
        );
    }
    h.finish(id, FinishReason::Stop, 2);
    // The answer comes after whatever tokens the engine sent meanwhile.
    let (_, end) = drain(rx).await;
    assert!(
        matches!(end, Some(EngineEvent::Done(ref f)) if f.reason == FinishReason::Stop && f.completion_tokens == 2),
        "{end:?}"
    );
    h.finish(id, FinishReason::Length, 5);
    until_idle(&h).await;
    assert_eq!(
        finished_reports(&rec),
        [(id, FinishReason::Stop, 2)],
        "reported once, with the tokens the server passed on; a second finish changes nothing"
    );
}

#[tokio::test]
async fn a_finish_is_read_before_its_closed_channel_and_a_departed_client_never_finishes() {
    let (h, rec, _dir) = engine_with(4, 16);
    let (finished, mut finished_rx) = request(&h, vec![8; 12], 400, vec![]);
    let (departed, mut departed_rx) = request(&h, vec![9; 12], 400, vec![]);
    let (finished_id, departed_id) = (finished.id, departed.id);
    h.submit(finished).unwrap();
    h.submit(departed).unwrap();
    for rx in [&mut finished_rx, &mut departed_rx] {
        let event = tokio::time::timeout(Duration::from_secs(30), rx.recv()).await;
        assert!(
            matches!(event, Ok(Some(EngineEvent::Token { .. }))),
            "{event:?}"
        );
    }
    // A server that stopped waiting for the engine's answer: finish, then let go at once.
    h.finish(finished_id, FinishReason::Length, 1);
    drop(finished_rx);
    drop(departed_rx);
    // The gauges may not have been published since the first step: idle gauges alone do not
    // say the engine has read the finish yet, a report does.
    let deadline = Instant::now() + Duration::from_secs(20);
    while finished_reports(&rec).is_empty() {
        assert!(Instant::now() < deadline, "the finish was never reported");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    until_idle(&h).await;
    let reports = finished_reports(&rec);
    assert_eq!(reports, [(finished_id, FinishReason::Length, 1)]);
    assert!(reports.iter().all(|r| r.0 != departed_id));
}

#[tokio::test]
async fn the_scheduler_decides_the_end_and_the_engine_relays_it() {
    let (h, rec, _dir) = engine_with(4, 16);
    let (greedy, end) = drain(submit(&h, vec![8; 12], 6)).await;
    assert_eq!(greedy.len(), 6);
    assert!(
        matches!(end, Some(EngineEvent::Done(ref f)) if f.reason == FinishReason::Length && f.completion_tokens == 6),
        "the 6th token carries the ending: {end:?}"
    );
    // The same prompt with its 3rd greedy token as a stop token: two tokens, then Done(stop).
    let (req, rx) = request(&h, vec![8; 12], 6, vec![greedy[2]]);
    h.submit(req).unwrap();
    let (tokens, end) = drain(rx).await;
    let first_stop = greedy.iter().position(|&t| t == greedy[2]).unwrap();
    assert_eq!(tokens, greedy[..first_stop]);
    assert!(
        matches!(end, Some(EngineEvent::Done(ref f)) if f.reason == FinishReason::Stop && f.completion_tokens == first_stop),
        "{end:?}"
    );
    let requests = rec.requests.lock().unwrap().clone();
    let finished: Vec<_> = requests
        .iter()
        .filter_map(|(_, e)| match e {
            RequestEvent::Finished { reason, .. } => Some(*reason),
            _ => None,
        })
        .collect();
    assert_eq!(finished, [FinishReason::Length, FinishReason::Stop]);
    let tokens_reported = requests
        .iter()
        .filter(|(_, e)| matches!(e, RequestEvent::Token(_)))
        .count();
    assert_eq!(
        tokens_reported,
        6 + first_stop,
        "stop tokens are not reported as tokens"
    );
    let steps = rec.steps.lock().unwrap().clone();
    let step_finished: usize = steps.iter().map(|s| s.finished.len()).sum();
    assert_eq!(step_finished, 2);
    let decodes: usize = steps.iter().map(|s| s.decode_tokens).sum();
    let accepted: usize = steps.iter().map(StepStats::accepted_tokens).sum();
    assert_eq!(
        decodes + accepted,
        5 + first_stop,
        "one decode per token after each first, or a drafted token it accepted"
    );
}

#[tokio::test]
async fn a_request_larger_than_the_pool_is_refused_at_submission() {
    let (h, _, _dir) = engine_with(1, 16);
    let pool = match h.submit(request(&h, vec![5; 8], 100_000, vec![]).0) {
        Err(SubmitError::ExceedsKvPool {
            needed_tokens,
            pool_tokens,
        }) => {
            assert_eq!(needed_tokens, 8 + 100_000 - 1);
            pool_tokens
        }
        other => panic!("{other:?}"),
    };
    let err = h.submit(request(&h, vec![5; 8], pool - 6, vec![]).0);
    assert_eq!(
        err,
        Err(SubmitError::ExceedsKvPool {
            needed_tokens: pool + 1,
            pool_tokens: pool
        })
    );
    assert_eq!(
        h.stats().waiting,
        0,
        "a refused request holds no place in the queue"
    );
}
