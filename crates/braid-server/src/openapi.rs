//! GET /openapi.json: the API's contract, generated from the request and response types in
//! `openai_types.rs` (utoipa), so clients, gateways and fuzzers read what the server accepts.
//!
//! The operations are declared here on empty functions, not on the handlers, so `routes/`
//! stays plain axum. A test checks that every documented path is a route of the router.
//! The dashboard and its event feed are left out: they are a view, not the API.

use crate::anthropic_types::{
    CountTokensRequest, ErrorBody as AnthropicErrorBody, MessageOut, MessagesRequest, TokenCount,
};
use crate::error::ErrorBody;
use crate::field_bounds::{CHAT_ONLY_FIELDS, COMPLETION_ONLY_FIELDS, SAMPLING_FIELDS};
use crate::openai_types::{
    ChatCompletionChunk, ChatCompletionRequest, ChatCompletionResponse, CompletionRequest,
    CompletionResponse, DetokenizeRequest, DetokenizeResponse, EmbeddingRequest, EmbeddingResponse,
    ModelCard, ModelList, RenderedRequest, TokenizeRequest, TokenizeResponse,
    TokenizerInfoResponse,
};
use crate::request_fields::{
    AtDefault, RequestFields, ACCEPTED_MESSAGE_NOOPS, ACCEPTED_NOOPS, UNSUPPORTED,
};
use crate::responses_types::{ResponseDeleted, ResponseObject, ResponsesRequest};
use crate::state::AppState;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use std::sync::OnceLock;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "braid",
        description = "OpenAI-compatible completions and chat on CPU. Errors are `{\"error\": {message, type, param, code}}`. When the server runs with --api-key, operations marked with `bearer` need `Authorization: Bearer KEY`.",
    ),
    paths(
        completions,
        chat_completions,
        responses_create,
        responses_retrieve,
        responses_delete,
        messages,
        count_tokens,
        embeddings,
        render_completion,
        render_chat,
        list_models,
        get_model,
        tokenize,
        detokenize,
        tokenizer_info,
        health,
        health_generate,
        get_load,
        get_server_info,
        get_model_info,
        flush_cache,
        kv_event_sources,
        metrics
    ),
    components(schemas(ErrorBody, CompletionResponse, ChatCompletionChunk)),
    modifiers(&BearerAuth)
)]
pub struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("Needed only when the server runs with --api-key."))
                    .build(),
            ),
        );
    }
}

/// The document for a server serving `served_model_name` (and `embedding_model`): every
/// request type's `model` is its model's id, empty or absent, so clients and fuzzers know the
/// accepted values.
pub fn document(served_model_name: &str, embedding_model: Option<&str>) -> Value {
    static BASE: OnceLock<Value> = OnceLock::new();
    let mut doc = BASE
        .get_or_init(|| {
            serde_json::to_value(ApiDoc::openapi()).expect("the OpenAPI document serializes")
        })
        .clone();
    if let Some(schemas) = doc
        .pointer_mut("/components/schemas")
        .and_then(Value::as_object_mut)
    {
        for (name, schema) in schemas.iter_mut() {
            let id = match name.as_str() {
                "EmbeddingRequest" => embedding_model.unwrap_or(served_model_name),
                _ => served_model_name,
            };
            if let Some(model) = schema.pointer_mut("/properties/model") {
                model["enum"] = json!([id, "", null]);
                model["description"] = json!("The served model's id; may be empty or omitted.");
            }
        }
    }
    document_field_groups(&mut doc);
    document_bounds(&mut doc);
    doc
}

/// Writes the bounds of `field_bounds.rs` into the request schemas: the document states
/// what validation enforces, from the same list.
fn document_bounds(doc: &mut Value) {
    let requests = [
        ("CompletionRequest", COMPLETION_ONLY_FIELDS),
        ("ChatCompletionRequest", CHAT_ONLY_FIELDS),
    ];
    for (schema, own) in requests {
        for field in SAMPLING_FIELDS.iter().chain(own) {
            let pointer = format!("/components/schemas/{schema}/properties/{}", field.name);
            let Some(property) = doc.pointer_mut(&pointer) else {
                continue;
            };
            // `logit_bias` bounds the values of its object.
            let target = if property
                .get("additionalProperties")
                .is_some_and(Value::is_object)
            {
                &mut property["additionalProperties"]
            } else {
                property
            };
            // Whole bounds as integers, as utoipa writes them.
            let number = |x: f64| {
                if x.fract() == 0.0 {
                    json!(x as i64)
                } else {
                    json!(x)
                }
            };
            let lower = if field.exclusive_min {
                "exclusiveMinimum"
            } else {
                "minimum"
            };
            target[lower] = number(field.lowest());
            if let Some(max) = field.max {
                target["maximum"] = number(max);
            }
        }
    }
}

/// Writes `request_fields`' groups into the document: request bodies take no properties
/// besides those listed, the accepted no-ops and the fields accepted at their default only
/// are listed as such, and the refused OpenAI fields are named in the description with their
/// reasons.
fn document_field_groups(doc: &mut Value) {
    let noops = |list: &[(&str, &str)]| {
        list.iter()
            .map(|(name, why)| {
                let described =
                    json!({"description": format!("Accepted; it has no effect: {why}.")});
                (name.to_string(), described)
            })
            .collect::<Vec<_>>()
    };
    let at_default = |lists: &[&[AtDefault]]| {
        lists
            .iter()
            .flat_map(|l| l.iter())
            .map(|f| {
                let default: Value = serde_json::from_str(f.default).expect("defaults are JSON");
                let described = json!({
                    "description": format!("vLLM/SGLang field, accepted only at its default (or null): {}.", f.why),
                    "default": default,
                    "enum": [default, null],
                });
                (f.name.to_string(), described)
            })
            .collect::<Vec<_>>()
    };
    let with = |mut a: Vec<(String, Value)>, b: Vec<(String, Value)>| {
        a.extend(b);
        a
    };
    let groups = [
        (
            "CompletionRequest",
            with(
                noops(ACCEPTED_NOOPS),
                at_default(CompletionRequest::AT_DEFAULT),
            ),
        ),
        (
            "ChatCompletionRequest",
            with(
                noops(ACCEPTED_NOOPS),
                at_default(ChatCompletionRequest::AT_DEFAULT),
            ),
        ),
        ("ChatMessageIn", noops(ACCEPTED_MESSAGE_NOOPS)),
        ("ToolCallIn", vec![]),
        ("FunctionCallIn", vec![]),
        ("ToolIn", vec![]),
        ("FunctionDefinition", vec![]),
        ("TokenizeRequest", at_default(TokenizeRequest::AT_DEFAULT)),
        ("DetokenizeRequest", vec![]),
        ("EmbeddingRequest", at_default(EmbeddingRequest::AT_DEFAULT)),
        ("ResponsesRequest", vec![]),
        ("TextConfig", vec![]),
        ("ReasoningConfig", vec![]),
        ("ResponsesStreamOptions", vec![]),
    ];
    for (schema, extra) in groups {
        let Some(obj) = doc
            .pointer_mut(&format!("/components/schemas/{schema}"))
            .and_then(Value::as_object_mut)
        else {
            continue;
        };
        obj.insert("additionalProperties".into(), json!(false));
        if let Some(props) = obj.get_mut("properties").and_then(Value::as_object_mut) {
            for (name, described) in extra {
                props.entry(name).or_insert(described);
            }
        }
    }
    let refused = UNSUPPORTED
        .iter()
        .map(|(name, why)| format!("`{name}` ({why})"))
        .collect::<Vec<_>>()
        .join(", ");
    if let Some(Value::String(d)) = doc.pointer_mut("/info/description") {
        d.push_str(&format!(
            " Every request field is honored, listed as an accepted no-op, or refused with 400 and code `unsupported_parameter` naming it: unknown fields, and these OpenAI fields: {refused}."
        ));
    }
}

pub async fn openapi_json(State(state): State<AppState>) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        document(
            &state.served_model_name,
            state.embedding_model_name.as_deref(),
        )
        .to_string(),
    )
        .into_response()
}

/// The answers every POST of a JSON body can get besides its own.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)]
enum JsonPostErrors {
    #[response(status = 400, description = "Invalid request")]
    Invalid(ErrorBody),
    #[response(status = 401, description = "Missing or wrong API key")]
    Unauthorized(ErrorBody),
    #[response(status = 404, description = "Unknown model")]
    UnknownModel(ErrorBody),
    #[response(status = 413, description = "Body larger than --max-body-bytes")]
    TooLarge(ErrorBody),
    #[response(status = 415, description = "Body is not JSON")]
    NotJson(ErrorBody),
    #[response(status = 503, description = "Loading or draining")]
    Unavailable(ErrorBody),
}

#[utoipa::path(
    post,
    path = "/v1/completions",
    tag = "generation",
    request_body = CompletionRequest,
    responses(
        (status = 200, description = "The completion; with `stream: true`, server-sent events `data: {CompletionResponse}` ending with `data: [DONE]`.",
            content(
                (CompletionResponse = "application/json"),
                (String = "text/event-stream"),
            )),
        (status = 429, description = "Queue full; retry after Retry-After seconds", body = ErrorBody),
        JsonPostErrors,
    ),
    security((), ("bearer" = []))
)]
#[allow(dead_code)]
fn completions() {}

#[utoipa::path(
    post,
    path = "/v1/responses",
    tag = "openai",
    description = "OpenAI's Responses API, run as the chat request it translates to (docs/API.md): `input` as a string or items (messages, function_call, function_call_output, reasoning), `instructions`, function `tools`, `tool_choice`, `text.format`, `reasoning`. With `store` (the default while --response-store-mb is above 0) the response is kept for --response-store-secs, for GET /v1/responses/{id} and `previous_response_id`. Hosted tools, images, `background`, `truncation: auto` and every other value braid cannot honour are 400s naming the field.",
    request_body = ResponsesRequest,
    responses(
        (status = 200, description = "The response; with `stream: true`, OpenAI's typed server-sent events (response.created, response.in_progress, response.output_item.added, response.content_part.added, response.output_text.delta / response.reasoning_text.delta / response.function_call_arguments.delta and their .done, response.output_item.done, then response.completed or, cut by max_output_tokens, response.incomplete), each with its sequence_number.",
            content(
                (ResponseObject = "application/json"),
                (String = "text/event-stream"),
            )),
        (status = 429, description = "Queue full; retry after Retry-After seconds", body = ErrorBody),
        (status = 400, description = "A bad request, a field braid cannot honour (named), or a `previous_response_id` that is not stored (code `previous_response_not_found`)", body = ErrorBody),
    ),
    security((), ("bearer" = []))
)]
#[allow(dead_code)]
fn responses_create() {}

#[utoipa::path(
    get,
    path = "/v1/responses/{id}",
    tag = "openai",
    description = "A stored response, as it was answered.",
    params(("id" = String, Path, description = "The response's id")),
    responses(
        (status = 200, description = "The response", body = ResponseObject),
        (status = 404, description = "Not stored: made with `store: false`, deleted, or expired", body = ErrorBody),
    ),
    security((), ("bearer" = []))
)]
#[allow(dead_code)]
fn responses_retrieve() {}

#[utoipa::path(
    delete,
    path = "/v1/responses/{id}",
    tag = "openai",
    description = "Forgets a stored response.",
    params(("id" = String, Path, description = "The response's id")),
    responses(
        (status = 200, description = "Deleted", body = ResponseDeleted),
        (status = 404, description = "Not stored", body = ErrorBody),
    ),
    security((), ("bearer" = []))
)]
#[allow(dead_code)]
fn responses_delete() {}

#[utoipa::path(
    post,
    path = "/v1/messages",
    tag = "anthropic",
    description = "Anthropic's Messages API, run as the chat request it translates to (docs/API.md). Errors on this route are Anthropic's `{\"type\": \"error\", \"error\": {type, message}}`; `x-api-key: KEY` works as the key.",
    request_body = MessagesRequest,
    responses(
        (status = 200, description = "The message; with `stream: true`, Anthropic's named server-sent events (message_start, content_block_start/delta/stop, message_delta, message_stop).",
            content(
                (MessageOut = "application/json"),
                (String = "text/event-stream"),
            )),
        (status = 429, description = "Queue full; retry after Retry-After seconds", body = AnthropicErrorBody),
        (status = 400, description = "A bad request, or a field braid cannot honour, named", body = AnthropicErrorBody),
    ),
    security((), ("bearer" = []))
)]
#[allow(dead_code)]
fn messages() {}

#[utoipa::path(
    post,
    path = "/v1/messages/count_tokens",
    tag = "anthropic",
    description = "The tokens of the prompt a message with the same model, system, messages, tools and tool_choice reads.",
    request_body = CountTokensRequest,
    responses(
        (status = 200, description = "`{\"input_tokens\": N}`", body = TokenCount),
        (status = 400, description = "A bad request, or a field braid cannot honour, named", body = AnthropicErrorBody),
    ),
    security((), ("bearer" = []))
)]
#[allow(dead_code)]
fn count_tokens() {}

#[utoipa::path(
    post,
    path = "/v1/embeddings",
    tag = "embeddings",
    description = "One vector per input from the embedding model (`braid serve --embedding-model DIR`), whose texts share the engine's steps with generation. `input` is a string, an array of strings, an array of token ids or an array of arrays of them (at most 2,048 inputs, none empty); texts are cut at the model's `max_seq_length` as sentence-transformers cuts them, or to their last `truncate_prompt_tokens` tokens (vLLM's). `dimensions` other than the model's own and a generation model's id are 400s naming the field.",
    request_body = EmbeddingRequest,
    responses(
        (status = 200, description = "The vectors, in input order", body = EmbeddingResponse),
        (status = 429, description = "Queue full; retry after Retry-After seconds", body = ErrorBody),
        (status = 504, description = "Not answered within --request-timeout-secs; the request's waiting texts were dropped", body = ErrorBody),
        JsonPostErrors,
    ),
    security((), ("bearer" = []))
)]
#[allow(dead_code)]
fn embeddings() {}

#[utoipa::path(
    post,
    path = "/v1/chat/completions",
    tag = "generation",
    description = "`messages` are rendered into a prompt with the model's chat template: the GGUF's `tokenizer.chat_template`, or the file given with `braid serve --chat-template FILE`, which replaces it. A model with neither (a base model such as Gemma 3 270M) answers every chat request with 400, type `invalid_request_error`, code `no_chat_template`; /v1/completions still works.",
    request_body = ChatCompletionRequest,
    responses(
        (status = 200, description = "The answer; with `stream: true`, server-sent events `data: {ChatCompletionChunk}` ending with `data: [DONE]`.",
            content(
                (ChatCompletionResponse = "application/json"),
                (String = "text/event-stream"),
            )),
        (status = 429, description = "Queue full; retry after Retry-After seconds", body = ErrorBody),
        JsonPostErrors,
    ),
    security((), ("bearer" = []))
)]
#[allow(dead_code)]
fn chat_completions() {}

#[utoipa::path(
    post,
    path = "/v1/completions/render",
    tag = "generation",
    description = "vLLM's endpoint, which cache-aware routers call: the body of a /v1/completions request, validated as that endpoint validates it, answered with each prompt's token ids (one item per prompt) instead of a completion.",
    request_body = CompletionRequest,
    responses(
        (status = 200, description = "One rendered request per prompt", body = Vec<RenderedRequest>),
        JsonPostErrors,
    ),
    security((), ("bearer" = []))
)]
#[allow(dead_code)]
fn render_completion() {}

#[utoipa::path(
    post,
    path = "/v1/chat/completions/render",
    tag = "generation",
    description = "vLLM's endpoint, which cache-aware routers call: the body of a /v1/chat/completions request, validated as that endpoint validates it, answered with the rendered conversation's token ids instead of an answer.",
    request_body = ChatCompletionRequest,
    responses(
        (status = 200, description = "The rendered request", body = RenderedRequest),
        JsonPostErrors,
    ),
    security((), ("bearer" = []))
)]
#[allow(dead_code)]
fn render_chat() {}

#[utoipa::path(
    get,
    path = "/v1/models",
    tag = "models",
    responses(
        (status = 200, description = "The served model", body = ModelList),
        (status = 401, description = "Missing or wrong API key", body = ErrorBody),
        (status = 503, description = "Loading or draining", body = ErrorBody),
    ),
    security((), ("bearer" = []))
)]
#[allow(dead_code)]
fn list_models() {}

#[utoipa::path(
    get,
    path = "/v1/models/{id}",
    tag = "models",
    params(("id" = String, Path, description = "The model id")),
    responses(
        (status = 200, description = "The model", body = ModelCard),
        (status = 401, description = "Missing or wrong API key", body = ErrorBody),
        (status = 404, description = "Unknown model", body = ErrorBody),
        (status = 503, description = "Loading or draining", body = ErrorBody),
    ),
    security((), ("bearer" = []))
)]
#[allow(dead_code)]
fn get_model() {}

#[utoipa::path(
    post,
    path = "/tokenize",
    tag = "tokenizer",
    request_body = TokenizeRequest,
    responses(
        (status = 200, description = "The prompt's token ids", body = TokenizeResponse),
        JsonPostErrors,
    ),
    security((), ("bearer" = []))
)]
#[allow(dead_code)]
fn tokenize() {}

#[utoipa::path(
    post,
    path = "/detokenize",
    tag = "tokenizer",
    request_body = DetokenizeRequest,
    responses(
        (status = 200, description = "The tokens' text", body = DetokenizeResponse),
        JsonPostErrors,
    ),
    security((), ("bearer" = []))
)]
#[allow(dead_code)]
fn detokenize() {}

#[utoipa::path(
    get,
    path = "/tokenizer_info",
    tag = "tokenizer",
    description = "vLLM's endpoint: the tokenizer's named tokens and the chat template, for clients that tokenize with the server's own tokenizer (lm-evaluation-harness's `tokenizer_backend=remote`).",
    responses(
        (status = 200, description = "The tokenizer's configuration", body = TokenizerInfoResponse),
        (status = 401, description = "Missing or wrong API key", body = ErrorBody),
        (status = 503, description = "Loading or draining", body = ErrorBody),
    ),
    security((), ("bearer" = []))
)]
#[allow(dead_code)]
fn tokenizer_info() {}

#[utoipa::path(
    get,
    path = "/health",
    tag = "operations",
    responses(
        (status = 200, description = "Serving: `{\"status\": \"ok\"}`", body = serde_json::Value),
        (status = 503, description = "`{\"status\": \"loading\" | \"draining\" | \"engine_stopped\"}`", body = serde_json::Value),
    )
)]
#[allow(dead_code)]
fn health() {}

#[utoipa::path(
    get,
    path = "/health_generate",
    tag = "operations",
    description = "SGLang's health check, which routers may proxy: answers 200 once the model has written one token.",
    responses(
        (status = 200, description = "`{\"status\": \"ok\"}`", body = serde_json::Value),
        (status = 503, description = "Loading or draining", body = ErrorBody),
    ),
    security((), ("bearer" = []))
)]
#[allow(dead_code)]
fn health_generate() {}

#[utoipa::path(
    get,
    path = "/get_load",
    tag = "operations",
    description = "For routers (vllm-router's `power_of_two` polls it): `load` is the requests running plus waiting. Open without a key, like /health.",
    responses(
        (status = 200, description = "`{\"load\", \"num_running\", \"num_waiting\", \"kv_cache_usage\"}`", body = serde_json::Value),
        (status = 503, description = "Loading or draining", body = ErrorBody),
    )
)]
#[allow(dead_code)]
fn get_load() {}

#[utoipa::path(
    get,
    path = "/get_server_info",
    tag = "operations",
    description = "For routers (vllm-router's `kv_aware` reads `model_id` and `kv_block_size`).",
    responses(
        (status = 200, description = "`{\"model_id\", \"served_model_name\", \"kv_block_size\", \"max_model_len\", \"max_total_num_tokens\", \"version\"}`", body = serde_json::Value),
        (status = 401, description = "Missing or wrong API key", body = ErrorBody),
        (status = 503, description = "Loading or draining", body = ErrorBody),
    ),
    security((), ("bearer" = []))
)]
#[allow(dead_code)]
fn get_server_info() {}

#[utoipa::path(
    get,
    path = "/get_model_info",
    tag = "operations",
    description = "SGLang's model info, which routers proxy.",
    responses(
        (status = 200, description = "`{\"model_path\", \"tokenizer_path\", \"is_generation\"}`", body = serde_json::Value),
        (status = 401, description = "Missing or wrong API key", body = ErrorBody),
        (status = 503, description = "Loading or draining", body = ErrorBody),
    ),
    security((), ("bearer" = []))
)]
#[allow(dead_code)]
fn get_model_info() {}

#[utoipa::path(
    post,
    path = "/flush_cache",
    tag = "operations",
    description = "Drops every prefix-cache block no running request holds (vllm-router sends it to every worker). Takes no body.",
    responses(
        (status = 200, description = "`{\"status\": \"ok\", \"dropped_blocks\": N}`", body = serde_json::Value),
        (status = 401, description = "Missing or wrong API key", body = ErrorBody),
        (status = 503, description = "Loading or draining", body = ErrorBody),
    ),
    security((), ("bearer" = []))
)]
#[allow(dead_code)]
fn flush_cache() {}

#[utoipa::path(
    get,
    path = "/kv_event_sources",
    tag = "operations",
    description = "Where the server publishes its KV-cache events (`braid serve --kv-events tcp://HOST:PORT`), keyed by data-parallel rank as vllm-router's discovery reads it: `{\"0\": {\"endpoint\", \"topic\": \"\", \"publisher\": \"zmq\", \"encoding\": \"msgpack\", \"schema_version\": 1, ...}}`.",
    responses(
        (status = 200, description = "The event source", body = serde_json::Value),
        (status = 401, description = "Missing or wrong API key", body = ErrorBody),
        (status = 404, description = "The server publishes no events (`kv_events_off`)", body = ErrorBody),
        (status = 503, description = "Loading or draining", body = ErrorBody),
    ),
    security((), ("bearer" = []))
)]
#[allow(dead_code)]
fn kv_event_sources() {}

#[utoipa::path(
    get,
    path = "/metrics",
    tag = "operations",
    responses(
        (status = 200, description = "Prometheus text format", content_type = "text/plain", body = String),
        (status = 401, description = "Missing or wrong API key (with --protect-metrics)", body = ErrorBody),
    ),
    security((), ("bearer" = []))
)]
#[allow(dead_code)]
fn metrics() {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_describes_the_request_types() {
        let doc = document("tiny", None);
        assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
        let paths = doc["paths"].as_object().unwrap();
        for p in [
            "/v1/completions",
            "/v1/chat/completions",
            "/v1/completions/render",
            "/v1/chat/completions/render",
            "/v1/models",
            "/v1/models/{id}",
            "/tokenize",
            "/detokenize",
            "/tokenizer_info",
            "/health",
            "/metrics",
        ] {
            assert!(paths.contains_key(p), "{p} is documented");
        }
        let schemas = &doc["components"]["schemas"];
        let completion = &schemas["CompletionRequest"]["properties"];
        for field in [
            "prompt",
            "max_tokens",
            "temperature",
            "stop",
            "stream",
            "top_k",
        ] {
            assert!(completion.get(field).is_some(), "CompletionRequest.{field}");
        }
        assert_eq!(completion["prompt"]["oneOf"].as_array().unwrap().len(), 3);
        for field in [
            "response_format",
            "structured_outputs",
            "guided_json",
            "guided_regex",
            "guided_choice",
            "guided_grammar",
        ] {
            assert!(completion.get(field).is_some(), "CompletionRequest.{field}");
        }
        assert!(schemas.get("ResponseFormat").is_some());
        assert!(completion["logit_bias"].is_object());
        assert!(completion["metadata"]["description"]
            .as_str()
            .unwrap()
            .contains("no effect"));
        assert_eq!(schemas["CompletionRequest"]["additionalProperties"], false);
        assert_eq!(completion["return_hidden_states"]["default"], false);
        assert!(completion.get("separate_reasoning").is_none());
        let chat = &schemas["ChatCompletionRequest"]["properties"];
        for field in [
            "no_stop_trim",
            "skip_special_tokens",
            "ignore_eos",
            "return_hidden_states",
            "continue_final_message",
            "separate_reasoning",
            "stream_reasoning",
            "include_reasoning",
        ] {
            assert!(chat.get(field).is_some(), "ChatCompletionRequest.{field}");
        }
        assert!(schemas["TokenizeRequest"]["properties"]
            .get("continue_final_message")
            .is_some());
        assert!(doc["info"]["description"]
            .as_str()
            .unwrap()
            .contains("`audio`"));
        assert_eq!(completion["model"]["enum"], json!(["tiny", "", null]));
        assert_eq!(completion["temperature"]["maximum"], 2.0);
        assert_eq!(completion["top_p"]["exclusiveMinimum"], 0.0);
        assert_eq!(completion["top_k"]["minimum"], -1);
        assert_eq!(completion["n"]["maximum"], 16);
        assert_eq!(completion["best_of"]["maximum"], 1);
        assert_eq!(
            completion["logit_bias"]["additionalProperties"]["minimum"],
            -100.0
        );
        let chat = &schemas["ChatCompletionRequest"]["properties"];
        assert_eq!(chat["top_logprobs"]["maximum"], 20);
        assert!(
            chat["logprobs"].get("maximum").is_none(),
            "chat's is a boolean"
        );
        for (schema, own) in [
            ("CompletionRequest", COMPLETION_ONLY_FIELDS),
            ("ChatCompletionRequest", CHAT_ONLY_FIELDS),
        ] {
            for field in SAMPLING_FIELDS.iter().chain(own) {
                assert!(
                    schemas[schema]["properties"].get(field.name).is_some(),
                    "{schema}.{} is in field_bounds.rs but not a field of the type",
                    field.name
                );
            }
        }
        assert_eq!(
            schemas["ChatCompletionRequest"]["properties"]["model"]["enum"],
            json!(["tiny", "", null])
        );
        let statuses = |path: &str| -> Vec<String> {
            doc["paths"][path]["post"]["responses"]
                .as_object()
                .unwrap()
                .keys()
                .cloned()
                .collect()
        };
        assert_eq!(
            statuses("/v1/completions"),
            ["200", "400", "401", "404", "413", "415", "429", "503"]
        );
        assert_eq!(
            statuses("/tokenize"),
            ["200", "400", "401", "404", "413", "415", "503"]
        );
        let invalid = &doc["paths"]["/v1/chat/completions"]["post"]["responses"]["400"];
        assert_eq!(
            invalid["content"]["application/json"]["schema"]["$ref"],
            "#/components/schemas/ErrorBody"
        );
        assert!(schemas["ErrorBody"].is_object());
        assert!(schemas["ChatCompletionResponse"].is_object());
        assert_eq!(
            doc["components"]["securitySchemes"]["bearer"]["scheme"],
            "bearer"
        );
    }
}
