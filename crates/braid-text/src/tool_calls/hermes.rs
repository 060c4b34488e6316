//! Tool calls in the Hermes syntax (NousResearch's Hermes 2 Pro, Qwen 2.5 and 3): the
//! functions are listed in the system prompt inside `<tools>`, the model writes each call as
//! `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`, and each result comes back
//! inside `<tool_response>`.
//!
//! It is the syntax braid falls back to: the most widely trained one among small open models,
//! and a grammar over it is what makes `tool_choice: "required"` reliable on a model that was
//! never trained on tools at all (the default SmolLM2). A template that renders tools itself
//! gets them (in whichever syntax it teaches); for any other, [`describe_tools`] rewrites the
//! conversation into plain turns in this syntax.

use super::{body_rule, lark_string, CallRules, Function, Trigger};
use crate::chat_template::ChatMessage;
use crate::python_json::python_json;
use serde_json::Value;

const CALL_OPEN: &str = "<tool_call>";
const CALL_CLOSE: &str = "</tool_call>";

/// The system prompt's description of `tools` (OpenAI's `{"type": "function", "function":
/// {...}}` objects), in Qwen 2.5's wording.
pub fn tools_prompt(tools: &[Value]) -> String {
    let mut s = String::from(
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n\
         You are provided with function signatures within <tools></tools> XML tags:\n<tools>",
    );
    for tool in tools {
        s.push('\n');
        s.push_str(&python_json(tool));
    }
    s.push_str(
        "\n</tools>\n\nFor each function call, return a json object with function name and \
         arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n\
         {\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>",
    );
    s
}

/// The head of a call to `name`, up to where its arguments begin.
fn call_head(name: &str) -> String {
    format!(
        "{CALL_OPEN}\n{{\"name\": {}, \"arguments\": ",
        Value::String(name.to_string())
    )
}

const CALL_TAIL: &str = "}\n</tool_call>";

/// One call as the model writes it.
pub fn call_text(name: &str, arguments: &Value) -> String {
    format!("{}{}{CALL_TAIL}", call_head(name), python_json(arguments))
}

/// The conversation as plain turns for a template that does not render tools: the tools
/// described at the end of the system prompt (a system turn is added if there is none), an
/// assistant's calls written out in its text, and `tool` results as user turns holding
/// `<tool_response>` blocks (consecutive results in one turn), as Qwen 2.5's template renders
/// them.
pub fn describe_tools(messages: Vec<ChatMessage>, tools: Option<&[Value]>) -> Vec<ChatMessage> {
    let mut out: Vec<ChatMessage> = Vec::with_capacity(messages.len() + 1);
    let mut last_was_tool = false;
    for m in messages {
        if m.role == "tool" {
            let block = format!("<tool_response>\n{}\n</tool_response>", m.content);
            match out.last_mut() {
                Some(prev) if last_was_tool => {
                    prev.content.push('\n');
                    prev.content.push_str(&block);
                }
                _ => out.push(ChatMessage {
                    role: "user".into(),
                    content: block,
                    ..ChatMessage::default()
                }),
            }
            last_was_tool = true;
            continue;
        }
        last_was_tool = false;
        let mut m = m;
        if let Some(calls) = m.tool_calls.take() {
            let mut parts: Vec<String> = Vec::with_capacity(calls.len() + 1);
            if !m.content.is_empty() {
                parts.push(std::mem::take(&mut m.content));
            }
            for call in &calls {
                let f = &call["function"];
                parts.push(call_text(
                    f["name"].as_str().unwrap_or_default(),
                    &f["arguments"],
                ));
            }
            m.content = parts.join("\n");
        }
        out.push(m);
    }
    if let Some(tools) = tools.filter(|t| !t.is_empty()) {
        let prompt = tools_prompt(tools);
        match out.first_mut() {
            Some(first) if first.role == "system" => {
                if !first.content.is_empty() {
                    first.content.push_str("\n\n");
                }
                first.content.push_str(&prompt);
            }
            _ => out.insert(
                0,
                ChatMessage {
                    role: "system".into(),
                    content: prompt,
                    ..ChatMessage::default()
                },
            ),
        }
    }
    out
}

/// Calls separated by newlines, each opened by `<tool_call>`.
pub(super) fn call_rules(functions: &[Function]) -> CallRules {
    let mut rules = body_rule(functions.len());
    for (i, f) in functions.iter().enumerate() {
        let head = &call_head(&f.name)[CALL_OPEN.len()..];
        rules.push_str(&format!(
            "body_{i}: {} args_{i} {}\nargs_{i}: %json {}\n",
            lark_string(head),
            lark_string(CALL_TAIL),
            f.schema
        ));
    }
    CallRules {
        trigger: Trigger::Text(CALL_OPEN),
        rules,
        separator: Some(lark_string("\n")),
    }
}

/// The call of one `<tool_call>` block.
pub(super) fn read_block(raw: &str) -> Option<Vec<(String, Value)>> {
    let body = raw.strip_prefix(CALL_OPEN)?.strip_suffix(CALL_CLOSE)?;
    let v: Value = serde_json::from_str(body.trim()).ok()?;
    let name = v.get("name")?.as_str()?.to_string();
    let arguments = v.get("arguments").or_else(|| v.get("parameters"))?;
    Some(vec![(name, arguments.clone())])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn msg(role: &str, content: &str) -> ChatMessage {
        ChatMessage {
            role: role.into(),
            content: content.into(),
            ..ChatMessage::default()
        }
    }

    #[test]
    fn a_conversation_with_tools_becomes_plain_turns() {
        let tools = [json!({"type": "function", "function": {"name": "add"}})];
        let mut assistant = msg("assistant", "");
        assistant.tool_calls = Some(vec![json!({"id": "call_1", "type": "function",
            "function": {"name": "add", "arguments": {"a": 1}}})]);
        let mut result = msg("tool", "2");
        result.tool_call_id = Some("call_1".into());
        let out = describe_tools(
            vec![
                msg("system", "Be brief."),
                msg("user", "1+1?"),
                assistant,
                result.clone(),
                result,
            ],
            Some(&tools),
        );
        assert_eq!(out.len(), 4);
        assert!(out[0].content.starts_with("Be brief.\n\n# Tools"));
        assert!(out[0]
            .content
            .contains(r#"{"type": "function", "function": {"name": "add"}}"#));
        assert_eq!(
            out[2].content,
            "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1}}\n</tool_call>"
        );
        assert_eq!(out[2].tool_calls, None);
        assert_eq!(out[3].role, "user");
        assert_eq!(
            out[3].content,
            "<tool_response>\n2\n</tool_response>\n<tool_response>\n2\n</tool_response>"
        );
        let out = describe_tools(vec![msg("user", "hi")], Some(&tools));
        assert_eq!(out[0].role, "system");
        assert_eq!(describe_tools(vec![msg("user", "hi")], None).len(), 1);
    }
}
