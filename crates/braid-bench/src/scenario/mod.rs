//! What every scenario shares: one client, one clock, one deadline.
//!
//! A run's clock starts after the model is resolved and the server warmed up, so the
//! first measured request does not pay for lazy initialisation. The deadline
//! (`--max-duration-secs`, counted from before the warm-up) bounds everything: no
//! request is sent after it and no stream is waited on past it, so a hung server cannot
//! hang the benchmark.
//!
//! Prompts depend on the seed, the scenario and the request id. Repeating the same
//! scenario on the same server with the same seed repeats its prompts, so pass a new
//! `--seed` when a server's prefix cache must stay cold across repeats.

pub mod interference;
pub mod poisson;
pub mod prefix_cache;
pub mod scaling;
pub mod speculative;

use crate::args::{CommonArgs, Scenario};
use crate::client::Client;
use crate::prompts::{Prompt, PromptGen};
use crate::record::RequestRecord;
use crate::report::{now_utc, Group, InterferenceDetail, Report, SCHEMA_VERSION};
use crate::stats::{aggregate, span_s};
use indicatif::ProgressBar;
use std::time::Duration;
use tokio::time::Instant;

/// Prompt indices of warm-up requests, far from any run's request ids.
const WARMUP_INDEX_BASE: u64 = 1 << 48;

#[derive(Clone)]
pub struct Ctx {
    pub client: Client,
    pub model: String,
    pub prompts: PromptGen,
    /// Start of the measured run; `sent_s` of every record counts from here.
    pub t0: Instant,
    pub deadline: Instant,
    pub progress: ProgressBar,
    /// Requests the scenario means to send.
    pub planned: usize,
    started_at: (f64, String),
}

impl Ctx {
    /// Resolves the model, warms the server up and starts the clock.
    pub async fn setup(common: &CommonArgs, scenario: &str, planned: usize) -> anyhow::Result<Ctx> {
        common.validate()?;
        let begin = Instant::now();
        let deadline = begin + Duration::from_secs_f64(common.max_duration_secs);
        let mut client = Client::new(&common.url, common.api_key.clone())?;
        if let Some(schema) = common.json_schema()? {
            client = client.with_json_schema(schema);
        }
        if let Some(t) = common.temperature {
            client = client.sampled(t);
        }
        let model = client.resolve_model(common.model.as_deref()).await;
        // Salted by scenario: running one scenario after another on the same server must
        // not hand the second one prompts the first already cached.
        let salt = scenario
            .bytes()
            .fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
        let prompts = PromptGen {
            seed: crate::prompts::mix(common.seed, salt),
            kind: common.prompt_kind,
            range: common.token_range,
        };
        for i in 0..common.warmup {
            let p = prompts.prompt(WARMUP_INDEX_BASE + i as u64, 8);
            let t = client.complete(&model, &p, 4, deadline).await;
            if let Some(e) = t.error {
                eprintln!("braid-bench: warm-up request {i} failed: {e}");
            }
        }
        eprintln!(
            "braid-bench: {scenario} against {} (model {model}), {planned} requests planned",
            common.url
        );
        Ok(Ctx {
            client,
            model,
            prompts,
            t0: Instant::now(),
            deadline,
            progress: crate::progress::bar(planned as u64, scenario),
            planned,
            started_at: now_utc(),
        })
    }

    pub fn expired(&self) -> bool {
        Instant::now() >= self.deadline
    }

    /// Sends request `id` (its prompt is a function of the seed and `id`) and records it.
    pub async fn request(
        &self,
        id: usize,
        group: &str,
        prompt_tokens: usize,
        max_tokens: usize,
    ) -> RequestRecord {
        let prompt = self.prompts.prompt(id as u64, prompt_tokens);
        self.send(id, group, &prompt, prompt_tokens, max_tokens)
            .await
    }

    /// Sends `prompt` (about `prompt_tokens` long) as request `id` and records it.
    pub async fn send(
        &self,
        id: usize,
        group: &str,
        prompt: &Prompt,
        prompt_tokens: usize,
        max_tokens: usize,
    ) -> RequestRecord {
        let trace = self
            .client
            .complete(&self.model, prompt, max_tokens, self.deadline)
            .await;
        self.progress.inc(1);
        trace.into_record(id, group, prompt_tokens, max_tokens, self.t0)
    }

    /// Aggregates one group over its own span of time.
    pub fn group(&self, common: &CommonArgs, name: String, records: &[&RequestRecord]) -> Group {
        let agg = aggregate(
            records.iter().copied(),
            span_s(records.iter().copied()),
            common.stall_ms / 1e3,
            &common.slo(),
        );
        Group {
            name,
            concurrency: None,
            prompt_tokens: None,
            aggregate: agg,
        }
    }

    /// Assembles the report of a finished run.
    pub fn finish(
        &self,
        common: &CommonArgs,
        scenario: &str,
        params: serde_json::Value,
        mut requests: Vec<RequestRecord>,
        groups: Vec<Group>,
        interference: Option<InterferenceDetail>,
    ) -> Report {
        let planned = self.planned;
        self.progress.finish_and_clear();
        requests.sort_by_key(|r| r.id);
        let wall = span_s(&requests);
        let deadline_reached = requests.len() < planned
            || requests
                .iter()
                .any(|r| r.outcome == crate::record::Outcome::Deadline);
        if deadline_reached {
            eprintln!(
                "braid-bench: --max-duration-secs reached: {} of {planned} planned requests sent",
                requests.len()
            );
        }
        Report {
            schema_version: SCHEMA_VERSION,
            tool: format!("braid-bench {}", env!("CARGO_PKG_VERSION")),
            scenario: scenario.to_string(),
            label: common.label.clone(),
            url: common.url.clone(),
            model: self.model.clone(),
            started_at: self.started_at.1.clone(),
            started_at_unix_s: self.started_at.0,
            params,
            stall_ms: common.stall_ms,
            slo: common.slo(),
            wall_time_s: wall,
            overall: aggregate(&requests, wall, common.stall_ms / 1e3, &common.slo()),
            groups,
            interference,
            prefix_cache: None,
            deadline_reached,
            planned_requests: planned,
            requests,
        }
    }
}

/// Runs a load scenario to its report (`Compare` is not a load scenario).
pub async fn execute(scenario: &Scenario) -> anyhow::Result<Report> {
    match scenario {
        Scenario::Scaling(a) => scaling::run(a).await,
        Scenario::Interference(a) => interference::run(a).await,
        Scenario::Poisson(a) => poisson::run(a).await,
        Scenario::PrefixCache(a) => prefix_cache::run(a).await,
        Scenario::Speculative(a) => speculative::run(a).await,
        Scenario::Compare(_) => anyhow::bail!("compare does not send requests"),
    }
}
