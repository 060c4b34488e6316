//! The engine's reports, turned into what the server shows: Prometheus metrics (under
//! vLLM's names, see `metrics.rs`) and the live step feed of `GET /debug/steps`.
//!
//! The engine only hands over values (`StepStats` per step, `RequestEvent`s per request); it
//! knows nothing of Prometheus or SSE. This is the one place that decides which value feeds
//! which metric.

use crate::kv_events::KvEventPublisher;
use crate::metrics::Metrics;
use braid_engine::{
    CacheEvent, EmbeddingDone, EngineInfo, EngineObserver, FinishReason, RequestEvent, StepStats,
    TokenTiming,
};
use std::sync::{Arc, OnceLock};
use tokio::sync::broadcast;

/// One engine step as the live view draws it (`GET /debug/steps`).
#[derive(Clone, Debug, serde::Serialize)]
pub struct StepRecord {
    /// Seconds since the engine started.
    pub t: f64,
    pub prefill_tokens: usize,
    pub decode_tokens: usize,
    pub duration_ms: f64,
    pub predicted_ms: Option<f64>,
    /// How far the step's time was off the cost model's prediction, relative to it:
    /// `(duration - predicted) / predicted` (0.2 is 20% slower than predicted).
    pub prediction_error: Option<f64>,
    pub target_ms: Option<f64>,
    /// What the step's prompt slices were sized to: `target_ms` times the share of it the
    /// cost model's measured error leaves (absent without a target or when nobody decodes).
    pub planned_ms: Option<f64>,
    pub running: usize,
    pub waiting: usize,
    pub kv_usage: f64,
    pub preempted: usize,
    /// Gaps (ms) between this step's tokens and the previous token of the same stream.
    pub itl_ms: Vec<f64>,
    /// Texts the embedding model ran in this step, and their tokens with padding.
    pub embed_texts: usize,
    pub embed_tokens: usize,
    /// Drafted tokens the step verified beside its decodes, and how many were accepted.
    pub drafted_tokens: usize,
    pub accepted_tokens: usize,
}

/// Updates `Metrics` and broadcasts `StepRecord`s from the engine's reports, and passes the
/// prefix cache's events to their publisher.
pub struct MetricsObserver {
    metrics: Arc<Metrics>,
    kv_events: Option<Arc<KvEventPublisher>>,
    steps: broadcast::Sender<StepRecord>,
    /// The latency target in ms, known once the engine has started.
    target_ms: OnceLock<Option<f64>>,
}

impl MetricsObserver {
    pub fn new(metrics: Arc<Metrics>, kv_events: Option<Arc<KvEventPublisher>>) -> Arc<Self> {
        Arc::new(Self {
            metrics,
            kv_events,
            steps: broadcast::channel(1024).0,
            target_ms: OnceLock::new(),
        })
    }

    /// A live feed of every engine step; a slow reader skips steps rather than slowing the
    /// engine.
    pub fn subscribe_steps(&self) -> broadcast::Receiver<StepRecord> {
        self.steps.subscribe()
    }
}

fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

impl EngineObserver for MetricsObserver {
    fn started(&self, info: &EngineInfo) {
        let _ = self.target_ms.set(info.itl_target.map(ms));
        self.metrics
            .cache_config_info
            .with_label_values(&[
                info.block_size.to_string().as_str(),
                info.num_blocks.to_string().as_str(),
                if info.prefix_caching { "True" } else { "False" },
                info.kv_cache_dtype,
            ])
            .set(1);
    }

    fn step(&self, s: &StepStats) {
        let m = &self.metrics;
        m.step_duration.observe(s.duration.as_secs_f64());
        m.iteration_tokens
            .observe((s.prefill_tokens + s.decode_tokens) as f64);
        m.prefix_cache_queries_total.inc_by(s.prefix_cache.queries);
        m.prefix_cache_hits_total.inc_by(s.prefix_cache.hits);
        for &(drafted, accepted) in &s.drafts {
            m.spec_decode_num_drafts.inc();
            m.spec_decode_num_draft_tokens.inc_by(drafted as u64);
            m.spec_decode_num_accepted_tokens.inc_by(accepted as u64);
            for position in 0..accepted {
                m.spec_decode_num_accepted_tokens_per_pos
                    .with_label_values(&[position.to_string().as_str()])
                    .inc();
            }
        }
        if self.steps.receiver_count() > 0 {
            let _ = self.steps.send(StepRecord {
                t: s.at.as_secs_f64(),
                prefill_tokens: s.prefill_tokens,
                decode_tokens: s.decode_tokens,
                duration_ms: ms(s.duration),
                predicted_ms: s.predicted.map(ms),
                prediction_error: s
                    .predicted
                    .filter(|p| !p.is_zero())
                    .map(|p| s.duration.as_secs_f64() / p.as_secs_f64() - 1.0),
                target_ms: self.target_ms.get().copied().flatten(),
                planned_ms: s.planned_to.map(ms),
                running: s.running,
                waiting: s.waiting,
                kv_usage: s.kv_usage,
                preempted: s.preempted.len(),
                itl_ms: s.token_gaps.iter().copied().map(ms).collect(),
                embed_texts: s.embed_texts,
                embed_tokens: s.embed_tokens,
                drafted_tokens: s.drafted_tokens(),
                accepted_tokens: s.accepted_tokens(),
            });
        }
    }

    fn request(&self, _id: u64, event: &RequestEvent) {
        let m = &self.metrics;
        match *event {
            RequestEvent::Queued { prompt_tokens } => {
                m.prompt_tokens_total.inc_by(prompt_tokens as u64)
            }
            RequestEvent::Scheduled { queue_time } => {
                m.request_queue_time.observe(queue_time.as_secs_f64())
            }
            RequestEvent::Token(timing) => {
                match timing {
                    TokenTiming::First(ttft) => m.time_to_first_token.observe(ttft.as_secs_f64()),
                    TokenTiming::Next(gap) => m.inter_token_latency.observe(gap.as_secs_f64()),
                }
                m.generation_tokens_total.inc();
            }
            RequestEvent::Preempted => m.num_preemptions_total.inc(),
            RequestEvent::Finished {
                reason,
                prompt_tokens,
                completion_tokens,
                e2e,
            } => {
                m.e2e_request_latency.observe(e2e.as_secs_f64());
                m.request_prompt_tokens.observe(prompt_tokens as f64);
                m.request_generation_tokens
                    .observe(completion_tokens as f64);
                m.request_success_total
                    .with_label_values(&[reason.as_str()])
                    .inc();
            }
        }
    }

    fn embedded(&self, done: &EmbeddingDone) {
        let m = &self.metrics;
        m.embedding_requests_total.inc();
        m.embedding_texts_total.inc_by(done.texts as u64);
        m.embedding_prompt_tokens_total
            .inc_by(done.prompt_tokens as u64);
        m.prompt_tokens_total.inc_by(done.prompt_tokens as u64);
        m.request_prompt_tokens.observe(done.prompt_tokens as f64);
        m.request_queue_time.observe(done.queue.as_secs_f64());
        m.e2e_request_latency.observe(done.e2e.as_secs_f64());
        m.request_success_total
            .with_label_values(&[FinishReason::Stop.as_str()])
            .inc();
    }

    fn wants_cache_events(&self) -> bool {
        self.kv_events.is_some()
    }

    fn cache_events(&self, events: &[CacheEvent]) {
        if let Some(publisher) = &self.kv_events {
            publisher.publish(events);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use braid_sched::PrefixCacheStats;
    use std::time::Duration;

    fn step(gaps_ms: &[u64]) -> StepStats {
        StepStats {
            at: Duration::from_secs(3),
            prefill_tokens: 30,
            decode_tokens: 2,
            duration: Duration::from_millis(40),
            predicted: Some(Duration::from_millis(50)),
            planned_to: Some(Duration::from_millis(88)),
            finished: vec![(1, FinishReason::Length)],
            preempted: vec![4, 5],
            prefix_cache: PrefixCacheStats {
                queries: 64,
                hits: 48,
            },
            kv_usage: 0.25,
            running: 3,
            waiting: 1,
            token_gaps: gaps_ms
                .iter()
                .map(|&ms| Duration::from_millis(ms))
                .collect(),
            embed_texts: 0,
            embed_tokens: 0,
            drafts: vec![(4, 2), (3, 0)],
        }
    }

    #[test]
    fn each_report_feeds_its_metric() {
        let metrics = Arc::new(Metrics::new());
        let o = MetricsObserver::new(metrics.clone(), None);
        o.started(&EngineInfo {
            block_size: 16,
            num_blocks: 99,
            prefix_caching: true,
            itl_target: Some(Duration::from_millis(100)),
            kv_cache_dtype: "q8_0",
        });
        let mut feed = o.subscribe_steps();
        o.step(&step(&[20, 30]));
        let ms = Duration::from_millis;
        for event in [
            RequestEvent::Queued { prompt_tokens: 30 },
            RequestEvent::Scheduled { queue_time: ms(5) },
            RequestEvent::Token(TokenTiming::First(ms(60))),
            RequestEvent::Token(TokenTiming::Next(ms(20))),
            RequestEvent::Preempted,
            RequestEvent::Finished {
                reason: FinishReason::Stop,
                prompt_tokens: 30,
                completion_tokens: 2,
                e2e: ms(200),
            },
        ] {
            o.request(1, &event);
        }
        let text = metrics.render();
        for line in [
            "braid_step_duration_seconds_count 1",
            "braid_iteration_tokens_total_sum 32",
            "braid_prefix_cache_queries_total 64",
            "braid_prefix_cache_hits_total 48",
            "braid_prompt_tokens_total 30",
            "braid_request_queue_time_seconds_count 1",
            "braid_time_to_first_token_seconds_count 1",
            "braid_inter_token_latency_seconds_count 1",
            "braid_generation_tokens_total 2",
            "braid_num_preemptions_total 1",
            "braid_e2e_request_latency_seconds_count 1",
            "braid_request_generation_tokens_sum 2",
            "braid_request_success_total{finished_reason=\"stop\"} 1",
            r#"braid_cache_config_info{block_size="16",cache_dtype="q8_0",enable_prefix_caching="True",num_gpu_blocks="99"} 1"#,
            "braid_spec_decode_num_drafts_total 2",
            "braid_spec_decode_num_draft_tokens_total 7",
            "braid_spec_decode_num_accepted_tokens_total 2",
            r#"braid_spec_decode_num_accepted_tokens_per_pos_total{position="0"} 1"#,
            r#"braid_spec_decode_num_accepted_tokens_per_pos_total{position="1"} 1"#,
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
        let record = feed.try_recv().unwrap();
        assert_eq!(
            (
                record.prefill_tokens,
                record.decode_tokens,
                record.preempted
            ),
            (30, 2, 2)
        );
        assert_eq!((record.t, record.duration_ms), (3.0, 40.0));
        assert_eq!(
            (record.predicted_ms, record.target_ms, record.planned_ms),
            (Some(50.0), Some(100.0), Some(88.0))
        );
        // 40 ms against a prediction of 50: 20% faster than predicted.
        assert!((record.prediction_error.unwrap() + 0.2).abs() < 1e-12);
        assert_eq!(record.itl_ms, [20.0, 30.0]);
        assert_eq!((record.drafted_tokens, record.accepted_tokens), (7, 2));
    }
}
