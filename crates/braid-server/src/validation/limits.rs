//! The bounds a request is checked against that come from the model and the server's flags.

/// Most `logit_bias` entries one request may give: OpenAI's limit. The sampler applies every
/// entry to every token it samples.
pub const MAX_LOGIT_BIAS_ENTRIES: usize = 300;

/// Most `stop_token_ids` one request may give; the sampler checks every sampled token against
/// them.
pub const MAX_STOP_TOKEN_IDS: usize = 300;

/// Request bounds from the model and the server's flags.
#[derive(Clone, Debug)]
pub struct Limits {
    pub served_model_name: String,
    /// The embedding model's id, when one is served beside (`--embedding-model`).
    pub embedding_model_name: Option<String>,
    pub context_length: usize,
    pub vocab_size: usize,
    /// Upper bound for `max_tokens` (at most the context length).
    pub max_tokens_cap: usize,
    pub max_stop_strings: usize,
    pub max_stop_string_len: usize,
    /// Longest prompt accepted, in tokens (at most the context length).
    pub max_prompt_tokens: usize,
    /// Most tokens of work one request may ask for: every choice's prompt plus its
    /// `max_tokens`, summed over the choices.
    pub max_request_tokens: usize,
    /// Control tokens typed in chat messages are read as control tokens (`--special-in-messages`);
    /// otherwise as the text they are.
    pub special_in_messages: bool,
    /// Where chat answers' reasoning is found (`--reasoning-parser`).
    pub reasoning_parser: crate::args::ReasoningParser,
    /// The syntax the model's tool calls are written and forced in (`--tool-call-parser`, by
    /// default the template's).
    pub tool_syntax: braid_text::tool_calls::ToolSyntax,
}
