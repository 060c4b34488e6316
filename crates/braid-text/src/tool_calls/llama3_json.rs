//! Llama 3's tool calls (3.1 to 3.3, and the models fine-tuned from them): the whole answer is
//! `{"name": ..., "parameters": {...}}`, as the template asks, after an optional
//! `<|python_tag|>`; several calls are separated by `;`. An answer that starts with anything
//! else is text, as vLLM's `llama3_json` parser reads it.

use super::{lark_string, start_rule, Function};
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

pub fn calls_grammar(functions: &[Function], parallel: bool) -> String {
    let mut g = start_rule(functions.len(), parallel, "\"; \"");
    for (i, f) in functions.iter().enumerate() {
        let head = format!("{{\"name\": {}, \"parameters\": ", lark_string(&f.name));
        g.push_str(&format!(
            "call_{i}: {} args_{i} \"}}\"\nargs_{i}: %json {}\n",
            lark_string(&head),
            f.schema
        ));
    }
    g
}
