//! The JSON of the OpenAI API as braid speaks it: request bodies as clients send them and
//! responses in exactly OpenAI's shape, so existing clients and tools work unchanged.
//!
//! Request types are deliberately loose: every field is optional, fields whose JSON type
//! varies (`prompt`, `stop`, message `content`) stay `serde_json::Value`, and unknown fields
//! are left to `request_fields`, which refuses what is neither declared nor a documented
//! no-op. Deciding what is acceptable, with a message that names the field and the bound,
//! is `validation.rs`'s job, not serde's.

use crate::request_fields::{
    AtDefault, RequestFields, CHAT_AT_DEFAULT, EMBEDDING_AT_DEFAULT, GENERATION_AT_DEFAULT,
    TEMPLATE_AT_DEFAULT, TOKENIZE_AT_DEFAULT,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use utoipa::ToSchema;

// ---------------------------------------------------------------- requests

#[derive(Clone, Debug, Default, Deserialize, ToSchema)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: Option<bool>,
}

/// OpenAI's `response_format`. Every form is enforced while sampling; `strict: false` is
/// enforced too, since an answer that does not parse helps no client.
#[derive(Clone, Debug, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResponseFormat {
    /// Free text, as without `response_format`.
    Text,
    /// Any JSON object.
    JsonObject,
    /// JSON valid against `json_schema.schema`.
    JsonSchema { json_schema: JsonSchemaFormat },
}

#[derive(Clone, Debug, Deserialize, ToSchema)]
pub struct JsonSchemaFormat {
    pub name: Option<String>,
    pub description: Option<String>,
    /// A JSON Schema; absent: any JSON value.
    #[schema(value_type = Option<Object>)]
    pub schema: Option<Value>,
    pub strict: Option<bool>,
}

/// OpenAI's `prediction`.
#[derive(Clone, Debug, Deserialize, ToSchema)]
pub struct Prediction {
    /// `content`.
    #[serde(rename = "type")]
    pub kind: String,
    /// A string, or an array of `{"type": "text", "text": ...}` parts.
    #[serde(default)]
    #[schema(schema_with = schema::content)]
    pub content: Value,
}

/// vLLM's `structured_outputs`: one of these constraints.
#[derive(Clone, Debug, Default, Deserialize, ToSchema)]
pub struct StructuredOutputs {
    /// A JSON Schema, as an object or as a string holding one.
    #[schema(value_type = Option<Object>)]
    pub json: Option<Value>,
    pub regex: Option<String>,
    pub choice: Option<Vec<String>>,
    /// A grammar in llguidance's Lark dialect or llama.cpp's GBNF (GBNF when it defines its
    /// rules with `::=`).
    pub grammar: Option<String>,
}

/// The sampling and stopping fields both generation endpoints take (vLLM's names for the
/// extras), listed once: each request type declares them itself (`request_with_sampling!`),
/// `SamplingFields` holds them for validation, and `sampling()` copies them over.
/// `#[serde(flatten)]` would lose the field name from type errors ("invalid type: string,
/// expected f64" without saying which field). The numeric fields' bounds are in
/// `field_bounds.rs`, which /openapi.json reads them from.
macro_rules! with_sampling_fields {
    ($then:ident! { $($input:tt)* }) => {
        $then! {
            $($input)*
            shared {
                temperature: Option<f64>,
                top_p: Option<f64>,
                /// 0 or -1: off.
                top_k: Option<i64>,
                min_p: Option<f64>,
                seed: Option<i64>,
                #[schema(schema_with = schema::stop)]
                stop: Option<Value>,
                /// vLLM extra: token ids that end generation, besides the model's end-of-text ids.
                #[schema(value_type = Option<Vec<u32>>)]
                stop_token_ids: Option<Vec<i64>>,
                /// vLLM: a matched stop string stays at the end of the text (default false).
                include_stop_str_in_output: Option<bool>,
                /// SGLang's name for `include_stop_str_in_output` (default false).
                no_stop_trim: Option<bool>,
                /// false: special tokens the model writes (other than the one that stops it)
                /// stay in the text (default true: left out).
                skip_special_tokens: Option<bool>,
                presence_penalty: Option<f64>,
                frequency_penalty: Option<f64>,
                repetition_penalty: Option<f64>,
                ignore_eos: Option<bool>,
                stream: Option<bool>,
                stream_options: Option<StreamOptions>,
                /// Choices per prompt, each sampled with `seed + index` when a seed is given.
                n: Option<i64>,
                user: Option<String>,
                /// Token id (a string, as OpenAI's JSON keys are) → bias added to that token's
                /// logit before sampling; -100 bans it, 100 all but forces it.
                #[schema(value_type = Option<BTreeMap<String, f64>>)]
                logit_bias: Option<BTreeMap<String, f64>>,
                /// The output's format, enforced token by token (at most one of this and the
                /// vLLM fields below). `max_tokens` can still cut the output short, with
                /// `finish_reason: "length"`.
                response_format: Option<ResponseFormat>,
                /// vLLM: one constraint of `json`, `regex`, `choice` or `grammar`.
                structured_outputs: Option<StructuredOutputs>,
                /// vLLM: a JSON Schema the output follows (an object, or a string holding one).
                #[schema(value_type = Option<Object>)]
                guided_json: Option<Value>,
                /// vLLM: a regular expression (Rust `regex` syntax) the whole output matches.
                guided_regex: Option<String>,
                /// vLLM: the output is exactly one of these strings.
                guided_choice: Option<Vec<String>>,
                /// vLLM: a grammar the output follows, in llguidance's Lark dialect or llama.cpp's
                /// GBNF (GBNF when it defines its rules with `::=`).
                guided_grammar: Option<String>,
                /// vLLM: each prompt token's logprob, rank and this many alternatives, in vLLM's
                /// shape; not with `stream`.
                prompt_logprobs: Option<i64>,
                /// OpenAI's Predicted Outputs: text the answer is expected to largely repeat.
                /// Its tokens are drafted and verified beside the decoding, so an answer that
                /// follows it comes faster; the answer is exactly what it would be without.
                prediction: Option<Prediction>,
            }
        }
    };
}

/// The shared fields, as validation reads them from either request type.
macro_rules! sampling_fields_struct {
    (shared { $($(#[$smeta:meta])* $sfield:ident: $sty:ty,)* }) => {
        /// The sampling and stopping fields of a request, whichever endpoint it came to.
        #[derive(Clone, Debug, Default)]
        pub struct SamplingFields {
            $(pub $sfield: $sty,)*
        }
    };
}

with_sampling_fields!(sampling_fields_struct! {});

/// Declares a request type: its own fields, then the shared ones, and `sampling()`, which
/// copies those out.
macro_rules! request_with_sampling {
    (
        $(#[$meta:meta])*
        pub struct $name:ident { $($(#[$fmeta:meta])* pub $field:ident: $ty:ty,)* }
        shared { $($(#[$smeta:meta])* $sfield:ident: $sty:ty,)* }
    ) => {
        $(#[$meta])*
        pub struct $name {
            $($(#[$fmeta])* pub $field: $ty,)*
            $($(#[$smeta])* pub $sfield: $sty,)*
        }

        impl $name {
            pub fn sampling(&self) -> SamplingFields {
                SamplingFields {
                    $($sfield: Clone::clone(&self.$sfield),)*
                }
            }
        }
    };
}

with_sampling_fields!(request_with_sampling! {
    /// POST /v1/completions
    #[derive(Clone, Debug, Default, Deserialize, ToSchema)]
    pub struct CompletionRequest {
        pub model: Option<String>,
        /// A string, an array of token ids, or an array of strings or id arrays (one choice each).
        #[schema(schema_with = schema::prompt)]
        pub prompt: Option<Value>,
        /// At least 1; 0 only with `echo`, which then answers with the prompt alone.
        #[schema(minimum = 0)]
        pub max_tokens: Option<i64>,
        /// Number of alternatives to return with each token; absent: no logprobs.
        /// With `echo`, the prompt's tokens get logprobs too (the first one null).
        pub logprobs: Option<i64>,
        pub echo: Option<bool>,
        pub best_of: Option<i64>,
        /// Not supported (no fill-in-the-middle): omit it or send null.
        pub suffix: Option<String>,
        /// false: no BOS in front of a text prompt, even where the model's tokenizer asks for
        /// one (default true).
        pub add_special_tokens: Option<bool>,
    }
});

impl RequestFields for CompletionRequest {
    const OPENAI_BODY: bool = true;
    const AT_DEFAULT: &'static [&'static [AtDefault]] = &[GENERATION_AT_DEFAULT];
}

#[derive(Clone, Debug, Deserialize, ToSchema)]
pub struct ChatMessageIn {
    /// `system` (or `developer`), `user`, `assistant` or `tool`.
    pub role: Option<String>,
    /// A string, an array of `{"type": "text", "text": ...}` parts, or null.
    #[serde(default)]
    #[schema(schema_with = schema::content)]
    pub content: Value,
    /// An assistant turn's calls, as a response gave them.
    pub tool_calls: Option<Vec<ToolCallIn>>,
    /// A `tool` turn: the id of the call it answers.
    pub tool_call_id: Option<String>,
    /// An assistant turn's reasoning, as a response gave it; it reaches the chat template,
    /// which decides whether the model reads it again (Qwen3's does for the current turn).
    pub reasoning_content: Option<String>,
}

/// A call in an assistant turn of the conversation.
#[derive(Clone, Debug, Deserialize, ToSchema)]
pub struct ToolCallIn {
    pub id: Option<String>,
    /// `function`.
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub function: FunctionCallIn,
}

#[derive(Clone, Debug, Deserialize, ToSchema)]
pub struct FunctionCallIn {
    pub name: String,
    /// The arguments: a string holding a JSON object, as responses give them, or the object.
    #[schema(value_type = String)]
    pub arguments: Value,
}

/// A function the model may call.
#[derive(Clone, Debug, Deserialize, ToSchema)]
pub struct ToolIn {
    /// `function`.
    #[serde(rename = "type")]
    pub kind: String,
    pub function: FunctionDefinition,
}

#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct FunctionDefinition {
    /// 1 to 64 of `a-z`, `A-Z`, `0-9`, `_` and `-`.
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// A JSON Schema of the arguments object; absent: no arguments.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub parameters: Option<Value>,
    /// Accepted either way: arguments always follow `parameters` where the call is enforced
    /// (`tool_choice` `required` or a named function).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

with_sampling_fields!(request_with_sampling! {
    /// POST /v1/chat/completions
    #[derive(Clone, Debug, Default, Deserialize, ToSchema)]
    pub struct ChatCompletionRequest {
        pub model: Option<String>,
        pub messages: Option<Vec<ChatMessageIn>>,
        #[schema(minimum = 1)]
        pub max_tokens: Option<i64>,
        /// OpenAI's newer name for `max_tokens`; wins when both are given.
        #[schema(minimum = 1)]
        pub max_completion_tokens: Option<i64>,
        pub logprobs: Option<bool>,
        pub top_logprobs: Option<i64>,
        /// Functions the model may call (at most 128).
        pub tools: Option<Vec<ToolIn>>,
        /// `none`, `auto` (the default with tools), `required`, or `{"type": "function",
        /// "function": {"name": ...}}`. `required` and a named function are enforced by a
        /// grammar; `auto` reads calls the model writes in the Hermes `<tool_call>` syntax.
        #[schema(schema_with = schema::tool_choice)]
        pub tool_choice: Option<Value>,
        /// Whether an answer may hold several calls (default true).
        pub parallel_tool_calls: Option<bool>,
        /// vLLM: end the prompt with the assistant's turn opener (default true).
        pub add_generation_prompt: Option<bool>,
        /// vLLM: the last message is the assistant's and the answer continues it; the prompt
        /// ends where its content does (default false; not with `add_generation_prompt`).
        pub continue_final_message: Option<bool>,
        /// Variables for the chat template (Qwen3's `enable_thinking`): each one the template
        /// reads, or a 400 naming it.
        #[schema(value_type = Option<Object>)]
        pub chat_template_kwargs: Option<serde_json::Map<String, Value>>,
        /// Passed to the chat template as `reasoning_effort` where it reads that variable
        /// (gpt-oss's); otherwise a 400.
        pub reasoning_effort: Option<String>,
    }
});

impl RequestFields for ChatCompletionRequest {
    const OPENAI_BODY: bool = true;
    const AT_DEFAULT: &'static [&'static [AtDefault]] =
        &[GENERATION_AT_DEFAULT, CHAT_AT_DEFAULT, TEMPLATE_AT_DEFAULT];
}

// ---------------------------------------------------------------- responses

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub total_tokens: usize,
    /// Prompt tokens the prefix cache held (the Responses API reports them).
    #[serde(skip)]
    pub cached_tokens: usize,
    /// With a `prediction`: how much of it the answer used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completion_tokens_details: Option<CompletionTokensDetails>,
}

/// OpenAI's `usage.completion_tokens_details`, as far as braid knows them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CompletionTokensDetails {
    /// Tokens of the prediction that became part of the answer.
    pub accepted_prediction_tokens: usize,
    /// Tokens of the prediction the answer did not use.
    pub rejected_prediction_tokens: usize,
}

impl CompletionTokensDetails {
    fn add(a: Option<Self>, b: Option<Self>) -> Option<Self> {
        match (a, b) {
            (Some(a), Some(b)) => Some(Self {
                accepted_prediction_tokens: a.accepted_prediction_tokens
                    + b.accepted_prediction_tokens,
                rejected_prediction_tokens: a.rejected_prediction_tokens
                    + b.rejected_prediction_tokens,
            }),
            (a, b) => a.or(b),
        }
    }
}

impl Usage {
    pub fn new(prompt_tokens: usize, completion_tokens: usize) -> Self {
        Self {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens + completion_tokens,
            cached_tokens: 0,
            completion_tokens_details: None,
        }
    }

    pub fn with_details(self, details: Option<CompletionTokensDetails>) -> Self {
        Self {
            completion_tokens_details: details,
            ..self
        }
    }

    pub fn with_cached(self, cached_tokens: usize) -> Self {
        Self {
            cached_tokens,
            ..self
        }
    }

    /// A whole request's usage from its choices' (in choice order, `n` per prompt): each
    /// prompt counts once, every choice's completion counts.
    pub fn of_choices(choices: impl IntoIterator<Item = Usage>, n: usize) -> Self {
        let (prompt, cached, completion, details) =
            choices
                .into_iter()
                .enumerate()
                .fold((0, 0, 0, None), |(p, k, c, d), (i, u)| {
                    let (p, k) = if i % n.max(1) == 0 {
                        (p + u.prompt_tokens, k + u.cached_tokens)
                    } else {
                        (p, k)
                    };
                    let d = CompletionTokensDetails::add(d, u.completion_tokens_details);
                    (p, k, c + u.completion_tokens, d)
                });
        Self::new(prompt, completion)
            .with_cached(cached)
            .with_details(details)
    }
}

/// Legacy completions logprobs: parallel arrays, one entry per token.
#[derive(Clone, Debug, Default, Serialize, ToSchema)]
pub struct CompletionLogprobs {
    pub tokens: Vec<String>,
    pub token_logprobs: Vec<Option<f32>>,
    pub top_logprobs: Vec<Option<BTreeMap<String, f32>>>,
    pub text_offset: Vec<usize>,
}

#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct CompletionChoice {
    pub index: usize,
    pub text: String,
    pub logprobs: Option<CompletionLogprobs>,
    pub finish_reason: Option<&'static str>,
    /// With `prompt_logprobs`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_logprobs: Option<PromptLogprobs>,
}

/// vLLM's `prompt_logprobs`: per prompt token (the first null, having no context), the
/// token's own entry and its alternatives', keyed by token id.
pub type PromptLogprobs = Vec<Option<BTreeMap<String, PromptLogprob>>>;

#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
pub struct PromptLogprob {
    pub logprob: f32,
    /// 1 + the tokens more likely.
    pub rank: u32,
    pub decoded_token: String,
}

/// A whole completion, and (with `object: "text_completion"` as OpenAI does) one stream chunk.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct CompletionResponse {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub choices: Vec<CompletionChoice>,
    /// Omitted in stream chunks unless `include_usage`; then null except in the last chunk.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Option<Usage>>,
}

#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct TopLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
}

#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ChatTokenLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
    pub top_logprobs: Vec<TopLogprob>,
}

#[derive(Clone, Debug, Default, Serialize, ToSchema)]
pub struct ChatLogprobs {
    pub content: Vec<ChatTokenLogprob>,
}

#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ChatMessageOut {
    pub role: &'static str,
    /// Null when the answer is only tool calls.
    pub content: Option<String>,
    /// The reasoning before the reply, for models that reason (vLLM's field).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallOut>,
}

#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ToolCallOut {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub function: FunctionCallOut,
}

#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct FunctionCallOut {
    pub name: String,
    /// A JSON object, as text.
    pub arguments: String,
}

/// A streamed call: whole, in one delta, once the model has written all of it.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ToolCallDelta {
    /// The call's position among the choice's calls.
    pub index: usize,
    #[serde(flatten)]
    pub call: ToolCallOut,
}

#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ChatChoice {
    pub index: usize,
    pub message: ChatMessageOut,
    pub logprobs: Option<ChatLogprobs>,
    pub finish_reason: Option<&'static str>,
}

#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ChatCompletionResponse {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub choices: Vec<ChatChoice>,
    pub usage: Usage,
    /// With `prompt_logprobs` (vLLM puts the chat prompt's here, once).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_logprobs: Option<PromptLogprobs>,
}

#[derive(Clone, Debug, Default, Serialize, ToSchema)]
pub struct ChatDelta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallDelta>,
}

#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ChatChunkChoice {
    pub index: usize,
    pub delta: ChatDelta,
    pub logprobs: Option<ChatLogprobs>,
    pub finish_reason: Option<&'static str>,
}

#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ChatCompletionChunk {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub choices: Vec<ChatChunkChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Option<Usage>>,
}

#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ModelCard {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub owned_by: &'static str,
    pub max_model_len: usize,
}

#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ModelList {
    pub object: &'static str,
    pub data: Vec<ModelCard>,
}

// ---------------------------------------------------------------- embeddings

/// `input` of an embedding request: OpenAI's four shapes.
#[derive(Clone, Debug, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum EmbeddingInput {
    Text(String),
    Texts(Vec<String>),
    Tokens(Vec<i64>),
    TokenLists(Vec<Vec<i64>>),
}

#[derive(Clone, Debug, Deserialize, ToSchema)]
pub struct EmbeddingRequest {
    pub model: Option<String>,
    pub input: EmbeddingInput,
    /// `float` (default) or `base64` (little-endian f32 bytes).
    pub encoding_format: Option<String>,
    /// The vector's length; only the model's own is possible (it was not trained to be cut).
    pub dimensions: Option<usize>,
    /// An end-user id, for the caller's own records; braid keeps nothing of it.
    pub user: Option<String>,
    /// vLLM's: keep only the last k tokens of each text (-1: the model's longest).
    pub truncate_prompt_tokens: Option<i64>,
}

impl RequestFields for EmbeddingRequest {
    const AT_DEFAULT: &'static [&'static [AtDefault]] = &[EMBEDDING_AT_DEFAULT];
}

/// A vector as the request asked for it.
#[derive(Clone, Debug, Serialize, ToSchema)]
#[serde(untagged)]
pub enum EmbeddingVector {
    Float(Vec<f32>),
    /// Little-endian f32 bytes.
    Base64(String),
}

#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct EmbeddingData {
    pub object: &'static str,
    pub index: usize,
    pub embedding: EmbeddingVector,
}

#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct EmbeddingUsage {
    pub prompt_tokens: usize,
    pub total_tokens: usize,
}

#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct EmbeddingResponse {
    pub object: &'static str,
    pub id: String,
    pub created: u64,
    pub model: String,
    pub data: Vec<EmbeddingData>,
    pub usage: EmbeddingUsage,
}

// ---------------------------------------------------------------- tokenizer endpoints (vLLM's)

#[derive(Clone, Debug, Default, Deserialize, ToSchema)]
pub struct TokenizeRequest {
    pub model: Option<String>,
    pub prompt: Option<String>,
    pub messages: Option<Vec<ChatMessageIn>>,
    /// With `messages`: end the rendering with the assistant's turn opener (default true).
    pub add_generation_prompt: Option<bool>,
    /// With `messages`: end the rendering where the last (assistant) message's content ends,
    /// as a chat request with `continue_final_message` does (default false).
    pub continue_final_message: Option<bool>,
    /// With `messages`: the functions the prompt offers, rendered as a chat request with
    /// `tool_choice: "auto"` renders them.
    pub tools: Option<Vec<ToolIn>>,
    /// With `prompt`: put BOS in front where the model's tokenizer asks for it, as a
    /// completion prompt gets (default true). lm-evaluation-harness sends false.
    pub add_special_tokens: Option<bool>,
    /// With `messages`: variables for the chat template, as on chat (each one it reads).
    #[schema(value_type = Option<Object>)]
    pub chat_template_kwargs: Option<serde_json::Map<String, Value>>,
}

impl RequestFields for TokenizeRequest {
    const AT_DEFAULT: &'static [&'static [AtDefault]] = &[TEMPLATE_AT_DEFAULT, TOKENIZE_AT_DEFAULT];
}

#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct TokenizeResponse {
    pub tokens: Vec<u32>,
    pub count: usize,
    pub max_model_len: usize,
}

/// A generation request as the render endpoints give it, in vLLM's `GenerateRequest` shape:
/// the prompt's token ids as the request would be read, and how it would be sampled.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct RenderedRequest {
    pub request_id: String,
    pub token_ids: Vec<u32>,
    /// The token ids as text, special tokens included (braid's addition).
    pub prompt: String,
    /// Always null: braid's models read text only.
    #[schema(value_type = Option<Object>)]
    pub features: Option<Value>,
    /// The validated sampling and stopping settings, under vLLM's names.
    #[schema(value_type = Object)]
    pub sampling_params: Value,
    pub model: String,
    pub stream: bool,
    #[schema(value_type = Option<Object>)]
    pub stream_options: Option<Value>,
    pub cache_salt: Option<String>,
    pub priority: i64,
    #[schema(value_type = Option<Object>)]
    pub kv_transfer_params: Option<Value>,
}

/// GET /tokenizer_info, in vLLM's shape (Hugging Face's tokenizer-config names).
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct TokenizerInfoResponse {
    pub tokenizer_class: &'static str,
    pub bos_token: Option<String>,
    pub eos_token: Option<String>,
    pub pad_token: Option<String>,
    pub unk_token: Option<String>,
    pub bos_token_id: Option<u32>,
    pub eos_token_id: Option<u32>,
    pub pad_token_id: Option<u32>,
    /// Whether a completion prompt gets BOS in front (/tokenize's `add_special_tokens`).
    pub add_bos_token: bool,
    /// The Jinja source /v1/chat/completions renders with; null for a model without one.
    pub chat_template: Option<String>,
    pub model_max_length: usize,
    pub vocab_size: usize,
}

#[derive(Clone, Debug, Default, Deserialize, ToSchema)]
pub struct DetokenizeRequest {
    pub model: Option<String>,
    #[schema(value_type = Option<Vec<u32>>)]
    pub tokens: Option<Vec<i64>>,
}

impl RequestFields for DetokenizeRequest {}

#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct DetokenizeResponse {
    pub prompt: String,
}

/// OpenAPI schemas of the fields whose JSON type varies (kept as `Value` in the types).
mod schema {
    use crate::field_bounds::MAX_CHOICES;
    use utoipa::openapi::schema::{
        ArrayBuilder, ArrayItems, ObjectBuilder, OneOfBuilder, Schema, Type,
    };
    use utoipa::openapi::RefOr;

    fn of(t: Type) -> ObjectBuilder {
        ObjectBuilder::new().schema_type(t)
    }

    fn array(items: impl Into<RefOr<Schema>>) -> ArrayBuilder {
        ArrayBuilder::new().items(ArrayItems::RefOrSchema(Box::new(items.into())))
    }

    pub fn prompt() -> impl Into<RefOr<Schema>> {
        let ids = || array(of(Type::Integer).minimum(Some(0)));
        OneOfBuilder::new()
            .item(of(Type::String))
            .item(ids())
            .item(
                array(OneOfBuilder::new().item(of(Type::String)).item(ids()))
                    .min_items(Some(1))
                    .max_items(Some(MAX_CHOICES)),
            )
            .description(Some(format!(
                "A string, an array of token ids, or an array of up to {MAX_CHOICES} strings or token-id arrays, each answered as its own choice."
            )))
    }

    pub fn stop() -> impl Into<RefOr<Schema>> {
        OneOfBuilder::new()
            .item(of(Type::String))
            .item(array(of(Type::String)))
            .item(of(Type::Null))
            .description(Some(
                "Text that ends generation when it appears (not included in the output).",
            ))
    }

    pub fn tool_choice() -> impl Into<RefOr<Schema>> {
        let named = of(Type::Object)
            .property("type", of(Type::String).enum_values(Some(["function"])))
            .required("type")
            .property(
                "function",
                of(Type::Object)
                    .property("name", of(Type::String))
                    .required("name"),
            )
            .required("function");
        OneOfBuilder::new()
            .item(of(Type::String).enum_values(Some(["none", "auto", "required"])))
            .item(named)
            .item(of(Type::Null))
    }

    pub fn content() -> impl Into<RefOr<Schema>> {
        let part = of(Type::Object)
            .property("type", of(Type::String).enum_values(Some(["text"])))
            .required("type")
            .property("text", of(Type::String))
            .required("text");
        OneOfBuilder::new()
            .item(of(Type::String))
            .item(array(part))
            .item(of(Type::Null))
    }
}

/// Seconds since the Unix epoch, for `created`.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_fields_and_nulls_are_accepted() {
        let r: CompletionRequest = serde_json::from_str(
            r#"{"model":"m","prompt":"hi","stop":null,"logprobs":null,"max_tokens":5,"top_k":3,"whatever":{"x":1},"stream_options":{"include_usage":true}}"#,
        )
        .unwrap();
        assert_eq!(r.max_tokens, Some(5));
        assert_eq!(r.top_k, Some(3));
        assert_eq!(r.stream_options.unwrap().include_usage, Some(true));
        let c: ChatCompletionRequest =
            serde_json::from_str(r#"{"messages":[{"role":"user","content":[{"type":"text","text":"a"}]}],"logprobs":true,"top_logprobs":2}"#)
                .unwrap();
        assert_eq!(c.messages.unwrap().len(), 1);
    }

    #[test]
    fn usage_is_omitted_null_or_present() {
        let mut chunk = CompletionResponse {
            id: "cmpl-1".into(),
            object: "text_completion",
            created: 0,
            model: "m".into(),
            choices: vec![],
            usage: None,
        };
        assert!(serde_json::to_value(&chunk).unwrap().get("usage").is_none());
        chunk.usage = Some(None);
        assert!(serde_json::to_value(&chunk).unwrap()["usage"].is_null());
        chunk.usage = Some(Some(Usage::new(3, 4)));
        assert_eq!(
            serde_json::to_value(&chunk).unwrap()["usage"]["total_tokens"],
            7
        );
    }
}
