//! Request traces for a collector (`--otlp-traces-endpoint`): OpenTelemetry spans over
//! OTLP/HTTP, one trace per generation, so a request that crossed a router can be followed into
//! the replica: how long it queued, how long its prompt took to read, how long it decoded.
//!
//! A request's spans are written when it ends, from the times the generation already keeps:
//! `request` (its whole life, with its id, endpoint, token counts and finish reason) and, inside
//! it, `queue` (arrival until first scheduled), `prompt` (until the first token: reading the
//! prompt, less what the prefix cache held) and `decode` (the rest). A W3C `traceparent` header
//! (from a router or client that traces) makes `request` a child of the caller's span. Spans
//! leave in batches from the exporter's own thread; the request never waits on the collector.

use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{Span, SpanKind, TraceContextExt, Tracer, TracerProvider};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracer, SdkTracerProvider,
};
use opentelemetry_sdk::Resource;
use std::time::{Duration, Instant, SystemTime};

/// The trace exporter.
pub struct RequestTraces {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
}

/// One finished generation, as its spans tell it.
pub struct TracedRequest<'a> {
    pub parent: &'a Context,
    pub request_id: &'a str,
    pub id: u64,
    pub endpoint: &'static str,
    pub arrival: Instant,
    /// Arrival to first scheduled.
    pub queue: Option<Duration>,
    pub first_token: Option<Instant>,
    pub end: Instant,
    pub prompt_tokens: usize,
    pub cached_tokens: Option<usize>,
    pub completion_tokens: usize,
    pub finish_reason: &'static str,
}

impl RequestTraces {
    /// An exporter sending to `endpoint` (an OTLP/HTTP traces URL such as
    /// http://127.0.0.1:4318/v1/traces), JSON-encoded, in batches at most a second apart.
    pub fn new(endpoint: &str) -> anyhow::Result<Self> {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpJson)
            .with_endpoint(endpoint)
            .build()?;
        let batches = BatchSpanProcessor::builder(exporter)
            .with_batch_config(
                BatchConfigBuilder::default()
                    .with_scheduled_delay(Duration::from_secs(1))
                    .build(),
            )
            .build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(batches)
            .with_resource(Resource::builder().with_service_name("braid").build())
            .build();
        let tracer = provider.tracer("braid");
        Ok(Self { provider, tracer })
    }

    /// The caller's trace context from a W3C `traceparent` header, if it sent one.
    pub fn parent(headers: &axum::http::HeaderMap) -> Context {
        TraceContextPropagator::new().extract(&HeaderExtractor(headers))
    }

    pub fn record(&self, r: &TracedRequest) {
        // Instants to wall-clock times, from one reading of both clocks.
        let (now, wall) = (Instant::now(), SystemTime::now());
        let at = |t: Instant| wall - now.saturating_duration_since(t);
        let mut request = self
            .tracer
            .span_builder("request")
            .with_kind(SpanKind::Server)
            .with_start_time(at(r.arrival))
            .with_attributes([
                KeyValue::new("braid.request_id", r.request_id.to_string()),
                KeyValue::new("braid.id", r.id as i64),
                KeyValue::new("braid.endpoint", r.endpoint),
                KeyValue::new("braid.prompt_tokens", r.prompt_tokens as i64),
                KeyValue::new("braid.cached_tokens", r.cached_tokens.unwrap_or(0) as i64),
                KeyValue::new("braid.completion_tokens", r.completion_tokens as i64),
                KeyValue::new("braid.finish_reason", r.finish_reason),
            ])
            .start_with_context(&self.tracer, r.parent);
        let scheduled = r.queue.map(|q| r.arrival + q);
        let cx = r
            .parent
            .with_remote_span_context(request.span_context().clone());
        let child = |name: &'static str, from: Instant, to: Instant, tokens: Vec<KeyValue>| {
            let mut span = self
                .tracer
                .span_builder(name)
                .with_start_time(at(from))
                .with_attributes(tokens)
                .start_with_context(&self.tracer, &cx);
            span.end_with_timestamp(at(to));
        };
        let read_until = r.first_token.unwrap_or(r.end);
        if let Some(scheduled) = scheduled {
            child("queue", r.arrival, scheduled, vec![]);
            child(
                "prompt",
                scheduled,
                read_until,
                vec![
                    KeyValue::new("braid.prompt_tokens", r.prompt_tokens as i64),
                    KeyValue::new("braid.cached_tokens", r.cached_tokens.unwrap_or(0) as i64),
                ],
            );
        }
        if let Some(first) = r.first_token {
            child(
                "decode",
                first,
                r.end,
                vec![KeyValue::new(
                    "braid.completion_tokens",
                    r.completion_tokens as i64,
                )],
            );
        }
        request.end_with_timestamp(at(r.end));
    }
}

impl Drop for RequestTraces {
    /// Sends what is still batched.
    fn drop(&mut self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::warn!("request traces not all sent at exit: {e}");
        }
    }
}

struct HeaderExtractor<'a>(&'a axum::http::HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}
