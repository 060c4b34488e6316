//! OpenAI's Responses API as JSON: the request braid takes at `/v1/responses` and the
//! response object it answers with (also what GET /v1/responses/{id} returns and what the
//! stream's `response.created` and `response.completed` events carry). Field names and
//! values are OpenAI's, so the `openai` SDK reads them into its typed objects.
//!
//! Input items and tools stay JSON values here: they are read, and refused by name where
//! braid cannot honour them, where the conversation is translated (`routes/responses.rs`).

use crate::request_fields::RequestFields;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

/// POST /v1/responses
#[derive(Clone, Debug, Default, Deserialize, ToSchema)]
pub struct ResponsesRequest {
    pub model: Option<String>,
    /// A string (one user message) or an array of items: messages (`user`, `system`,
    /// `developer`, `assistant`), `function_call`, `function_call_output` and `reasoning`.
    #[schema(schema_with = schema::input)]
    pub input: Option<Value>,
    /// A system message put first; not carried over to a response that continues this one.
    pub instructions: Option<String>,
    #[schema(minimum = 1)]
    pub max_output_tokens: Option<i64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    /// Function tools (`{"type": "function", "name", "parameters", ...}`); OpenAI's hosted
    /// tools (web search, file search, computer use, ...) are refused by name.
    #[schema(value_type = Option<Vec<Object>>)]
    pub tools: Option<Vec<Value>>,
    /// `none`, `auto`, `required`, or `{"type": "function", "name": ...}`.
    #[schema(schema_with = schema::tool_choice)]
    pub tool_choice: Option<Value>,
    pub parallel_tool_calls: Option<bool>,
    /// A bound on calls to OpenAI's built-in tools, of which braid runs none: any value holds.
    pub max_tool_calls: Option<i64>,
    pub text: Option<TextConfig>,
    pub reasoning: Option<ReasoningConfig>,
    /// vLLM's extension, as on chat: variables for the chat template (Qwen3's
    /// `enable_thinking`), each one the template reads, or a 400 naming it.
    #[schema(value_type = Option<Object>)]
    pub chat_template_kwargs: Option<Map<String, Value>>,
    /// `reasoning.encrypted_content` only: the reasoning text, returned for the client to
    /// send back (braid does not encrypt it).
    pub include: Option<Vec<String>>,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    /// Keep the response for GET /v1/responses/{id} and `previous_response_id` (default: when
    /// the server's store is on).
    pub store: Option<bool>,
    /// Continue the conversation of a stored response.
    pub previous_response_id: Option<String>,
    /// Up to 16 string pairs, returned with the response.
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Map<String, Value>>,
    /// `disabled` only: a conversation that does not fit is refused, not cut.
    pub truncation: Option<String>,
    /// false only: braid answers while the client waits.
    pub background: Option<bool>,
    /// OpenAI's Conversations API, which braid does not have: null only.
    #[schema(value_type = Option<Object>)]
    pub conversation: Option<Value>,
    /// OpenAI's stored prompt templates, which braid does not have: null only.
    #[schema(value_type = Option<Object>)]
    pub prompt: Option<Value>,
    /// Bookkeeping for the caller; no effect.
    pub user: Option<String>,
    pub safety_identifier: Option<String>,
    /// braid's prefix cache matches by content on its own; no effect.
    pub prompt_cache_key: Option<String>,
    pub prompt_cache_retention: Option<String>,
    /// braid has one tier; no effect.
    pub service_tier: Option<String>,
}

impl RequestFields for ResponsesRequest {}

#[derive(Clone, Debug, Default, Deserialize, Serialize, ToSchema)]
pub struct TextConfig {
    /// `{"type": "text"}`, `{"type": "json_object"}`, or `{"type": "json_schema", "name",
    /// "schema", "strict"}`.
    #[schema(value_type = Option<Object>)]
    pub format: Option<Value>,
    /// `medium` only (braid's models have no verbosity control).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verbosity: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, ToSchema)]
pub struct ReasoningConfig {
    /// Passed to the chat template as `reasoning_effort` where it reads that variable;
    /// otherwise a 400.
    pub effort: Option<String>,
    /// `auto` or `detailed`: the whole reasoning, as its summary.
    pub summary: Option<String>,
    /// The older name of `summary`.
    #[serde(skip_serializing)]
    pub generate_summary: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize, ToSchema)]
#[schema(as = ResponsesStreamOptions)]
pub struct StreamOptions {
    /// false only: braid pads no events.
    pub include_obfuscation: Option<bool>,
}

/// The response: an `output` of items, with what the request asked for echoed.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ResponseObject {
    pub id: String,
    pub object: &'static str,
    pub created_at: u64,
    /// `in_progress` (the stream's first events), `completed` or `incomplete`.
    pub status: &'static str,
    pub completed_at: Option<u64>,
    #[schema(value_type = Option<Object>)]
    pub error: Option<Value>,
    pub incomplete_details: Option<IncompleteDetails>,
    pub instructions: Option<String>,
    pub max_output_tokens: Option<i64>,
    pub max_tool_calls: Option<i64>,
    pub model: String,
    pub output: Vec<OutputItem>,
    pub parallel_tool_calls: bool,
    pub previous_response_id: Option<String>,
    pub reasoning: ReasoningConfig,
    pub store: bool,
    pub temperature: Option<f64>,
    pub text: TextConfig,
    #[schema(schema_with = schema::tool_choice)]
    pub tool_choice: Value,
    #[schema(value_type = Vec<Object>)]
    pub tools: Vec<Value>,
    pub top_p: Option<f64>,
    pub truncation: &'static str,
    pub usage: Option<ResponseUsage>,
    pub user: Option<String>,
    #[schema(value_type = Object)]
    pub metadata: Map<String, Value>,
    pub background: bool,
    pub service_tier: &'static str,
}

#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct IncompleteDetails {
    /// `max_output_tokens`.
    pub reason: &'static str,
}

#[derive(Clone, Debug, Serialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum OutputItem {
    /// A reasoning model's reasoning, before its answer.
    Reasoning {
        id: String,
        /// With `reasoning.summary`: the whole reasoning as one summary part.
        summary: Vec<TextPart>,
        /// The reasoning, as `reasoning_text` parts.
        content: Vec<TextPart>,
        /// With `include: ["reasoning.encrypted_content"]`: the reasoning text itself.
        #[serde(skip_serializing_if = "Option::is_none")]
        encrypted_content: Option<String>,
        status: &'static str,
    },
    Message {
        id: String,
        status: &'static str,
        role: &'static str,
        content: Vec<OutputText>,
    },
    FunctionCall {
        id: String,
        call_id: String,
        name: String,
        /// A JSON object, as a string.
        arguments: String,
        status: &'static str,
    },
}

/// `{"type": "reasoning_text" | "summary_text", "text": ...}`
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct TextPart {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub text: String,
}

#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct OutputText {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub text: String,
    #[schema(value_type = Vec<Object>)]
    pub annotations: Vec<Value>,
    #[schema(value_type = Vec<Object>)]
    pub logprobs: Vec<Value>,
}

impl OutputText {
    pub fn new(text: String) -> Self {
        Self {
            kind: "output_text",
            text,
            annotations: Vec::new(),
            logprobs: Vec::new(),
        }
    }
}

#[derive(Clone, Copy, Debug, Serialize, ToSchema)]
pub struct ResponseUsage {
    pub input_tokens: usize,
    pub input_tokens_details: InputTokensDetails,
    pub output_tokens: usize,
    pub output_tokens_details: OutputTokensDetails,
    pub total_tokens: usize,
}

#[derive(Clone, Copy, Debug, Serialize, ToSchema)]
pub struct InputTokensDetails {
    /// Prompt tokens braid's prefix cache already held.
    pub cached_tokens: usize,
}

#[derive(Clone, Copy, Debug, Serialize, ToSchema)]
pub struct OutputTokensDetails {
    /// The output's tokens up to the end of its reasoning.
    pub reasoning_tokens: usize,
}

/// DELETE /v1/responses/{id}
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ResponseDeleted {
    pub id: String,
    pub object: &'static str,
    pub deleted: bool,
}

mod schema {
    use utoipa::openapi::schema::{
        ArrayBuilder, ArrayItems, ObjectBuilder, OneOfBuilder, Schema, Type,
    };
    use utoipa::openapi::RefOr;

    fn of(t: Type) -> ObjectBuilder {
        ObjectBuilder::new().schema_type(t)
    }

    /// A string, or an array of item objects.
    pub fn input() -> impl Into<RefOr<Schema>> {
        let item = of(Type::Object);
        OneOfBuilder::new()
            .item(of(Type::String))
            .item(ArrayBuilder::new().items(ArrayItems::RefOrSchema(Box::new(item.into()))))
            .item(of(Type::Null))
    }

    pub fn tool_choice() -> impl Into<RefOr<Schema>> {
        let named = of(Type::Object)
            .property("type", of(Type::String))
            .required("type");
        OneOfBuilder::new()
            .item(of(Type::String).enum_values(Some(["none", "auto", "required"])))
            .item(named)
            .item(of(Type::Null))
    }
}
