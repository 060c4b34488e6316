//! The bounds a request is checked against that come from the model and the server's flags.

/// Request bounds from the model and the server's flags.
#[derive(Clone, Debug)]
pub struct Limits {
    pub served_model_name: String,
    pub context_length: usize,
    pub vocab_size: usize,
    /// Upper bound for `max_tokens` (at most the context length).
    pub max_tokens_cap: usize,
    pub max_stop_strings: usize,
    pub max_stop_string_len: usize,
    /// Longest prompt accepted, in tokens (at most the context length).
    pub max_prompt_tokens: usize,
}
