//! Nothing a client sends is silently ignored.
//!
//! A client that asks for audio, a web search or a predicted output and gets plain text back
//! has no way to notice; llama.cpp's users filed exactly that complaint about schemas that
//! were accepted and not enforced. So every field of a request body is in one of three
//! groups:
//! - honored: the fields the request types declare (`openai_types.rs`);
//! - accepted and documented as having no effect ([`ACCEPTED_NOOPS`]): bookkeeping that
//!   changes nothing about the answer (`user`, `metadata`, `store`, ...);
//! - accepted only at their default ([`AtDefault`]): vLLM's and SGLang's fields for what
//!   braid does not do. Routers and clients written for those servers send them at their
//!   defaults, which ask for nothing; any other value is refused, naming the field;
//! - refused with 400 `unsupported_parameter` naming the field: the ones OpenAI defines that
//!   braid cannot honor ([`UNSUPPORTED`], with the reason), and anything unknown.
//!
//! serde reports the fields it skipped while deserializing (`serde_ignored`), so the groups
//! follow the declared types by construction: declaring a field is what makes it honored.

use crate::error::ApiError;
use serde::de::DeserializeOwned;

/// Fields accepted on the generation endpoints that change nothing about the answer, with
/// why they are harmless to accept.
pub const ACCEPTED_NOOPS: &[(&str, &str)] = &[
    ("user", "an end-user id for the caller's own abuse tracking"),
    (
        "metadata",
        "tags for the caller's stored-completion dashboard",
    ),
    ("store", "braid stores no completions"),
    ("service_tier", "braid has one tier"),
    (
        "safety_identifier",
        "an end-user id for the caller's own abuse tracking",
    ),
    (
        "prompt_cache_key",
        "braid's prefix cache matches by content, without a key",
    ),
];

/// A vLLM or SGLang field braid accepts at its default only.
#[derive(Clone, Copy, Debug)]
pub struct AtDefault {
    pub name: &'static str,
    /// The default, as JSON. `null` and absence are the default too; where the default is
    /// null, so are an empty object and an empty array.
    pub default: &'static str,
    /// Why another value cannot be honored.
    pub why: &'static str,
}

const fn at_default(name: &'static str, default: &'static str, why: &'static str) -> AtDefault {
    AtDefault { name, default, why }
}

/// Both generation endpoints' (and their render endpoints').
pub const GENERATION_AT_DEFAULT: &[AtDefault] = &[
    at_default(
        "return_hidden_states",
        "false",
        "braid answers with text, not hidden states",
    ),
    at_default("min_tokens", "0", "braid has no minimum answer length"),
    at_default(
        "spaces_between_special_tokens",
        "true",
        "special tokens are written as the tokenizer decodes them",
    ),
    at_default("use_beam_search", "false", "braid has no beam search"),
    at_default(
        "length_penalty",
        "1.0",
        "it weighs beams, and braid has no beam search",
    ),
    at_default("priority", "0", "braid schedules without priorities"),
    at_default(
        "truncate_prompt_tokens",
        "null",
        "braid refuses a prompt that does not fit rather than cutting it",
    ),
    at_default(
        "return_tokens_as_token_ids",
        "false",
        "logprobs name tokens by their text",
    ),
    at_default(
        "cache_salt",
        "null",
        "braid's prefix cache is shared by every request",
    ),
    at_default("lora_path", "null", "braid serves no LoRA adapters"),
    at_default("lora_name", "null", "braid serves no LoRA adapters"),
    at_default("session_params", "null", "braid keeps no sessions"),
    at_default(
        "regex",
        "null",
        "send `structured_outputs: {\"regex\": ...}` or `guided_regex`",
    ),
    at_default(
        "ebnf",
        "null",
        "send `structured_outputs: {\"grammar\": ...}` or `guided_grammar`",
    ),
    at_default(
        "json_schema",
        "null",
        "send `response_format` or `structured_outputs`",
    ),
    at_default(
        "bad_words",
        "null",
        "braid bans tokens with `logit_bias` only",
    ),
    at_default(
        "allowed_token_ids",
        "null",
        "braid restricts tokens with `logit_bias` only",
    ),
    at_default("detokenize", "true", "braid always answers with text"),
    at_default(
        "logits_processors",
        "null",
        "braid runs no custom logits processors",
    ),
    at_default(
        "kv_transfer_params",
        "null",
        "braid does not split prompt reading from decoding",
    ),
];

const NO_REASONING: &str =
    "braid always gives a reasoning model's reasoning apart, in `reasoning_content`, as it streams";

/// /v1/chat/completions' (and its render endpoint's).
pub const CHAT_AT_DEFAULT: &[AtDefault] = &[
    at_default("separate_reasoning", "true", NO_REASONING),
    at_default("stream_reasoning", "true", NO_REASONING),
    at_default("include_reasoning", "true", NO_REASONING),
    at_default(
        "echo",
        "false",
        "a chat answer does not repeat the conversation",
    ),
    at_default(
        "add_special_tokens",
        "false",
        "the chat template and the model's tokenizer settings place the special tokens",
    ),
    at_default(
        "documents",
        "null",
        "the chat templates braid renders take no documents",
    ),
    at_default(
        "mm_processor_kwargs",
        "null",
        "braid's models read text only",
    ),
];

/// Where a conversation is rendered: chat, its render endpoint and /tokenize.
pub const TEMPLATE_AT_DEFAULT: &[AtDefault] = &[at_default(
    "chat_template",
    "null",
    "the served template is the model's or `braid serve --chat-template`",
)];

/// /tokenize's own, as routers send them.
pub const TOKENIZE_AT_DEFAULT: &[AtDefault] = &[at_default(
    "return_token_strs",
    "false",
    "braid answers with token ids; /detokenize gives text",
)];

/// vLLM's embedding fields, as its clients and routers send them.
pub const EMBEDDING_AT_DEFAULT: &[AtDefault] = &[
    at_default(
        "add_special_tokens",
        "true",
        "the model reads each text framed by its special tokens, as it was trained",
    ),
    at_default(
        "priority",
        "0",
        "braid orders texts by arrival, with no priorities",
    ),
    at_default(
        "embed_dtype",
        "\"float32\"",
        "vectors are float32 (as a list of floats, or as bytes with `encoding_format: base64`)",
    ),
];

/// Fields of messages accepted without effect.
pub const ACCEPTED_MESSAGE_NOOPS: &[(&str, &str)] = &[(
    "name",
    "a participant's name; the chat templates of braid's models do not render it",
)];

/// OpenAI fields braid cannot honor, with the reason the refusal gives.
pub const UNSUPPORTED: &[(&str, &str)] = &[
    ("audio", "braid's models produce text only"),
    ("modalities", "braid's models produce text only"),
    ("web_search_options", "braid has no web search"),
    (
        "functions",
        "the deprecated functions API is not supported; send `tools`",
    ),
    (
        "function_call",
        "the deprecated functions API is not supported; send `tool_choice`",
    ),
    ("verbosity", "braid's models have no verbosity control"),
    ("tools", NO_TOOLS),
    ("tool_choice", NO_TOOLS),
    ("parallel_tool_calls", NO_TOOLS),
];

/// Why the tool fields are refused on /v1/completions (the chat endpoint declares them):
/// unconstrained text in answer to a request for a tool call breaks the client later and
/// quietly.
const NO_TOOLS: &str =
    "tool calls are made on /v1/chat/completions; /v1/completions continues a prompt";

/// A request body type whose skipped fields are checked against the groups above.
pub trait RequestFields: DeserializeOwned {
    /// True for the generation endpoints, whose bodies OpenAI clients fill with extras; the
    /// other endpoints (tokenize, detokenize) refuse any field they do not declare.
    const OPENAI_BODY: bool = false;
    /// The fields accepted at their default only.
    const AT_DEFAULT: &'static [&'static [AtDefault]] = &[];
}

/// Deserializes `bytes` as `T` once more and refuses the first field that is neither
/// declared nor an accepted no-op. Called after the typed parse succeeded, so type errors
/// keep serde's messages naming the field.
pub fn check<T: RequestFields>(bytes: &[u8]) -> Result<(), ApiError> {
    let mut skipped: Vec<Vec<String>> = Vec::new();
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let parsed: Result<T, _> =
        serde_ignored::deserialize(&mut de, |path| skipped.push(segments(&path)));
    if parsed.is_err() {
        return Ok(());
    }
    let mut body: Option<serde_json::Value> = None;
    for path in skipped {
        if let [field] = path.as_slice() {
            if let Some(known) = T::AT_DEFAULT
                .iter()
                .flat_map(|l| l.iter())
                .find(|d| d.name == field)
            {
                let body = body.get_or_insert_with(|| {
                    serde_json::from_slice(bytes).unwrap_or(serde_json::Value::Null)
                });
                if is_default(&body[field.as_str()], known.default) {
                    continue;
                }
                return Err(not_default(known));
            }
        }
        if let Some(refusal) = refusal(&path, T::OPENAI_BODY) {
            return Err(refusal);
        }
    }
    Ok(())
}

/// Whether `value` asks for no more than `default` (JSON) does.
fn is_default(value: &serde_json::Value, default: &str) -> bool {
    use serde_json::Value;
    let default: Value = serde_json::from_str(default).expect("defaults are JSON");
    match (value, &default) {
        (Value::Null, _) => true,
        (Value::Object(o), Value::Null) => o.is_empty(),
        (Value::Array(a), Value::Null) => a.is_empty(),
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        (v, d) => v == d,
    }
}

fn not_default(field: &AtDefault) -> ApiError {
    ApiError::bad_request(format!(
        "`{}` is accepted only at its default, {}: {}",
        field.name, field.default, field.why
    ))
    .with_param(field.name)
    .with_code("unsupported_parameter")
}

/// The path's keys and indices, without serde's markers for options and newtypes.
fn segments(path: &serde_ignored::Path) -> Vec<String> {
    use serde_ignored::Path;
    let mut out = match path {
        Path::Root => return Vec::new(),
        Path::Seq { parent, .. }
        | Path::Map { parent, .. }
        | Path::Some { parent }
        | Path::NewtypeStruct { parent }
        | Path::NewtypeVariant { parent } => segments(parent),
    };
    match path {
        Path::Seq { index, .. } => out.push(index.to_string()),
        Path::Map { key, .. } => out.push(key.clone()),
        _ => {}
    }
    out
}

fn refusal(path: &[String], openai_body: bool) -> Option<ApiError> {
    let listed = |list: &[(&str, &str)], name: &str| list.iter().any(|(n, _)| *n == name);
    let (param, reason) = match path {
        [field] if openai_body && listed(ACCEPTED_NOOPS, field) => return None,
        [field] => match UNSUPPORTED.iter().find(|(n, _)| n == field) {
            Some((_, reason)) if openai_body => (field.clone(), (*reason).to_string()),
            _ => (
                field.clone(),
                "it is not a field of this endpoint".to_string(),
            ),
        },
        [list, index, field] if list == "messages" => {
            if listed(ACCEPTED_MESSAGE_NOOPS, field) {
                return None;
            }
            (
                format!("messages[{index}].{field}"),
                "it is not a field of a message braid reads".to_string(),
            )
        }
        _ => (
            path.join("."),
            "it is not a field of this endpoint".to_string(),
        ),
    };
    Some(
        ApiError::bad_request(format!(
            "`{param}` is not supported: {reason}; /openapi.json lists every field braid accepts"
        ))
        .with_param(&param)
        .with_code("unsupported_parameter"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openai_types::{ChatCompletionRequest, CompletionRequest, TokenizeRequest};

    fn refused<T: RequestFields>(body: &str) -> Option<(String, String)> {
        check::<T>(body.as_bytes()).err().map(|e| {
            assert_eq!(e.status, axum::http::StatusCode::BAD_REQUEST);
            assert_eq!(e.detail.code, Some("unsupported_parameter"));
            (e.detail.param.clone().unwrap(), e.detail.message.clone())
        })
    }

    #[test]
    fn declared_fields_and_noops_pass() {
        let body = r#"{"prompt": "hi", "max_tokens": 3, "temperature": 0.5, "user": "u",
            "metadata": {"a": "b"}, "store": false, "service_tier": "auto"}"#;
        assert_eq!(refused::<CompletionRequest>(body), None);
        let chat = r#"{"messages": [{"role": "user", "content": "hi", "name": "ann"}],
            "stream_options": {"include_usage": true}}"#;
        assert_eq!(refused::<ChatCompletionRequest>(chat), None);
        let tools = r#"{"messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
            "tool_choice": "auto", "parallel_tool_calls": false}"#;
        assert_eq!(refused::<ChatCompletionRequest>(tools), None);
        let (param, message) =
            refused::<CompletionRequest>(r#"{"prompt": "x", "tools": []}"#).unwrap();
        assert_eq!(param, "tools");
        assert!(message.contains("/v1/chat/completions"), "{message}");
    }

    #[test]
    fn unsupported_fields_are_named_with_the_reason() {
        let (param, message) =
            refused::<ChatCompletionRequest>(r#"{"messages": [], "audio": {"voice": "x"}}"#)
                .unwrap();
        assert_eq!(param, "audio");
        assert!(message.contains("text only"), "{message}");
        for field in ["modalities", "web_search_options", "functions"] {
            let body = format!(r#"{{"prompt": "x", "{field}": null}}"#);
            assert_eq!(refused::<CompletionRequest>(&body).unwrap().0, field);
        }
    }

    #[test]
    fn unknown_fields_are_refused_at_any_depth() {
        let (param, _) = refused::<CompletionRequest>(r#"{"prompt": "x", "temprature": 1}"#)
            .expect("a misspelt field is refused");
        assert_eq!(param, "temprature");
        let (param, _) = refused::<ChatCompletionRequest>(
            r#"{"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b", "refusal": "x"}]}"#,
        )
        .unwrap();
        assert_eq!(param, "messages[1].refusal");
        let (param, _) = refused::<ChatCompletionRequest>(
            r#"{"messages": [], "stream_options": {"include_obfuscation": true}}"#,
        )
        .unwrap();
        assert_eq!(param, "stream_options.include_obfuscation");
    }

    #[test]
    fn other_endpoints_refuse_generation_extras() {
        assert_eq!(
            refused::<TokenizeRequest>(r#"{"prompt": "x", "user": "u"}"#)
                .unwrap()
                .0,
            "user"
        );
    }

    #[test]
    fn router_fields_at_their_defaults_are_accepted() {
        // vllm-router 0.1.17 re-serializes every request with these.
        let completion = r#"{"prompt": "x", "stream": false, "echo": false, "no_stop_trim": false,
            "ignore_eos": false, "skip_special_tokens": true, "return_hidden_states": false}"#;
        assert_eq!(refused::<CompletionRequest>(completion), None);
        let chat = r#"{"messages": [{"role": "user", "content": "hi"}], "stream": false,
            "logprobs": false, "no_stop_trim": false, "ignore_eos": false,
            "continue_final_message": false, "skip_special_tokens": true,
            "separate_reasoning": true, "stream_reasoning": true, "return_hidden_states": false,
            "include_reasoning": true, "chat_template_kwargs": {}, "length_penalty": 1,
            "priority": 0, "truncate_prompt_tokens": null}"#;
        assert_eq!(refused::<ChatCompletionRequest>(chat), None);
        let tokenize = r#"{"messages": [], "add_generation_prompt": true,
            "continue_final_message": false, "chat_template_kwargs": null}"#;
        assert_eq!(refused::<TokenizeRequest>(tokenize), None);
    }

    #[test]
    fn router_fields_at_other_values_are_refused_by_name() {
        for (body, field) in [
            (
                r#"{"prompt": "x", "return_hidden_states": true}"#,
                "return_hidden_states",
            ),
            (r#"{"prompt": "x", "min_tokens": 3}"#, "min_tokens"),
            (
                r#"{"prompt": "x", "length_penalty": 0.5}"#,
                "length_penalty",
            ),
            (r#"{"prompt": "x", "cache_salt": "s"}"#, "cache_salt"),
        ] {
            let (param, message) = refused::<CompletionRequest>(body).expect(body);
            assert_eq!(param, field);
            assert!(message.contains("only at its default"), "{message}");
        }
        let (param, _) =
            refused::<ChatCompletionRequest>(r#"{"messages": [], "separate_reasoning": false}"#)
                .unwrap();
        assert_eq!(param, "separate_reasoning");
        // The render endpoints' template must come from the model or --chat-template.
        let (param, _) =
            refused::<TokenizeRequest>(r#"{"messages": [], "chat_template": "{{ messages }}"}"#)
                .unwrap();
        assert_eq!(param, "chat_template");
        // Chat's fields are not completions'.
        let (param, message) =
            refused::<CompletionRequest>(r#"{"prompt": "x", "separate_reasoning": true}"#).unwrap();
        assert_eq!(param, "separate_reasoning");
        assert!(
            message.contains("not a field of this endpoint"),
            "{message}"
        );
    }

    #[test]
    fn a_body_of_the_wrong_shape_is_left_to_the_typed_parse() {
        assert!(check::<CompletionRequest>(br#"{"temperature": "hot"}"#).is_ok());
    }
}
