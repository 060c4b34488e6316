//! Mistral's tool calls: `[TOOL_CALLS]` and a JSON array of `{"name", "arguments"}` objects
//! (Mistral Nemo's template), or `[TOOL_CALLS]NAME[ARGS]{...}` per call (Mistral Small 3.2,
//! Devstral and Ministral 3, whose templates may add `[CALL_ID]id` before `[ARGS]`).
//!
//! The marks are special tokens in Mistral's vocabularies, so a request with tools decodes
//! them as text for this parser to see (`ToolSyntax::needs_marks`). A forced call is written in the
//! form the vocabulary knows: with an `[ARGS]` token, one call per mark; without, the array.

use super::{body_rule, json_end, lark_string, CallRules, Function, Trigger};
use serde_json::Value;

pub const TOOL_CALLS: &str = "[TOOL_CALLS]";
pub const ARGS: &str = "[ARGS]";
pub const CALL_ID: &str = "[CALL_ID]";

/// Where the call block at the start of `pending` (which starts with the mark) ends: None
/// while it may still be completed, Some(Err) when it is not a call.
pub(super) fn block_end(pending: &str) -> Option<Result<usize, ()>> {
    let after = &pending[TOOL_CALLS.len()..];
    let body = after.trim_start();
    let offset = pending.len() - body.len();
    if body.is_empty() {
        return None;
    }
    if body.starts_with('[') {
        return json_end(body).map(|end| end.map(|end| offset + end));
    }
    let name_end = body
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.'))
        .unwrap_or(body.len());
    let mut rest = &body[name_end..];
    if rest.is_empty() {
        return None;
    }
    if name_end == 0 {
        return Some(Err(()));
    }
    if let Some(after_id) = rest.strip_prefix(CALL_ID) {
        match after_id.find('[') {
            Some(at) => rest = &after_id[at..],
            None => return None,
        }
    }
    match rest.strip_prefix(ARGS) {
        Some(args) => {
            let json = args.trim_start();
            if json.is_empty() {
                return None;
            }
            let start = pending.len() - json.len();
            json_end(json).map(|end| end.map(|end| start + end))
        }
        None if ARGS.starts_with(rest) || CALL_ID.starts_with(rest) => None,
        None => Some(Err(())),
    }
}

/// The calls of a block [`block_end`] cut: (name, arguments).
pub(super) fn read_block(raw: &str) -> Option<Vec<(String, Value)>> {
    let body = raw.strip_prefix(TOOL_CALLS)?.trim();
    if body.starts_with('[') {
        let Value::Array(calls) = serde_json::from_str::<Value>(body).ok()? else {
            return None;
        };
        return calls
            .into_iter()
            .map(|call| {
                let name = call.get("name")?.as_str()?.to_string();
                let arguments = call.get("arguments").or_else(|| call.get("parameters"))?;
                Some((name, arguments.clone()))
            })
            .collect();
    }
    let (head, json) = body.split_once(ARGS)?;
    let name = head.split(CALL_ID).next()?.trim();
    Some(vec![(
        name.to_string(),
        serde_json::from_str(json.trim()).ok()?,
    )])
}

/// Calls in the vocabulary's form: `mark` spells a mark as its special token, None where the
/// vocabulary has none. With an `[ARGS]` token, each call is opened by its own mark; without,
/// one mark opens the array of them all.
pub(super) fn call_rules(
    functions: &[Function],
    parallel: bool,
    mark: &dyn Fn(&str) -> Option<String>,
) -> CallRules {
    let trigger = match mark(TOOL_CALLS) {
        Some(atom) => Trigger::Token(TOOL_CALLS, atom),
        None => Trigger::Text(TOOL_CALLS),
    };
    let (mut rules, separator) = match mark(ARGS) {
        Some(args) => {
            let mut rules = body_rule(functions.len());
            for (i, f) in functions.iter().enumerate() {
                rules.push_str(&format!(
                    "body_{i}: {} {args} args_{i}\n",
                    lark_string(&f.name)
                ));
            }
            (rules, Some("\"\"".to_string()))
        }
        None => {
            let items = if parallel {
                "item (\", \" item)*"
            } else {
                "item"
            };
            let mut rules = format!("body: \"[\" {items} \"]\"\n");
            let alternatives: Vec<String> =
                (0..functions.len()).map(|i| format!("item_{i}")).collect();
            rules.push_str(&format!("item: {}\n", alternatives.join(" | ")));
            for (i, f) in functions.iter().enumerate() {
                let head = format!("{{\"name\": {}, \"arguments\": ", lark_string(&f.name));
                rules.push_str(&format!(
                    "item_{i}: {} args_{i} \"}}\"\n",
                    lark_string(&head)
                ));
            }
            (rules, None)
        }
    };
    for (i, f) in functions.iter().enumerate() {
        rules.push_str(&format!("args_{i}: %json {}\n", f.schema));
    }
    CallRules {
        trigger,
        rules,
        separator,
    }
}
