//! Structured outputs: a grammar a sequence's output must follow, enforced token by token.
//!
//! A 135M model rarely writes valid JSON on its own; masking every token the grammar cannot
//! take next (llguidance, the engine behind llama.cpp's, vLLM's and mistral.rs's structured
//! outputs) makes the output parse by construction. llguidance sees the vocabulary as a
//! `toktrie::TokTrie` built here from braid's own tokenizer (each token's bytes), not through
//! `toktrie_hf_tokenizers`, which is tied to another `tokenizers` version. The trie and the
//! parser factory are built once per model ([`Grammars`]); each request compiles its grammar
//! once, at validation, so a bad schema is a 400 before anything is queued, and the engine only
//! ever sees a ready [`TokenConstraint`].
//!
//! Compiling and masking are bounded by llguidance's `ParserLimits`, so a hostile grammar
//! (a huge enum, a regex built to backtrack) fails to compile or fails a step instead of
//! holding the engine thread. A step that fails leaves only end-of-sequence allowed: the
//! sequence ends rather than going on unconstrained.

use crate::tokenizer::Tokenizer;
use crate::tool_calls::{Besides, Function, ToolSyntax, Trigger};
use llguidance::api::{ParserLimits, TopLevelGrammar};
use llguidance::toktrie::{ApproximateTokEnv, SimpleVob, TokRxInfo, TokTrie};
use llguidance::{JsonCompileOptions, Matcher, ParserFactory};
use std::sync::Arc;

/// What a request asks its output to be.
#[derive(Clone, Debug, PartialEq)]
pub enum Constraint {
    /// Any JSON object (`response_format: {"type": "json_object"}`).
    JsonObject,
    /// JSON valid against this schema.
    JsonSchema(serde_json::Value),
    /// Text matching this regular expression (Rust `regex` syntax), whole.
    Regex(String),
    /// Exactly one of these strings.
    Choice(Vec<String>),
    /// Text of this grammar, in llguidance's Lark dialect.
    Lark(String),
    /// Text of this grammar, in llama.cpp's GBNF (compiled as the Lark [`crate::gbnf`]
    /// translates it to).
    Gbnf(String),
    /// Calls to these functions in `syntax` (one, or with `parallel` one or more), and
    /// `besides` them nothing, free text, or JSON of a schema.
    ToolCalls {
        functions: Vec<Function>,
        parallel: bool,
        syntax: ToolSyntax,
        besides: Besides,
    },
}

/// The largest schema, regex, grammar or list of choices compiled, in bytes. Compiling costs
/// memory in proportion, many times the source's size, and OpenAI's own bounds on a schema (100 properties, 15,000 characters of names) fit many
/// times over.
pub const MAX_SOURCE_BYTES: usize = 128 * 1024;

impl Constraint {
    /// A grammar given as text: GBNF when it defines its rules with `::=`, which Lark never
    /// does, else Lark.
    pub fn grammar(src: &str) -> Self {
        if crate::gbnf::defines_rules(src) {
            Constraint::Gbnf(src.to_owned())
        } else {
            Constraint::Lark(src.to_owned())
        }
    }

    /// Size of the grammar's source as the client wrote it.
    fn source_bytes(&self) -> usize {
        match self {
            Constraint::JsonObject => 0,
            Constraint::JsonSchema(schema) => schema.to_string().len(),
            Constraint::Regex(src) | Constraint::Lark(src) | Constraint::Gbnf(src) => src.len(),
            Constraint::Choice(choices) => choices.iter().map(|c| c.len() + 1).sum(),
            Constraint::ToolCalls {
                functions, besides, ..
            } => {
                let answer = match besides {
                    Besides::Json(schema) => schema.to_string().len(),
                    Besides::Nothing | Besides::Text => 0,
                };
                answer
                    + functions
                        .iter()
                        .map(|f| f.name.len() + f.schema.to_string().len())
                        .sum::<usize>()
            }
        }
    }
}

/// The stack a grammar is compiled on. llguidance compiles a rule by recursing into the rules
/// it refers to, a few kilobytes of stack per rule in a chain (`a0: a1`, `a1: a2`, ...; more
/// in a debug build): an 11 KB Lark grammar of 1,000 such rules overflowed the 2 MiB stack of
/// a server worker and aborted the server (the hostile-input suite of docs/RELIABILITY.md
/// sends such chains). Within [`MAX_SOURCE_BYTES`] a chain has at
/// most some 11,000 rules, which even a debug build compiles within this. It is only reserved:
/// a grammar uses as much of it as it goes deep.
const COMPILE_STACK_BYTES: usize = 256 << 20;

/// Bounds on the work one grammar may cost. llguidance's defaults allow a mask to take a
/// large share of a step; a shared engine step should not wait that long for one sequence.
/// Fuel and items are llguidance's units of work, not time: these bounds keep the worst mask
/// a small share of a step, and a grammar that needs more is refused or ends its answer.
fn limits() -> ParserLimits {
    ParserLimits {
        // Regex building at compile time.
        initial_lexer_fuel: 1_000_000,
        // Lexing per mask.
        step_lexer_fuel: 100_000,
        // Earley items per mask.
        step_max_items: 50_000,
        max_lexer_states: 100_000,
        // Symbols in the grammar: a schema of some hundreds of kilobytes.
        max_grammar_size: 200_000,
        verbose_errors: false,
        ..ParserLimits::default()
    }
}

/// The model's vocabulary as llguidance sees it, and the factory that compiles grammars over it.
pub struct Grammars {
    factory: ParserFactory,
    /// Every id that ends a generation; the trie knows only one, so the others are allowed
    /// wherever it is.
    eos_ids: Vec<u32>,
    /// The special tokens by their text, for grammars that must write one (a tool-call mark).
    special_ids: std::collections::HashMap<String, u32>,
}

impl Grammars {
    pub fn new(tokenizer: &Tokenizer) -> Result<Self, String> {
        let trie = token_trie(tokenizer)?;
        let env = Arc::new(ApproximateTokEnv::new(trie));
        let mut factory = ParserFactory::new_simple(&(env as llguidance::toktrie::TokEnv))
            .map_err(|e| e.to_string())?;
        factory.quiet();
        *factory.limits_mut() = limits();
        let special_ids = (0..tokenizer.vocab_size() as u32)
            .filter(|&id| tokenizer.is_special(id))
            .map(|id| {
                (
                    String::from_utf8_lossy(tokenizer.token_bytes(id)).into_owned(),
                    id,
                )
            })
            .collect();
        Ok(Self {
            factory,
            eos_ids: tokenizer.eos_token_ids().to_vec(),
            special_ids,
        })
    }

    /// Compiles `constraint` into a matcher at the start of an output; the error says what is
    /// wrong with it, for the client.
    pub fn compile(&self, constraint: &Constraint) -> Result<TokenConstraint, String> {
        let size = constraint.source_bytes();
        if size > MAX_SOURCE_BYTES {
            return Err(format!(
                "it is {size} bytes long; at most {MAX_SOURCE_BYTES} are accepted"
            ));
        }
        std::thread::scope(|scope| {
            let compiling = std::thread::Builder::new()
                .name("grammar".into())
                .stack_size(COMPILE_STACK_BYTES)
                .spawn_scoped(scope, || self.compile_unbounded(constraint))
                .map_err(|e| format!("no thread to compile it on: {e}"))?;
            compiling
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    }

    /// [`compile`](Self::compile) without the size bound: llguidance's limits alone.
    fn compile_unbounded(&self, constraint: &Constraint) -> Result<TokenConstraint, String> {
        let mut gate = Gate::Open;
        let grammar = match constraint {
            Constraint::JsonObject => json_grammar(serde_json::json!({"type": "object"})),
            Constraint::JsonSchema(schema) => json_grammar(schema.clone()),
            Constraint::Regex(rx) => TopLevelGrammar::from_regex(rx),
            Constraint::Choice(choices) => {
                if choices.is_empty() {
                    return Err("needs at least one choice".into());
                }
                // One regex, not a grammar rule per choice: a lexeme is bounded by the lexer's
                // fuel, so a list of 100,000 choices is refused in milliseconds.
                let alternatives: Vec<String> =
                    choices.iter().map(|c| regex_syntax::escape(c)).collect();
                TopLevelGrammar::from_regex(&format!("(?:{})", alternatives.join("|")))
            }
            Constraint::Lark(src) => TopLevelGrammar::from_lark(src.clone()),
            // A grammar read as GBNF says so in its errors: the client may have meant Lark.
            Constraint::Gbnf(src) => {
                let lark = crate::gbnf::to_lark(src).map_err(|e| format!("GBNF grammar: {e}"))?;
                return self
                    .compile_unbounded(&Constraint::Lark(lark))
                    .map_err(|e| format!("GBNF grammar: {e}"));
            }
            Constraint::ToolCalls {
                functions,
                parallel,
                syntax,
                besides,
            } => {
                // A schema nested in a grammar is compiled lazily, when the output reaches it:
                // each one is compiled alone first, so a bad one is refused here, naming its
                // function, rather than ending a call half-written.
                for f in functions {
                    self.compile_unbounded(&Constraint::JsonSchema(f.schema.clone()))
                        .map_err(|e| format!("the parameters of `{}`: {e}", f.name))?;
                    if *syntax == ToolSyntax::Qwen3Coder {
                        if let Some(why) = crate::tool_calls::qwen3_coder::unenforceable(f) {
                            return Err(format!("the parameters of `{}`: {why}", f.name));
                        }
                    }
                }
                let functions: Vec<Function> = functions
                    .iter()
                    .map(|f| Function {
                        name: f.name.clone(),
                        schema: compact_json(f.schema.clone()),
                    })
                    .collect();
                let mark = |text: &str| self.special_ids.get(text).map(|id| format!("<[{id}]>"));
                let besides = match besides {
                    Besides::Json(schema) => Besides::Json(compact_json(schema.clone())),
                    other => other.clone(),
                };
                if besides == Besides::Text {
                    gate = match syntax.trigger(&mark) {
                        Trigger::Text(t) => Gate::UntilText {
                            trigger: t.as_bytes().to_vec(),
                            seen: Vec::new(),
                        },
                        Trigger::Token(text, _) => match self.special_ids.get(text) {
                            Some(&id) => Gate::UntilToken(id),
                            None => Gate::Open,
                        },
                        Trigger::Start => Gate::AtStart,
                    };
                }
                TopLevelGrammar::from_lark(
                    syntax.calls_grammar(&functions, *parallel, &mark, &besides),
                )
            }
        };
        let parser = self.factory.create_parser(grammar).map_err(problem)?;
        let mut matcher = Matcher::new(Ok(parser));
        // The first mask is where a grammar too costly to follow shows itself; refuse it now
        // rather than end the sequence at its first token.
        let first = matcher.compute_mask().map_err(problem)?;
        if first.is_zero() {
            return Err("the grammar allows no output at all".into());
        }
        let ready = gate.masks().then_some(Some(first));
        Ok(TokenConstraint {
            matcher,
            ready,
            eos_ids: self.eos_ids.clone(),
            trie_eos: self.factory.tok_env().tok_trie().eos_token(),
            gate,
            env: self.factory.tok_env().clone(),
        })
    }
}

/// llguidance's error as a client should read it: its first line, without the marker it
/// appends when errors are not verbose, nor a backtrace.
fn problem(e: impl std::fmt::Display) -> String {
    let text = e.to_string();
    let first = text.lines().next().unwrap_or_default().trim();
    match first {
        // A grammar whose rules never reach text (a `$ref` cycle) leaves nothing to sample.
        "NoExtensionBias" => "no output can satisfy it (a rule refers only to itself?)".into(),
        _ => first.to_string(),
    }
}

/// JSON written as Python's `json.dumps` writes it (`", "` and `": "`, no other whitespace),
/// unless the schema sets llguidance's own `x-guidance` options: free whitespace lets a small
/// model fill `max_tokens` with newlines instead of values.
fn json_grammar(schema: serde_json::Value) -> TopLevelGrammar {
    TopLevelGrammar::from_json_schema(compact_json(schema))
}

/// `schema` with llguidance's options for [`json_grammar`]'s layout, unless it sets its own,
/// and its numbers bounded ([`bound_numbers`]).
fn compact_json(mut schema: serde_json::Value) -> serde_json::Value {
    bound_numbers(&mut schema);
    if let Some(obj) = schema.as_object_mut() {
        if !obj.contains_key("x-guidance") {
            JsonCompileOptions {
                item_separator: ", ".into(),
                key_separator: ": ".into(),
                whitespace_flexible: false,
                ..JsonCompileOptions::default()
            }
            .apply_to(&mut schema);
        }
    }
    schema
}

/// The largest magnitude of a number a schema leaves unbounded: 15 digits, as llama.cpp's
/// JSON grammars allow. Unbounded, a small model writes digits until `max_tokens` (seen with
/// a forced call's integer argument on a random-weight model), and the client gets no JSON.
pub const NUMBER_BOUND: f64 = 999_999_999_999_999.0;

/// The finest step of a number a schema leaves unstepped: 10 digits after the point
/// (llama.cpp allows 16; llguidance takes `multipleOf` as a decimal, and 1e-16 is not one in
/// binary floating point, while 1e-10 is read exactly).
pub const NUMBER_STEP: f64 = 1e-10;

/// Every integer or number schema in `schema` gets `minimum` and `maximum` of
/// ±[`NUMBER_BOUND`] where it sets none of its own on that side, and a number schema
/// `multipleOf` [`NUMBER_STEP`] where it sets none.
fn bound_numbers(schema: &mut serde_json::Value) {
    use serde_json::Value;
    match schema {
        Value::Object(map) => {
            let numeric = map.get("type").is_some_and(|t| {
                let is = |t: &Value| t == "integer" || t == "number";
                is(t) || t.as_array().is_some_and(|a| a.iter().any(is))
            });
            if numeric && !map.contains_key("enum") && !map.contains_key("const") {
                let integer = map.get("type").is_some_and(|t| {
                    t == "integer"
                        || t.as_array()
                            .is_some_and(|a| a.iter().all(|t| t == "integer" || t == "null"))
                });
                let bound = |v: f64| {
                    if integer {
                        Value::from(v as i64)
                    } else {
                        Value::from(v)
                    }
                };
                if !map.contains_key("minimum") && !map.contains_key("exclusiveMinimum") {
                    map.insert("minimum".into(), bound(-NUMBER_BOUND));
                }
                if !map.contains_key("maximum") && !map.contains_key("exclusiveMaximum") {
                    map.insert("maximum".into(), bound(NUMBER_BOUND));
                }
                if !integer && !map.contains_key("multipleOf") {
                    map.insert("multipleOf".into(), Value::from(NUMBER_STEP));
                }
            }
            for (key, child) in map.iter_mut() {
                // Values that are data, not schemas.
                if !["enum", "const", "default", "examples", "x-guidance"].contains(&key.as_str()) {
                    bound_numbers(child);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(bound_numbers),
        _ => {}
    }
}

/// The vocabulary as a trie of byte strings. Special tokens (`<|im_end|>`) get toktrie's
/// marker byte in front, so that text a grammar asks for can never be spelled with them.
pub fn token_trie(tokenizer: &Tokenizer) -> Result<TokTrie, String> {
    let eos = *tokenizer
        .eos_token_ids()
        .first()
        .ok_or("the tokenizer names no end-of-sequence token")?;
    let words: Vec<Vec<u8>> = (0..tokenizer.vocab_size() as u32)
        .map(|id| {
            let bytes = tokenizer.token_bytes(id);
            if tokenizer.is_special(id) {
                let mut marked = Vec::with_capacity(bytes.len() + 1);
                marked.push(TokTrie::SPECIAL_TOKEN_MARKER);
                marked.extend_from_slice(bytes);
                marked
            } else {
                bytes.to_vec()
            }
        })
        .collect();
    let info = TokRxInfo::new(words.len() as u32, eos);
    Ok(TokTrie::from(&info, &words))
}

/// One sequence's grammar state: which tokens may come next, advanced by each sampled token.
pub struct TokenConstraint {
    matcher: Matcher,
    /// The next token's mask, computed ahead: at compile time for the first token, then by
    /// [`prepare_mask`](TokenConstraint::prepare_mask) while the forward pass runs. None
    /// inside: only end of sequence is left.
    ready: Option<Option<SimpleVob>>,
    eos_ids: Vec<u32>,
    trie_eos: u32,
    gate: Gate,
    /// The vocabulary's bytes, for the gate to watch the text.
    env: llguidance::toktrie::TokEnv,
}

/// Whether masks are computed. A mask costs some tenths of a millisecond per token (a sixth
/// of one stream's decode rate on a 2-core Zen 4), and in `auto` tool calling it allows every
/// token until a call opens: there the grammar only follows the text (each token is cheap to
/// consume) until the trigger appears, and masks from then on.
#[derive(Clone, Debug)]
enum Gate {
    /// Masks every token.
    Open,
    /// Free until the text holds `trigger` (`seen`: the text's last bytes).
    UntilText { trigger: Vec<u8>, seen: Vec<u8> },
    /// Free until this (special) token.
    UntilToken(u32),
    /// Masks until the answer's first byte that is not whitespace; after anything but `{`
    /// (Llama's calls open the answer), free for good.
    AtStart,
    /// Free for good: the text can no longer open a call the grammar holds.
    Shut,
}

impl Gate {
    fn masks(&self) -> bool {
        matches!(self, Gate::Open | Gate::AtStart)
    }

    /// Follows the text past a token of these bytes.
    fn after(&mut self, token: u32, bytes: &[u8]) {
        match self {
            Gate::UntilText { trigger, seen } => {
                seen.extend_from_slice(bytes);
                if seen.windows(trigger.len()).any(|w| w == trigger.as_slice()) {
                    *self = Gate::Open;
                } else {
                    let keep = seen.len().min(trigger.len().saturating_sub(1));
                    seen.drain(..seen.len() - keep);
                }
            }
            Gate::UntilToken(id) if *id == token => *self = Gate::Open,
            Gate::AtStart => match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
                Some(b'{') => *self = Gate::Open,
                Some(_) => *self = Gate::Shut,
                None => {}
            },
            _ => {}
        }
    }
}

/// A copy at the same point of the grammar, going on independently.
impl Clone for TokenConstraint {
    fn clone(&self) -> Self {
        Self {
            matcher: self.matcher.deep_clone(),
            ready: self.ready.clone(),
            eos_ids: self.eos_ids.clone(),
            trie_eos: self.trie_eos,
            gate: self.gate.clone(),
            env: self.env.clone(),
        }
    }
}

impl std::fmt::Debug for TokenConstraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenConstraint")
            .field("stopped", &self.matcher.is_stopped())
            .finish_non_exhaustive()
    }
}

impl TokenConstraint {
    /// Sets every token the grammar does not allow next to -inf. Once the grammar is complete
    /// only end-of-sequence is left, and the sequence stops there.
    pub fn mask_logits(&mut self, logits: &mut [f32]) {
        if !self.gate.masks() {
            return;
        }
        let mask = match self.ready.take() {
            Some(m) => m,
            None => self.compute_mask(),
        };
        let Some(mask) = mask else {
            return only(logits, &self.eos_ids);
        };
        let eos: Vec<(usize, f32)> = if mask.is_allowed(self.trie_eos) {
            self.eos_ids
                .iter()
                .filter_map(|&id| logits.get(id as usize).map(|&l| (id as usize, l)))
                .collect()
        } else {
            Vec::new()
        };
        for (id, l) in logits.iter_mut().enumerate() {
            if id >= mask.len() || !mask.is_allowed(id as u32) {
                *l = f32::NEG_INFINITY;
            }
        }
        for (id, l) in eos {
            logits[id] = l;
        }
    }

    /// Whether the next token is masked: false while free text waits for a call to open, when
    /// there is no mask to prepare ahead.
    pub fn masks(&self) -> bool {
        self.gate.masks()
    }

    /// Computes the next token's mask now, so that [`mask_logits`](Self::mask_logits) only
    /// applies it: the engine calls this while the forward pass that brings the logits runs,
    /// since the mask depends only on the tokens already taken.
    pub fn prepare_mask(&mut self) {
        if self.ready.is_none() && self.gate.masks() {
            self.ready = Some(self.compute_mask());
        }
    }

    /// The grammar's mask for the next token; None when only end of sequence is left (the
    /// grammar is complete, or failed a step).
    fn compute_mask(&mut self) -> Option<SimpleVob> {
        match self.matcher.compute_mask_or_eos() {
            Ok(m) if !m.is_zero() => Some(m),
            Ok(_) => None,
            Err(e) => {
                tracing::warn!(
                    "structured output: the grammar failed a step ({}); ending",
                    problem(e)
                );
                None
            }
        }
    }

    /// Advances the grammar past `token` (one [`mask_logits`](Self::mask_logits) allowed).
    /// End of sequence ends the sequence too, so the grammar need not hear of it.
    pub fn consume(&mut self, token: u32) {
        if self.eos_ids.contains(&token) {
            return;
        }
        let masked = self.gate.masks();
        if let Err(e) = self.matcher.consume_token(token) {
            if masked {
                tracing::warn!(
                    "structured output: the grammar refused a token ({})",
                    problem(e)
                );
            } else {
                // Unmasked, the text took a token the grammar's text cannot hold (a special
                // token): no call can be held to it after that.
                self.gate = Gate::Shut;
            }
            return;
        }
        if !masked || matches!(self.gate, Gate::AtStart) {
            let trie = self.env.tok_trie();
            self.gate.after(token, trie.token(token));
            // A mask computed before the gate opened is stale.
            self.ready = None;
        }
    }
}

/// Leaves only `ids` possible.
fn only(logits: &mut [f32], ids: &[u32]) {
    for (id, l) in logits.iter_mut().enumerate() {
        if !ids.contains(&(id as u32)) {
            *l = f32::NEG_INFINITY;
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn unbounded_numbers_get_fifteen_digits_and_bounds_given_stay() {
        let mut schema = serde_json::json!({"type": "object", "properties": {
            "n": {"type": "integer"},
            "x": {"type": ["number", "null"], "minimum": 0},
            "e": {"type": "integer", "enum": [1, 2]},
            "d": {"type": "integer", "default": 5},
        }});
        bound_numbers(&mut schema);
        let p = &schema["properties"];
        assert_eq!(p["n"]["minimum"], -999_999_999_999_999_i64);
        assert_eq!(p["n"]["maximum"], 999_999_999_999_999_i64);
        assert_eq!(p["x"]["minimum"], 0);
        assert_eq!(p["x"]["maximum"], NUMBER_BOUND);
        assert_eq!(p["x"]["multipleOf"], NUMBER_STEP);
        assert!(p["n"].get("multipleOf").is_none());
        assert!(p["e"].get("maximum").is_none());
        assert_eq!(p["d"]["default"], 5);
    }

    use super::*;

    fn tiny_tokenizer() -> Tokenizer {
        crate::tiny_vocab::tokenizer()
    }

    #[test]
    fn the_trie_holds_every_token_s_bytes_and_marks_the_special_ones() {
        let tok = tiny_tokenizer();
        let trie = token_trie(&tok).unwrap();
        assert_eq!(trie.vocab_size(), tok.vocab_size());
        assert_eq!(trie.eos_token(), tok.eos_token_ids()[0]);
        let mut specials = 0;
        for id in 0..tok.vocab_size() as u32 {
            let bytes = trie.token(id);
            if tok.is_special(id) {
                specials += 1;
                assert_eq!(bytes[0], TokTrie::SPECIAL_TOKEN_MARKER);
                assert_eq!(&bytes[1..], tok.token_bytes(id));
            } else {
                assert_eq!(bytes, tok.token_bytes(id), "token {id}");
            }
        }
        assert_eq!(specials, crate::tiny_vocab::SPECIAL_TOKENS.len());
    }

    #[test]
    fn a_bad_grammar_is_refused_with_the_reason() {
        let g = Grammars::new(&tiny_tokenizer()).unwrap();
        let err = |c: Constraint| g.compile(&c).expect_err("refused");
        assert!(err(Constraint::Regex("(ab".into())).contains("regex"));
        assert!(!err(Constraint::JsonSchema(serde_json::json!({"type": 5}))).is_empty());
        assert!(!err(Constraint::JsonSchema(
            serde_json::json!({"$ref": "#/nowhere"})
        ))
        .is_empty());
        assert!(!err(Constraint::Lark("start: ???".into())).is_empty());
        assert!(err(Constraint::Choice(vec![])).contains("choice"));
    }

    #[test]
    fn llguidance_s_limits_refuse_a_costly_grammar_even_under_the_size_bound() {
        let g = Grammars::new(&tiny_tokenizer()).unwrap();
        let words: Vec<String> = (0..100_000).map(|i| i.to_string()).collect();
        let e = g
            .compile_unbounded(&Constraint::Choice(words.clone()))
            .expect_err("refused");
        assert!(e.contains("too big"), "{e}");
        let enum_schema = serde_json::json!({ "enum": words });
        let e = g
            .compile_unbounded(&Constraint::JsonSchema(enum_schema.clone()))
            .expect_err("refused");
        assert!(e.contains("too big"), "{e}");
        let e = g
            .compile(&Constraint::JsonSchema(enum_schema))
            .expect_err("refused");
        assert!(e.contains("at most 131072"), "{e}");
    }

    #[test]
    fn a_long_chain_of_rules_compiles_whatever_stack_the_caller_has() {
        let g = Grammars::new(&tiny_tokenizer()).unwrap();
        let rules = 3_000;
        let mut lark = String::from("start: a0\n");
        let mut gbnf = String::from("root ::= a0\n");
        for i in 0..rules {
            lark.push_str(&format!("a{i}: a{}\n", i + 1));
            gbnf.push_str(&format!("a{i} ::= a{}\n", i + 1));
        }
        lark.push_str(&format!("a{rules}: \"x\"\n"));
        gbnf.push_str(&format!("a{rules} ::= \"x\"\n"));
        // The stack of the server's workers; llguidance needs far more for this.
        std::thread::scope(|scope| {
            std::thread::Builder::new()
                .stack_size(2 << 20)
                .spawn_scoped(scope, || {
                    for c in [Constraint::Lark(lark), Constraint::Gbnf(gbnf)] {
                        g.compile(&c).unwrap();
                    }
                })
                .unwrap()
                .join()
                .unwrap();
        });
    }
}
