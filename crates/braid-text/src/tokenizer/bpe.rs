//! GPT-2-style byte-level BPE (`tokenizer.ggml.model = gpt2`): Llama 3, Qwen2.5/3, SmolLM.
//!
//! The merges are in the file; what differs between families is how text is cut into words
//! before merging, which the file only names (`tokenizer.ggml.pre`). Each name maps to the
//! regular expressions llama.cpp's `llm_tokenizer_bpe` applies for it, one after another on the
//! pieces the previous one left (text no expression matches stays a piece of its own), then to
//! GPT-2's byte-to-character map. A name braid does not know is refused rather than guessed:
//! a wrong pre-tokenizer gives plausible but wrong ids, and the model then reads another text.

use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::SplitDelimiterBehavior;

const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN35: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// How one family of `tokenizer.ggml.pre` names cuts text, as llama.cpp's `llama-vocab.cpp`
/// has it.
pub struct PreTokenizer {
    pub names: &'static [&'static str],
    regexes: &'static [&'static str],
    /// A word that is itself a token is not merged (llama.cpp's `ignore_merges`).
    ignore_merges: bool,
    /// llama.cpp's default for `add_bos_token` when the file does not say.
    pub add_bos: bool,
}

const fn pre(
    names: &'static [&'static str],
    regexes: &'static [&'static str],
    ignore_merges: bool,
    add_bos: bool,
) -> PreTokenizer {
    PreTokenizer {
        names,
        regexes,
        ignore_merges,
        add_bos,
    }
}

pub const PRE_TOKENIZERS: &[PreTokenizer] = &[
    pre(
        &["default"],
        &[r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"],
        false,
        false,
    ),
    pre(
        &[
            "gpt-2",
            "gpt2",
            "phi-2",
            "mpt",
            "olmo",
            "jais",
            "exaone4",
            "jina-es",
            "jina-de",
            "jina-v2-es",
            "jina-v2-de",
            "gigachat",
            "a.x-4.0",
            "mellum",
            "modern-bert",
            "trillion",
            "granite-docling",
        ],
        &[GPT2],
        false,
        false,
    ),
    pre(
        &[
            "smollm",
            "starcoder",
            "refact",
            "command-r",
            "codeshell",
            "exaone",
            "minerva-7b",
            "mellum2",
        ],
        &[r"\p{N}", GPT2],
        false,
        false,
    ),
    pre(
        &[
            "llama-bpe",
            "llama3",
            "llama-v3",
            "falcon3",
            "falcon-h1",
            "pixtral",
            "midm-2.0",
            "lfm2",
            "jina-v5-nano",
        ],
        &[LLAMA3],
        true,
        true,
    ),
    pre(&["dbrx", "smaug-bpe"], &[LLAMA3], false, false),
    pre(
        &[
            "qwen2",
            "deepseek-r1-qwen",
            "kormo",
            "f2llmv2",
            "megrez",
            "stablelm2",
            "hunyuan",
            "solar-open",
        ],
        &[QWEN2],
        false,
        false,
    ),
    pre(&["qwen35"], &[QWEN35], false, false),
    pre(
        &["deepseek-llm"],
        &[
            r"[\r\n]",
            r"\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
            r"\s?[!-/:-~！-／：-～‘-‟　-。]+",
            r"\s+$",
            r"[一-龥ࠀ-一가-퟿]+",
            r"\p{N}+",
        ],
        false,
        false,
    ),
    pre(
        &["falcon"],
        &[r"[\p{P}\$\+<=>\^~\|`]+", GPT2, r"[0-9][0-9][0-9]"],
        false,
        false,
    ),
    pre(
        &["deepseek-coder"],
        &[
            r"[\r\n]",
            r"\s?\p{L}+",
            r"\s?\p{P}+",
            r"[一-龥ࠀ-一가-퟿]+",
            r"\p{N}",
        ],
        false,
        false,
    ),
];

pub fn find_pre(name: &str) -> Option<&'static PreTokenizer> {
    PRE_TOKENIZERS.iter().find(|p| p.names.contains(&name))
}

/// Every `tokenizer.ggml.pre` braid reads, for the message that refuses another.
pub fn supported_pre_names() -> String {
    PRE_TOKENIZERS
        .iter()
        .flat_map(|p| p.names.iter().copied())
        .collect::<Vec<_>>()
        .join(", ")
}

pub struct Bpe {
    inner: tokenizers::Tokenizer,
}

impl Bpe {
    pub fn new(tokens: &[String], merges: &[String], pre: &PreTokenizer) -> Result<Self, String> {
        let vocab: Vocab = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (t.clone(), i as u32))
            .collect();
        // llama.cpp cuts a merge at its first space after the first character.
        let merges = merges
            .iter()
            .filter_map(|m| {
                let cut = m.char_indices().skip(1).find(|&(_, c)| c == ' ')?.0;
                Some((m[..cut].to_string(), m[cut + 1..].to_string()))
            })
            .collect();
        let model = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .ignore_merges(pre.ignore_merges)
            .build()
            .map_err(|e| format!("BPE vocabulary: {e}"))?;
        let mut steps: Vec<PreTokenizerWrapper> = pre
            .regexes
            .iter()
            .map(|r| {
                Split::new(
                    SplitPattern::Regex(r.to_string()),
                    SplitDelimiterBehavior::Isolated,
                    false,
                )
                .map(PreTokenizerWrapper::from)
                .map_err(|e| format!("pre-tokenizer regex {r}: {e}"))
            })
            .collect::<Result<_, _>>()?;
        steps.push(ByteLevel::new(false, true, false).into());
        let mut inner = tokenizers::Tokenizer::new(model);
        inner.with_pre_tokenizer(Some(Sequence::new(steps)));
        Ok(Self { inner })
    }

    pub fn encode(&self, text: &str, out: &mut Vec<u32>) -> Result<(), String> {
        let enc = self
            .inner
            .encode_fast(text, false)
            .map_err(|e| e.to_string())?;
        out.extend_from_slice(enc.get_ids());
        Ok(())
    }
}

/// GPT-2's reversible map from bytes to printable characters, inverted: char → byte.
pub fn unicode_to_byte() -> std::collections::HashMap<char, u8> {
    let mut printable: Vec<u32> = (b'!' as u32..=b'~' as u32)
        .chain(0xA1..=0xAC)
        .chain(0xAE..=0xFF)
        .collect();
    let mut chars: Vec<u32> = printable.clone();
    let mut extra = 0;
    for b in 0..=255u32 {
        if !printable.contains(&b) {
            printable.push(b);
            chars.push(256 + extra);
            extra += 1;
        }
    }
    printable
        .into_iter()
        .zip(chars)
        .map(|(b, c)| (char::from_u32(c).expect("valid char"), b as u8))
        .collect()
}
