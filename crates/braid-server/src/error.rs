//! Every error braid answers with, as OpenAI's JSON body `{"error": {message, type, param,
//! code}}` with the right status, so clients show the message instead of a parse failure.
//!
//! Handlers return `ApiError`; validation errors, engine admission errors and axum's body
//! rejections convert into it here, in one place. axum's own 422 for a body of the wrong
//! shape is never sent: it becomes a 400 carrying serde's message, which names the field.
//!
//! `ValidationError` lives here too, beside its HTTP mapping, so that everything that
//! refuses a request (validation, tool checking, the tokenizer endpoints) depends on this
//! file and this file on none of them.

use crate::field_bounds::{NumericField, MAX_CHOICES};
use crate::trace_failures::mark_if_by_design;
use axum::extract::rejection::{BytesRejection, JsonRejection};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use braid_engine::SubmitError;
use serde::Serialize;

/// The body OpenAI clients parse.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorDetail {
    pub message: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub param: Option<String>,
    pub code: Option<&'static str>,
}

#[derive(Clone, Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub detail: ErrorDetail,
    /// Seconds for the `Retry-After` header (429 and 503).
    pub retry_after: Option<u64>,
}

/// Put on every error response so the logging middleware can say why without reparsing it.
#[derive(Clone, Debug)]
pub struct ErrorMessage(pub String);

impl ApiError {
    pub fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            detail: ErrorDetail {
                message: message.into(),
                kind,
                param: None,
                code: None,
            },
            retry_after: None,
        }
    }

    pub fn with_param(mut self, param: impl Into<String>) -> Self {
        self.detail.param = Some(param.into());
        self
    }

    pub fn with_code(mut self, code: &'static str) -> Self {
        self.detail.code = Some(code);
        self
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    /// A 400 for a field whose value is wrong, naming it.
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        Self::bad_request(message).with_param(param)
    }

    /// A 400 `unsupported_parameter` for a field braid cannot honour, naming it.
    pub fn unsupported(param: impl Into<String>, message: impl Into<String>) -> Self {
        Self::invalid(param, message).with_code("unsupported_parameter")
    }

    /// The error with the field names of an API translated to chat (`renames`: chat's name,
    /// then the API's), in `param` and in the message.
    pub fn renamed(mut self, renames: &[(&str, &str)]) -> Self {
        for (chat, api) in renames {
            if self.detail.param.as_deref() == Some(chat) {
                self.detail.param = Some(api.to_string());
                self.detail.message = self
                    .detail
                    .message
                    .replace(&format!("`{chat}`"), &format!("`{api}`"));
            }
        }
        self
    }

    pub fn route_not_found(method: &str, path: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!("no route for {method} {path}; braid serves OpenAI's /v1/completions, /v1/chat/completions, /v1/responses, /v1/embeddings and /v1/models, Anthropic's /v1/messages, and /tokenize, /detokenize, /health, /metrics and /dashboard; GET /openapi.json lists every route"),
        )
        .with_code("route_not_found")
    }

    /// A stored thing (a response) that is not there.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "invalid_request_error", message).with_code("not_found")
    }

    pub fn method_not_allowed(method: &str, path: &str) -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "invalid_request_error",
            format!("{path} does not accept {method}"),
        )
        .with_code("method_not_allowed")
    }

    pub fn payload_too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request_error",
            format!("the request body is larger than the server's limit of {limit} bytes (--max-body-bytes)"),
        )
        .with_code("request_too_large")
    }

    pub fn overloaded(message: impl Into<String>) -> Self {
        Self {
            retry_after: Some(1),
            ..Self::new(StatusCode::TOO_MANY_REQUESTS, "rate_limit_error", message)
                .with_code("server_at_capacity")
        }
    }

    pub fn loading() -> Self {
        Self {
            retry_after: Some(1),
            ..Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "service_unavailable",
                "the model is still loading; retry shortly",
            )
            .with_code("loading")
        }
    }

    pub fn draining() -> Self {
        Self {
            retry_after: Some(1),
            ..Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "service_unavailable",
                "the server is shutting down and takes no new requests",
            )
            .with_code("draining")
        }
    }

    /// A request without a partial answer (an embedding) that outlived `--request-timeout-secs`.
    pub fn timeout(limit: std::time::Duration) -> Self {
        Self::new(
            StatusCode::GATEWAY_TIMEOUT,
            "timeout_error",
            format!(
                "the request took longer than --request-timeout-secs ({} s) and was dropped; \
                 send fewer or shorter inputs per request, or raise the limit",
                limit.as_secs()
            ),
        )
        .with_code("request_timeout")
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
            .with_code("engine_failed")
    }

    pub fn body(&self) -> ErrorBody {
        ErrorBody {
            error: self.detail.clone(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp = (self.status, axum::Json(self.body())).into_response();
        if let Some(secs) = self.retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if let Some(code) = self.detail.code {
            mark_if_by_design(&mut resp, code);
        }
        resp.extensions_mut()
            .insert(ErrorMessage(self.detail.message));
        resp
    }
}

/// Every way a request can be wrong, each message naming the field and the bound.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ValidationError {
    #[error("the model `{requested}` does not exist; this server serves `{served}`")]
    ModelNotFound { requested: String, served: String },
    #[error("`{requested}` {cannot}; the models here that do: {serving}")]
    WrongModelKind {
        requested: String,
        /// What the model cannot do, as the request asked it ("does not embed").
        cannot: &'static str,
        /// The ids that can, or "none".
        serving: String,
    },
    #[error("`{field}` is required")]
    Missing { field: &'static str },
    #[error("`{field}` must be a finite number, got {got}")]
    NotFinite { field: &'static str, got: f64 },
    #[error("`{field}` must be {bound}, got {got}")]
    OutOfRange {
        field: &'static str,
        bound: String,
        got: String,
    },
    #[error("`{field}` must not be empty")]
    Empty { field: &'static str },
    #[error("`{field}` must be {expected}")]
    WrongShape {
        field: &'static str,
        expected: &'static str,
    },
    #[error("give exactly one of `{first}` and `{second}`")]
    ExactlyOne {
        first: &'static str,
        second: &'static str,
    },
    #[error("`{field}` is not supported: {reason}")]
    Unsupported {
        field: &'static str,
        reason: &'static str,
    },
    #[error("{prompts} prompts × `n` {n} = {total} choices; at most {MAX_CHOICES} per request", total = .prompts * .n)]
    TooManyChoices { prompts: usize, n: usize },
    #[error("give at most one of `{first}` and `{second}`: a request's output follows one format")]
    TwoConstraints {
        first: &'static str,
        second: &'static str,
    },
    #[error("`{field}` cannot be enforced: {problem}")]
    Grammar {
        field: &'static str,
        problem: String,
    },
    #[error("`{field}` has token id {id}, outside the vocabulary of {vocab} tokens (ids 0 to {last})", last = .vocab - 1)]
    TokenOutOfVocab {
        field: &'static str,
        id: i64,
        vocab: usize,
    },
    #[error("`{field}` holds {count} {what}; at most {max} are allowed")]
    TooMany {
        field: &'static str,
        what: &'static str,
        count: usize,
        max: usize,
    },
    #[error("`stop` string {index} is {len} bytes long; at most {max} are allowed")]
    StopTooLong {
        index: usize,
        len: usize,
        max: usize,
    },
    #[error("`{param}` {reason}")]
    InvalidTool { param: String, reason: String },
    #[error("`{param}` cannot reach the chat template, which does not read `{name}`; the variables it reads are: {reads}")]
    TemplateVariable {
        param: String,
        name: String,
        reads: String,
    },
    #[error("`messages[{index}]` {reason}")]
    InvalidMessage { index: usize, reason: String },
    #[error("`messages` cannot be rendered with the model's chat template: {0}")]
    Template(String),
    #[error("this model has no chat template (its GGUF has no `tokenizer.chat_template`, as base models usually do not), so `messages` cannot be turned into a prompt; send the text as a `prompt` to /v1/completions, or start the server with `braid serve --chat-template FILE` to supply a Jinja chat template")]
    NoChatTemplate,
    #[error("the prompt cannot be tokenized: {0}")]
    Tokenize(String),
    #[error("prompt ({prompt} tokens) + {field} ({max_tokens}) = {total} exceeds the model's context of {context} tokens", total = .prompt + .max_tokens)]
    ContextOverflow {
        field: &'static str,
        prompt: usize,
        max_tokens: usize,
        context: usize,
    },
    #[error("the prompt ({prompt} tokens) fills the model's context of {context} tokens and leaves no room for a completion")]
    PromptFillsContext { prompt: usize, context: usize },
    #[error("`{field}` is {prompt} tokens long; this server accepts prompts of at most {max} tokens (--max-prompt-tokens)")]
    PromptTooLong {
        field: &'static str,
        prompt: usize,
        max: usize,
    },
    #[error("this request is {total} tokens of work ({prompt_tokens} prompt tokens over its {choices} choices, plus max_tokens {max_tokens} for each); this server accepts at most {budget} per request (--max-request-tokens): send fewer or shorter prompts, fewer choices or a lower max_tokens")]
    RequestTooLarge {
        field: &'static str,
        total: usize,
        prompt_tokens: usize,
        max_tokens: usize,
        choices: usize,
        budget: usize,
    },
}

impl ValidationError {
    pub fn out_of_range(field: &'static str, bound: &str, got: impl ToString) -> Self {
        ValidationError::OutOfRange {
            field,
            bound: bound.to_string(),
            got: got.to_string(),
        }
    }

    /// `got` is outside `field`'s bounds.
    pub fn outside(field: &NumericField, got: impl ToString) -> Self {
        Self::out_of_range(field.name, &field.bound(), got)
    }

    /// The one place a validation failure becomes an HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            ValidationError::ModelNotFound { .. } => StatusCode::NOT_FOUND,
            _ => StatusCode::BAD_REQUEST,
        }
    }

    /// OpenAI's `param`: the offending field.
    pub fn param(&self) -> Option<&str> {
        match self {
            ValidationError::ModelNotFound { .. } | ValidationError::WrongModelKind { .. } => {
                Some("model")
            }
            ValidationError::Missing { field }
            | ValidationError::NotFinite { field, .. }
            | ValidationError::OutOfRange { field, .. }
            | ValidationError::Empty { field }
            | ValidationError::WrongShape { field, .. }
            | ValidationError::Unsupported { field, .. }
            | ValidationError::TokenOutOfVocab { field, .. }
            | ValidationError::ContextOverflow { field, .. }
            | ValidationError::PromptTooLong { field, .. }
            | ValidationError::RequestTooLarge { field, .. }
            | ValidationError::ExactlyOne { first: field, .. }
            | ValidationError::TwoConstraints { second: field, .. }
            | ValidationError::Grammar { field, .. } => Some(field),
            ValidationError::TooManyChoices { .. }
            | ValidationError::PromptFillsContext { .. }
            | ValidationError::Tokenize(_) => Some("prompt"),
            ValidationError::TooMany { field, .. } => Some(field),
            ValidationError::StopTooLong { .. } => Some("stop"),
            ValidationError::InvalidTool { param, .. }
            | ValidationError::TemplateVariable { param, .. } => Some(param),
            ValidationError::InvalidMessage { .. }
            | ValidationError::Template(_)
            | ValidationError::NoChatTemplate => Some("messages"),
        }
    }

    /// OpenAI's `code`, where OpenAI has one for the case.
    pub fn code(&self) -> Option<&'static str> {
        match self {
            ValidationError::ModelNotFound { .. } => Some("model_not_found"),
            ValidationError::WrongModelKind { .. } => Some("model_not_supported"),
            ValidationError::ContextOverflow { .. }
            | ValidationError::PromptFillsContext { .. } => Some("context_length_exceeded"),
            ValidationError::PromptTooLong { .. } => Some("prompt_too_long"),
            ValidationError::RequestTooLarge { .. } => Some("too_many_request_tokens"),
            ValidationError::NoChatTemplate => Some("no_chat_template"),
            ValidationError::TemplateVariable { .. } => Some("unsupported_parameter"),
            _ => None,
        }
    }
}

impl From<ValidationError> for ApiError {
    fn from(e: ValidationError) -> Self {
        let mut err = ApiError::new(e.status(), "invalid_request_error", e.to_string());
        err.detail.param = e.param().map(str::to_string);
        err.detail.code = e.code();
        err
    }
}

impl From<SubmitError> for ApiError {
    fn from(e: SubmitError) -> Self {
        match e {
            SubmitError::QueueFull { .. } => ApiError::overloaded(e.to_string()),
            SubmitError::EngineStopped => {
                ApiError::internal(format!("{e}; the server must be restarted"))
                    .with_code("engine_stopped")
            }
            SubmitError::ExceedsKvPool { .. } => ApiError::bad_request(format!(
                "{e}; lower `max_tokens` or shorten the prompt (or start the server with a \
                 larger --kv-cache-mb)"
            ))
            .with_param("max_tokens")
            .with_code("kv_cache_exceeded"),
        }
    }
}

impl ApiError {
    /// axum's body-reading rejection: too large (413) or a broken connection (400).
    pub fn from_bytes_rejection(r: BytesRejection, limit: usize) -> Self {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::payload_too_large(limit)
        } else {
            ApiError::bad_request(format!(
                "could not read the request body: {}",
                r.body_text()
            ))
        }
    }

    /// axum's JSON rejections, all as 400 with serde's message (which names the field).
    pub fn from_json_rejection(r: JsonRejection) -> Self {
        let detail = source_message(&r);
        match &r {
            JsonRejection::JsonSyntaxError(_) => {
                ApiError::bad_request(format!("the request body is not valid JSON: {detail}"))
            }
            JsonRejection::JsonDataError(_) => {
                let err = ApiError::bad_request(format!(
                    "the request body does not match the API: {detail}"
                ));
                // serde_path_to_error puts the field's path first: "temperature: invalid type ...".
                match detail.split_once(": ") {
                    Some((path, _)) if !path.contains(char::is_whitespace) && path != "." => {
                        err.with_param(path)
                    }
                    _ => err,
                }
            }
            _ => ApiError::bad_request(r.body_text()),
        }
    }
}

/// The serde message without axum's prefix ("Failed to deserialize ...: ").
fn source_message(r: &JsonRejection) -> String {
    let text = r.body_text();
    match text.split_once(": ") {
        Some((prefix, rest)) if prefix.starts_with("Failed to") => rest.to_string(),
        _ => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_and_body_shape() {
        let resp = ApiError::overloaded("full").into_response();
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(resp.headers()[header::RETRY_AFTER], "1");
        let body =
            serde_json::to_value(ApiError::bad_request("x").with_param("temperature").body())
                .unwrap();
        assert_eq!(body["error"]["type"], "invalid_request_error");
        assert_eq!(body["error"]["param"], "temperature");
        assert!(body["error"]["code"].is_null());
        assert_eq!(body["error"]["message"], "x");
    }

    #[test]
    fn every_submit_error_has_its_status() {
        let all = [
            SubmitError::QueueFull { waiting: 3 },
            SubmitError::EngineStopped,
            SubmitError::ExceedsKvPool {
                needed_tokens: 5000,
                pool_tokens: 4096,
            },
        ];
        for e in all {
            // No wildcard: a new variant does not compile until it is given a status here.
            let want = match e {
                SubmitError::QueueFull { .. } => StatusCode::TOO_MANY_REQUESTS,
                SubmitError::EngineStopped => StatusCode::INTERNAL_SERVER_ERROR,
                SubmitError::ExceedsKvPool { .. } => StatusCode::BAD_REQUEST,
            };
            assert_eq!(ApiError::from(e.clone()).status, want, "{e:?}");
        }
        let e = ApiError::from(SubmitError::ExceedsKvPool {
            needed_tokens: 5000,
            pool_tokens: 4096,
        });
        assert!(
            e.detail.message.contains("5000") && e.detail.message.contains("4096"),
            "{}",
            e.detail.message
        );
        assert_eq!(e.detail.code, Some("kv_cache_exceeded"));
    }

    /// A body with one typed field, as the request types declare theirs.
    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Body {
        temperature: Option<f64>,
    }

    #[test]
    fn json_type_errors_become_400_naming_the_field() {
        let r = axum::Json::<Body>::from_bytes(br#"{"temperature":"hot"}"#).unwrap_err();
        let e = ApiError::from_json_rejection(r);
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert!(
            e.detail.message.contains("temperature"),
            "{}",
            e.detail.message
        );
        assert_eq!(e.detail.param.as_deref(), Some("temperature"));
        let r = axum::Json::<Body>::from_bytes(br#"{"temperature": NaN}"#).unwrap_err();
        assert_eq!(
            ApiError::from_json_rejection(r).status,
            StatusCode::BAD_REQUEST
        );
    }
}
