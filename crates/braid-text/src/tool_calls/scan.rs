//! Cutting a streamed answer into plain text and call blocks, before any block is read.
//!
//! Three shapes cover the syntaxes: calls between tags anywhere in the answer (Hermes,
//! Qwen3-Coder), calls as the whole answer (Llama 3's JSON), and calls after a mark that ends
//! the text (Mistral's `[TOOL_CALLS]`). Text that may be the start of a call is held until it
//! is known; a block is released once it is complete, raw, so that a block that turns out not
//! to be a call goes to the client as the text it was.

use super::{json_end, mistral, partial_suffix, ToolSyntax};

/// A piece of the answer as cut.
#[derive(Clone, Debug, PartialEq)]
pub enum Segment {
    Text(String),
    /// A complete call block, tags included.
    Block(String),
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Phase {
    /// Nothing but whitespace (and an optional lead mark) yet.
    Start,
    /// Inside the calls.
    Calls,
    /// Plain text from here on, or until the next call.
    Text,
}

pub enum Scanner {
    Tagged {
        open: &'static str,
        close: &'static str,
        pending: String,
        in_call: bool,
    },
    Leading {
        lead: &'static str,
        pending: String,
        phase: Phase,
    },
    Marked {
        pending: String,
        phase: Phase,
    },
}

impl Scanner {
    pub fn of(syntax: ToolSyntax) -> Self {
        match syntax {
            ToolSyntax::Hermes | ToolSyntax::Qwen3Coder => Scanner::Tagged {
                open: "<tool_call>",
                close: "</tool_call>",
                pending: String::new(),
                in_call: false,
            },
            ToolSyntax::Llama3Json => Scanner::Leading {
                lead: super::llama3_json::PYTHON_TAG,
                pending: String::new(),
                phase: Phase::Start,
            },
            ToolSyntax::Mistral => Scanner::Marked {
                pending: String::new(),
                phase: Phase::Text,
            },
        }
    }

    pub fn push(&mut self, text: &str) -> Vec<Segment> {
        let mut out = Vec::new();
        match self {
            Scanner::Tagged {
                open,
                close,
                pending,
                in_call,
            } => {
                pending.push_str(text);
                tagged(open, close, pending, in_call, &mut out);
            }
            Scanner::Leading {
                lead,
                pending,
                phase,
            } => {
                pending.push_str(text);
                leading(lead, pending, phase, &mut out);
            }
            Scanner::Marked { pending, phase } => {
                pending.push_str(text);
                marked(pending, phase, &mut out);
            }
        }
        out
    }

    /// The end: what is held is text.
    pub fn finish(&mut self) -> Vec<Segment> {
        let rest = match self {
            Scanner::Tagged {
                open,
                pending,
                in_call,
                ..
            } => {
                let mut rest = std::mem::take(pending);
                if std::mem::take(in_call) {
                    rest.insert_str(0, open);
                }
                rest
            }
            Scanner::Leading { pending, .. } | Scanner::Marked { pending, .. } => {
                std::mem::take(pending)
            }
        };
        text(rest).into_iter().collect()
    }
}

fn text(t: String) -> Option<Segment> {
    (!t.is_empty()).then_some(Segment::Text(t))
}

fn take(pending: &mut String, n: usize) -> String {
    pending.drain(..n).collect()
}

fn tagged(
    open: &str,
    close: &str,
    pending: &mut String,
    in_call: &mut bool,
    out: &mut Vec<Segment>,
) {
    loop {
        if *in_call {
            let Some(end) = pending.find(close) else {
                return;
            };
            let body = take(pending, end + close.len());
            *in_call = false;
            out.push(Segment::Block(format!("{open}{body}")));
        } else if let Some(start) = pending.find(open) {
            out.extend(text(take(pending, start)));
            pending.drain(..open.len());
            *in_call = true;
        } else {
            let keep = partial_suffix(pending, open);
            out.extend(text(take(pending, pending.len() - keep)));
            return;
        }
    }
}

fn leading(lead: &str, pending: &mut String, phase: &mut Phase, out: &mut Vec<Segment>) {
    loop {
        match phase {
            Phase::Text => {
                out.extend(text(std::mem::take(pending)));
                return;
            }
            Phase::Start => {
                let body = pending.trim_start();
                let body = body.strip_prefix(lead).unwrap_or(body).trim_start();
                if body.is_empty() || (lead.starts_with(body) && body.len() < lead.len()) {
                    return;
                }
                *phase = if body.starts_with('{') {
                    Phase::Calls
                } else {
                    Phase::Text
                };
            }
            Phase::Calls => {
                let skipped = pending.len()
                    - pending
                        .trim_start_matches(|c: char| c.is_whitespace() || c == ';')
                        .len();
                let rest = &pending[skipped..];
                let rest_after_lead = rest.strip_prefix(lead).unwrap_or(rest);
                let lead_len = rest.len() - rest_after_lead.len();
                if rest_after_lead.is_empty() {
                    return;
                }
                if !rest_after_lead.starts_with('{') {
                    *phase = Phase::Text;
                    continue;
                }
                match json_end(rest_after_lead) {
                    None => return,
                    Some(Err(())) => *phase = Phase::Text,
                    Some(Ok(end)) => {
                        // Separators and whitespace before a call are the call's.
                        out.push(Segment::Block(take(pending, skipped + lead_len + end)));
                        let tail =
                            pending.trim_start_matches(|c: char| c.is_whitespace() || c == ';');
                        if !tail.is_empty() && !tail.starts_with('{') && !tail.starts_with(lead) {
                            *phase = Phase::Text;
                        }
                    }
                }
            }
        }
    }
}

fn marked(pending: &mut String, phase: &mut Phase, out: &mut Vec<Segment>) {
    let mark = mistral::TOOL_CALLS;
    loop {
        match phase {
            Phase::Text | Phase::Start => match pending.find(mark) {
                Some(at) => {
                    out.extend(text(take(pending, at)));
                    *phase = Phase::Calls;
                }
                None => {
                    let keep = partial_suffix(pending, mark);
                    out.extend(text(take(pending, pending.len() - keep)));
                    return;
                }
            },
            Phase::Calls => match mistral::block_end(pending) {
                None => return,
                Some(Ok(end)) => {
                    out.push(Segment::Block(take(pending, end)));
                    *phase = Phase::Text;
                }
                Some(Err(())) => {
                    // Not a call: the mark and what follows it, up to the next mark, is text.
                    let next = pending[mark.len()..]
                        .find(mark)
                        .map_or(pending.len(), |at| at + mark.len());
                    out.extend(text(take(pending, next)));
                    *phase = Phase::Text;
                }
            },
        }
    }
}
