//! `braid serve`'s flags: one struct, every flag with a default and a doc comment, because
//! these comments are what `braid serve --help` and docs/CLI.md show.
//!
//! Engine settings are turned into an `EngineConfig` here, so the engine never sees clap.

use crate::engine::EngineConfig;
use std::path::PathBuf;
use std::time::Duration;

/// Other servers' metric names /metrics can repeat braid's gauges and counters under.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricsCompat {
    Vllm,
}

/// How the generation model's final hidden states make an embedding (`--pooling`; the flag's
/// help says what each does).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolingArg {
    Mean,
    Last,
    Cls,
}

impl From<PoolingArg> for braid_engine::Pooling {
    fn from(p: PoolingArg) -> Self {
        match p {
            PoolingArg::Mean => Self::Mean,
            PoolingArg::Last => Self::Last,
            PoolingArg::Cls => Self::Cls,
        }
    }
}

/// Where drafted tokens come from (`--speculative`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpeculativeMode {
    /// Each request's own prompt and answer, and recent answers to other requests.
    Ngram,
    /// No drafting (a request's `prediction` is still drafted: it asked for it).
    Off,
}

/// How the KV cache stores keys and values (`--kv-cache-dtype`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvCacheDtype {
    /// Half floats (vLLM's name for the model's own precision).
    Auto,
    /// Half floats.
    F16,
    /// int8 with a half-float scale per 32 values (llama.cpp's q8_0): half the memory and
    /// reads of f16, so twice the tokens in --kv-cache-mb, and faster decoding at long
    /// contexts where reading the cache is what bounds it.
    #[value(name = "q8_0")]
    Q8_0,
}

impl From<KvCacheDtype> for braid_model::KvDtype {
    fn from(d: KvCacheDtype) -> Self {
        match d {
            KvCacheDtype::Auto | KvCacheDtype::F16 => Self::F16,
            KvCacheDtype::Q8_0 => Self::Q8_0,
        }
    }
}

/// Where a chat answer's reasoning is found (`--reasoning-parser`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReasoningParser {
    /// From the chat template: `<think>` tags where it writes them (Qwen3, QwQ, DeepSeek-R1
    /// distills, SmolLM3).
    Auto,
    /// Between `<think>` and `</think>`, whatever the template.
    Think,
    /// Nowhere: the answer is all reply.
    None,
}

/// How chat answers are read for tool calls (`--tool-call-parser`), by vLLM's parser names.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolCallParser {
    /// The syntax the chat template writes calls in; Hermes for a template that renders no
    /// tools (braid then describes them in Hermes's syntax itself).
    Auto,
    /// `<tool_call>{"name": ..., "arguments": ...}</tool_call>` (Qwen 2.5 and 3, Hermes).
    Hermes,
    /// `{"name": ..., "parameters": ...}` as the whole answer (Llama 3.1 to 3.3).
    #[value(name = "llama3_json")]
    Llama3Json,
    /// `<tool_call><function=NAME><parameter=P>...` (Qwen3-Coder).
    #[value(name = "qwen3_coder")]
    Qwen3Coder,
    /// `[TOOL_CALLS]` (Mistral Nemo, Small 3.2, Devstral, Ministral).
    Mistral,
}

#[derive(clap::Args, Clone, Debug)]
pub struct ServeArgs {
    /// Address to listen on (0.0.0.0 to accept connections from other machines).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,

    /// Port to listen on (0 picks a free one and logs it).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,

    /// Path to a GGUF model file (llama, qwen2, qwen3 or gemma3 architecture) [default:
    /// models/SmolLM2-135M-Instruct.Q4_1.gguf, or none when --embedding-model is given
    /// alone: the server then only embeds].
    #[arg(long, env = "BRAID_MODEL")]
    pub model: Option<PathBuf>,

    /// A sentence-transformers BERT model directory (such as models/all-MiniLM-L6-v2, from
    /// `scripts/fetch-model.sh all-minilm-l6-v2`) to serve /v1/embeddings with, beside the
    /// generation model; its id is the directory's name. Its texts share the engine's steps
    /// under the same latency target.
    #[arg(long, value_name = "DIR")]
    pub embedding_model: Option<PathBuf>,

    /// The generation model also serves /v1/embeddings (under its own id), its final hidden
    /// states (after the output norm) pooled and normalised to unit length: `mean` over the
    /// text's tokens, the `last` token's (how decoder embedders such as Qwen3-Embedding are
    /// used) or the first token's (`cls`). Its texts are read like prompts, in the same steps.
    /// Needs a generation model: without `--model` (with --embedding-model alone) it is refused.
    #[arg(long, value_enum, value_name = "POOLING")]
    pub pooling: Option<PoolingArg>,

    /// Load the model from this model-hub repository instead of --model (needs --hf-file).
    /// The hub cache (HF_HUB_CACHE, else HF_HOME/hub) is used first; only a missing file is
    /// downloaded (from HF_ENDPOINT, with HF_TOKEN), and never with HF_HUB_OFFLINE=1.
    #[arg(long, value_name = "OWNER/NAME", requires = "hf_file")]
    pub hf_repo: Option<String>,

    /// The GGUF file in --hf-repo to load.
    #[arg(long, value_name = "FILE", requires = "hf_repo")]
    pub hf_file: Option<String>,

    /// Branch, tag or commit hash of --hf-repo.
    #[arg(long, value_name = "REV", default_value = "main")]
    pub hf_revision: String,

    /// A Jinja chat template file to render /v1/chat/completions' messages with, instead of
    /// the model's own (`tokenizer.chat_template` in the GGUF). A model with neither answers
    /// chat requests with 400: base models such as Gemma 3 270M have no template.
    #[arg(long, value_name = "FILE")]
    pub chat_template: Option<PathBuf>,

    /// Read every prompt in full instead of reusing the KV cache of a prefix computed before
    /// (by an earlier request sharing it, e.g. the same system prompt).
    #[arg(long)]
    pub no_prefix_cache: bool,

    /// Speculative decoding: guess each answer's next tokens from text it is likely to repeat
    /// and verify the guesses beside the decoding, as many as the cost model says pay. The
    /// answers are exactly those of plain decoding.
    #[arg(long, value_enum, default_value_t = SpeculativeMode::Ngram)]
    pub speculative: SpeculativeMode,

    /// Most drafted tokens one sequence verifies in a step.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub num_speculative_tokens: u16,

    /// A smaller GGUF with the model's vocabulary that drafts where the request's prediction,
    /// its own tokens and recent answers have nothing to draft. It reads every prompt and token
    /// the model reads, and its KV cache shares --kv-cache-mb.
    #[arg(long, value_name = "GGUF")]
    pub draft_model: Option<PathBuf>,

    /// Model id clients use in the `model` field and /v1/models lists [default: the model
    /// file's name without .gguf]. Requests that omit `model` are served too.
    #[arg(long)]
    pub served_model_name: Option<String>,

    /// Memory for the KV cache, in MiB; it bounds how many tokens all running sequences hold.
    #[arg(long, default_value_t = 1024)]
    pub kv_cache_mb: usize,

    /// How the KV cache stores keys and values. q8_0 rounds them to 8 bits (text drifts from
    /// f16's sooner, about as llama.cpp's --cache-type-k/v q8_0 does).
    #[arg(long, value_enum, default_value_t = KvCacheDtype::Auto)]
    pub kv_cache_dtype: KvCacheDtype,

    /// Tokens per KV cache block; braid's attention takes 16 only (the flag is here for
    /// vLLM's command lines, which pass 16).
    #[arg(long, default_value_t = 16)]
    pub block_size: usize,

    /// Most sequences one engine step may run together.
    #[arg(long, default_value_t = 32)]
    pub max_num_seqs: usize,

    /// Most tokens (decodes plus prompt slices) one engine step may process.
    #[arg(long, default_value_t = 512)]
    pub max_batched_tokens: usize,

    /// Most requests waiting for admission; beyond it the server answers 429 at once.
    #[arg(long, default_value_t = 256)]
    pub max_waiting: usize,

    /// Target inter-token latency in ms: prompt slices per step are sized to keep running
    /// streams under it (0 disables the target; only --max-batched-tokens bounds a step).
    #[arg(long, default_value_t = 100)]
    pub itl_target_ms: u64,

    /// Read each prompt in one step instead of slicing it across steps.
    #[arg(long)]
    pub no_chunked_prefill: bool,

    /// A waiting request older than this many ms is admitted before newer work.
    #[arg(long, default_value_t = 2000)]
    pub starvation_ms: u64,

    /// Compute threads for the model [default: the number of available cores].
    #[arg(long)]
    pub threads: Option<usize>,

    /// On SIGTERM/SIGINT, seconds to let running requests finish before exiting.
    #[arg(long, default_value_t = 30)]
    pub drain_timeout_secs: u64,

    /// Largest request body accepted, in bytes (larger: 413).
    #[arg(long, default_value_t = 1024 * 1024)]
    pub max_body_bytes: usize,

    /// Upper bound for a request's `max_tokens` [default: the model's context length].
    #[arg(long)]
    pub max_tokens_cap: Option<usize>,

    /// Most stop strings one request may give.
    #[arg(long, default_value_t = 4)]
    pub max_stop_strings: usize,

    /// Longest stop string accepted, in bytes.
    #[arg(long, default_value_t = 256)]
    pub max_stop_string_len: usize,

    /// Wall-clock limit per request in seconds: when it passes, a generation ends with
    /// finish_reason "length" (and a log line saying why), and an embedding request is
    /// answered 504 with its waiting texts dropped.
    #[arg(long, default_value_t = 600)]
    pub request_timeout_secs: u64,

    /// Seconds a client has to send a request's headers (also how long an idle keep-alive
    /// connection stays open) and, separately, its body; slow clients are disconnected.
    #[arg(long, default_value_t = 10)]
    pub header_read_timeout_secs: u64,

    /// Longest prompt accepted, in tokens (after the chat template); longer: 400
    /// [default: the model's context length].
    #[arg(long)]
    pub max_prompt_tokens: Option<usize>,

    /// Most tokens of work one request may ask for: its prompts' tokens for every choice plus
    /// `max_tokens` for every choice (a prompt array of 64 long prompts is minutes of engine
    /// time); more: 400 `request_too_large`.
    #[arg(long, default_value_t = 131_072)]
    pub max_request_tokens: usize,

    /// Read control tokens typed in chat messages (`<|im_start|>system` in a user's text) as
    /// control tokens, as braid did before; by default a message's text is read as the text
    /// it is, and only the chat template's own markup is special.
    #[arg(long)]
    pub special_in_messages: bool,

    /// Where a chat answer's reasoning is: `auto` reads the chat template (`<think>` tags
    /// where it writes them), `think` always looks for `<think>`…`</think>`, `none` never.
    /// Reasoning goes to `reasoning_content` in chat, to reasoning items in responses and to
    /// thinking blocks in messages.
    #[arg(long, value_enum, default_value_t = ReasoningParser::Auto)]
    pub reasoning_parser: ReasoningParser,

    /// The syntax tool calls are written in: read from the chat template by default (Hermes
    /// `<tool_call>`, Llama 3 JSON, Qwen3-Coder XML or Mistral `[TOOL_CALLS]`). Forced calls
    /// (`tool_choice` `required` or a named function) are held to the same syntax.
    #[arg(long, value_enum, default_value_t = ToolCallParser::Auto)]
    pub tool_call_parser: ToolCallParser,

    /// Memory for the Responses API's stored responses, in MiB (what `store` keeps and
    /// `previous_response_id` continues); the oldest leave first when it is full. 0: keep
    /// none, and `store: true` is a 400.
    #[arg(long, default_value_t = 64)]
    pub response_store_mb: usize,

    /// Seconds a stored response is kept.
    #[arg(long, default_value_t = 3600)]
    pub response_store_secs: u64,

    /// Most open connections from one client address (off unless given): one client cannot
    /// take every place of --max-connections. Past it, 503 `too_many_connections`.
    #[arg(long)]
    pub max_connections_per_ip: Option<usize>,

    /// Seconds a request may wait for one of the two request-preparation slots (tokenizing,
    /// rendering templates) before it gets 429: a flood of large bodies then costs its senders,
    /// not everyone queued behind them.
    #[arg(long, default_value_t = 10)]
    pub prep_wait_secs: u64,

    /// Seconds one engine step may run before /health answers 503 "engine_stalled" (a step
    /// that never returns would otherwise leave every request to its deadline behind a 200).
    #[arg(long, default_value_t = 60)]
    pub step_stall_secs: u64,

    /// Seconds a connection may go without being able to write to its client (a stream whose
    /// client stopped reading); then it is closed and its request cancelled, which frees the
    /// request's sequence and KV blocks.
    #[arg(long, default_value_t = 30)]
    pub write_timeout_secs: u64,

    /// Most open client connections. Past it, a new connection gets a 503 (with Retry-After)
    /// and is closed; past twice it, a new connection is closed without an answer.
    #[arg(long, default_value_t = 512)]
    pub max_connections: usize,

    /// API key clients must send as `Authorization: Bearer KEY` on every route except
    /// /health, /get_load, /metrics, /dashboard and /openapi.json; /debug/steps also takes `?api_key=KEY`
    /// (open the dashboard as /dashboard?api_key=KEY). Repeat for several keys; the env
    /// variable takes a comma-separated list. Without one, the server is open to anyone.
    #[arg(
        long = "api-key",
        value_name = "KEY",
        env = "BRAID_API_KEY",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub api_keys: Vec<crate::auth::ApiKey>,

    /// Require the API key on /metrics too.
    #[arg(long)]
    pub protect_metrics: bool,

    /// Publish the prefix cache's stores and evictions (KV-cache events in vLLM's format:
    /// ZeroMQ PUB, MessagePack) on this tcp://HOST:PORT endpoint, for routers that route on
    /// what each replica holds (vllm-router's kv_aware, llm-d's precise prefix scorer).
    /// GET /kv_event_sources then names it.
    #[arg(long, value_name = "ENDPOINT")]
    pub kv_events: Option<String>,

    /// The topic frame of every KV-cache event message: empty for vllm-router; llm-d's router
    /// reads `kv@POD_IP:PORT@MODEL`.
    #[arg(long, value_name = "TOPIC", default_value = "", requires = "kv_events")]
    pub kv_events_topic: String,

    /// Send a trace of every generation request (spans: request, queue, prompt, decode, with
    /// token counts; a child of the caller's `traceparent`) to this OTLP/HTTP traces URL,
    /// JSON-encoded, e.g. http://127.0.0.1:4318/v1/traces.
    #[arg(long, value_name = "URL")]
    pub otlp_traces_endpoint: Option<String>,

    /// Also export, under vLLM's names (`vllm`), the gauges and counters routers and
    /// gateways hard-code: vllm:num_requests_waiting, vllm:num_requests_running,
    /// vllm:kv_cache_usage_perc (and vllm:gpu_cache_usage_perc for older routers), the prefix
    /// cache's counters and vllm:cache_config_info.
    #[arg(long, value_enum)]
    pub metrics_compat: Option<MetricsCompat>,

    /// Let web pages from ORIGIN (e.g. https://app.example.com; * for any) call the API from
    /// a browser (CORS; repeatable). Without it, no CORS headers are sent.
    #[arg(long = "cors-origin", value_name = "ORIGIN")]
    pub cors_origins: Vec<String>,
}

impl ServeArgs {
    /// The flags with their defaults, for `model` at `path` (tests and embedding).
    pub fn with_model(path: impl Into<PathBuf>) -> Self {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Wrapper {
            #[command(flatten)]
            args: ServeArgs,
        }
        let mut args = Wrapper::parse_from(["braid"]).args;
        args.model = Some(path.into());
        args
    }

    /// The generation model's file: --model, else the default one, unless --embedding-model
    /// is given alone (or with --hf-repo, which names the file instead).
    pub fn generation_model(&self) -> Option<PathBuf> {
        match &self.model {
            Some(m) => Some(m.clone()),
            None if self.embedding_model.is_some() && self.hf_repo.is_none() => None,
            None => Some(PathBuf::from(braid_model::DEFAULT_MODEL_PATH)),
        }
    }

    pub fn to_engine_config(&self) -> EngineConfig {
        EngineConfig {
            kv_cache_mb: self.kv_cache_mb,
            block_size: self.block_size,
            max_num_seqs: self.max_num_seqs,
            max_batched_tokens: self.max_batched_tokens,
            max_waiting: self.max_waiting,
            chunked_prefill: !self.no_chunked_prefill,
            itl_target: (self.itl_target_ms > 0).then(|| Duration::from_millis(self.itl_target_ms)),
            starvation_after: Duration::from_millis(self.starvation_ms),
            prefix_caching: !self.no_prefix_cache,
            pooling: self.pooling.map(Into::into),
            speculation: braid_engine::Speculation {
                ngram: self.speculative == SpeculativeMode::Ngram,
                max_tokens: self.num_speculative_tokens.into(),
            },
            // Loaded by the server once the model is (`server::lifecycle`).
            draft_model: None,
            kv_cache_dtype: self.kv_cache_dtype.into(),
        }
    }

    /// The hub file to load, when --hf-repo is given.
    pub fn hub_model(&self) -> Option<braid_model::hub::HubModel> {
        Some(braid_model::hub::HubModel {
            repo: self.hf_repo.clone()?,
            file: self.hf_file.clone()?,
            revision: self.hf_revision.clone(),
        })
    }

    /// The id /v1/models lists and requests may name.
    pub fn served_model_name(&self) -> String {
        self.served_model_name.clone().unwrap_or_else(|| {
            let file = match (&self.hf_file, self.generation_model()) {
                (Some(f), _) if self.hf_repo.is_some() => PathBuf::from(f),
                (_, Some(model)) => model,
                // Only embeddings: the embedding model's id.
                (_, None) => self.embedding_model.clone().unwrap_or_default(),
            };
            let name = file
                .file_name()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            name.strip_suffix(".gguf")
                .map(str::to_string)
                .unwrap_or(name)
        })
    }

    /// The --chat-template file's source, read and compiled now so that a missing or broken
    /// file stops start-up with its name.
    pub fn chat_template_source(&self) -> anyhow::Result<Option<String>> {
        self.chat_template
            .as_deref()
            .map(read_chat_template)
            .transpose()
    }

    /// Compute threads: the flag, else every available core.
    pub fn threads(&self) -> usize {
        self.threads.filter(|&n| n > 0).unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        })
    }

    /// Flags that cannot work, each with the fix.
    pub fn check(&self) -> anyhow::Result<()> {
        let positive = [
            ("--kv-cache-mb", self.kv_cache_mb),
            ("--block-size", self.block_size),
            ("--max-num-seqs", self.max_num_seqs),
            ("--max-batched-tokens", self.max_batched_tokens),
            ("--max-waiting", self.max_waiting),
            ("--max-body-bytes", self.max_body_bytes),
            ("--request-timeout-secs", self.request_timeout_secs as usize),
            (
                "--header-read-timeout-secs",
                self.header_read_timeout_secs as usize,
            ),
            ("--max-connections", self.max_connections),
            ("--max-request-tokens", self.max_request_tokens),
            ("--write-timeout-secs", self.write_timeout_secs as usize),
            ("--step-stall-secs", self.step_stall_secs as usize),
            ("--prep-wait-secs", self.prep_wait_secs as usize),
        ];
        for (flag, value) in positive {
            if value == 0 {
                anyhow::bail!("{flag} must be at least 1");
            }
        }
        if self.max_connections_per_ip == Some(0) {
            anyhow::bail!(
                "--max-connections-per-ip must be at least 1 (omit it for no per-address limit)"
            );
        }
        if self.max_prompt_tokens == Some(0) {
            anyhow::bail!(
                "--max-prompt-tokens must be at least 1 (omit it to allow the model's whole context)"
            );
        }
        if self.protect_metrics && self.api_keys.is_empty() {
            anyhow::bail!(
                "--protect-metrics needs an API key: pass --api-key KEY or set BRAID_API_KEY"
            );
        }
        for origin in &self.cors_origins {
            check_origin(origin)?;
        }
        if self.pooling.is_some() && self.generation_model().is_none() {
            anyhow::bail!(
                "--pooling makes the generation model embed, and there is none: pass --model GGUF \
                 (--embedding-model alone serves only its own embeddings)"
            );
        }
        if self.draft_model.is_some() && self.speculative == SpeculativeMode::Off {
            anyhow::bail!(
                "--draft-model drafts for speculative decoding, which --speculative off turns off: \
                 pass one or the other"
            );
        }
        if self.draft_model.is_some() && self.generation_model().is_none() {
            anyhow::bail!(
                "--draft-model drafts for a generation model, and there is none: pass --model GGUF"
            );
        }
        if self.max_tokens_cap == Some(0) {
            anyhow::bail!(
                "--max-tokens-cap must be at least 1 (omit it to allow the model's whole context)"
            );
        }
        Ok(())
    }
}

/// A `--chat-template FILE`'s source, checked to compile; the error names the flag and the file
/// (`braid chat` takes the flag too).
pub fn read_chat_template(path: &std::path::Path) -> anyhow::Result<String> {
    braid_text::ChatTemplate::read_file(path).map_err(|e| match e {
        braid_text::TextError::Template(reason) => anyhow::anyhow!("--chat-template: {reason}"),
        other => other.into(),
    })
}

/// A CORS origin as browsers send it: `*`, or scheme://host[:port] with no path.
fn check_origin(origin: &str) -> anyhow::Result<()> {
    if origin == "*" {
        return Ok(());
    }
    let fix = "give it as scheme://host[:port], e.g. https://app.example.com (no path, no trailing slash), or * for any origin";
    let Some((scheme, host)) = origin.split_once("://") else {
        anyhow::bail!("--cors-origin {origin:?}: {fix}");
    };
    let ok = matches!(scheme, "http" | "https")
        && !host.is_empty()
        && !host.contains('/')
        && host.bytes().all(|b| b.is_ascii_graphic());
    if !ok {
        anyhow::bail!("--cors-origin {origin:?}: {fix}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults() -> ServeArgs {
        ServeArgs::with_model("models/SmolLM2-135M-Instruct.Q4_1.gguf")
    }

    #[test]
    fn the_defaults_pass_the_check() {
        defaults().check().unwrap();
    }

    #[test]
    fn pooling_needs_a_generation_model() {
        let mut a = defaults();
        a.pooling = Some(PoolingArg::Last);
        a.check().unwrap();
        a.model = None;
        a.embedding_model = Some("models/all-MiniLM-L6-v2".into());
        let err = a.check().unwrap_err().to_string();
        assert!(
            err.contains("--pooling") && err.contains("--model"),
            "{err}"
        );
    }

    #[test]
    fn the_default_port_is_8080_and_the_connection_cap_512() {
        let a = defaults();
        assert_eq!(a.port, 8080);
        assert_eq!(a.max_connections, 512);
    }

    #[test]
    fn by_default_the_server_is_open_with_no_cors() {
        let a = defaults();
        assert!(a.api_keys.is_empty() && a.cors_origins.is_empty() && !a.protect_metrics);
    }

    #[test]
    fn the_default_engine_has_a_latency_target_chunked_prefill_and_prefix_caching() {
        let e = defaults().to_engine_config();
        assert_eq!(e.itl_target, Some(Duration::from_millis(100)));
        assert!(e.chunked_prefill);
        assert!(e.prefix_caching);
        assert_eq!(e.max_waiting, 256);
    }

    #[test]
    fn a_zero_itl_target_and_no_chunked_prefill_turn_both_off() {
        let off = ServeArgs {
            itl_target_ms: 0,
            no_chunked_prefill: true,
            ..defaults()
        };
        assert_eq!(off.to_engine_config().itl_target, None);
        assert!(!off.to_engine_config().chunked_prefill);
    }

    #[test]
    fn a_local_model_is_served_under_its_file_name_without_gguf_and_no_hub() {
        let a = defaults();
        assert_eq!(a.served_model_name(), "SmolLM2-135M-Instruct.Q4_1");
        assert_eq!(a.hub_model(), None);
    }

    #[test]
    fn a_hub_model_is_served_under_its_file_name_at_revision_main() {
        let hub = ServeArgs {
            hf_repo: Some("owner/repo".into()),
            hf_file: Some("sub/m.Q8_0.gguf".into()),
            ..defaults()
        };
        assert_eq!(hub.served_model_name(), "m.Q8_0");
        assert_eq!(hub.hub_model().unwrap().revision, "main");
    }

    #[test]
    fn a_zero_block_size_is_refused() {
        let args = ServeArgs {
            block_size: 0,
            ..defaults()
        };
        assert!(args.check().is_err());
    }

    #[test]
    fn a_chat_template_file_is_read_and_checked_before_start_up() {
        assert_eq!(defaults().chat_template_source().unwrap(), None);
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("chat.jinja");
        let with = |path: &std::path::Path| ServeArgs {
            chat_template: Some(path.to_path_buf()),
            ..defaults()
        };
        let msg = with(&file).chat_template_source().unwrap_err().to_string();
        assert!(
            msg.starts_with("--chat-template: cannot read") && msg.contains("chat.jinja"),
            "{msg}"
        );
        std::fs::write(&file, "{% if add_generation_prompt %}").unwrap();
        let msg = with(&file).chat_template_source().unwrap_err().to_string();
        assert!(
            msg.contains("chat.jinja is not a valid Jinja template"),
            "{msg}"
        );
        std::fs::write(&file, "{{ messages[0].content }}").unwrap();
        assert_eq!(
            with(&file).chat_template_source().unwrap().as_deref(),
            Some("{{ messages[0].content }}")
        );
    }

    #[test]
    fn protect_metrics_without_an_api_key_is_refused() {
        let args = ServeArgs {
            protect_metrics: true,
            ..defaults()
        };
        assert!(args.check().is_err());
    }

    #[test]
    fn a_cors_origin_is_star_or_http_scheme_and_host_without_a_path() {
        for (origin, ok) in [
            ("*", true),
            ("https://app.example.com", true),
            ("http://localhost:3000", true),
            ("https://app.example.com/", false),
            ("app.example.com", false),
            ("ftp://x", false),
        ] {
            let args = ServeArgs {
                cors_origins: vec![origin.into()],
                ..defaults()
            };
            assert_eq!(args.check().is_ok(), ok, "{origin}");
        }
    }
}
