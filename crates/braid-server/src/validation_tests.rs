//! Unit tests of validation.rs and validation/, against the tiny test model (context 512, vocabulary 262).

use super::*;
use crate::openai_types::{ChatCompletionRequest, ChatMessageIn, CompletionRequest};
use axum::http::StatusCode;
use std::sync::OnceLock;

fn model() -> &'static LoadedModel {
    static MODEL: OnceLock<LoadedModel> = OnceLock::new();
    MODEL.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tiny.gguf");
        braid_model::tiny_gguf::write(&path, 1).unwrap();
        LoadedModel::load(&path).unwrap()
    })
}

fn limits() -> Limits {
    Limits {
        served_model_name: "tiny".into(),
        embedding_model_name: None,
        context_length: 512,
        vocab_size: model().tokenizer.vocab_size(),
        max_tokens_cap: 512,
        max_stop_strings: 4,
        max_stop_string_len: 8,
        max_prompt_tokens: 512,
        max_request_tokens: 100_000,
        special_in_messages: false,
        reasoning_parser: crate::args::ReasoningParser::Auto,
        tool_syntax: braid_text::tool_calls::ToolSyntax::Hermes,
    }
}

fn completion_json(v: serde_json::Value) -> Result<ValidatedRequest> {
    let req: CompletionRequest = serde_json::from_value(v).unwrap();
    completion(&req, model(), &limits())
}

fn chat_json(v: serde_json::Value) -> Result<ValidatedRequest> {
    let req: ChatCompletionRequest = serde_json::from_value(v).unwrap();
    chat(&req, model(), &limits())
}

fn message(v: serde_json::Value) -> String {
    completion_json(v).unwrap_err().to_string()
}

#[test]
fn a_plain_request_gets_openai_defaults() {
    let r = completion_json(serde_json::json!({"prompt": "hello"})).unwrap();
    assert_eq!(r.prompt, model().tokenizer.encode("hello").unwrap());
    assert_eq!(r.max_tokens, 16);
    assert_eq!(r.params.temperature, 1.0);
    assert_eq!(r.stop_token_ids, model().tokenizer.eos_token_ids().to_vec());
    assert!(!r.stream && r.echo.is_none() && r.logprobs.is_none());
}

#[test]
fn sampling_bounds_name_the_field_and_the_bound() {
    let cases = [
        (
            serde_json::json!({"prompt": "a", "temperature": -1}),
            "`temperature` must be >= 0 and <= 2, got -1",
        ),
        (
            serde_json::json!({"prompt": "a", "temperature": 2.5}),
            "`temperature` must be >= 0 and <= 2, got 2.5",
        ),
        (
            serde_json::json!({"prompt": "a", "top_p": 0}),
            "`top_p` must be > 0 and <= 1, got 0",
        ),
        (
            serde_json::json!({"prompt": "a", "top_k": -2}),
            "`top_k` must be >= 0 (0 or -1 turn it off), got -2",
        ),
        (
            serde_json::json!({"prompt": "a", "min_p": 1.5}),
            "`min_p` must be >= 0 and <= 1, got 1.5",
        ),
        (
            serde_json::json!({"prompt": "a", "presence_penalty": 3}),
            "`presence_penalty` must be >= -2 and <= 2, got 3",
        ),
        (
            serde_json::json!({"prompt": "a", "frequency_penalty": -2.5}),
            "`frequency_penalty` must be >= -2 and <= 2, got -2.5",
        ),
        (
            serde_json::json!({"prompt": "a", "repetition_penalty": 0}),
            "`repetition_penalty` must be > 0 and <= 2, got 0",
        ),
        (
            serde_json::json!({"prompt": "a", "max_tokens": -5}),
            "`max_tokens` must be >= 1, got -5",
        ),
        (
            serde_json::json!({"prompt": "a", "max_tokens": 0}),
            "`max_tokens` must be >= 1, got 0",
        ),
        (
            serde_json::json!({"prompt": "a", "max_tokens": 600}),
            "`max_tokens` must be <= 512 (the server's --max-tokens-cap), got 600",
        ),
        (
            serde_json::json!({"prompt": "a", "n": 17}),
            "`n` must be >= 1 and <= 16, got 17",
        ),
        (
            serde_json::json!({"prompt": "a", "best_of": 3}),
            "`best_of` must be 1 (braid has no best-of sampling; `n` returns several choices), got 3",
        ),
        (
            serde_json::json!({"prompt": "a", "logprobs": 21}),
            "`logprobs` must be >= 0 and <= 20, got 21",
        ),
    ];
    for (body, want) in cases {
        assert_eq!(message(body.clone()), want, "{body}");
    }
    let e = completion_json(serde_json::json!({"prompt": "a", "temperature": -1})).unwrap_err();
    assert_eq!(
        (e.status(), e.param()),
        (StatusCode::BAD_REQUEST, Some("temperature"))
    );
}

#[test]
fn non_finite_numbers_are_rejected() {
    let f = SamplingFields {
        temperature: Some(f64::NAN),
        ..Default::default()
    };
    assert!(matches!(
        sampling(&f, None, &limits()),
        Err(ValidationError::NotFinite {
            field: "temperature",
            ..
        })
    ));
    let f = SamplingFields {
        top_p: Some(f64::INFINITY),
        ..Default::default()
    };
    assert!(matches!(
        sampling(&f, None, &limits()),
        Err(ValidationError::NotFinite { field: "top_p", .. })
    ));
}

#[test]
fn prompt_shapes() {
    let ids =
        |v: serde_json::Value| completion_json(serde_json::json!({"prompt": v})).map(|r| r.prompt);
    assert_eq!(ids(serde_json::json!([5, 6, 7])).unwrap(), vec![5, 6, 7]);
    assert_eq!(ids(serde_json::json!([[5, 6]])).unwrap(), vec![5, 6]);
    assert_eq!(
        ids(serde_json::json!(["hi"])).unwrap(),
        model().tokenizer.encode("hi").unwrap()
    );
    assert_eq!(
        ids(serde_json::json!("")).unwrap_err(),
        ValidationError::Empty { field: "prompt" }
    );
    assert_eq!(
        ids(serde_json::json!([])).unwrap_err(),
        ValidationError::Empty { field: "prompt" }
    );
    let two = completion_json(
        serde_json::json!({"prompt": ["a", [5, 6]], "n": 3, "seed": 7, "echo": true}),
    )
    .unwrap();
    assert_eq!(two.n, 3);
    let choices = two.choices();
    assert_eq!(choices.len(), 6);
    assert_eq!(choices[0].prompt, model().tokenizer.encode("a").unwrap());
    assert_eq!(choices[3].prompt, vec![5, 6]);
    assert_eq!(
        choices[3].echo.as_deref(),
        Some(model().tokenizer.decode(&[5, 6], false).as_str())
    );
    let seeds: Vec<_> = choices.iter().map(|c| c.params.seed).collect();
    assert_eq!(seeds, [7, 8, 9, 7, 8, 9].map(Some));
    assert!(choices
        .iter()
        .all(|c| c.n == 1 && c.more_prompts.is_empty()));
    assert_eq!(
        completion_json(serde_json::json!({"prompt": ["a", "b", "c", "d", "e"], "n": 16}))
            .unwrap_err(),
        ValidationError::TooManyChoices { prompts: 5, n: 16 }
    );
    assert_eq!(
        ids(serde_json::json!(["a", []])).unwrap_err(),
        ValidationError::Empty { field: "prompt" }
    );
    assert!(matches!(
        ids(serde_json::json!(5)),
        Err(ValidationError::WrongShape {
            field: "prompt",
            ..
        })
    ));
    assert!(matches!(
        ids(serde_json::json!([1, "a"])),
        Err(ValidationError::WrongShape {
            field: "prompt",
            ..
        })
    ));
    assert!(matches!(
        ids(serde_json::json!([1.5])),
        Err(ValidationError::WrongShape {
            field: "prompt",
            ..
        })
    ));
    let e = ids(serde_json::json!([1, 300])).unwrap_err();
    assert_eq!(
        e.to_string(),
        "`prompt` has token id 300, outside the vocabulary of 262 tokens (ids 0 to 261)"
    );
    assert_eq!(message(serde_json::json!({})), "`prompt` is required");
}

#[test]
fn context_overflow_names_the_numbers() {
    let long = "x".repeat(600);
    assert_eq!(
        message(serde_json::json!({"prompt": long})),
        "the prompt (600 tokens) fills the model's context of 512 tokens and leaves no room for a completion"
    );
    let e = completion_json(serde_json::json!({"prompt": "x".repeat(500), "max_tokens": 20}))
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "prompt (500 tokens) + max_tokens (20) = 520 exceeds the model's context of 512 tokens"
    );
    assert_eq!(e.code(), Some("context_length_exceeded"));
}

#[test]
fn unknown_model_is_404_and_omitted_model_is_fine() {
    let e = completion_json(serde_json::json!({"prompt": "a", "model": "gpt-4"})).unwrap_err();
    assert_eq!(e.status(), StatusCode::NOT_FOUND);
    assert_eq!(e.code(), Some("model_not_found"));
    assert!(completion_json(serde_json::json!({"prompt": "a", "model": "tiny"})).is_ok());
}

#[test]
fn stop_strings_are_bounded() {
    assert_eq!(
        completion_json(serde_json::json!({"prompt": "a", "stop": "x"}))
            .unwrap()
            .stop_strings,
        vec!["x"]
    );
    assert_eq!(
        completion_json(serde_json::json!({"prompt": "a", "stop": ["x", "y"]}))
            .unwrap()
            .stop_strings,
        vec!["x", "y"]
    );
    assert_eq!(
        message(serde_json::json!({"prompt": "a", "stop": ["1", "2", "3", "4", "5"]})),
        "`stop` holds 5 strings; at most 4 are allowed"
    );
    assert_eq!(
        message(serde_json::json!({"prompt": "a", "stop": "123456789"})),
        "`stop` string 0 is 9 bytes long; at most 8 are allowed"
    );
    assert_eq!(
        message(serde_json::json!({"prompt": "a", "stop": [""]})),
        "`stop` must not be empty"
    );
    assert_eq!(
        message(serde_json::json!({"prompt": "a", "stop": 3})),
        "`stop` must be a string or an array of strings"
    );
}

#[test]
fn ignore_eos_and_stop_token_ids() {
    let r = completion_json(
        serde_json::json!({"prompt": "a", "ignore_eos": true, "stop_token_ids": [7]}),
    )
    .unwrap();
    assert_eq!(r.stop_token_ids, vec![7]);
    assert!(matches!(
        completion_json(serde_json::json!({"prompt": "a", "stop_token_ids": [999]})),
        Err(ValidationError::TokenOutOfVocab {
            field: "stop_token_ids",
            id: 999,
            ..
        })
    ));
}

#[test]
fn echo_and_unsupported_fields() {
    let r = completion_json(serde_json::json!({"prompt": [104, 105], "echo": true})).unwrap();
    assert_eq!(
        r.echo.as_deref(),
        Some(model().tokenizer.decode(&[104, 105], false).as_str())
    );
    let scored = completion_json(
        serde_json::json!({"prompt": "a", "echo": true, "logprobs": 1, "max_tokens": 0}),
    )
    .unwrap();
    assert_eq!((scored.score_prompt, scored.max_tokens), (Some(1), 0));
    let unscored = completion_json(serde_json::json!({"prompt": "a", "logprobs": 1})).unwrap();
    assert_eq!(unscored.score_prompt, None);
    let vllm = completion_json(
        serde_json::json!({"prompt": "a", "echo": true, "logprobs": 1, "prompt_logprobs": 4}),
    )
    .unwrap();
    assert_eq!(
        (vllm.score_prompt, vllm.prompt_logprobs),
        (Some(4), Some(4))
    );
    let e = completion_json(serde_json::json!({"prompt": "a", "prompt_logprobs": -1})).unwrap_err();
    assert_eq!(e.param(), Some("prompt_logprobs"));
    assert!(matches!(
        completion_json(serde_json::json!({"prompt": "a", "max_tokens": 0})),
        Err(ValidationError::OutOfRange {
            field: "max_tokens",
            ..
        })
    ));
    assert!(matches!(
        completion_json(serde_json::json!({"prompt": "a", "suffix": "b"})),
        Err(ValidationError::Unsupported {
            field: "suffix",
            ..
        })
    ));
    assert!(completion_json(serde_json::json!({"prompt": "a", "suffix": null})).is_ok());
}

#[test]
fn chat_renders_the_template_and_defaults_max_tokens_to_the_rest_of_the_context() {
    let r =
        chat_json(serde_json::json!({"messages": [{"role": "user", "content": "hi"}]})).unwrap();
    let want = model()
        .tokenizer
        .encode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
        .unwrap();
    assert_eq!(r.prompt, want);
    assert_eq!(r.max_tokens, 512 - want.len());
    let parts = chat_json(serde_json::json!({"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]})).unwrap();
    assert_eq!(parts.prompt, want);
    let r = chat_json(serde_json::json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "max_completion_tokens": 7})).unwrap();
    assert_eq!(r.max_tokens, 7);
    let r = chat_json(serde_json::json!({"messages": [{"role": "user", "content": "hi"}], "logprobs": true, "top_logprobs": 3})).unwrap();
    assert_eq!((r.logprobs, r.params.logprobs), (Some(3), Some(3)));
}

#[test]
fn chat_message_errors() {
    let err = |v: serde_json::Value| chat_json(v).unwrap_err().to_string();
    assert_eq!(
        err(serde_json::json!({"messages": []})),
        "`messages` must not be empty"
    );
    assert_eq!(err(serde_json::json!({})), "`messages` is required");
    assert!(err(serde_json::json!({"messages": [{"content": "x"}]}))
        .starts_with("`messages[0]` needs a `role`"));
    assert_eq!(
        err(
            serde_json::json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]})
        ),
        "`messages[0]` content part 0 has type `image_url`; braid's models read text only"
    );
    assert!(err(
        serde_json::json!({"messages": [{"role": "user", "content": "a"}], "top_logprobs": 2})
    )
    .contains("top_logprobs"));
    assert_eq!(
        err(serde_json::json!({"messages": [{"role": "user"}]})),
        "`messages[0]` needs `content`: a user message must say something"
    );
    assert!(chat_json(serde_json::json!({"messages": [
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": null},
        {"role": "user", "content": "again"}]}))
    .is_ok());
}

#[test]
fn logit_bias_is_checked_and_carried() {
    let r =
        completion_json(serde_json::json!({"prompt": "a", "logit_bias": {"5": -100, " 7": 2.5}}))
            .unwrap();
    assert_eq!(r.params.logit_bias, vec![(7, 2.5), (5, -100.0)]);
    let err = |v: serde_json::Value| completion_json(v).unwrap_err().to_string();
    assert!(
        err(serde_json::json!({"prompt": "a", "logit_bias": {"x": 1}}))
            .contains("keys are token ids")
    );
    assert!(
        err(serde_json::json!({"prompt": "a", "logit_bias": {"5": 101}}))
            .contains("`logit_bias` must be >= -100 and <= 100")
    );
    assert!(
        err(serde_json::json!({"prompt": "a", "logit_bias": {"99999999": 1}}))
            .contains("outside the vocabulary")
    );
}

/// The tiny model loaded again, with `chat_template` in place of its GGUF's ChatML one, or
/// (given None) with no template at all, as a base model's GGUF has none.
fn tiny_model_with_template(chat_template: Option<&str>) -> LoadedModel {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    braid_model::tiny_gguf::write(&path, 1).unwrap();
    let mut m = LoadedModel::load_with_chat_template(&path, chat_template).unwrap();
    if chat_template.is_none() {
        m.chat_template = None;
    }
    m
}

#[test]
fn a_model_without_a_chat_template_refuses_chat_but_completes_prompts() {
    let m = tiny_model_with_template(None);
    let req: ChatCompletionRequest = serde_json::from_value(
        serde_json::json!({"messages": [{"role": "user", "content": "hi"}], "temperature": 9}),
    )
    .unwrap();
    let e = chat(&req, &m, &limits()).unwrap_err();
    assert_eq!(e, ValidationError::NoChatTemplate);
    assert_eq!(e.status(), StatusCode::BAD_REQUEST);
    assert_eq!(
        (e.param(), e.code()),
        (Some("messages"), Some("no_chat_template"))
    );
    let msg = e.to_string();
    assert!(
        msg.contains("no chat template") && msg.contains("braid serve --chat-template FILE"),
        "{msg}"
    );
    let msgs: [ChatMessageIn; 1] =
        [serde_json::from_value(serde_json::json!({"role": "user", "content": "hi"})).unwrap()];
    assert_eq!(
        chat_prompt(
            &msgs,
            None,
            ChatEnd::NewTurn,
            &m,
            false,
            &Default::default()
        )
        .unwrap_err(),
        ValidationError::NoChatTemplate
    );
    let req: CompletionRequest =
        serde_json::from_value(serde_json::json!({"prompt": "the", "max_tokens": 2})).unwrap();
    assert!(completion(&req, &m, &limits()).is_ok());
}

#[test]
fn a_given_chat_template_replaces_the_models_own() {
    let gemma = "{{ bos_token }}{% for m in messages %}<start_of_turn>{{ 'model' if m.role == 'assistant' else m.role }}\n{{ m.content }}<end_of_turn>\n{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}";
    let m = tiny_model_with_template(Some(gemma));
    let req: ChatCompletionRequest = serde_json::from_value(
        serde_json::json!({"messages": [{"role": "user", "content": "hi"}]}),
    )
    .unwrap();
    let want = m
        .tokenizer
        .encode("<|im_start|><start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n")
        .unwrap();
    assert_eq!(chat(&req, &m, &limits()).unwrap().prompt, want);
}

#[test]
fn a_prompt_never_starts_with_two_bos_tokens() {
    // As if the template wrote bos_token and the tokenizer added its own.
    let m = tiny_model_with_template(Some(
        "{{ bos_token }}{{ bos_token }}{{ messages[0].content }}",
    ));
    let req: ChatCompletionRequest = serde_json::from_value(
        serde_json::json!({"messages": [{"role": "user", "content": "the"}]}),
    )
    .unwrap();
    let want = m.tokenizer.encode("<|im_start|>the").unwrap();
    assert_eq!(want[0], m.tokenizer.token_id("<|im_start|>").unwrap());
    assert_eq!(chat(&req, &m, &limits()).unwrap().prompt, want);
}

#[test]
fn a_request_past_its_token_budget_is_refused_with_its_size() {
    let capped = Limits {
        max_request_tokens: 100,
        ..limits()
    };
    // 2 prompts of 6 tokens, 4 choices each: 48 prompt tokens + 8 choices × 7 = 104.
    let req: CompletionRequest = serde_json::from_value(serde_json::json!(
        {"prompt": [[3, 4, 5, 6, 7, 8], [3, 4, 5, 6, 7, 8]], "max_tokens": 7, "n": 4}
    ))
    .unwrap();
    let err = completion(&req, model(), &capped).unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("104 tokens of work") && message.contains("at most 100"),
        "{message}"
    );
    assert!(
        message.contains("48 prompt tokens") && message.contains("8 choices"),
        "{message}"
    );
    let fits: CompletionRequest = serde_json::from_value(serde_json::json!(
        {"prompt": [[3, 4, 5, 6, 7, 8], [3, 4, 5, 6, 7, 8]], "max_tokens": 6, "n": 4}
    ))
    .unwrap();
    completion(&fits, model(), &capped).expect("96 tokens fit 100");
}

#[test]
fn prompts_longer_than_the_cap_are_refused() {
    let capped = Limits {
        max_prompt_tokens: 5,
        ..limits()
    };
    let req: CompletionRequest =
        serde_json::from_value(serde_json::json!({"prompt": [3, 4, 5, 6, 7, 8], "max_tokens": 1}))
            .unwrap();
    let e = completion(&req, model(), &capped).unwrap_err();
    assert_eq!(
        e.to_string(),
        "`prompt` is 6 tokens long; this server accepts prompts of at most 5 tokens (--max-prompt-tokens)"
    );
    assert_eq!(
        (e.param(), e.code()),
        (Some("prompt"), Some("prompt_too_long"))
    );
    assert_eq!(e.status(), StatusCode::BAD_REQUEST);
    let req: CompletionRequest =
        serde_json::from_value(serde_json::json!({"prompt": [3, 4, 5, 6, 7], "max_tokens": 1}))
            .unwrap();
    assert_eq!(completion(&req, model(), &capped).unwrap().prompt.len(), 5);
    let chat_req: ChatCompletionRequest = serde_json::from_value(
        serde_json::json!({"messages": [{"role": "user", "content": "a long enough message"}]}),
    )
    .unwrap();
    let e = chat(&chat_req, model(), &capped).unwrap_err();
    assert_eq!(e.param(), Some("messages"));
}

#[test]
fn bounds_hold_for_the_f32_the_sampler_gets() {
    // Found by tests/fuzz_requests.rs: > 0 as f64, but 0 once narrowed to f32.
    for field in ["repetition_penalty", "top_p"] {
        let e = completion_json(serde_json::json!({"prompt": "a", field: 1e-300})).unwrap_err();
        assert_eq!(e.param(), Some(field), "{e}");
    }
    let r = completion_json(serde_json::json!({"prompt": "a", "top_p": 1e-30})).unwrap();
    assert!(r.params.top_p > 0.0);
}

#[test]
fn each_structured_output_field_compiles_to_a_constraint() {
    let schema = serde_json::json!({"type": "object", "properties": {"a": {"type": "integer"}}});
    for extra in [
        serde_json::json!({"response_format": {"type": "json_object"}}),
        serde_json::json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": true}}}),
        serde_json::json!({"guided_json": schema}),
        serde_json::json!({"guided_json": schema.to_string()}),
        serde_json::json!({"guided_regex": "[0-9]+"}),
        serde_json::json!({"guided_choice": ["yes", "no"]}),
        serde_json::json!({"guided_grammar": "start: \"a\" | \"b\""}),
        serde_json::json!({"guided_grammar": "root ::= \"a\" | \"b\""}),
        serde_json::json!({"structured_outputs": {"choice": ["yes", "no"]}}),
        serde_json::json!({"structured_outputs": {"grammar": "root ::= [0-9]+"}}),
    ] {
        let mut body = serde_json::json!({"messages": [{"role": "user", "content": "hi"}]});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        assert!(chat_json(body).unwrap().constraint.is_some(), "{extra}");
    }
    let text = chat_json(
        serde_json::json!({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "text"}}),
    );
    assert!(text.unwrap().constraint.is_none());
}

#[test]
fn a_structured_output_that_cannot_be_enforced_is_refused_naming_the_field() {
    let param = |v: serde_json::Value| {
        let e = completion_json(v).unwrap_err();
        assert_eq!(e.status(), StatusCode::BAD_REQUEST);
        (e.param().unwrap().to_string(), e.to_string())
    };
    let (p, m) = param(serde_json::json!({"prompt": "a", "guided_regex": "(ab"}));
    assert_eq!(p, "guided_regex");
    assert!(m.contains("cannot be enforced"), "{m}");
    let (p, _) = param(serde_json::json!({"prompt": "a", "guided_json": {"type": "nonsense"}}));
    assert_eq!(p, "guided_json");
    let (p, m) = param(serde_json::json!({"prompt": "a", "guided_json": "{not json"}));
    assert_eq!(p, "guided_json");
    assert!(m.contains("not JSON"), "{m}");
    let (p, m) = param(serde_json::json!({"prompt": "a", "guided_grammar": "root ::= foo"}));
    assert_eq!(p, "guided_grammar");
    assert!(m.contains("GBNF grammar: line 1: rule `foo`"), "{m}");
    let (p, m) = param(
        serde_json::json!({"prompt": "a", "response_format": {"type": "json_object"}, "guided_regex": "a"}),
    );
    assert_eq!(p, "guided_regex");
    assert!(m.contains("at most one"), "{m}");
    let (p, _) = param(
        serde_json::json!({"prompt": "a", "structured_outputs": {"regex": "a", "choice": ["a"]}}),
    );
    assert_eq!(p, "structured_outputs");
    let (p, _) = param(serde_json::json!({"prompt": "a", "guided_choice": [], "max_tokens": 2}));
    assert_eq!(p, "guided_choice");
    let (p, _) =
        param(serde_json::json!({"prompt": "a", "guided_regex": "a+", "ignore_eos": true}));
    assert_eq!(p, "ignore_eos");
}

fn weather_tool() -> serde_json::Value {
    serde_json::json!({"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}})
}

#[test]
fn tools_are_offered_in_the_prompt_and_required_calls_are_a_grammar() {
    // The tiny model's context is too short for the Hermes tools prompt in a whole request:
    // its rendering is checked alone, and the requests use a template that renders tools.
    let msgs: [ChatMessageIn; 1] =
        [serde_json::from_value(serde_json::json!({"role": "user", "content": "hi"})).unwrap()];
    let tools = [weather_tool()];
    let hermes = chat_prompt(
        &msgs,
        Some(&tools),
        ChatEnd::NewTurn,
        model(),
        false,
        &Default::default(),
    )
    .unwrap();
    let text = model().tokenizer.decode(&hermes, false);
    assert!(
        text.contains("<tools>") && text.contains("\"name\": \"get_weather\""),
        "{text}"
    );
    let m = tiny_model_with_template(Some(
        "{% for t in tools %}[{{ t.function.name }}]{% endfor %}{% for m in messages %}{{ m.content }}{% endfor %}",
    ));
    let chat_with = |extra: serde_json::Value| {
        let mut body = serde_json::json!({"messages": [{"role": "user", "content": "weather?"}]});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let req: ChatCompletionRequest = serde_json::from_value(body).unwrap();
        chat(&req, &m, &limits())
    };
    let plain = chat_with(serde_json::json!({})).unwrap();
    let auto = chat_with(serde_json::json!({"tools": tools})).unwrap();
    assert_eq!(
        m.tokenizer.decode(&auto.prompt, false),
        "[get_weather]weather?"
    );
    // `auto` is a grammar too: free text, and calls held to the functions once opened.
    assert!(auto.tools.is_some() && auto.constraint.is_some());
    let none = chat_with(serde_json::json!({"tools": tools, "tool_choice": "none"})).unwrap();
    assert_eq!(none.prompt, plain.prompt);
    assert!(none.tools.is_none());
    let required =
        chat_with(serde_json::json!({"tools": tools, "tool_choice": "required"})).unwrap();
    assert!(required.tools.is_some() && required.constraint.is_some());
    let e = chat_with(serde_json::json!({"tools": tools, "guided_regex": "a+"})).unwrap_err();
    assert_eq!(e.param(), Some("tools"));
    let format = serde_json::json!({"type": "json_schema", "json_schema": {"name": "a",
        "schema": {"type": "object"}}});
    let both = chat_with(serde_json::json!({"tools": tools, "response_format": format})).unwrap();
    assert!(both.tools.is_some() && both.constraint.is_some());
    let bad = serde_json::json!({"type": "json_schema", "json_schema": {"name": "a",
        "schema": {"type": 5}}});
    let e = chat_with(serde_json::json!({"tools": tools, "response_format": bad})).unwrap_err();
    assert_eq!(e.param(), Some("response_format"));
}

#[test]
fn a_conversation_s_calls_and_results_are_checked() {
    let call = serde_json::json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]});
    let user = serde_json::json!({"role": "user", "content": "weather?"});
    let ok = chat_json(serde_json::json!({"messages": [user, call,
        {"role": "tool", "tool_call_id": "c1", "content": "cold"}]}))
    .unwrap();
    let text = model().tokenizer.decode(&ok.prompt, false);
    assert!(
        text.contains("{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}")
            && text.contains("<tool_response>\ncold\n</tool_response>"),
        "{text}"
    );
    let refused = |messages: serde_json::Value| {
        chat_json(serde_json::json!({ "messages": messages }))
            .unwrap_err()
            .to_string()
    };
    let e =
        refused(serde_json::json!([user, {"role": "tool", "tool_call_id": "c9", "content": "x"}]));
    assert!(e.contains("messages[1]") && e.contains("`c9`"), "{e}");
    let e = refused(serde_json::json!([user, {"role": "tool", "content": "x"}]));
    assert!(e.contains("tool_call_id"), "{e}");
    let e = refused(
        serde_json::json!([user, {"role": "assistant", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "[1]"}}]}]),
    );
    assert!(
        e.contains("tool call 0") && e.contains("not a JSON object"),
        "{e}"
    );
    let e = refused(
        serde_json::json!([user, {"role": "assistant", "tool_calls": [
        {"type": "function", "function": {"name": "f", "arguments": "{}"}}]}]),
    );
    assert!(e.contains("`id`"), "{e}");
    let developer = chat_json(serde_json::json!({"messages": [
        {"role": "developer", "content": "Be brief."}, user]}))
    .unwrap();
    let system = chat_json(serde_json::json!({"messages": [
        {"role": "system", "content": "Be brief."}, user]}))
    .unwrap();
    assert_eq!(developer.prompt, system.prompt);
    let e = refused(serde_json::json!([{"role": "user", "content": "a", "tool_call_id": "c1"}]));
    assert!(e.contains("only a `tool` message"), "{e}");
    let e =
        refused(serde_json::json!([{"role": "user", "content": "a", "reasoning_content": "r"}]));
    assert!(e.contains("only an assistant message"), "{e}");
    chat_json(serde_json::json!({"messages": [user,
        {"role": "assistant", "content": "b", "reasoning_content": "r"}, user]}))
    .unwrap();
}
