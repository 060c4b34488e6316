//! Prompts that give no server an unfair advantage.
//!
//! Each request gets a different prompt, so no prefix cache can skip work that another
//! server would have to do. Token-id prompts (`"prompt": [ids...]`) have exactly the
//! requested length on every OpenAI-compatible server that accepts them (llama-server,
//! vLLM, braid), independent of each server's tokenizer; ids come from a range that
//! avoids special tokens. Word prompts are for servers that only take strings: their
//! length in tokens is only approximately the requested one.
//!
//! A prompt is a function of (seed, request index) alone, so the same run against two
//! servers sends the same prompts whatever order the requests happen to be sent in.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum PromptKind {
    /// Random token ids: exact lengths, no tokenizer involved.
    Tokens,
    /// Random English words as a string: lengths approximate (about one token a word).
    Words,
}

/// Half-open range of token ids, written `START..END`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenRange {
    pub start: u32,
    pub end: u32,
}

impl FromStr for TokenRange {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (a, b) = s
            .split_once("..")
            .ok_or_else(|| format!("token range `{s}` must look like 1000..40000"))?;
        let parse = |x: &str| {
            x.trim()
                .parse::<u32>()
                .map_err(|e| format!("token range `{s}`: {e}"))
        };
        let r = TokenRange {
            start: parse(a)?,
            end: parse(b)?,
        };
        if r.start >= r.end {
            return Err(format!("token range `{s}` is empty"));
        }
        Ok(r)
    }
}

impl fmt::Display for TokenRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}..{}", self.start, self.end)
    }
}

/// Prompt lengths and their weights, written `32:0.5,256:0.3,1024:0.2`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PromptMix(pub Vec<(usize, f64)>);

impl FromStr for PromptMix {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let mut parts = vec![];
        for item in s.split(',').filter(|x| !x.trim().is_empty()) {
            let (len, w) = item
                .split_once(':')
                .ok_or_else(|| format!("prompt mix item `{item}` must be LEN:WEIGHT"))?;
            let len: usize = len.trim().parse().map_err(|e| format!("`{item}`: {e}"))?;
            let w: f64 = w.trim().parse().map_err(|e| format!("`{item}`: {e}"))?;
            if len == 0 || !(w > 0.0 && w.is_finite()) {
                return Err(format!(
                    "prompt mix item `{item}` needs a length > 0 and a weight > 0"
                ));
            }
            parts.push((len, w));
        }
        if parts.is_empty() {
            return Err("prompt mix is empty".into());
        }
        Ok(PromptMix(parts))
    }
}

impl fmt::Display for PromptMix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let items: Vec<String> = self.0.iter().map(|(l, w)| format!("{l}:{w}")).collect();
        write!(f, "{}", items.join(","))
    }
}

impl PromptMix {
    /// Draws a length with probability proportional to its weight.
    pub fn sample(&self, rng: &mut impl Rng) -> usize {
        let total: f64 = self.0.iter().map(|(_, w)| w).sum();
        let mut x = rng.random::<f64>() * total;
        for &(len, w) in &self.0 {
            if x < w {
                return len;
            }
            x -= w;
        }
        self.0.last().expect("non-empty mix").0
    }
}

/// The `prompt` field of a completion request.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Prompt {
    Tokens(Vec<u32>),
    Text(String),
}

#[derive(Debug, Clone)]
pub struct PromptGen {
    pub seed: u64,
    pub kind: PromptKind,
    pub range: TokenRange,
}

impl PromptGen {
    /// The prompt of request `index`, about `len` tokens long (exactly, for token ids).
    pub fn prompt(&self, index: u64, len: usize) -> Prompt {
        self.render(self.draw(index, len))
    }

    /// The prompt of `prefix_index` (`prefix_len` long), then that of `index` (`len`):
    /// prompts with the same prefix index share that prefix exactly.
    pub fn with_prefix(
        &self,
        prefix_index: u64,
        prefix_len: usize,
        index: u64,
        len: usize,
    ) -> Prompt {
        let mut picks = self.draw(prefix_index, prefix_len);
        picks.extend(self.draw(index, len));
        self.render(picks)
    }

    /// Token ids, or indices into the word list, of request `index`.
    fn draw(&self, index: u64, len: usize) -> Vec<u32> {
        let mut rng = StdRng::seed_from_u64(mix(self.seed, index));
        (0..len)
            .map(|_| match self.kind {
                PromptKind::Tokens => rng.random_range(self.range.start..self.range.end),
                // Drawn as usize, as before prompts could share a prefix: same seed, same words.
                PromptKind::Words => rng.random_range(0..WORDS.len()) as u32,
            })
            .collect()
    }

    fn render(&self, picks: Vec<u32>) -> Prompt {
        match self.kind {
            PromptKind::Tokens => Prompt::Tokens(picks),
            PromptKind::Words => {
                let words: Vec<&str> = picks.iter().map(|&i| WORDS[i as usize]).collect();
                Prompt::Text(words.join(" "))
            }
        }
    }
}

/// splitmix64 of (seed, index): independent streams for neighbouring indices.
pub fn mix(seed: u64, index: u64) -> u64 {
    let mut z = seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Common short words that most BPE vocabularies hold as one token each.
#[rustfmt::skip]
const WORDS: &[&str] = &[
    "the", "of", "and", "to", "in", "is", "you", "that", "it", "he", "was",
    "for", "on", "are", "as", "with", "his", "they", "at", "be", "this", "have", "from",
    "or", "one", "had", "by", "word", "but", "not", "what", "all", "were", "we", "when",
    "your", "can", "said", "there", "use", "an", "each", "which", "she", "do", "how",
    "their", "if", "will", "up", "other", "about", "out", "many", "then", "them", "these",
    "so", "some", "her", "would", "make", "like", "him", "into", "time", "has", "look",
    "two", "more", "write", "go", "see", "number", "no", "way", "could", "people", "my",
    "than", "first", "water", "been", "call", "who", "oil", "its", "now", "find", "long",
    "down", "day", "did", "get", "come", "made", "may", "part", "over", "new", "sound",
    "take", "only", "little", "work", "know", "place", "year", "live", "me", "back", "give",
    "most", "very", "after", "thing", "our", "just", "name", "good", "man", "think", "say",
    "great", "where", "help", "through", "much", "before", "line", "right", "too", "mean",
    "old", "any", "same", "tell", "boy", "follow", "came", "want", "show", "also", "around",
    "form", "three", "small", "set", "put", "end", "does", "another", "well", "large",
    "must", "big", "even", "such", "because", "turn", "here", "why", "ask", "went", "men",
    "read", "need", "land", "different", "home", "us", "move", "try", "kind", "hand",
    "picture", "again", "change", "off", "play", "spell", "air", "away", "animal", "house",
    "point", "page", "letter", "mother", "answer", "found", "study", "still", "learn",
    "should", "world", "high", "every", "near", "add", "food", "between", "own", "below",
    "country", "plant", "last", "school", "father", "keep", "tree", "never", "start",
    "city", "earth", "eye", "light", "thought", "head", "under", "story", "saw", "left",
    "few", "while", "along", "might", "close", "something", "seem", "next", "hard", "open",
    "example", "begin", "life", "always", "those", "both", "paper", "together", "got",
    "group", "often", "run", "river", "car", "feet", "care",
];

#[cfg(test)]
mod tests {
    use super::*;

    fn gen(kind: PromptKind) -> PromptGen {
        PromptGen {
            seed: 7,
            kind,
            range: "1000..40000".parse().unwrap(),
        }
    }

    #[test]
    fn token_prompts_are_exact_in_range_distinct_and_reproducible() {
        let g = gen(PromptKind::Tokens);
        let a = g.prompt(0, 24);
        let Prompt::Tokens(ids) = &a else { panic!() };
        assert_eq!(ids.len(), 24);
        assert!(ids.iter().all(|&t| (1000..40000).contains(&t)));
        assert_eq!(a, g.prompt(0, 24));
        assert_ne!(a, g.prompt(1, 24));
        let other_seed = PromptGen {
            seed: 8,
            ..g.clone()
        };
        assert_ne!(a, other_seed.prompt(0, 24));
        assert_eq!(
            serde_json::to_string(&Prompt::Tokens(vec![1, 2])).unwrap(),
            "[1,2]"
        );
    }

    #[test]
    fn word_prompts_have_the_requested_word_count() {
        let Prompt::Text(t) = gen(PromptKind::Words).prompt(3, 50) else {
            panic!()
        };
        assert_eq!(t.split(' ').count(), 50);
    }

    #[test]
    fn prefixed_prompts_share_exactly_their_prefix() {
        let g = gen(PromptKind::Tokens);
        let Prompt::Tokens(prefix) = g.prompt(100, 40) else {
            panic!()
        };
        let Prompt::Tokens(a) = g.with_prefix(100, 40, 1, 5) else {
            panic!()
        };
        let Prompt::Tokens(b) = g.with_prefix(100, 40, 2, 5) else {
            panic!()
        };
        assert_eq!(
            (a.len(), &a[..40], &b[..40]),
            (45, &prefix[..], &prefix[..])
        );
        assert_ne!(a[40..], b[40..]);
        let Prompt::Text(t) = gen(PromptKind::Words).with_prefix(100, 40, 1, 5) else {
            panic!()
        };
        assert_eq!(t.split(' ').count(), 45);
    }

    #[test]
    fn parses_ranges_and_mixes() {
        assert_eq!(
            "5..9".parse::<TokenRange>(),
            Ok(TokenRange { start: 5, end: 9 })
        );
        assert!("9..5".parse::<TokenRange>().is_err());
        assert!("9".parse::<TokenRange>().is_err());
        let m: PromptMix = "32:0.5,256:0.3,1024:0.2".parse().unwrap();
        assert_eq!(m.0, vec![(32, 0.5), (256, 0.3), (1024, 0.2)]);
        assert_eq!(m.to_string(), "32:0.5,256:0.3,1024:0.2");
        assert!("32:0".parse::<PromptMix>().is_err());
        assert!("x:1".parse::<PromptMix>().is_err());
        assert!("".parse::<PromptMix>().is_err());
    }

    #[test]
    fn mix_sampling_follows_weights() {
        let m: PromptMix = "1:0.75,2:0.25".parse().unwrap();
        let mut rng = StdRng::seed_from_u64(1);
        let ones = (0..4000).filter(|_| m.sample(&mut rng) == 1).count();
        assert!((2700..3300).contains(&ones), "{ones}");
    }
}
