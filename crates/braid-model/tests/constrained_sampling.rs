//! Constraints as the sampler applies them: text sampled under a compiled grammar follows it,
//! ends, and reads back as the grammar promised; a mask prepared ahead of the logits samples
//! exactly as one computed in place.

use braid_model::{Sampler, SamplingParams};
use braid_text::tool_calls::{parse_answer, Besides, CallParser, Function, ToolSyntax};
use braid_text::{Constraint, Grammars, TokenConstraint, Tokenizer};
use rand::{Rng, SeedableRng};

fn tiny_tokenizer() -> Tokenizer {
    braid_text::tiny_vocab::tokenizer()
}

/// Samples until end of sequence from random logits, as an untrained model would give.
fn generate(g: &Grammars, tok: &Tokenizer, c: Constraint, seed: u64) -> String {
    let constraint = g.compile(&c).unwrap();
    let mut sampler = Sampler::new(
        SamplingParams {
            seed: Some(seed),
            ..SamplingParams::default()
        },
        &[],
    )
    .with_constraint(Some(constraint));
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut out = Vec::new();
    // Random logits: each character of a call's syntax is a token of its own, so a few
    // calls in Qwen3-Coder's XML take some hundreds.
    for _ in 0..1000 {
        let logits: Vec<f32> = (0..tok.vocab_size())
            .map(|_| rng.random_range(-5.0..5.0))
            .collect();
        let t = sampler.sample(&logits).token;
        if tok.eos_token_ids().contains(&t) {
            return tok.decode(&out, false);
        }
        out.push(t);
    }
    panic!(
        "no end of sequence after 1000 tokens: {:?}",
        tok.decode(&out, false)
    );
}

#[test]
fn sampled_text_follows_the_grammar_and_then_ends() {
    let tok = tiny_tokenizer();
    let g = Grammars::new(&tok).unwrap();
    for seed in 0..5 {
        let choice = generate(
            &g,
            &tok,
            Constraint::Choice(vec!["yes".into(), "no".into()]),
            seed,
        );
        assert!(choice == "yes" || choice == "no", "{choice:?}");
        let digits = generate(&g, &tok, Constraint::Regex("[0-9]{3}-[a-c]+".into()), seed);
        assert!(
            digits.len() >= 5
                && digits[..3].bytes().all(|b| b.is_ascii_digit())
                && &digits[3..4] == "-"
                && digits[4..].bytes().all(|b| (b'a'..=b'c').contains(&b)),
            "{digits:?}"
        );
        let month = generate(
            &g,
            &tok,
            Constraint::Gbnf("root ::= \"2024-\" (\"0\" [1-9] | \"1\" [0-2])".into()),
            seed,
        );
        let m: u32 = month.strip_prefix("2024-").unwrap().parse().unwrap();
        assert!(month.len() == 7 && (1..=12).contains(&m), "{month:?}");
        let schema = serde_json::json!({
            "type": "object",
            "properties": {"n": {"type": "integer"}, "ok": {"type": "boolean"}},
            "required": ["n", "ok"],
            "additionalProperties": false
        });
        let json = generate(&g, &tok, Constraint::JsonSchema(schema), seed);
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert!(v["n"].is_number() && v["ok"].is_boolean(), "{json}");
    }
}

#[test]
fn a_mask_prepared_ahead_samples_exactly_as_one_computed_in_place() {
    let tok = tiny_tokenizer();
    let g = Grammars::new(&tok).unwrap();
    let schema = serde_json::json!({"type": "object",
        "properties": {"n": {"type": "integer"}}, "required": ["n"]});
    let compiled = g.compile(&Constraint::JsonSchema(schema)).unwrap();
    let sampler = |c: &TokenConstraint| {
        Sampler::new(SamplingParams::greedy(), &[]).with_constraint(Some(c.clone()))
    };
    let (mut ahead, mut in_place) = (sampler(&compiled), sampler(&compiled));
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    for _ in 0..40 {
        let logits: Vec<f32> = (0..tok.vocab_size())
            .map(|_| rng.random_range(-5.0..5.0))
            .collect();
        ahead.prepare_mask();
        let (a, b) = (ahead.sample(&logits).token, in_place.sample(&logits).token);
        assert_eq!(a, b);
        if tok.eos_token_ids().contains(&a) {
            return;
        }
    }
}

#[test]
fn tool_calls_follow_a_function_s_schema_and_read_back_as_calls() {
    let tok = tiny_tokenizer();
    let g = Grammars::new(&tok).unwrap();
    let functions = vec![
        Function {
            name: "get_weather".to_string(),
            schema: serde_json::json!({
                "type": "object",
                "properties": {"city": {"type": "string", "maxLength": 8},
                               "unit": {"enum": ["c", "f"]}},
                "required": ["city", "unit"],
                "additionalProperties": false
            }),
        },
        Function {
            name: "add".to_string(),
            schema: serde_json::json!({
                "type": "object",
                "properties": {"a": {"type": "integer"}},
                "required": ["a"],
                "additionalProperties": false
            }),
        },
    ];
    for syntax in ToolSyntax::ALL {
        for seed in 0..4 {
            for parallel in [false, true] {
                let c = Constraint::ToolCalls {
                    functions: functions.clone(),
                    parallel,
                    syntax,
                    besides: Besides::Nothing,
                };
                let text = generate(&g, &tok, c, seed);
                let mut parser = CallParser::new(syntax, functions.clone(), true);
                let (content, calls) = parse_answer(&mut parser, &text);
                let said = format!("{}: {text:?}", syntax.name());
                assert_eq!(content, None, "{said}");
                assert!(
                    !calls.is_empty() && (parallel || calls.len() == 1),
                    "{said}"
                );
                for call in calls {
                    let args: serde_json::Value = serde_json::from_str(&call.arguments).unwrap();
                    match call.name.as_str() {
                        "get_weather" => assert!(
                            args["city"]
                                .as_str()
                                .is_some_and(|c| c.chars().count() <= 8)
                                && ["c", "f"].contains(&args["unit"].as_str().unwrap()),
                            "{said}"
                        ),
                        _ => assert!(args["a"].is_i64(), "{said}"),
                    }
                }
            }
        }
    }
    for schema in [
        serde_json::json!({"type": 5}),
        serde_json::json!({"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}),
    ] {
        let bad = Constraint::ToolCalls {
            functions: vec![
                functions[1].clone(),
                Function {
                    name: "f".into(),
                    schema,
                },
            ],
            parallel: false,
            syntax: ToolSyntax::Hermes,
            besides: Besides::Nothing,
        };
        let e = g.compile(&bad).expect_err("refused");
        assert!(e.starts_with("the parameters of `f`: "), "{e}");
    }
}
