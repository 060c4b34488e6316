//! Prometheus metrics under vLLM's names and meanings with the `braid_` prefix, so the
//! Kubernetes inference gateway's endpoint picker and existing vLLM dashboards read braid as is.
//!
//! Some routers read vLLM's own names only (`vllm:num_requests_waiting`, ...), hard-coded:
//! with `--metrics-compat vllm` those families are written a second time under vLLM's names,
//! from the same values at the same scrape.

use prometheus::{
    Encoder, Gauge, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec,
    Opts, Registry, TextEncoder,
};

pub struct Metrics {
    registry: Registry,
    /// Families repeated under vLLM's names (`--metrics-compat vllm`).
    vllm_names: bool,
    pub num_requests_running: IntGauge,
    pub num_requests_waiting: IntGauge,
    pub kv_cache_usage_perc: Gauge,
    pub time_to_first_token: Histogram,
    pub inter_token_latency: Histogram,
    pub e2e_request_latency: Histogram,
    pub request_queue_time: Histogram,
    pub request_prompt_tokens: Histogram,
    pub request_generation_tokens: Histogram,
    pub iteration_tokens: Histogram,
    pub step_duration: Histogram,
    pub prompt_tokens_total: IntCounter,
    pub generation_tokens_total: IntCounter,
    pub num_preemptions_total: IntCounter,
    pub prefix_cache_queries_total: IntCounter,
    pub prefix_cache_hits_total: IntCounter,
    /// Always 1, with the KV cache's shape as labels (vLLM's cache_config_info, which the
    /// inference gateway's endpoint picker reads for the block size).
    pub cache_config_info: IntGaugeVec,
    /// Always 1, with braid's version, the compute kernel in force and the CPU architecture
    /// as labels, so a dashboard shows which build and which kernel each replica runs.
    pub build_info: IntGaugeVec,
    pub request_success_total: IntCounterVec,
    pub request_errors_total: IntCounterVec,
    /// Embedding requests answered, their texts and their tokens (they also count in the
    /// request families above, as vLLM counts its pooling requests).
    pub embedding_requests_total: IntCounter,
    pub embedding_texts_total: IntCounter,
    pub embedding_prompt_tokens_total: IntCounter,
    /// Speculative decoding: drafts verified, their tokens, the tokens accepted, and the
    /// tokens accepted at each position of a draft (vLLM's spec_decode families).
    pub spec_decode_num_drafts: IntCounter,
    pub spec_decode_num_draft_tokens: IntCounter,
    pub spec_decode_num_accepted_tokens: IntCounter,
    pub spec_decode_num_accepted_tokens_per_pos: IntCounterVec,
}

/// braid's family → vLLM's name for it, as routers and gateways read them (counters carry
/// `_total` in the exposition, as vLLM's do).
const VLLM_NAMES: &[(&str, &str)] = &[
    ("braid_num_requests_running", "vllm:num_requests_running"),
    ("braid_num_requests_waiting", "vllm:num_requests_waiting"),
    ("braid_kv_cache_usage_perc", "vllm:kv_cache_usage_perc"),
    ("braid_kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    (
        "braid_prefix_cache_queries_total",
        "vllm:prefix_cache_queries_total",
    ),
    (
        "braid_prefix_cache_hits_total",
        "vllm:prefix_cache_hits_total",
    ),
    ("braid_cache_config_info", "vllm:cache_config_info"),
    ("braid_request_success_total", "vllm:request_success_total"),
    ("braid_prompt_tokens_total", "vllm:prompt_tokens_total"),
    (
        "braid_e2e_request_latency_seconds",
        "vllm:e2e_request_latency_seconds",
    ),
    (
        "braid_request_queue_time_seconds",
        "vllm:request_queue_time_seconds",
    ),
    (
        "braid_spec_decode_num_drafts_total",
        "vllm:spec_decode_num_drafts_total",
    ),
    (
        "braid_spec_decode_num_draft_tokens_total",
        "vllm:spec_decode_num_draft_tokens_total",
    ),
    (
        "braid_spec_decode_num_accepted_tokens_total",
        "vllm:spec_decode_num_accepted_tokens_total",
    ),
    (
        "braid_spec_decode_num_accepted_tokens_per_pos_total",
        "vllm:spec_decode_num_accepted_tokens_per_pos_total",
    ),
];

fn buckets_secs() -> Vec<f64> {
    vec![
        0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
        10.0, 20.0, 40.0, 80.0,
    ]
}

fn buckets_tokens() -> Vec<f64> {
    vec![
        1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0,
    ]
}

impl Metrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        let hist = |name: &str, help: &str, buckets: Vec<f64>| {
            let h = Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets))
                .expect("histogram");
            registry.register(Box::new(h.clone())).expect("register");
            h
        };
        let counter = |name: &str, help: &str| {
            let c = IntCounter::new(name, help).expect("counter");
            registry.register(Box::new(c.clone())).expect("register");
            c
        };
        let gauge = |name: &str, help: &str| {
            let g = IntGauge::new(name, help).expect("gauge");
            registry.register(Box::new(g.clone())).expect("register");
            g
        };
        let kv = Gauge::new(
            "braid_kv_cache_usage_perc",
            "Fraction of KV cache blocks in use (0 to 1).",
        )
        .expect("gauge");
        registry.register(Box::new(kv.clone())).expect("register");
        let success = IntCounterVec::new(
            Opts::new(
                "braid_request_success_total",
                "Finished requests by finish reason.",
            ),
            &["finished_reason"],
        )
        .expect("counter");
        registry
            .register(Box::new(success.clone()))
            .expect("register");
        let errors = IntCounterVec::new(
            Opts::new(
                "braid_request_errors_total",
                "Requests answered with an error, by HTTP status.",
            ),
            &["status"],
        )
        .expect("counter");
        registry
            .register(Box::new(errors.clone()))
            .expect("register");
        let cache_config = IntGaugeVec::new(
            Opts::new(
                "braid_cache_config_info",
                "KV cache configuration as labels (value always 1): tokens per block, blocks \
                 in the pool (num_gpu_blocks, under vLLM's label name, though they are in RAM), \
                 whether prefix caching is on, and how keys and values are stored \
                 (cache_dtype: f16 or q8_0).",
            ),
            &[
                "block_size",
                "num_gpu_blocks",
                "enable_prefix_caching",
                "cache_dtype",
            ],
        )
        .expect("gauge");
        registry
            .register(Box::new(cache_config.clone()))
            .expect("register");
        let accepted_per_pos = IntCounterVec::new(
            Opts::new(
                "braid_spec_decode_num_accepted_tokens_per_pos_total",
                "Drafted tokens accepted, by their position in the draft (0 is the first).",
            ),
            &["position"],
        )
        .expect("counter");
        registry
            .register(Box::new(accepted_per_pos.clone()))
            .expect("register");
        let build_info = IntGaugeVec::new(
            Opts::new(
                "braid_build_info",
                "braid's version, the compute kernel in force (BRAID_KERNEL's names) and the \
                 CPU architecture as labels (value always 1).",
            ),
            &["version", "kernel", "arch"],
        )
        .expect("gauge");
        registry
            .register(Box::new(build_info.clone()))
            .expect("register");
        build_info
            .with_label_values(&[
                env!("CARGO_PKG_VERSION"),
                braid_kernels::active().name(),
                std::env::consts::ARCH,
            ])
            .set(1);
        Self {
            num_requests_running: gauge(
                "braid_num_requests_running",
                "Requests whose sequences are admitted (prefilling or decoding).",
            ),
            num_requests_waiting: gauge(
                "braid_num_requests_waiting",
                "Requests waiting to be admitted.",
            ),
            kv_cache_usage_perc: kv,
            time_to_first_token: hist(
                "braid_time_to_first_token_seconds",
                "Request arrival to first token sent.",
                buckets_secs(),
            ),
            inter_token_latency: hist(
                "braid_inter_token_latency_seconds",
                "Gap between consecutive tokens of one stream.",
                buckets_secs(),
            ),
            e2e_request_latency: hist(
                "braid_e2e_request_latency_seconds",
                "Request arrival to last token.",
                buckets_secs(),
            ),
            request_queue_time: hist(
                "braid_request_queue_time_seconds",
                "Request arrival to first scheduled.",
                buckets_secs(),
            ),
            request_prompt_tokens: hist(
                "braid_request_prompt_tokens",
                "Prompt length of finished requests.",
                buckets_tokens(),
            ),
            request_generation_tokens: hist(
                "braid_request_generation_tokens",
                "Generated tokens of finished requests.",
                buckets_tokens(),
            ),
            iteration_tokens: hist(
                "braid_iteration_tokens_total",
                "Tokens (decodes + prompt rows) per engine step.",
                buckets_tokens(),
            ),
            step_duration: hist(
                "braid_step_duration_seconds",
                "Wall time of one engine step.",
                buckets_secs(),
            ),
            prompt_tokens_total: counter(
                "braid_prompt_tokens_total",
                "Prompt tokens read (recomputation after preemption not counted).",
            ),
            generation_tokens_total: counter("braid_generation_tokens_total", "Tokens generated."),
            num_preemptions_total: counter(
                "braid_num_preemptions_total",
                "Sequences preempted to free KV blocks.",
            ),
            prefix_cache_queries_total: counter(
                "braid_prefix_cache_queries_total",
                "Tokens looked up in the prefix cache: every token of every admitted sequence \
                 (vLLM's prefix_cache_queries).",
            ),
            prefix_cache_hits_total: counter(
                "braid_prefix_cache_hits_total",
                "Tokens found in the prefix cache, whose K/V were reused instead of computed \
                 (vLLM's prefix_cache_hits).",
            ),
            cache_config_info: cache_config,
            build_info,
            request_success_total: success,
            request_errors_total: errors,
            embedding_requests_total: counter(
                "braid_embedding_requests_total",
                "Embedding requests answered (also counted in braid_request_success_total).",
            ),
            embedding_texts_total: counter("braid_embedding_texts_total", "Texts embedded."),
            embedding_prompt_tokens_total: counter(
                "braid_embedding_prompt_tokens_total",
                "Tokens of the texts embedded, special tokens included, padding not \
                 (also counted in braid_prompt_tokens_total).",
            ),
            spec_decode_num_drafts: counter(
                "braid_spec_decode_num_drafts_total",
                "Drafts verified (one per sequence and step that verified drafted tokens).",
            ),
            spec_decode_num_draft_tokens: counter(
                "braid_spec_decode_num_draft_tokens_total",
                "Drafted tokens verified.",
            ),
            spec_decode_num_accepted_tokens: counter(
                "braid_spec_decode_num_accepted_tokens_total",
                "Drafted tokens accepted: each is a token that needed no step of its own.",
            ),
            spec_decode_num_accepted_tokens_per_pos: accepted_per_pos,
            registry,
            vllm_names: false,
        }
    }

    /// Also writes the families routers read under vLLM's names.
    pub fn with_vllm_names(mut self) -> Self {
        self.vllm_names = true;
        self
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut families = self.registry.gather();
        if self.vllm_names {
            let copies: Vec<_> = families
                .iter()
                .flat_map(|f| {
                    VLLM_NAMES
                        .iter()
                        .filter(|(braid, _)| *braid == f.name())
                        .map(|(_, vllm)| {
                            let mut copy = f.clone();
                            copy.set_name(vllm.to_string());
                            copy
                        })
                        .collect::<Vec<_>>()
                })
                .collect();
            families.extend(copies);
        }
        let mut buf = Vec::new();
        TextEncoder::new()
            .encode(&families, &mut buf)
            .expect("text encoding");
        String::from_utf8(buf).expect("utf-8")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vllm_names_repeat_the_families_routers_read() {
        let m = Metrics::new().with_vllm_names();
        m.num_requests_waiting.set(3);
        m.kv_cache_usage_perc.set(0.25);
        m.prefix_cache_hits_total.inc_by(7);
        let text = m.render();
        for line in [
            "braid_num_requests_waiting 3",
            "vllm:num_requests_waiting 3",
            "vllm:num_requests_running 0",
            "vllm:kv_cache_usage_perc 0.25",
            "vllm:gpu_cache_usage_perc 0.25",
            "vllm:prefix_cache_hits_total 7",
            "vllm:prefix_cache_queries_total 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
        assert!(text.contains("# TYPE vllm:prefix_cache_hits_total counter"));
        assert!(!Metrics::new().render().contains("vllm:"));
    }
}
