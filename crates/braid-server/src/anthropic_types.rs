//! Anthropic's Messages API as JSON: the request braid takes at `/v1/messages`, the message it
//! answers with, and the streaming events. Field names and values are Anthropic's, so the
//! `anthropic` SDK reads the answers into its typed objects.
//!
//! Content arrives as a string or an array of blocks; blocks stay JSON values here and are read
//! (and refused by name when braid cannot honour them) where the conversation is translated,
//! `routes/messages.rs`.

use crate::request_fields::RequestFields;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

/// POST /v1/messages
#[derive(Clone, Debug, Default, Deserialize, ToSchema)]
pub struct MessagesRequest {
    pub model: Option<String>,
    /// Required, as Anthropic requires it.
    pub max_tokens: Option<i64>,
    pub messages: Option<Vec<MessageIn>>,
    /// A string, or an array of text blocks.
    #[schema(schema_with = content_schema)]
    pub system: Option<Value>,
    pub stop_sequences: Option<Vec<String>>,
    pub stream: Option<bool>,
    /// 0 to 1, as Anthropic bounds it.
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<i64>,
    pub tools: Option<Vec<ToolDefinition>>,
    pub tool_choice: Option<ToolChoice>,
    /// `{"type": "disabled"}` only: it switches a reasoning model's thinking off where its
    /// template can (Qwen3's `enable_thinking`). Enabled is refused: braid cannot hold
    /// thinking to `budget_tokens`.
    #[schema(value_type = Option<Object>)]
    pub thinking: Option<Value>,
    /// `format` (a JSON schema the answer follows) is honoured; `effort` only when null.
    pub output_config: Option<OutputConfig>,
    /// `{"user_id": ...}`: bookkeeping for the caller's abuse tracking; no effect.
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Value>,
    /// braid has one tier; no effect.
    pub service_tier: Option<String>,
    /// Prompt-caching hint: braid's prefix cache matches by content on its own; no effect.
    #[schema(value_type = Option<Object>)]
    pub cache_control: Option<Value>,
    /// Where the request may be processed: braid runs where it was started; no effect.
    pub inference_geo: Option<String>,
    /// Bookkeeping ids for the caller's accounts; no effect.
    pub user_profile_id: Option<String>,
    pub workspace_id: Option<String>,
    /// `standard` only: braid has one speed.
    pub speed: Option<String>,
    /// Only null or empty: braid reports no prompt-cache diagnostics.
    #[schema(value_type = Option<Object>)]
    pub diagnostics: Option<Value>,
    /// Anthropic's code-execution containers: refused when set.
    #[schema(value_type = Option<Object>)]
    pub container: Option<Value>,
}

#[derive(Clone, Debug, Default, Deserialize, ToSchema)]
pub struct OutputConfig {
    /// `{"type": "json_schema", "schema": {...}}`
    #[schema(value_type = Option<Object>)]
    pub format: Option<Value>,
    pub effort: Option<String>,
}

impl RequestFields for MessagesRequest {}

/// POST /v1/messages/count_tokens: the request without what only generation reads.
#[derive(Clone, Debug, Default, Deserialize, ToSchema)]
pub struct CountTokensRequest {
    pub model: Option<String>,
    pub messages: Option<Vec<MessageIn>>,
    #[schema(schema_with = content_schema)]
    pub system: Option<Value>,
    pub tools: Option<Vec<ToolDefinition>>,
    pub tool_choice: Option<ToolChoice>,
    #[schema(value_type = Option<Object>)]
    pub thinking: Option<Value>,
}

impl RequestFields for CountTokensRequest {}

#[derive(Clone, Debug, Deserialize, ToSchema)]
pub struct MessageIn {
    /// `user` or `assistant`.
    pub role: String,
    /// A string, or an array of blocks (`text`, `tool_use`, `tool_result`).
    #[schema(schema_with = content_schema)]
    pub content: Value,
}

#[derive(Clone, Debug, Deserialize, ToSchema)]
pub struct ToolDefinition {
    /// Absent or `custom`: a client tool. Anthropic's server tools (web search, code
    /// execution, ...) are refused by name.
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub name: String,
    pub description: Option<String>,
    #[schema(value_type = Option<Object>)]
    pub input_schema: Option<Value>,
    /// Prompt-caching hint: braid's prefix cache matches by content on its own.
    #[schema(value_type = Option<Object>)]
    pub cache_control: Option<Value>,
}

#[derive(Clone, Debug, Deserialize, ToSchema)]
pub struct ToolChoice {
    /// `auto`, `any`, `tool` or `none`.
    #[serde(rename = "type")]
    pub kind: String,
    /// With `tool`: the tool to call.
    pub name: Option<String>,
    pub disable_parallel_tool_use: Option<bool>,
}

/// The answer: one assistant message.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct MessageOut {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub role: &'static str,
    pub model: String,
    pub content: Vec<ContentBlock>,
    pub stop_reason: Option<&'static str>,
    pub stop_sequence: Option<String>,
    pub usage: MessageUsage,
}

#[derive(Clone, Debug, Serialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    /// A reasoning model's reasoning (braid signs nothing: `signature` is empty).
    Thinking {
        thinking: String,
        signature: String,
    },
    Text {
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
}

#[derive(Clone, Copy, Debug, Default, Serialize, ToSchema)]
pub struct MessageUsage {
    pub input_tokens: usize,
    pub output_tokens: usize,
}

/// `{"input_tokens": N}`
#[derive(Clone, Copy, Debug, Serialize, ToSchema)]
pub struct TokenCount {
    pub input_tokens: usize,
}

/// One streaming event; its `type` is also the SSE event's name.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamEvent {
    MessageStart {
        message: MessageOut,
    },
    ContentBlockStart {
        index: usize,
        content_block: ContentBlock,
    },
    ContentBlockDelta {
        index: usize,
        delta: BlockDelta,
    },
    ContentBlockStop {
        index: usize,
    },
    MessageDelta {
        delta: MessageDelta,
        usage: OutputUsage,
    },
    MessageStop,
}

impl StreamEvent {
    pub fn name(&self) -> &'static str {
        match self {
            StreamEvent::MessageStart { .. } => "message_start",
            StreamEvent::ContentBlockStart { .. } => "content_block_start",
            StreamEvent::ContentBlockDelta { .. } => "content_block_delta",
            StreamEvent::ContentBlockStop { .. } => "content_block_stop",
            StreamEvent::MessageDelta { .. } => "message_delta",
            StreamEvent::MessageStop => "message_stop",
        }
    }
}

#[derive(Clone, Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum BlockDelta {
    ThinkingDelta { thinking: String },
    TextDelta { text: String },
    InputJsonDelta { partial_json: String },
}

#[derive(Clone, Debug, Serialize)]
pub struct MessageDelta {
    pub stop_reason: &'static str,
    pub stop_sequence: Option<String>,
}

#[derive(Clone, Copy, Debug, Serialize)]
pub struct OutputUsage {
    pub output_tokens: usize,
}

/// Anthropic's error body: `{"type": "error", "error": {"type": ..., "message": ...}}`.
#[derive(Clone, Debug, Serialize, ToSchema)]
#[schema(as = AnthropicErrorBody)]
pub struct ErrorBody {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub error: ErrorDetail,
}

#[derive(Clone, Debug, Serialize, ToSchema)]
#[schema(as = AnthropicErrorDetail)]
pub struct ErrorDetail {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub message: String,
}

impl ErrorBody {
    /// The error of HTTP status `status`, in Anthropic's kinds.
    pub fn of_status(status: u16, message: String) -> Self {
        let kind = match status {
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            413 => "request_too_large",
            429 => "rate_limit_error",
            503 | 529 => "overloaded_error",
            500..=599 => "api_error",
            _ => "invalid_request_error",
        };
        Self {
            kind: "error",
            error: ErrorDetail { kind, message },
        }
    }
}

/// A string, or an array of content block objects.
fn content_schema() -> impl Into<utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>> {
    use utoipa::openapi::schema::{ArrayBuilder, ArrayItems, ObjectBuilder, OneOfBuilder, Type};
    let block = ObjectBuilder::new()
        .schema_type(Type::Object)
        .property("type", ObjectBuilder::new().schema_type(Type::String))
        .required("type");
    OneOfBuilder::new()
        .item(ObjectBuilder::new().schema_type(Type::String))
        .item(ArrayBuilder::new().items(ArrayItems::RefOrSchema(Box::new(block.into()))))
}
