//! The syntaxes in which models write tool calls, each read back token by token, and each the
//! grammar of a forced call.
//!
//! A model calls tools in the syntax its chat template taught it: Hermes `<tool_call>` JSON
//! (Qwen 2.5 and 3, Hermes), Llama 3's bare JSON object, Qwen3-Coder's XML, Mistral's
//! `[TOOL_CALLS]`. The template says which ([`ToolSyntax::of_template`]), or the server is told
//! (`--tool-call-parser`). Reading a syntax is split in two: a scanner cuts the text into
//! plain text and call blocks as it streams ([`scan`]), and the syntax reads each block's
//! calls. What every syntax shares is here: a block that is not a call to an offered function
//! with an object of arguments stays text, as the model wrote it, so the client sees what the
//! model said and never gets a malformed call; whitespace next to calls is dropped; without
//! `parallel`, calls after the first are dropped.

pub mod hermes;
pub mod llama3_json;
pub mod mistral;
pub mod qwen3_coder;
mod scan;

use scan::{Scanner, Segment};
use serde_json::Value;

/// How a model writes its calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolSyntax {
    /// `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`
    Hermes,
    /// `{"name": ..., "parameters": {...}}` as the whole answer (Llama 3.1 to 3.3), calls
    /// separated by `;`, after an optional `<|python_tag|>`.
    Llama3Json,
    /// `<tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n</function>\n</tool_call>`
    Qwen3Coder,
    /// `[TOOL_CALLS]` then a JSON array of `{"name", "arguments"}` (Mistral Nemo's), or
    /// `[TOOL_CALLS]NAME[ARGS]{...}` per call (Mistral Small 3.2, Devstral, Ministral 3).
    Mistral,
}

impl ToolSyntax {
    pub const ALL: [ToolSyntax; 4] = [
        ToolSyntax::Hermes,
        ToolSyntax::Llama3Json,
        ToolSyntax::Qwen3Coder,
        ToolSyntax::Mistral,
    ];

    /// vLLM's name for the parser of this syntax.
    pub fn name(self) -> &'static str {
        match self {
            ToolSyntax::Hermes => "hermes",
            ToolSyntax::Llama3Json => "llama3_json",
            ToolSyntax::Qwen3Coder => "qwen3_coder",
            ToolSyntax::Mistral => "mistral",
        }
    }

    pub fn named(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The syntax a chat template writes calls in (Hermes when it shows none of the others:
    /// it is also what braid describes tools in for a template that renders none).
    pub fn of_template(source: &str) -> Self {
        if source.contains("<function=") && source.contains("<parameter=") {
            ToolSyntax::Qwen3Coder
        } else if source.contains("[TOOL_CALLS]") {
            ToolSyntax::Mistral
        } else if source.contains("<tool_call>") {
            ToolSyntax::Hermes
        } else if source.contains("\"parameters\": ") || source.contains("<|python_tag|>") {
            ToolSyntax::Llama3Json
        } else {
            ToolSyntax::Hermes
        }
    }

    /// Whether the syntax's calls are written with special tokens (Mistral's `[TOOL_CALLS]`
    /// and `[ARGS]`), which must reach the parser as text: a request with tools then keeps
    /// special tokens when it decodes. (Llama's optional `<|python_tag|>` is not needed to
    /// read a call.)
    pub fn needs_marks(self) -> bool {
        self == ToolSyntax::Mistral
    }

    /// The Lark grammar (llguidance's dialect) of an answer of calls to `functions` (one or,
    /// with `parallel`, several) and, `besides` them, nothing, free text or JSON. `mark`
    /// spells a mark (`[TOOL_CALLS]`) as a grammar atom, the special token, where the
    /// vocabulary has it as one.
    pub fn calls_grammar(
        self,
        functions: &[Function],
        parallel: bool,
        mark: &dyn Fn(&str) -> Option<String>,
        besides: &Besides,
    ) -> String {
        self.rules(functions, parallel, mark)
            .grammar(parallel, besides)
    }

    /// How a call opens in this syntax.
    pub(crate) fn trigger(self, mark: &dyn Fn(&str) -> Option<String>) -> Trigger {
        self.rules(&[], false, mark).trigger
    }

    fn rules(
        self,
        functions: &[Function],
        parallel: bool,
        mark: &dyn Fn(&str) -> Option<String>,
    ) -> CallRules {
        match self {
            ToolSyntax::Hermes => hermes::call_rules(functions),
            ToolSyntax::Llama3Json => llama3_json::call_rules(functions),
            ToolSyntax::Qwen3Coder => qwen3_coder::call_rules(functions),
            ToolSyntax::Mistral => mistral::call_rules(functions, parallel, mark),
        }
    }
}

/// What an answer with tools may be besides calls.
#[derive(Clone, Debug, PartialEq)]
pub enum Besides {
    /// Nothing: calls only (`tool_choice` `required` or a named function).
    Nothing,
    /// Any text, with every call in it held to the grammar once it opens (`auto`): the
    /// trigger that opens a call is free to write, what follows it is not.
    Text,
    /// JSON valid against this schema (`auto` with a `response_format`), or calls.
    Json(Value),
}

/// How a call opens.
pub(crate) enum Trigger {
    /// With this text.
    Text(&'static str),
    /// With this mark, a special token, written in the grammar as this atom.
    Token(&'static str, String),
    /// Calls are the whole answer: they open at its start (Llama 3's).
    Start,
}

/// A syntax's grammar of calls, before it is put in an answer.
pub(crate) struct CallRules {
    pub trigger: Trigger,
    /// Lark rules defining `body`: one call after its trigger (or every call, where one body
    /// holds them all).
    pub rules: String,
    /// Between consecutive calls; None where one body holds them all (Mistral's array).
    pub separator: Option<String>,
}

impl CallRules {
    fn grammar(&self, parallel: bool, besides: &Besides) -> String {
        let call = match &self.trigger {
            Trigger::Text(t) => format!("{} body", lark_string(t)),
            Trigger::Token(_, a) => format!("{a} body"),
            Trigger::Start => "body".to_string(),
        };
        let calls = match (&self.separator, parallel) {
            (Some(sep), true) => format!("call ({sep} call)*"),
            _ => "call".to_string(),
        };
        let repeat = if parallel && self.separator.is_some() {
            "*"
        } else {
            "?"
        };
        let start = match besides {
            Besides::Nothing => format!("start: {calls}\n"),
            Besides::Json(schema) => format!("start: answer | {calls}\nanswer: %json {schema}\n"),
            Besides::Text => match &self.trigger {
                // Text that does not open with `{` is text; what does is calls.
                Trigger::Start => {
                    format!("start: FREE | {calls}\nFREE: /([^{{](?s:.)*)?/\n")
                }
                // Free text up to the trigger (as few characters as that takes), then a call.
                Trigger::Text(t) => format!(
                    "start: opened{repeat} TEXT\nopened: lead body\nlead[lazy]: TEXT {}\nTEXT: /(?s:.)*/\n",
                    lark_string(t)
                ),
                // Text cannot hold a special token: the token ends it.
                Trigger::Token(_, a) => format!(
                    "start: opened{repeat} TEXT\nopened: TEXT {a} body\nTEXT: /(?s:.)*/\n"
                ),
            },
        };
        format!("{start}call: {call}\n{}", self.rules)
    }
}

/// `body: body_0 | body_1 | ...`, one alternative per function.
pub(crate) fn body_rule(count: usize) -> String {
    let alternatives: Vec<String> = (0..count).map(|i| format!("body_{i}")).collect();
    format!("body: {}\n", alternatives.join(" | "))
}

/// A function the model may call: its name and the JSON Schema of its arguments.
#[derive(Clone, Debug, PartialEq)]
pub struct Function {
    pub name: String,
    pub schema: Value,
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

/// Reads calls out of a model's text as it arrives, in one syntax. Text that may be the start
/// of a call is held back until it is clear it is not; a call is released whole once it is
/// complete.
pub struct CallParser {
    syntax: ToolSyntax,
    functions: Vec<Function>,
    parallel: bool,
    scanner: Scanner,
    /// Trailing whitespace of released text, released only if more text follows.
    held_space: String,
    /// A call was the last thing released: whitespace after it is dropped.
    after_call: bool,
    /// Calls released so far (dropped ones not counted).
    calls: usize,
}

impl CallParser {
    pub fn new(syntax: ToolSyntax, functions: Vec<Function>, parallel: bool) -> Self {
        Self {
            syntax,
            functions,
            parallel,
            scanner: Scanner::of(syntax),
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
        let segments = self.scanner.push(text);
        self.read(segments)
    }

    /// The end of the answer: whatever is held back is text (a call cut short by
    /// `max_tokens` included), trailing whitespace excepted.
    pub fn finish(&mut self) -> Vec<Piece> {
        let segments = self.scanner.finish();
        let out = self.read(segments);
        self.held_space.clear();
        out
    }

    fn read(&mut self, segments: Vec<Segment>) -> Vec<Piece> {
        let mut out = Vec::new();
        for segment in segments {
            match segment {
                Segment::Text(text) => self.text(text, &mut out),
                Segment::Block(raw) => match self.calls_of(&raw) {
                    Some(calls) => {
                        self.held_space.clear();
                        self.after_call = true;
                        for call in calls {
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
                    }
                    None => self.text(raw, &mut out),
                },
            }
        }
        out
    }

    /// The calls a block holds, if every one is a call to an offered function with an object
    /// of arguments.
    fn calls_of(&self, raw: &str) -> Option<Vec<ParsedCall>> {
        let read = match self.syntax {
            ToolSyntax::Hermes => hermes::read_block(raw),
            ToolSyntax::Llama3Json => llama3_json::read_block(raw),
            ToolSyntax::Qwen3Coder => qwen3_coder::read_block(raw, &self.functions),
            ToolSyntax::Mistral => mistral::read_block(raw),
        }?;
        if read.is_empty() {
            return None;
        }
        read.into_iter()
            .map(|(name, arguments)| {
                if !self.functions.iter().any(|f| f.name == name) {
                    return None;
                }
                let arguments = match arguments {
                    Value::String(s) => serde_json::from_str::<Value>(&s).ok()?,
                    other => other,
                };
                arguments.is_object().then(|| ParsedCall {
                    name,
                    arguments: arguments.to_string(),
                })
            })
            .collect()
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
}

/// The length of the JSON value at the start of `s`: None while it may still be completed,
/// Some(Err) when it cannot be JSON.
pub(crate) fn json_end(s: &str) -> Option<Result<usize, ()>> {
    let mut values = serde_json::Deserializer::from_str(s).into_iter::<serde_json::Value>();
    match values.next() {
        Some(Ok(_)) => Some(Ok(values.byte_offset())),
        Some(Err(e)) if e.is_eof() => None,
        Some(Err(_)) => Some(Err(())),
        None => None,
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

/// A Lark string literal of `text`.
pub(crate) fn lark_string(text: &str) -> String {
    Value::String(text.to_string()).to_string()
}

#[cfg(test)]
mod tests;
