//! Tool calls in the Hermes syntax (NousResearch's Hermes 2 Pro, Qwen 2.5 and 3): the
//! functions are listed in the system prompt inside `<tools>`, the model writes each call as
//! `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`, and each result comes back
//! inside `<tool_response>`.
//!
//! One syntax serves every model: it is the most widely trained one among small open models,
//! and a grammar over it is what makes `tool_choice: "required"` reliable on a model that was
//! never trained on tools at all (the default SmolLM2). A template that renders tools itself
//! gets them; for any other, [`describe_tools`] rewrites the conversation into plain turns
//! in this syntax. The model's answer is read back in this syntax ([`CallParser`]), token by
//! token for streaming, the same way whichever template rendered the prompt.

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

/// The Lark grammar (llguidance's dialect) of an answer that is nothing but calls to
/// `functions` (name, JSON Schema of the arguments, already given llguidance's JSON options),
/// one or, with `parallel`, several separated by newlines.
pub fn calls_grammar(functions: &[(String, Value)], parallel: bool) -> String {
    let mut g = String::from(if parallel {
        "start: call (\"\\n\" call)*\ncall: "
    } else {
        "start: call\ncall: "
    });
    let alternatives: Vec<String> = (0..functions.len()).map(|i| format!("call_{i}")).collect();
    g.push_str(&alternatives.join(" | "));
    g.push('\n');
    for (i, (name, schema)) in functions.iter().enumerate() {
        let head = Value::String(call_head(name));
        let tail = Value::String(CALL_TAIL.to_string());
        g.push_str(&format!("call_{i}: {head} args_{i} {tail}\n"));
        g.push_str(&format!("args_{i}: %json {schema}\n"));
    }
    g
}

/// A call read from the model's text: a function of the request's `tools`, with its
/// arguments as a JSON object in text (OpenAI's wire form).
#[derive(Clone, Debug, PartialEq)]
pub struct ParsedCall {
    pub name: String,
    pub arguments: String,
}

/// What the model's text turned out to be, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum Piece {
    Content(String),
    Call(ParsedCall),
}

/// Reads calls out of a model's text as it arrives. Text that may be the start of
/// `<tool_call>` is held back until it is clear it is not; a call is released whole once its
/// `</tool_call>` arrives. A block that is not a call to one of `names` with an object of
/// arguments stays text, as the model wrote it: the client sees what the model said rather
/// than losing it. Whitespace next to calls is dropped. Without `parallel`, calls after the
/// first are dropped (and logged).
pub struct CallParser {
    names: Vec<String>,
    parallel: bool,
    pending: String,
    in_call: bool,
    /// Trailing whitespace of released text, released only if more text follows.
    held_space: String,
    /// A call was the last thing released: whitespace after it is dropped.
    after_call: bool,
    /// Calls released so far (dropped ones not counted).
    calls: usize,
}

impl CallParser {
    pub fn new(names: Vec<String>, parallel: bool) -> Self {
        Self {
            names,
            parallel,
            pending: String::new(),
            in_call: false,
            held_space: String::new(),
            after_call: false,
            calls: 0,
        }
    }

    /// Calls released so far.
    pub fn calls(&self) -> usize {
        self.calls
    }

    pub fn push(&mut self, text: &str) -> Vec<Piece> {
        self.pending.push_str(text);
        let mut out = Vec::new();
        loop {
            if self.in_call {
                let Some(end) = self.pending.find(CALL_CLOSE) else {
                    break;
                };
                let block: String = self.pending.drain(..end + CALL_CLOSE.len()).collect();
                self.in_call = false;
                let body = &block[..end];
                match self.call(body) {
                    Some(call) => {
                        self.held_space.clear();
                        self.after_call = true;
                        if self.calls == 0 || self.parallel {
                            self.calls += 1;
                            out.push(Piece::Call(call));
                        } else {
                            tracing::info!(
                                "tool call to `{}` dropped: parallel_tool_calls is false",
                                call.name
                            );
                        }
                    }
                    None => self.text(format!("{CALL_OPEN}{block}"), &mut out),
                }
            } else if let Some(start) = self.pending.find(CALL_OPEN) {
                let before: String = self.pending.drain(..start + CALL_OPEN.len()).collect();
                self.text(before[..start].to_string(), &mut out);
                self.in_call = true;
            } else {
                let keep = partial_suffix(&self.pending, CALL_OPEN);
                let release = self.pending.len() - keep;
                let text: String = self.pending.drain(..release).collect();
                self.text(text, &mut out);
                break;
            }
        }
        out
    }

    /// The end of the answer: whatever is held back is text (a call cut short by
    /// `max_tokens` included), trailing whitespace excepted.
    pub fn finish(&mut self) -> Vec<Piece> {
        let mut rest = std::mem::take(&mut self.pending);
        if self.in_call {
            rest.insert_str(0, CALL_OPEN);
            self.in_call = false;
        }
        let mut out = Vec::new();
        self.text(rest, &mut out);
        self.held_space.clear();
        out
    }

    /// Releases `text`, holding back its trailing whitespace.
    fn text(&mut self, text: String, out: &mut Vec<Piece>) {
        let body = text.trim_end();
        if body.is_empty() {
            if !self.after_call {
                self.held_space.push_str(&text);
            }
            return;
        }
        let mut released = std::mem::take(&mut self.held_space);
        if std::mem::take(&mut self.after_call) {
            released.push_str(body.trim_start());
        } else {
            released.push_str(body);
        }
        self.held_space = text[body.len()..].to_string();
        out.push(Piece::Content(released));
    }

    /// The call `body` (between the tags) names, if it is one.
    fn call(&self, body: &str) -> Option<ParsedCall> {
        let v: Value = serde_json::from_str(body.trim()).ok()?;
        let name = v.get("name")?.as_str()?;
        if !self.names.iter().any(|n| n == name) {
            return None;
        }
        let arguments = match v.get("arguments").or_else(|| v.get("parameters"))? {
            Value::String(s) => match serde_json::from_str::<Value>(s).ok()? {
                obj @ Value::Object(_) => obj,
                _ => return None,
            },
            obj @ Value::Object(_) => obj.clone(),
            _ => return None,
        };
        Some(ParsedCall {
            name: name.to_string(),
            arguments: arguments.to_string(),
        })
    }
}

/// Length of the longest end of `text` that `tag` starts with (a tag possibly cut in two).
pub(crate) fn partial_suffix(text: &str, tag: &str) -> usize {
    (1..tag.len().min(text.len() + 1))
        .rev()
        .find(|&n| {
            text.is_char_boundary(text.len() - n) && tag.starts_with(&text[text.len() - n..])
        })
        .unwrap_or(0)
}

/// A whole answer's text and calls: the text is None when the answer was only calls.
pub fn parse_answer(parser: &mut CallParser, text: &str) -> (Option<String>, Vec<ParsedCall>) {
    let mut content = String::new();
    let mut calls = Vec::new();
    for piece in parser.push(text).into_iter().chain(parser.finish()) {
        match piece {
            Piece::Content(t) => content.push_str(&t),
            Piece::Call(c) => calls.push(c),
        }
    }
    let content = (!content.is_empty() || calls.is_empty()).then_some(content);
    (content, calls)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parser() -> CallParser {
        CallParser::new(vec!["get_weather".into(), "add".into()], true)
    }

    fn call(name: &str, args: Value) -> Piece {
        Piece::Call(ParsedCall {
            name: name.into(),
            arguments: args.to_string(),
        })
    }

    #[test]
    fn a_whole_answer_splits_into_text_and_calls() {
        let text = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"add\", \"arguments\": \"{\\\"a\\\": 1}\"}\n</tool_call>\n";
        let (content, calls) = parse_answer(&mut parser(), text);
        assert_eq!(content.as_deref(), Some("Let me check."));
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0].name, "get_weather");
        assert_eq!(calls[0].arguments, r#"{"city":"Paris"}"#);
        assert_eq!(calls[1].arguments, r#"{"a":1}"#);
        let (content, calls) = parse_answer(&mut parser(), "Just text.");
        assert_eq!((content.as_deref(), calls.len()), (Some("Just text."), 0));
        let only = call_text("add", &json!({"a": 1}));
        let (content, calls) = parse_answer(&mut parser(), &only);
        assert_eq!((content, calls.len()), (None, 1));
    }

    #[test]
    fn streaming_gives_the_same_pieces_whatever_the_chunking() {
        let text = "Hi <tool_ <tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1}}\n</tool_call>\n\n<tool_call>{\"name\": \"get_weather\", \"arguments\": {}}</tool_call> bye";
        let want = vec![
            Piece::Content("Hi <tool_".into()),
            call("add", json!({"a": 1})),
            call("get_weather", json!({})),
            Piece::Content("bye".into()),
        ];
        let whole = {
            let mut p = parser();
            let mut v = p.push(text);
            v.extend(p.finish());
            v
        };
        for size in 1..8 {
            let mut p = parser();
            let mut got = Vec::new();
            let chars: Vec<char> = text.chars().collect();
            for chunk in chars.chunks(size) {
                got.extend(p.push(&chunk.iter().collect::<String>()));
            }
            got.extend(p.finish());
            let merged = merge_text(got);
            assert_eq!(merged, merge_text(whole.clone()), "chunks of {size}");
            assert_eq!(merged, want, "chunks of {size}");
        }
    }

    fn merge_text(pieces: Vec<Piece>) -> Vec<Piece> {
        let mut out: Vec<Piece> = Vec::new();
        for p in pieces {
            match (out.last_mut(), p) {
                (Some(Piece::Content(a)), Piece::Content(b)) => a.push_str(&b),
                (_, p) => out.push(p),
            }
        }
        out
    }

    #[test]
    fn what_is_not_a_call_to_a_known_tool_stays_text() {
        for block in [
            "<tool_call>{\"name\": \"rm_rf\", \"arguments\": {}}</tool_call>",
            "<tool_call>{\"name\": \"add\", \"arguments\": [1]}</tool_call>",
            "<tool_call>not json</tool_call>",
            "<tool_call>{\"name\": \"add\", \"arguments\": {\"a\":",
        ] {
            let (content, calls) = parse_answer(&mut parser(), block);
            assert!(calls.is_empty(), "{block}");
            assert_eq!(content.as_deref(), Some(block));
        }
    }

    #[test]
    fn without_parallel_calls_only_the_first_is_kept() {
        let mut p = CallParser::new(vec!["add".into()], false);
        let two = format!(
            "{}\n{}",
            call_text("add", &json!({"a": 1})),
            call_text("add", &json!({"a": 2}))
        );
        let (content, calls) = parse_answer(&mut p, &two);
        assert_eq!(content, None);
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].arguments, r#"{"a":1}"#);
    }

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
