//! A reasoning model's answer, split into its reasoning and its reply.
//!
//! Qwen3, QwQ, the DeepSeek-R1 distills and SmolLM3 write their reasoning between `<think>` and
//! `</think>` before the reply, and clients expect it apart: vLLM's `reasoning_content` in chat,
//! a thinking block in Anthropic's Messages. Whether a model reasons this way is read from its
//! chat template, which writes those tags around earlier turns' reasoning or into the prompt.
//!
//! The reasoning is open from the first token when the prompt ends inside a think block (the
//! R1 distills' templates, and Qwen3's with thinking on in some versions, end the prompt with
//! `<think>\n`); otherwise it opens only if the answer starts with the tag, whitespace aside.
//! A tag may arrive split across tokens, so text that could be the start of one is held until
//! it is known. Text after the closing tag is the reply; an answer cut off inside the
//! reasoning has reasoning only.

use crate::tool_calls::partial_suffix;

/// The tags a template's reasoning is written between.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReasoningSyntax {
    pub open: &'static str,
    pub close: &'static str,
}

/// `<think>` … `</think>`.
pub const THINK: ReasoningSyntax = ReasoningSyntax {
    open: "<think>",
    close: "</think>",
};

impl ReasoningSyntax {
    /// The syntax a chat template writes reasoning in, if it writes any.
    pub fn of_template(source: &str) -> Option<Self> {
        (source.contains(THINK.open) && source.contains(THINK.close)).then_some(THINK)
    }

    /// Whether a prompt ends inside an open think block, so the answer begins as reasoning.
    pub fn prompt_opens_reasoning(&self, prompt: &str) -> bool {
        let tail = prompt.trim_end();
        match (tail.rfind(self.open), tail.rfind(self.close)) {
            (Some(open), Some(close)) => open > close && tail.ends_with(self.open),
            (Some(_), None) => tail.ends_with(self.open),
            _ => false,
        }
    }
}

/// A piece of the answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Part {
    Reasoning(String),
    Reply(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Nothing but whitespace yet: the open tag may still come.
    Start,
    Reasoning,
    /// Just after the closing tag: the blank lines before the reply are dropped.
    ReplyStart,
    Reply,
}

/// Splits an answer as it streams.
#[derive(Clone, Debug)]
pub struct ReasoningSplitter {
    syntax: ReasoningSyntax,
    state: State,
    held: String,
}

impl ReasoningSplitter {
    /// `inside`: the prompt left a think block open ([`ReasoningSyntax::prompt_opens_reasoning`]).
    pub fn new(syntax: ReasoningSyntax, inside: bool) -> Self {
        Self {
            syntax,
            state: if inside {
                State::Reasoning
            } else {
                State::Start
            },
            held: String::new(),
        }
    }

    /// The next piece of the answer, as the parts it completes.
    pub fn push(&mut self, text: &str) -> Vec<Part> {
        self.held.push_str(text);
        let mut out = Vec::new();
        loop {
            match self.state {
                State::Start => {
                    let trimmed = self.held.trim_start();
                    if let Some(rest) = trimmed.strip_prefix(self.syntax.open) {
                        self.held = rest.to_string();
                        self.state = State::Reasoning;
                    } else if trimmed.is_empty() || self.syntax.open.starts_with(trimmed) {
                        return out;
                    } else {
                        self.state = State::Reply;
                    }
                }
                State::Reasoning => match self.held.find(self.syntax.close) {
                    Some(at) => {
                        let reasoning: String = self.held.drain(..at).collect();
                        self.held.drain(..self.syntax.close.len());
                        push(&mut out, Part::Reasoning(reasoning));
                        self.state = State::ReplyStart;
                    }
                    None => {
                        let keep = partial_suffix(&self.held, self.syntax.close);
                        let ready: String = self.held.drain(..self.held.len() - keep).collect();
                        push(&mut out, Part::Reasoning(ready));
                        return out;
                    }
                },
                State::ReplyStart => {
                    // The reply conventionally starts after a blank line or two.
                    let rest = self.held.trim_start().to_string();
                    self.held = rest;
                    if self.held.is_empty() {
                        return out;
                    }
                    self.state = State::Reply;
                }
                State::Reply => {
                    push(&mut out, Part::Reply(std::mem::take(&mut self.held)));
                    return out;
                }
            }
        }
    }

    /// Whether the answer is inside its reasoning now (for counting reasoning tokens: a
    /// token that opened, continued or closed the reasoning finds it inside before or after).
    pub fn in_reasoning(&self) -> bool {
        self.state == State::Reasoning
    }

    /// The answer ended: what was held is what it seemed.
    pub fn finish(&mut self) -> Vec<Part> {
        let held = std::mem::take(&mut self.held);
        let part = match self.state {
            State::Reasoning => Part::Reasoning(held),
            State::Start | State::ReplyStart | State::Reply => Part::Reply(held),
        };
        let mut out = Vec::new();
        push(&mut out, part);
        out
    }
}

/// Appends a non-empty part.
fn push(out: &mut Vec<Part>, part: Part) {
    let empty = match &part {
        Part::Reasoning(t) | Part::Reply(t) => t.is_empty(),
    };
    if !empty {
        out.push(part);
    }
}

/// A whole answer split at once: its reasoning (None without any) and its reply.
pub fn split_answer(syntax: ReasoningSyntax, inside: bool, text: &str) -> (Option<String>, String) {
    let mut splitter = ReasoningSplitter::new(syntax, inside);
    let mut parts = splitter.push(text);
    parts.extend(splitter.finish());
    let (mut reasoning, mut reply) = (None::<String>, String::new());
    for part in parts {
        match part {
            Part::Reasoning(t) => reasoning.get_or_insert_with(String::new).push_str(&t),
            Part::Reply(t) => reply.push_str(&t),
        }
    }
    (reasoning, reply)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The answer fed in `pieces`, joined part by part.
    fn split(inside: bool, pieces: &[&str]) -> (String, String) {
        let mut s = ReasoningSplitter::new(THINK, inside);
        let (mut reasoning, mut reply) = (String::new(), String::new());
        let mut parts: Vec<Part> = pieces.iter().flat_map(|p| s.push(p)).collect();
        parts.extend(s.finish());
        for p in parts {
            match p {
                Part::Reasoning(t) => reasoning.push_str(&t),
                Part::Reply(t) => reply.push_str(&t),
            }
        }
        (reasoning, reply)
    }

    #[test]
    fn reasoning_then_reply_in_any_pieces() {
        let answer = "<think>\nTwo and two.\n</think>\n\nFour.";
        let want = ("\nTwo and two.\n".to_string(), "Four.".to_string());
        assert_eq!(split(false, &[answer]), want);
        // Every split of the answer into two pieces, so every tag split across tokens.
        for cut in 1..answer.len() {
            assert_eq!(
                split(false, &[&answer[..cut], &answer[cut..]]),
                want,
                "cut at {cut}"
            );
        }
        let chars: Vec<String> = answer.chars().map(String::from).collect();
        let refs: Vec<&str> = chars.iter().map(String::as_str).collect();
        assert_eq!(split(false, &refs), want);
    }

    #[test]
    fn a_prompt_that_opened_the_block_starts_in_reasoning() {
        assert_eq!(
            split(true, &["Hmm.", "</thi", "nk>Yes."]),
            ("Hmm.".into(), "Yes.".into())
        );
        assert!(THINK.prompt_opens_reasoning("<|User|>hi<|Assistant|><think>\n"));
        assert!(!THINK.prompt_opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
        assert!(!THINK.prompt_opens_reasoning("<|im_start|>assistant\n"));
    }

    #[test]
    fn no_tag_is_all_reply_and_a_cut_answer_all_reasoning() {
        assert_eq!(
            split(false, &["Just ", "an answer."]),
            (String::new(), "Just an answer.".into())
        );
        assert_eq!(
            split(false, &["<", "b>bold</b>"]),
            (String::new(), "<b>bold</b>".into())
        );
        assert_eq!(split(false, &["<thi"]), (String::new(), "<thi".into()));
        assert_eq!(
            split(false, &["<think>still thinking"]),
            ("still thinking".into(), String::new())
        );
        // A tag after the reply began is reply text.
        assert_eq!(
            split(false, &["So <think> it"]),
            (String::new(), "So <think> it".into())
        );
    }

    #[test]
    fn templates_that_reason_are_recognised() {
        let qwen3 = include_str!("../tests/data/templates/Qwen-Qwen3-0.6B.jinja");
        let r1 =
            include_str!("../tests/data/templates/deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja");
        let llama = include_str!("../tests/data/templates/meta-llama-Llama-3.1-8B-Instruct.jinja");
        assert_eq!(ReasoningSyntax::of_template(qwen3), Some(THINK));
        assert_eq!(ReasoningSyntax::of_template(r1), Some(THINK));
        assert_eq!(ReasoningSyntax::of_template(llama), None);
    }
}
