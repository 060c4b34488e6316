//! How well the server's step cost model predicted the steps of a run, from braid's live step
//! feed (`GET /debug/steps`).
//!
//! A latency target is only as good as the prediction the planner sizes steps with: a step
//! that runs 30% over its prediction runs 30% over the target. The client sees only token
//! gaps, which mix the step time with everything else; the server knows each step's
//! predicted and actual time, so the benchmark reads them while it loads the server and
//! reports the error's distribution beside the latencies it caused. Servers without the feed
//! (llama.cpp, vLLM) simply get no such section.

use crate::client::{sse_events, Client, SseEvent};
use crate::stats::{summarize, Summary};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex};
use tokio::task::JoinHandle;

/// One step as the feed reports it (the fields this report needs).
#[derive(Debug, Clone, Deserialize)]
pub struct StepSample {
    pub prefill_tokens: usize,
    pub decode_tokens: usize,
    pub duration_ms: f64,
    pub predicted_ms: Option<f64>,
    pub target_ms: Option<f64>,
}

/// The prediction error `(actual - predicted) / predicted` of the steps the planner sized,
/// overall and by kind of step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PredictionAccuracy {
    /// Steps the feed reported (some may lack a prediction).
    pub steps: usize,
    pub all: Option<Summary>,
    /// Steps that read a prompt slice (the planner's chunk sizing).
    pub with_prefill: Option<Summary>,
    /// Steps that only decoded.
    pub decode_only: Option<Summary>,
    /// The latency target the server ran with, in ms.
    pub target_ms: Option<f64>,
    /// Steps that took longer than the target, and the longest step.
    pub steps_over_target: usize,
    pub longest_step_ms: Option<f64>,
}

impl PredictionAccuracy {
    pub fn from_samples(samples: &[StepSample]) -> Self {
        let error = |s: &StepSample| {
            s.predicted_ms
                .filter(|&p| p > 0.0)
                .map(|p| s.duration_ms / p - 1.0)
        };
        let of = |keep: &dyn Fn(&StepSample) -> bool| {
            let errors: Vec<f64> = samples
                .iter()
                .filter(|s| keep(s))
                .filter_map(error)
                .collect();
            summarize(&errors)
        };
        let target_ms = samples.iter().find_map(|s| s.target_ms);
        Self {
            steps: samples.len(),
            all: of(&|_| true),
            with_prefill: of(&|s| s.prefill_tokens > 0),
            decode_only: of(&|s| s.prefill_tokens == 0 && s.decode_tokens > 0),
            target_ms,
            steps_over_target: target_ms
                .map_or(0, |t| samples.iter().filter(|s| s.duration_ms > t).count()),
            longest_step_ms: samples.iter().map(|s| s.duration_ms).reduce(f64::max),
        }
    }
}

/// Reads the step feed in the background until [`StepFeed::finish`].
pub struct StepFeed {
    samples: Arc<Mutex<Vec<StepSample>>>,
    task: JoinHandle<()>,
}

impl StepFeed {
    /// Subscribes to the server's feed; `None` when it has none (not braid, or an old one).
    pub async fn start(client: &Client) -> Option<Self> {
        let resp = client.get_root("debug/steps").await?;
        let samples = Arc::new(Mutex::new(Vec::new()));
        let sink = samples.clone();
        let task = tokio::spawn(async move {
            let mut events = std::pin::pin!(sse_events(resp.bytes_stream()));
            while let Some(Ok(SseEvent::Data(data))) = events.next().await {
                if let Ok(sample) = serde_json::from_str(&data) {
                    sink.lock().expect("step samples").push(sample);
                }
            }
        });
        Some(Self { samples, task })
    }

    /// Stops reading and summarizes the steps seen.
    pub fn finish(self) -> PredictionAccuracy {
        self.task.abort();
        let samples = std::mem::take(&mut *self.samples.lock().expect("step samples"));
        PredictionAccuracy::from_samples(&samples)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(prefill: usize, duration: f64, predicted: Option<f64>) -> StepSample {
        StepSample {
            prefill_tokens: prefill,
            decode_tokens: 4,
            duration_ms: duration,
            predicted_ms: predicted,
            target_ms: Some(50.0),
        }
    }

    #[test]
    fn errors_are_relative_to_the_prediction_and_split_by_kind() {
        let a = PredictionAccuracy::from_samples(&[
            step(0, 10.0, Some(10.0)),
            step(0, 12.0, Some(10.0)),
            step(256, 60.0, Some(40.0)),
            step(0, 5.0, None),
        ]);
        assert_eq!(a.steps, 4);
        let all = a.all.unwrap();
        assert_eq!(all.n, 3);
        assert!((all.max - 0.5).abs() < 1e-12);
        assert!((a.with_prefill.unwrap().p50 - 0.5).abs() < 1e-12);
        let decode = a.decode_only.unwrap();
        assert_eq!(decode.n, 2);
        assert!((decode.max - 0.2).abs() < 1e-12);
        assert_eq!((a.target_ms, a.steps_over_target), (Some(50.0), 1));
        assert_eq!(a.longest_step_ms, Some(60.0));
    }
}
