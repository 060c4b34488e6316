//! Every syntax read back: right answers, malformed ones, and each cut into stream chunks of
//! every small size; and the calls each real template writes into a conversation read back
//! as the calls they were.

use super::*;
use crate::chat_template::{ChatMessage, ChatTemplate};
use serde_json::json;

fn functions() -> Vec<Function> {
    vec![
        Function {
            name: "get_weather".into(),
            schema: json!({"type": "object", "properties": {"city": {"type": "string"},
                "days": {"type": "integer"}}, "required": ["city"]}),
        },
        Function {
            name: "add".into(),
            schema: json!({"type": "object", "properties": {"a": {"type": "integer"},
                "tags": {"type": "array", "items": {"type": "string"}}}}),
        },
    ]
}

fn parser(syntax: ToolSyntax) -> CallParser {
    CallParser::new(syntax, functions(), true)
}

fn call(name: &str, args: Value) -> Piece {
    Piece::Call(ParsedCall {
        name: name.into(),
        arguments: args.to_string(),
    })
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

/// `text` read whole, then in chunks of 1 to 7 characters: every way gives `want`.
fn reads_as(syntax: ToolSyntax, text: &str, want: Vec<Piece>) {
    let mut whole = parser(syntax);
    let mut got = whole.push(text);
    got.extend(whole.finish());
    assert_eq!(
        merge_text(got),
        want,
        "{} read whole: {text:?}",
        syntax.name()
    );
    for size in 1..8 {
        let mut p = parser(syntax);
        let mut got = Vec::new();
        let chars: Vec<char> = text.chars().collect();
        for chunk in chars.chunks(size) {
            got.extend(p.push(&chunk.iter().collect::<String>()));
        }
        got.extend(p.finish());
        assert_eq!(
            merge_text(got),
            want,
            "{} in chunks of {size}: {text:?}",
            syntax.name()
        );
    }
}

fn text(t: &str) -> Piece {
    Piece::Content(t.into())
}

#[test]
fn hermes_calls_among_text() {
    reads_as(
        ToolSyntax::Hermes,
        "Hi <tool_ <tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1}}\n</tool_call>\n\n<tool_call>{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Oslo\\\"}\"}</tool_call> bye",
        vec![
            text("Hi <tool_"),
            call("add", json!({"a": 1})),
            call("get_weather", json!({"city": "Oslo"})),
            text("bye"),
        ],
    );
}

#[test]
fn llama3_calls_are_the_whole_answer() {
    reads_as(
        ToolSyntax::Llama3Json,
        "{\"name\": \"add\", \"parameters\": {\"a\": 1}}; {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}",
        vec![
            call("add", json!({"a": 1})),
            call("get_weather", json!({"city": "Oslo"})),
        ],
    );
    reads_as(
        ToolSyntax::Llama3Json,
        "<|python_tag|>{\"name\": \"add\", \"parameters\": {\"a\": 2}}",
        vec![call("add", json!({"a": 2}))],
    );
    reads_as(
        ToolSyntax::Llama3Json,
        "The answer is {\"name\": \"add\"}.",
        vec![text("The answer is {\"name\": \"add\"}.")],
    );
}

#[test]
fn qwen3_coder_values_are_read_by_their_declared_type() {
    reads_as(
        ToolSyntax::Qwen3Coder,
        "Let me look.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=add>\n<parameter=a>\n12\n</parameter>\n<parameter=tags>\n[\"x\", \"y\"]\n</parameter>\n</function>\n</tool_call>",
        vec![
            text("Let me look."),
            call("get_weather", json!({"city": "New York", "days": 3})),
            call("add", json!({"a": 12, "tags": ["x", "y"]})),
        ],
    );
}

#[test]
fn mistral_calls_in_both_forms() {
    reads_as(
        ToolSyntax::Mistral,
        "Sure.[TOOL_CALLS][{\"name\": \"add\", \"arguments\": {\"a\": 1}, \"id\": \"abcdefghi\"}, {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}]",
        vec![
            text("Sure."),
            call("add", json!({"a": 1})),
            call("get_weather", json!({"city": "Oslo"})),
        ],
    );
    reads_as(
        ToolSyntax::Mistral,
        "[TOOL_CALLS]add[ARGS]{\"a\": 1}[TOOL_CALLS]get_weather[CALL_ID]abc123def[ARGS]{\"city\": \"Oslo\"}",
        vec![
            call("add", json!({"a": 1})),
            call("get_weather", json!({"city": "Oslo"})),
        ],
    );
}

/// A block that is not a well-formed call to an offered function reaches the client as the
/// text the model wrote, never as a call, in every syntax.
#[test]
fn malformed_calls_stay_text() {
    let cases: &[(ToolSyntax, &str)] = &[
        (
            ToolSyntax::Hermes,
            "<tool_call>{\"name\": \"rm_rf\", \"arguments\": {}}</tool_call>",
        ),
        (
            ToolSyntax::Hermes,
            "<tool_call>{\"name\": \"add\", \"arguments\": [1]}</tool_call>",
        ),
        (ToolSyntax::Hermes, "<tool_call>not json</tool_call>"),
        (
            ToolSyntax::Hermes,
            "<tool_call>{\"name\": \"add\", \"arguments\": {\"a\":",
        ),
        (
            ToolSyntax::Llama3Json,
            "{\"name\": \"rm_rf\", \"parameters\": {}}",
        ),
        (
            ToolSyntax::Llama3Json,
            "{\"name\": \"add\", \"parameters\": {\"a\"",
        ),
        (ToolSyntax::Llama3Json, "{not json at all"),
        (
            ToolSyntax::Qwen3Coder,
            "<tool_call>\n<function=rm_rf>\n</function>\n</tool_call>",
        ),
        (
            ToolSyntax::Qwen3Coder,
            "<tool_call>\n<function=add>\n<parameter=a>\n1\n</function>\n</tool_call>",
        ),
        (
            ToolSyntax::Qwen3Coder,
            "<tool_call>\n<function=add>\n<parameter=a>\n1",
        ),
        (
            ToolSyntax::Mistral,
            "[TOOL_CALLS][{\"name\": \"rm_rf\", \"arguments\": {}}]",
        ),
        (ToolSyntax::Mistral, "[TOOL_CALLS]add[ARGS][1, 2]"),
        (ToolSyntax::Mistral, "[TOOL_CALLS] what?"),
        (ToolSyntax::Mistral, "[TOOL_CALLS]add[ARGS]{\"a\":"),
    ];
    for (syntax, block) in cases {
        reads_as(*syntax, block, vec![text(block)]);
    }
}

#[test]
fn without_parallel_calls_only_the_first_is_kept() {
    for (syntax, two) in [
        (
            ToolSyntax::Hermes,
            "<tool_call>{\"name\": \"add\", \"arguments\": {\"a\": 1}}</tool_call><tool_call>{\"name\": \"add\", \"arguments\": {\"a\": 2}}</tool_call>",
        ),
        (
            ToolSyntax::Llama3Json,
            "{\"name\": \"add\", \"parameters\": {\"a\": 1}}; {\"name\": \"add\", \"parameters\": {\"a\": 2}}",
        ),
        (
            ToolSyntax::Mistral,
            "[TOOL_CALLS][{\"name\": \"add\", \"arguments\": {\"a\": 1}}, {\"name\": \"add\", \"arguments\": {\"a\": 2}}]",
        ),
    ] {
        let mut p = CallParser::new(syntax, functions(), false);
        let (content, calls) = parse_answer(&mut p, two);
        assert_eq!(content, None, "{}", syntax.name());
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].arguments, r#"{"a":1}"#);
    }
}

/// Real chat templates (llama.cpp's copies, `tests/data/templates/`): each names its syntax,
/// and the call it writes into an assistant turn, which is what the model learnt to write,
/// reads back as that call.
#[test]
fn each_real_template_s_own_calls_read_back() {
    let templates: &[(&str, &str, ToolSyntax, &str)] = &[
        (
            "Qwen-Qwen2.5-7B-Instruct",
            include_str!("../../tests/data/templates/Qwen-Qwen2.5-7B-Instruct.jinja"),
            ToolSyntax::Hermes,
            "<|im_end|>",
        ),
        (
            "Qwen-Qwen3-0.6B",
            include_str!("../../tests/data/templates/Qwen-Qwen3-0.6B.jinja"),
            ToolSyntax::Hermes,
            "<|im_end|>",
        ),
        (
            "meta-llama-Llama-3.1-8B-Instruct",
            include_str!("../../tests/data/templates/meta-llama-Llama-3.1-8B-Instruct.jinja"),
            ToolSyntax::Llama3Json,
            "<|eot_id|>",
        ),
        (
            "meta-llama-Llama-3.2-3B-Instruct",
            include_str!("../../tests/data/templates/meta-llama-Llama-3.2-3B-Instruct.jinja"),
            ToolSyntax::Llama3Json,
            "<|eot_id|>",
        ),
        (
            "Qwen3-Coder",
            include_str!("../../tests/data/templates/Qwen3-Coder.jinja"),
            ToolSyntax::Qwen3Coder,
            "<|im_end|>",
        ),
        (
            "mistralai-Mistral-Nemo-Instruct-2407",
            include_str!("../../tests/data/templates/mistralai-Mistral-Nemo-Instruct-2407.jinja"),
            ToolSyntax::Mistral,
            "</s>",
        ),
        (
            "Mistral-Small-3.2-24B-Instruct-2506",
            include_str!("../../tests/data/templates/Mistral-Small-3.2-24B-Instruct-2506.jinja"),
            ToolSyntax::Mistral,
            "</s>",
        ),
    ];
    let tools = [
        json!({"type": "function", "function": {"name": "get_weather",
        "description": "The weather", "parameters": functions()[0].schema}}),
    ];
    let arguments = json!({"city": "Paris", "days": 2});
    for (name, source, syntax, end) in templates {
        assert_eq!(ToolSyntax::of_template(source), *syntax, "{name}");
        let template = ChatTemplate::new(source, "<s>".into(), "</s>".into()).unwrap();
        let user = ChatMessage {
            role: "user".into(),
            content: "Weather in Paris?".into(),
            ..ChatMessage::default()
        };
        let assistant = ChatMessage {
            role: "assistant".into(),
            content: String::new(),
            tool_calls: Some(vec![json!({"id": "abcdefghi", "type": "function",
                "function": {"name": "get_weather", "arguments": arguments}})]),
            ..ChatMessage::default()
        };
        let vars = Default::default();
        let prompt = template
            .render(std::slice::from_ref(&user), Some(&tools), true, &vars)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let full = template
            .render(&[user, assistant], Some(&tools), false, &vars)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let written = full.strip_prefix(prompt.as_str()).unwrap_or_else(|| {
            panic!("{name}: the turn does not continue the prompt:\n{prompt}\n---\n{full}")
        });
        let written = written.trim_end();
        let written = written.strip_suffix(end).unwrap_or(written);
        // Qwen3's template writes an empty reasoning block first, which is split off before
        // an answer is read for calls.
        let (_, reply) = crate::reasoning::split_answer(crate::reasoning::THINK, false, written);
        let (content, calls) = parse_answer(&mut parser(*syntax), &reply);
        assert_eq!(
            (content, calls),
            (
                None,
                vec![ParsedCall {
                    name: "get_weather".into(),
                    arguments: arguments.to_string()
                }]
            ),
            "{name} wrote {written:?}"
        );
    }
}

fn constraint(syntax: ToolSyntax, besides: Besides) -> crate::Constraint {
    crate::Constraint::ToolCalls {
        functions: functions(),
        parallel: true,
        syntax,
        besides,
    }
}

/// In `auto`, text is free until it opens a call; from the trigger on, the call is held to
/// the offered functions and their schemas, in every syntax.
#[test]
fn auto_leaves_text_free_and_holds_every_call_it_opens() {
    let checker = crate::gbnf::tests::Checker::new();
    let cases: &[(ToolSyntax, &str, &str, &str)] = &[
        (
            ToolSyntax::Hermes,
            "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call> Done.",
            "Let me check.\n<tool_call>\n{\"name\": \"rm_rf\"",
            "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": \"one\"}}\n</tool_call>",
        ),
        (
            ToolSyntax::Qwen3Coder,
            "Sure.\n<tool_call>\n<function=add>\n<parameter=a>\n3\n</parameter>\n</function>\n</tool_call>",
            "<tool_call>\n<function=rm_rf>",
            "<tool_call>\n<function=add>\n<parameter=a>\nthree\n</parameter>\n</function>\n</tool_call>",
        ),
        (
            ToolSyntax::Llama3Json,
            "{\"name\": \"add\", \"parameters\": {\"a\": 3}}",
            "{\"name\": \"rm_rf\"",
            "{\"name\": \"add\", \"parameters\": {\"a\": \"three\"}}",
        ),
        (
            ToolSyntax::Mistral,
            "Sure.[TOOL_CALLS][{\"name\": \"add\", \"arguments\": {\"a\": 3}}]",
            "[TOOL_CALLS][{\"name\": \"rm_rf\"",
            "[TOOL_CALLS][{\"name\": \"add\", \"arguments\": {\"a\": 1.5}}]",
        ),
    ];
    for (syntax, call, unknown, bad_args) in cases {
        let c = checker.constraint(&constraint(*syntax, Besides::Text));
        let name = syntax.name();
        assert!(
            checker.accepts(&c, "Just some text, { and all."),
            "{name}: text"
        );
        assert!(checker.accepts(&c, ""), "{name}: nothing");
        assert!(checker.accepts(&c, call), "{name}: {call:?}");
        assert!(!checker.accepts(&c, unknown), "{name}: {unknown:?}");
        assert!(!checker.accepts(&c, bad_args), "{name}: {bad_args:?}");
    }
}

/// `auto` with a response format: the answer is JSON of the schema, or calls.
#[test]
fn with_a_response_format_the_answer_is_its_json_or_calls() {
    let checker = crate::gbnf::tests::Checker::new();
    let schema = json!({"type": "object", "properties": {"answer": {"type": "string"}},
        "required": ["answer"], "additionalProperties": false});
    for syntax in [
        ToolSyntax::Hermes,
        ToolSyntax::Qwen3Coder,
        ToolSyntax::Mistral,
    ] {
        let c = checker.constraint(&constraint(syntax, Besides::Json(schema.clone())));
        let name = syntax.name();
        assert!(checker.accepts(&c, "{\"answer\": \"Oslo\"}"), "{name}");
        assert!(!checker.accepts(&c, "{\"other\": 1}"), "{name}");
        assert!(!checker.accepts(&c, "Free text."), "{name}");
    }
    let c = checker.constraint(&constraint(
        ToolSyntax::Hermes,
        Besides::Json(schema.clone()),
    ));
    assert!(checker.accepts(
        &c,
        "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 3}}\n</tool_call>"
    ));
}

/// In `auto`, masks cost nothing until a call opens: the grammar follows the text unmasked
/// and starts masking at the trigger (Llama's calls open the answer: it masks until the
/// answer's first character says whether they do).
#[test]
fn auto_masks_only_from_the_trigger_on() {
    let checker = crate::gbnf::tests::Checker::new();
    let mut hermes = checker.constraint(&constraint(ToolSyntax::Hermes, Besides::Text));
    assert!(!hermes.masks());
    checker.feed(&mut hermes, "Let me check. <tool_");
    assert!(!hermes.masks());
    checker.feed(&mut hermes, "call>");
    assert!(hermes.masks());
    let mut llama = checker.constraint(&constraint(ToolSyntax::Llama3Json, Besides::Text));
    assert!(llama.masks());
    checker.feed(&mut llama, "  Hi");
    assert!(!llama.masks());
    let mut call = checker.constraint(&constraint(ToolSyntax::Llama3Json, Besides::Text));
    checker.feed(&mut call, "{");
    assert!(call.masks());
    let forced = checker.constraint(&constraint(ToolSyntax::Hermes, Besides::Nothing));
    assert!(forced.masks());
}

/// Mistral's marks are special tokens in its vocabularies: the grammar writes them as those
/// tokens (`[TOOL_CALLS]NAME[ARGS]{...}` where the vocabulary has `[ARGS]`), never spelled out,
/// and in `auto` the `[TOOL_CALLS]` token is what starts the masks.
#[test]
fn mistral_marks_that_are_special_tokens_are_written_as_tokens() {
    use candle_core::quantized::gguf_file::{Content, Value as Gguf, VersionedMagic};
    let mut metadata = crate::tiny_vocab::metadata();
    for (key, value) in metadata.iter_mut() {
        match (key.as_str(), value) {
            ("tokenizer.ggml.tokens", Gguf::Array(tokens)) => {
                tokens.push(Gguf::String(mistral::TOOL_CALLS.into()));
                tokens.push(Gguf::String(mistral::ARGS.into()));
            }
            ("tokenizer.ggml.token_type", Gguf::Array(types)) => {
                types.extend([Gguf::I32(3), Gguf::I32(3)]);
            }
            _ => {}
        }
    }
    let content = Content {
        magic: VersionedMagic::GgufV3,
        metadata: metadata.into_iter().collect(),
        tensor_infos: Default::default(),
        tensor_data_offset: 0,
    };
    let tok = crate::Tokenizer::from_gguf(&content).unwrap();
    let (tool_calls, args) = (tok.vocab_size() as u32 - 2, tok.vocab_size() as u32 - 1);
    assert!(tok.is_special(tool_calls) && tok.is_special(args));
    let byte = |b: u8| {
        (0..tok.vocab_size() as u32)
            .find(|&id| !tok.is_special(id) && tok.token_bytes(id) == [b])
            .unwrap()
    };
    let grammars = crate::Grammars::new(&tok).unwrap();
    let compile = |besides| {
        grammars
            .compile(&crate::Constraint::ToolCalls {
                functions: functions(),
                parallel: false,
                syntax: ToolSyntax::Mistral,
                besides,
            })
            .unwrap()
    };
    let allowed = |c: &mut crate::TokenConstraint, id: u32| {
        let mut logits = vec![0.0; tok.vocab_size()];
        c.mask_logits(&mut logits);
        logits[id as usize] != f32::NEG_INFINITY
    };
    let mut forced = compile(Besides::Nothing);
    assert!(
        !allowed(&mut forced.clone(), byte(b'[')),
        "the mark is spelled out"
    );
    let call: Vec<u32> = [tool_calls]
        .into_iter()
        .chain(b"add".iter().map(|&b| byte(b)))
        .chain([args])
        .chain(b"{\"a\": 3}".iter().map(|&b| byte(b)))
        .collect();
    for &id in &call {
        assert!(allowed(&mut forced, id), "token {id} refused");
        forced.consume(id);
    }
    assert!(allowed(&mut forced, tok.eos_token_ids()[0]));
    let text = tok.decode(&call, false);
    let (content, calls) = parse_answer(&mut parser(ToolSyntax::Mistral), &text);
    assert_eq!(
        (content, calls),
        (
            None,
            vec![ParsedCall {
                name: "add".into(),
                arguments: r#"{"a":3}"#.into()
            }]
        ),
        "{text:?}"
    );
    let mut auto = compile(Besides::Text);
    assert!(!auto.masks());
    auto.consume(byte(b'H'));
    auto.consume(tool_calls);
    assert!(auto.masks());
    assert!(!allowed(&mut auto, byte(b'?')));
    assert!(allowed(&mut auto, byte(b'a')));
}

/// Numbers a schema leaves unbounded are held to 15 digits before the point and 10 after,
/// so a small model cannot write digits until `max_tokens`.
#[test]
fn unbounded_numbers_have_bounded_digits() {
    let checker = crate::gbnf::tests::Checker::new();
    let c = checker.constraint(&crate::Constraint::JsonSchema(json!({"type": "object",
        "properties": {"x": {"type": "number"}, "n": {"type": "integer"}}})));
    for (text, ok) in [
        ("{\"x\": 1.5, \"n\": 3}", true),
        ("{\"x\": -0.0000000001}", true),
        ("{\"x\": 0.12345678901}", false),
        ("{\"n\": 999999999999999}", true),
        ("{\"n\": 1000000000000000}", false),
    ] {
        assert_eq!(checker.accepts(&c, text), ok, "{text}");
    }
}
