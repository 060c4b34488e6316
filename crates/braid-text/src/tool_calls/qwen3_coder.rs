//! Qwen3-Coder's tool calls, in XML:
//!
//! ```text
//! <tool_call>
//! <function=get_weather>
//! <parameter=city>
//! Paris
//! </parameter>
//! </function>
//! </tool_call>
//! ```
//!
//! A value is written raw, so it is read by the type its parameter declares, as vLLM's
//! `qwen3_coder` parser reads it: a string stays the text; a number, boolean, object or array
//! is read as JSON, and stays the text where it is not.

use super::{body_rule, lark_string, CallRules, Function, Trigger};
use serde_json::{Map, Value};

const FUNCTION: &str = "<function=";
const PARAMETER: &str = "<parameter=";
const PARAMETER_CLOSE: &str = "</parameter>";

/// The call of one `<tool_call>` block, its values typed by `functions`' schemas.
pub(super) fn read_block(raw: &str, functions: &[Function]) -> Option<Vec<(String, Value)>> {
    let body = raw
        .strip_prefix("<tool_call>")?
        .strip_suffix("</tool_call>")?
        .trim();
    let rest = body.strip_prefix(FUNCTION)?;
    let (name, rest) = rest.split_once('>')?;
    let rest = rest.trim().strip_suffix("</function>")?;
    let schema = functions.iter().find(|f| f.name == name).map(|f| &f.schema);
    let mut arguments = Map::new();
    let mut rest = rest.trim_start();
    while !rest.is_empty() {
        let after = rest.strip_prefix(PARAMETER)?;
        let (parameter, after) = after.split_once('>')?;
        let (value, after) = after.split_once(PARAMETER_CLOSE)?;
        let value = value.strip_prefix('\n').unwrap_or(value);
        let value = value.strip_suffix('\n').unwrap_or(value);
        let declared = schema.and_then(|s| s.get("properties")?.get(parameter));
        arguments.insert(parameter.to_string(), typed(value, declared));
        rest = after.trim_start();
    }
    Some(vec![(name.to_string(), Value::Object(arguments))])
}

/// Whether a parameter declared so takes a string, written raw.
fn takes_string(declared: Option<&Value>) -> bool {
    let types: Vec<&str> = match declared.and_then(|d| d.get("type")) {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    types.contains(&"string")
        || (types.is_empty()
            && declared
                .and_then(|d| d.get("enum"))
                .and_then(Value::as_array)
                .is_some_and(|e| e.iter().all(Value::is_string)))
}

/// A raw value as its parameter's type reads it.
fn typed(value: &str, declared: Option<&Value>) -> Value {
    let nullable = declared
        .and_then(|d| d.get("type"))
        .and_then(Value::as_array)
        .is_some_and(|ts| ts.iter().any(|t| t == "null"));
    if takes_string(declared) && !(nullable && value == "null") {
        return Value::String(value.to_string());
    }
    serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.to_string()))
}

/// Calls with the parameters each function declares, in its order: the required ones, and
/// the others where the model writes them. A string value is any text without `<`, which
/// the grammar needs to know where the value ends, within its `minLength` and `maxLength`;
/// [`unenforceable`] names what a raw string cannot be held to.
pub(super) fn call_rules(functions: &[Function]) -> CallRules {
    let mut g = body_rule(functions.len());
    g.push_str("VALUE_TEXT: /[^<]*/\n");
    // (The newline the model writes before `</parameter>` is the value's last character.)
    for (i, f) in functions.iter().enumerate() {
        let head = format!("\n{FUNCTION}{}>\n", f.name);
        let mut params = Vec::new();
        let required: Vec<&str> = f
            .schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if let Some(Value::Object(properties)) = f.schema.get("properties") {
            for (j, (name, declared)) in properties.iter().enumerate() {
                let open = lark_string(&format!("{PARAMETER}{name}>\n"));
                let strings: Option<Vec<String>> = declared
                    .get("enum")
                    .and_then(Value::as_array)
                    .and_then(|e| e.iter().map(|v| v.as_str().map(lark_string)).collect());
                let rule = match strings {
                    Some(choices) if !choices.is_empty() => format!(
                        "p_{i}_{j}: {open} ({}) \"\\n{PARAMETER_CLOSE}\\n\"\n",
                        choices.join(" | ")
                    ),
                    // The text takes the newline before the closing tag; reading drops it.
                    _ if takes_string(Some(declared)) => {
                        let length = |key: &str| declared.get(key).and_then(Value::as_u64);
                        let text = match (length("minLength"), length("maxLength")) {
                            (None, None) => "VALUE_TEXT".to_string(),
                            (min, max) => format!(
                                "/[^<]{{{},{}}}\\n/",
                                min.unwrap_or(0),
                                max.map_or(String::new(), |m| m.to_string())
                            ),
                        };
                        format!("p_{i}_{j}: {open} {text} \"{PARAMETER_CLOSE}\\n\"\n")
                    }
                    _ => {
                        let mut schema = declared.clone();
                        if let Some(obj) = schema.as_object_mut() {
                            for shared in ["$defs", "x-guidance"] {
                                if let Some(v) = f.schema.get(shared) {
                                    obj.insert(shared.into(), v.clone());
                                }
                            }
                        }
                        format!(
                            "p_{i}_{j}: {open} v_{i}_{j} \"\\n{PARAMETER_CLOSE}\\n\"\nv_{i}_{j}: %json {schema}\n"
                        )
                    }
                };
                g.push_str(&rule);
                let optional = if required.contains(&name.as_str()) {
                    ""
                } else {
                    "?"
                };
                params.push(format!("p_{i}_{j}{optional}"));
            }
        }
        g.push_str(&format!(
            "body_{i}: {} {} \"</function>\\n</tool_call>\"\n",
            lark_string(&head),
            params.join(" ")
        ));
    }
    CallRules {
        trigger: Trigger::Text("<tool_call>"),
        rules: g,
        separator: Some(lark_string("\n")),
    }
}

/// What a function's schema asks of a string value that a raw value cannot be held to
/// (`pattern`, `format`), naming the parameter; such a function cannot be forced in this
/// syntax.
pub fn unenforceable(function: &Function) -> Option<String> {
    let Some(Value::Object(properties)) = function.schema.get("properties") else {
        return None;
    };
    properties.iter().find_map(|(name, declared)| {
        let string = takes_string(Some(declared));
        ["pattern", "format"]
            .into_iter()
            .find(|k| string && declared.get(*k).is_some())
            .map(|k| format!("parameter `{name}` has a `{k}`, which Qwen3-Coder's raw string values cannot be held to"))
    })
}
