//! Llama 3's tool calls (3.1 to 3.3, and the models fine-tuned from them): the whole answer is
//! `{"name": ..., "parameters": {...}}`, as the template asks, after an optional
//! `<|python_tag|>`; several calls are separated by `;`. An answer that starts with anything
//! else is text, as vLLM's `llama3_json` parser reads it.

use super::{body_rule, lark_string, CallRules, Function, Trigger};
use serde_json::Value;

pub const PYTHON_TAG: &str = "<|python_tag|>";

/// The call of one JSON object block.
pub(super) fn read_block(raw: &str) -> Option<Vec<(String, Value)>> {
    let body = raw.trim_start_matches(|c: char| c.is_whitespace() || c == ';');
    let body = body.strip_prefix(PYTHON_TAG).unwrap_or(body);
    let call: Value = serde_json::from_str(body.trim()).ok()?;
    let name = call.get("name")?.as_str()?.to_string();
    let arguments = call.get("parameters").or_else(|| call.get("arguments"))?;
    Some(vec![(name, arguments.clone())])
}

/// Calls separated by `; `, from the answer's start.
pub(super) fn call_rules(functions: &[Function]) -> CallRules {
    let mut rules = body_rule(functions.len());
    for (i, f) in functions.iter().enumerate() {
        let head = format!("{{\"name\": {}, \"parameters\": ", lark_string(&f.name));
        rules.push_str(&format!(
            "body_{i}: {} args_{i} \"}}\"\nargs_{i}: %json {}\n",
            lark_string(&head),
            f.schema
        ));
    }
    CallRules {
        trigger: Trigger::Start,
        rules,
        separator: Some(lark_string("; ")),
    }
}
