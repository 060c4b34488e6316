//! Nothing a client sends is silently ignored.
//!
//! A client that asks for audio, a web search or a predicted output and gets plain text back
//! has no way to notice; llama.cpp's users filed exactly that complaint about schemas that
//! were accepted and not enforced. So every field of a request body is in one of three
//! groups:
//! - honored: the fields the request types declare (`openai_types.rs`);
//! - accepted and documented as having no effect ([`ACCEPTED_NOOPS`]): bookkeeping that
//!   changes nothing about the answer (`user`, `metadata`, `store`, ...);
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

/// Fields of messages accepted without effect.
pub const ACCEPTED_MESSAGE_NOOPS: &[(&str, &str)] = &[(
    "name",
    "a participant's name; the chat templates of braid's models do not render it",
)];

/// OpenAI fields braid cannot honor, with the reason the refusal gives.
pub const UNSUPPORTED: &[(&str, &str)] = &[
    ("audio", "braid's models produce text only"),
    ("modalities", "braid's models produce text only"),
    (
        "prediction",
        "braid has no predicted-output (speculative) decoding",
    ),
    ("web_search_options", "braid has no web search"),
    (
        "functions",
        "the deprecated functions API is not supported; send `tools`",
    ),
    (
        "function_call",
        "the deprecated functions API is not supported; send `tool_choice`",
    ),
    (
        "reasoning_effort",
        "braid's models do not reason before answering",
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
    for path in skipped {
        if let Some(refusal) = refusal(&path, T::OPENAI_BODY) {
            return Err(refusal);
        }
    }
    Ok(())
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
        for field in [
            "modalities",
            "prediction",
            "web_search_options",
            "functions",
        ] {
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
    fn a_body_of_the_wrong_shape_is_left_to_the_typed_parse() {
        assert!(check::<CompletionRequest>(br#"{"temperature": "hot"}"#).is_ok());
    }
}
