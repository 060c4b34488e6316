//! braid's tokenizers against llama.cpp's own server on the same GGUF files: the ids must be
//! equal, and decoding them must give back what llama.cpp gives back.
//!
//! The vectors come from scripts/tokenizer-vectors.py (the llama.cpp version and command are in
//! each JSON file). Gemma 3 is read from its metadata only, so these tests do not depend on
//! the gemma3 architecture loading.

mod common;

use braid_text::Tokenizer;
use candle_core::quantized::gguf_file::Content;
use common::{real_model, workspace_root};
use serde_json::Value;
use std::path::PathBuf;

fn vectors(name: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(format!("tokenizer-vectors-{name}.json"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_json::from_str(&text).expect("vectors JSON")
}

fn ids(v: &Value) -> Vec<u32> {
    serde_json::from_value(v.clone()).expect("ids")
}

/// Checks every vector; returns how many there were.
fn check(tokenizer: &Tokenizer, name: &str) -> usize {
    let doc = vectors(name);
    let cases = doc["vectors"].as_array().expect("vectors");
    let mut failures = Vec::new();
    for case in cases {
        let text = case["text"].as_str().unwrap();
        let want = ids(&case["ids"]);
        let got = tokenizer.encode(text).unwrap();
        if got != want {
            failures.push(format!(
                "ids of {text:?}: braid {got:?}, llama.cpp {want:?}"
            ));
            continue;
        }
        // llama.cpp adds BOS even to a text that starts with it; braid does not double it.
        let mut want_prompt = ids(&case["ids_add_special"]);
        if want_prompt.len() > 1
            && want_prompt[0] == want_prompt[1]
            && Some(want_prompt[0]) == tokenizer.prompt_bos()
        {
            want_prompt.remove(0);
        }
        let got_prompt = tokenizer.encode_prompt(text).unwrap();
        if got_prompt != want_prompt {
            failures.push(format!(
                "prompt ids of {text:?}: braid {got_prompt:?}, llama.cpp {want_prompt:?}"
            ));
        }
        let back = tokenizer.decode(&got, false);
        if back != case["detokenized"].as_str().unwrap() {
            failures.push(format!(
                "decoding {text:?}: braid {back:?}, llama.cpp {:?}",
                case["detokenized"]
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} {name} vectors differ from llama.cpp:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    cases.len()
}

#[test]
fn smollm2_tokenizer_matches_llama_cpp() {
    let n = check(&real_model().tokenizer, "smollm2");
    assert!(n >= 30, "only {n} vectors");
    let t = &real_model().tokenizer;
    assert_eq!(t.prompt_bos(), None, "SmolLM2 prompts start without BOS");
    // llama-server's load log ("printing all EOG tokens"): <|endoftext|>, <|im_end|> and the
    // fill-in-the-middle <reponame>.
    assert_eq!(eog(t), vec![0, 2, 4]);
}

fn eog(t: &Tokenizer) -> Vec<u32> {
    let mut ids = t.eos_token_ids().to_vec();
    ids.sort();
    ids
}

fn gemma3() -> Tokenizer {
    let path = workspace_root().join("models/gemma-3-270m-q4_k_m.gguf");
    let mut file = std::fs::File::open(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; run scripts/fetch-model.sh gemma3-270m to fetch Gemma 3 270M",
            path.display()
        )
    });
    let ct = Content::read(&mut file).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Tokenizer::from_gguf(&ct).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn gemma3_tokenizer_matches_llama_cpp() {
    let t = gemma3();
    let n = check(&t, "gemma3");
    assert!(n >= 30, "only {n} vectors");
}

#[test]
fn gemma3_prompts_start_with_bos_and_end_of_turn_stops() {
    let t = gemma3();
    let bos = t.token_id("<bos>").unwrap();
    assert_eq!(t.prompt_bos(), Some(bos));
    assert_eq!(t.encode_prompt("Hello").unwrap()[0], bos);
    let eot = t.token_id("<end_of_turn>").unwrap();
    let eos = t.token_id("<eos>").unwrap();
    assert_eq!(t.eos_token_ids()[0], eos);
    // llama-server's load log: <eos>, <end_of_turn> and </s>.
    assert_eq!(eog(&t), vec![eos, eot, t.token_id("</s>").unwrap()]);
    assert!(t.is_special(eot));
}

#[test]
fn gemma3_streaming_decode_never_splits_a_character() {
    let t = gemma3();
    for text in [
        "日本語のテキスト",
        "emoji 🦀 and ü",
        "family 👨\u{200d}👩\u{200d}👧",
        "\u{0d}\n\t x",
    ] {
        let ids = t.encode(text).unwrap();
        let mut dec = braid_text::IncrementalDecoder::default();
        let mut out = String::new();
        for &id in &ids {
            let piece = dec.push(&t, id, true);
            assert!(!piece.contains('\u{FFFD}'), "{text:?}: piece {piece:?}");
            out.push_str(&piece);
        }
        out.push_str(&dec.finish());
        assert_eq!(out, text);
    }
}

/// llama.cpp's own tokenizer tests (`models/ggml-vocab-NAME.gguf` with `.inp` and `.out`, in
/// a llama.cpp source tree): vocabulary-only files for families braid has no model file of,
/// Llama 3 and Qwen2 among them. Their expected ids are Hugging Face's, which llama.cpp's
/// test-tokenizer-0 holds llama.cpp to.
///
/// LLAMA_CPP_DIR=/path/to/llama.cpp cargo test --release -p braid-model \
///     --test tokenizer_vectors -- --ignored
#[test]
#[ignore = "needs a llama.cpp source tree in LLAMA_CPP_DIR"]
fn llama_cpp_vocab_files() {
    let dir = PathBuf::from(std::env::var("LLAMA_CPP_DIR").expect("LLAMA_CPP_DIR")).join("models");
    let mut report = Vec::new();
    let mut failed = false;
    for name in [
        "gpt-2",
        "mpt",
        "starcoder",
        "refact",
        "command-r",
        "llama-bpe",
        "qwen2",
        "qwen35",
        "deepseek-coder",
        "deepseek-llm",
        "falcon",
        "llama-spm",
        "phi-3",
    ] {
        let gguf = dir.join(format!("ggml-vocab-{name}.gguf"));
        let mut file =
            std::fs::File::open(&gguf).unwrap_or_else(|e| panic!("{}: {e}", gguf.display()));
        let ct = Content::read(&mut file).unwrap();
        let t = Tokenizer::from_gguf(&ct).unwrap_or_else(|e| panic!("{name}: {e}"));
        let inp = std::fs::read_to_string(gguf.with_extension("gguf.inp")).unwrap();
        let out = std::fs::read_to_string(gguf.with_extension("gguf.out")).unwrap();
        // As test-tokenizer-0 reads it: a separator at the very end starts no test.
        let mut texts: Vec<&str> = inp.split("\n__ggml_vocab_test__\n").collect();
        if texts.last() == Some(&"") {
            texts.pop();
        }
        let expected: Vec<Vec<u32>> = out
            .lines()
            .map(|l| l.split_whitespace().map(|x| x.parse().unwrap()).collect())
            .collect();
        assert_eq!(texts.len(), expected.len(), "{name}");
        let mut bad = 0;
        for (text, want) in texts.iter().zip(&expected) {
            let got = t.encode(text).unwrap();
            if &got != want {
                bad += 1;
                eprintln!("{name}: {text:?}\n  braid     {got:?}\n  expected  {want:?}");
            }
        }
        failed |= bad > 0;
        report.push(format!(
            "{name}: {}/{} equal",
            texts.len() - bad,
            texts.len()
        ));
    }
    eprintln!("{}", report.join("\n"));
    assert!(!failed, "{}", report.join("\n"));
}
