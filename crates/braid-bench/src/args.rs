//! The `braid bench` command line.
//!
//! Options a load scenario shares live in [`CommonArgs`], flattened into each scenario so
//! that they follow the scenario name (`braid bench scaling --url ...`). Every argument
//! struct is also `Serialize`: the report records the exact parameters of its run (less
//! the API key), so two reports can be checked for like-for-like before comparing.

use crate::prompts::{PromptKind, PromptMix, TokenRange};
use crate::stats::Slo;
use clap::{Args, Subcommand};
use serde::Serialize;
use std::path::PathBuf;

/// `braid bench`: load an OpenAI-compatible /v1/completions endpoint and report TTFT,
/// ITL, stalls, throughput and goodput.
#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub scenario: Scenario,
}

#[derive(Subcommand, Debug, Clone)]
pub enum Scenario {
    /// Concurrency sweep: at each level keep exactly C requests in flight.
    Scaling(ScalingArgs),
    /// Long streams decoding while long prompts arrive: do the decoders stall?
    Interference(InterferenceArgs),
    /// Open-loop Poisson arrivals with mixed prompt lengths: goodput under SLOs.
    Poisson(PoissonArgs),
    /// Long prompts cold, then again, then sharing a prefix: what a prefix cache saves.
    PrefixCache(PrefixCacheArgs),
    /// Answers that copy the prompt, with and without a `prediction`, and random text at
    /// one and many streams: what speculative decoding gains and costs.
    Speculative(SpeculativeArgs),
    /// Print ratios a/b of two saved reports (throughput, goodput, latency percentiles).
    Compare(CompareArgs),
}

impl Scenario {
    pub fn name(&self) -> &'static str {
        match self {
            Scenario::Scaling(_) => "scaling",
            Scenario::Interference(_) => "interference",
            Scenario::Poisson(_) => "poisson",
            Scenario::PrefixCache(_) => "prefix-cache",
            Scenario::Speculative(_) => "speculative",
            Scenario::Compare(_) => "compare",
        }
    }
}

#[derive(Args, Debug, Clone, Serialize)]
pub struct CommonArgs {
    /// Server base URL (with or without a trailing /v1).
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// Model id to request (default: the first id of GET /v1/models, else "default").
    #[arg(long)]
    pub model: Option<String>,
    /// Sent as `Authorization: Bearer <key>`; never written to the report.
    #[arg(long)]
    #[serde(skip)]
    pub api_key: Option<String>,
    /// Seed for prompts and arrival times: same seed, same requests.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Directory to write `<scenario>.json` and `<scenario>.svg` into.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Name of the system under test, recorded in the report (e.g. "braid", "llama.cpp").
    #[arg(long)]
    pub label: Option<String>,
    /// Hard bound on the whole run: no request is sent or waited for past it.
    #[arg(long, default_value_t = 600.0)]
    pub max_duration_secs: f64,
    /// Vocabulary size of the served model; token ids must stay below it.
    #[arg(long, default_value_t = 49152)]
    pub vocab_size: u32,
    /// Token ids prompts are drawn from, START..END (END exclusive); avoids special tokens.
    #[arg(long, default_value = "1000..40000")]
    pub token_range: TokenRange,
    /// `tokens`: exact-length token-id arrays; `words`: random words as a string
    /// (lengths then only approximate).
    #[arg(long, value_enum, default_value_t = PromptKind::Tokens)]
    pub prompt_kind: PromptKind,
    /// An ITL above this many milliseconds counts as a stall.
    #[arg(long, default_value_t = 250.0)]
    pub stall_ms: f64,
    /// Goodput SLO: a request's TTFT must be at most this.
    #[arg(long)]
    pub slo_ttft_ms: Option<f64>,
    /// Goodput SLO: a request's own ITL p99 must be at most this.
    #[arg(long)]
    pub slo_itl_p99_ms: Option<f64>,
    /// Short requests sent (one at a time) before measuring, and not recorded.
    #[arg(long, default_value_t = 1)]
    pub warmup: usize,
    /// A JSON Schema file put on every request as `response_format` (json_schema), to measure
    /// what structured outputs cost. Answers then end where the schema is complete, so for a
    /// like-for-like token count use one that `max_tokens` cuts (an unbounded array).
    #[arg(long)]
    pub json_schema: Option<PathBuf>,
    /// Sample every completion at this temperature, each request with a seed of its own,
    /// instead of greedily: what clients at the OpenAI API's default (1) cost the server.
    #[arg(long)]
    pub temperature: Option<f64>,
}

impl CommonArgs {
    pub fn slo(&self) -> Slo {
        Slo {
            ttft_ms: self.slo_ttft_ms,
            itl_p99_ms: self.slo_itl_p99_ms,
        }
    }

    /// The `--json-schema` file's schema, if one was given.
    pub fn json_schema(&self) -> anyhow::Result<Option<serde_json::Value>> {
        let Some(path) = &self.json_schema else {
            return Ok(None);
        };
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("--json-schema {}: {e}", path.display()))?;
        let schema = serde_json::from_str(&text)
            .map_err(|e| anyhow::anyhow!("--json-schema {} is not JSON: {e}", path.display()))?;
        Ok(Some(schema))
    }

    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.token_range.end <= self.vocab_size,
            "--token-range {} reaches past --vocab-size {}",
            self.token_range,
            self.vocab_size
        );
        anyhow::ensure!(
            self.max_duration_secs > 0.0 && self.max_duration_secs.is_finite(),
            "--max-duration-secs must be > 0"
        );
        anyhow::ensure!(self.stall_ms > 0.0, "--stall-ms must be > 0");
        if let Some(t) = self.temperature {
            anyhow::ensure!(
                t > 0.0 && t.is_finite(),
                "--temperature must be > 0 (leave it out for greedy completions)"
            );
        }
        Ok(())
    }
}

#[derive(Args, Debug, Clone, Serialize)]
pub struct ScalingArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Concurrency levels, in order.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16,32")]
    pub concurrency: Vec<usize>,
    #[arg(long, default_value_t = 24)]
    pub prompt_tokens: usize,
    #[arg(long, default_value_t = 64)]
    pub max_tokens: usize,
    /// Requests per level (default: max(4, 2 × concurrency)).
    #[arg(long)]
    pub requests_per_level: Option<usize>,
}

impl ScalingArgs {
    pub fn requests_at(&self, concurrency: usize) -> usize {
        self.requests_per_level.unwrap_or((2 * concurrency).max(4))
    }
}

#[derive(Args, Debug, Clone, Serialize)]
pub struct InterferenceArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Streams that start decoding at t = 0.
    #[arg(long, default_value_t = 4)]
    pub decoders: usize,
    /// Tokens each decoder generates.
    #[arg(long, default_value_t = 400)]
    pub decode_tokens: usize,
    /// Prompt length of each decoder.
    #[arg(long, default_value_t = 24)]
    pub prompt_tokens: usize,
    /// Prompt length of each long prompt.
    #[arg(long, default_value_t = 1200)]
    pub long_prompt_tokens: usize,
    /// How many long prompts arrive.
    #[arg(long, default_value_t = 3)]
    pub long_prompts: usize,
    /// Tokens each long prompt generates.
    #[arg(long, default_value_t = 16)]
    pub long_max_tokens: usize,
    /// Seconds between long-prompt arrivals.
    #[arg(long, default_value_t = 3.0)]
    pub interval_secs: f64,
    /// Arrival of the first long prompt, seconds after the decoders start.
    #[arg(long, default_value_t = 1.0)]
    pub first_at_secs: f64,
}

#[derive(Args, Debug, Clone, Serialize)]
pub struct PoissonArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Mean arrival rate, requests per second.
    #[arg(long, default_value_t = 1.0)]
    pub rate: f64,
    /// Seconds of arrivals (default 30 when --num-requests is not given).
    #[arg(long)]
    pub duration_secs: Option<f64>,
    /// Number of arrivals (stops at whichever of this and --duration-secs comes first).
    #[arg(long)]
    pub num_requests: Option<usize>,
    /// Prompt lengths and weights, LEN:WEIGHT,...
    #[arg(long, default_value = "32:0.5,256:0.3,1024:0.2")]
    pub prompt_mix: PromptMix,
    #[arg(long, default_value_t = 64)]
    pub max_tokens: usize,
}

/// One request at a time, each greedy and short, so TTFT is the time to read the prompt.
#[derive(Args, Debug, Clone, Serialize)]
pub struct PrefixCacheArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Distinct long prompts, each sent once cold and then once more (warm).
    #[arg(long, default_value_t = 8)]
    pub prompts: usize,
    /// Length of each of those prompts.
    #[arg(long, default_value_t = 1000)]
    pub prompt_tokens: usize,
    /// Prompts made of one shared prefix and a suffix of their own (0: no such phase).
    /// The first of them puts the prefix in the cache and is reported on its own.
    #[arg(long, default_value_t = 8)]
    pub shared_prompts: usize,
    /// Length of the shared prefix.
    #[arg(long, default_value_t = 1000)]
    pub prefix_tokens: usize,
    /// Length of each shared-prefix prompt's own suffix.
    #[arg(long, default_value_t = 24)]
    pub suffix_tokens: usize,
    /// Tokens each request generates.
    #[arg(long, default_value_t = 8)]
    pub max_tokens: usize,
}

/// Edit requests one at a time, then random text at one and at many streams.
#[derive(Args, Debug, Clone, Serialize)]
pub struct SpeculativeArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Edit requests (chat: a text back with one change), sent without and then with the
    /// unchanged text as `prediction`.
    #[arg(long, default_value_t = 8)]
    pub edits: usize,
    /// Most tokens of an edit's answer (it ends where the model ends it).
    #[arg(long, default_value_t = 300)]
    pub max_tokens: usize,
    /// Random-text requests at one stream.
    #[arg(long, default_value_t = 6)]
    pub random_requests: usize,
    /// Streams of the many-stream random phase (twice as many requests).
    #[arg(long, default_value_t = 16)]
    pub random_concurrency: usize,
    #[arg(long, default_value_t = 24)]
    pub random_prompt_tokens: usize,
    #[arg(long, default_value_t = 128)]
    pub random_max_tokens: usize,
    /// A second server (say, the same build with `--speculative off`) sent every request too,
    /// side by side: request by request, alternating which goes first, for the edits and the
    /// one-stream random text; level after level for the many-stream one. Its groups are
    /// named `... (baseline)`.
    #[arg(long)]
    pub baseline_url: Option<String>,
}

#[derive(Args, Debug, Clone)]
pub struct CompareArgs {
    /// Report of the system to rate (numerator).
    pub a: PathBuf,
    /// Report of the baseline (denominator).
    pub b: PathBuf,
    /// Print the comparison as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        bench: BenchArgs,
    }

    fn parse(args: &[&str]) -> Scenario {
        let mut v = vec!["bench"];
        v.extend_from_slice(args);
        Cli::try_parse_from(v).unwrap().bench.scenario
    }

    #[test]
    fn scaling_defaults_and_lists() {
        let Scenario::Scaling(s) = parse(&["scaling"]) else {
            panic!()
        };
        assert_eq!(s.concurrency, vec![1, 2, 4, 8, 16, 32]);
        assert_eq!(s.common.url, "http://127.0.0.1:8080");
        assert_eq!(s.common.token_range.to_string(), "1000..40000");
        assert_eq!((s.requests_at(1), s.requests_at(8)), (4, 16));
        let Scenario::Scaling(s) = parse(&[
            "scaling",
            "--concurrency",
            "3,5",
            "--requests-per-level",
            "2",
        ]) else {
            panic!()
        };
        assert_eq!(s.concurrency, vec![3, 5]);
        assert_eq!(s.requests_at(5), 2);
    }

    #[test]
    fn api_key_is_not_serialized() {
        let Scenario::Poisson(p) = parse(&["poisson", "--api-key", "sekrit", "--rate", "2"]) else {
            panic!()
        };
        let v = serde_json::to_string(&p).unwrap();
        assert!(!v.contains("sekrit") && v.contains("\"rate\":2.0"));
    }

    #[test]
    fn a_temperature_samples_and_zero_is_refused() {
        let Scenario::Scaling(s) = parse(&["scaling", "--temperature", "0.8"]) else {
            panic!()
        };
        assert_eq!(s.common.temperature, Some(0.8));
        assert!(s.common.validate().is_ok());
        let Scenario::Scaling(s) = parse(&["scaling", "--temperature", "0"]) else {
            panic!()
        };
        assert!(s.common.validate().is_err());
        let Scenario::Scaling(s) = parse(&["scaling"]) else {
            panic!()
        };
        assert_eq!(s.common.temperature, None);
    }

    #[test]
    fn token_range_must_fit_the_vocabulary() {
        let Scenario::Interference(i) = parse(&["interference", "--vocab-size", "5000"]) else {
            panic!()
        };
        assert!(i.common.validate().is_err());
        let Scenario::Compare(c) = parse(&["compare", "a.json", "b.json", "--json"]) else {
            panic!()
        };
        assert!(c.json);
    }

    #[test]
    fn speculative_defaults() {
        let Scenario::Speculative(s) = parse(&["speculative", "--baseline-url", "http://b"]) else {
            panic!()
        };
        assert_eq!((s.edits, s.max_tokens), (8, 300));
        assert_eq!(
            (s.random_requests, s.random_concurrency, s.random_max_tokens),
            (6, 16, 128)
        );
        assert_eq!(s.baseline_url.as_deref(), Some("http://b"));
        assert_eq!(Scenario::Speculative(s).name(), "speculative");
    }

    #[test]
    fn prefix_cache_defaults() {
        let Scenario::PrefixCache(p) = parse(&["prefix-cache", "--prompts", "3"]) else {
            panic!()
        };
        assert_eq!((p.prompts, p.prompt_tokens, p.max_tokens), (3, 1000, 8));
        assert_eq!(
            (p.shared_prompts, p.prefix_tokens, p.suffix_tokens),
            (8, 1000, 24)
        );
        assert_eq!(Scenario::PrefixCache(p).name(), "prefix-cache");
    }
}
