//! The raw trace of one request, kept verbatim in the report.
//!
//! Aggregates can always be recomputed from these records (and a different stall
//! threshold or SLO applied later), so the report stores the trace, not just the
//! numbers derived from it. Times are seconds: `sent_s` from the start of the run, every
//! other time from the moment that request was sent.

use serde::{Deserialize, Serialize};

/// How a request ended. Anything but `Ok` is a failed request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// 2xx response whose stream ended with `data: [DONE]`.
    Ok,
    /// The server answered with a non-2xx status (see `status`).
    HttpError,
    /// The stream closed, or sent an error event, before `data: [DONE]`.
    Incomplete,
    /// Connecting, sending or reading failed below HTTP.
    Transport,
    /// The run's `--max-duration-secs` bound ran out while the request was open.
    Deadline,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// Index of the request within the run, in the order requests were planned.
    pub id: usize,
    /// Which part of the scenario the request belongs to (`c=4`, `decoder`, `long`, `prompt=256`).
    pub group: String,
    /// Prompt length asked for: exact for token prompts, approximate for word prompts.
    pub prompt_tokens: usize,
    pub max_tokens: usize,
    /// Send time, seconds since the start of the run.
    pub sent_s: f64,
    /// Arrival of every chunk that carried a token, seconds since send.
    pub token_times_s: Vec<f64>,
    /// When the request ended (`[DONE]`, error or close), seconds since send.
    pub end_s: f64,
    /// `usage.completion_tokens` when the server sent a usage chunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_completion_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_prompt_tokens: Option<u64>,
    /// HTTP status, when a response arrived at all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    pub outcome: Outcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl RequestRecord {
    pub fn ok(&self) -> bool {
        self.outcome == Outcome::Ok
    }

    /// Output tokens this request delivered: the server's own count when it sent one,
    /// else the number of token chunks seen.
    pub fn output_tokens(&self) -> u64 {
        self.usage_completion_tokens
            .unwrap_or(self.token_times_s.len() as u64)
    }

    /// The key failures are counted under: the HTTP status (`"429"`, `"500"`), or the
    /// outcome's name for failures that have no status. `None` for a success.
    pub fn failure_key(&self) -> Option<String> {
        match self.outcome {
            Outcome::Ok => None,
            Outcome::HttpError => Some(
                self.status
                    .map(|s| s.to_string())
                    .unwrap_or_else(|| "http_error".into()),
            ),
            Outcome::Incomplete => Some("incomplete".into()),
            Outcome::Transport => Some("transport".into()),
            Outcome::Deadline => Some("deadline".into()),
        }
    }

    /// Absolute time (since run start) at which the request ended.
    pub fn finished_at_s(&self) -> f64 {
        self.sent_s + self.end_s
    }
}
