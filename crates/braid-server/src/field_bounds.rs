//! The numeric fields of a generation request and their bounds, declared once.
//!
//! Validation checks each value against its entry here, /openapi.json states the bounds it
//! finds here, and the request fuzzer (`tests/fuzz_requests.rs`) generates values on both
//! sides of them, so the three cannot drift apart. A new sampling field starts here
//! (CONTRIBUTING.md, "Adding a sampling field").
//!
//! Plain data on purpose: this file imports nothing from the crate, so every other file may
//! read it.

/// How a field's value is written in JSON.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Number,
    Integer,
}

/// One numeric field: its name in the request body and the values it accepts.
#[derive(Clone, Copy, Debug)]
pub struct NumericField {
    pub name: &'static str,
    pub kind: Kind,
    pub min: f64,
    /// The minimum itself is refused (`top_p: 0` would leave no token to sample).
    pub exclusive_min: bool,
    pub max: Option<f64>,
    /// The value an absent field stands for; `None` when absence means "not asked for".
    pub default: Option<f64>,
    /// A value below `min` that is accepted too and means what the default means (top_k's
    /// -1, vLLM's spelling of "off").
    pub also_off: Option<f64>,
    /// Said in parentheses after the bounds when a value is refused.
    pub note: &'static str,
}

/// Most choices per prompt (`n`).
pub const MAX_N: usize = 16;
/// Most choices per request: prompts in the array times `n`.
pub const MAX_CHOICES: usize = 64;

const fn field(name: &'static str, kind: Kind, min: f64, max: Option<f64>) -> NumericField {
    NumericField {
        name,
        kind,
        min,
        exclusive_min: false,
        max,
        default: None,
        also_off: None,
        note: "",
    }
}

pub const TEMPERATURE: NumericField = NumericField {
    default: Some(1.0),
    ..field("temperature", Kind::Number, 0.0, Some(2.0))
};
pub const TOP_P: NumericField = NumericField {
    exclusive_min: true,
    default: Some(1.0),
    ..field("top_p", Kind::Number, 0.0, Some(1.0))
};
pub const TOP_K: NumericField = NumericField {
    default: Some(0.0),
    also_off: Some(-1.0),
    note: "0 or -1 turn it off",
    ..field("top_k", Kind::Integer, 0.0, None)
};
pub const MIN_P: NumericField = NumericField {
    default: Some(0.0),
    ..field("min_p", Kind::Number, 0.0, Some(1.0))
};
pub const PRESENCE_PENALTY: NumericField = NumericField {
    default: Some(0.0),
    ..field("presence_penalty", Kind::Number, -2.0, Some(2.0))
};
pub const FREQUENCY_PENALTY: NumericField = NumericField {
    default: Some(0.0),
    ..field("frequency_penalty", Kind::Number, -2.0, Some(2.0))
};
pub const REPETITION_PENALTY: NumericField = NumericField {
    exclusive_min: true,
    default: Some(1.0),
    ..field("repetition_penalty", Kind::Number, 0.0, Some(2.0))
};
/// The values of the `logit_bias` object (its keys are token ids, checked against the
/// vocabulary).
pub const LOGIT_BIAS: NumericField = field("logit_bias", Kind::Number, -100.0, Some(100.0));
pub const N: NumericField = NumericField {
    default: Some(1.0),
    ..field("n", Kind::Integer, 1.0, Some(MAX_N as f64))
};
/// Alternatives reported with each prompt token; OpenAI's limit of 20, as for `logprobs`.
pub const PROMPT_LOGPROBS: NumericField = field("prompt_logprobs", Kind::Integer, 0.0, Some(20.0));
/// /v1/completions: alternatives reported with each token.
pub const LOGPROBS: NumericField = NumericField {
    name: "logprobs",
    ..PROMPT_LOGPROBS
};
/// /v1/chat/completions: alternatives reported with each token.
pub const TOP_LOGPROBS: NumericField = NumericField {
    name: "top_logprobs",
    ..PROMPT_LOGPROBS
};
/// braid samples no hidden candidates to pick the best from.
pub const BEST_OF: NumericField = NumericField {
    default: Some(1.0),
    note: "braid has no best-of sampling; `n` returns several choices",
    ..field("best_of", Kind::Integer, 1.0, Some(1.0))
};

/// The sampling fields both generation endpoints take.
pub const SAMPLING_FIELDS: &[NumericField] = &[
    TEMPERATURE,
    TOP_P,
    MIN_P,
    PRESENCE_PENALTY,
    FREQUENCY_PENALTY,
    REPETITION_PENALTY,
    TOP_K,
    LOGIT_BIAS,
    N,
    PROMPT_LOGPROBS,
];

/// The numeric fields only /v1/completions takes.
pub const COMPLETION_ONLY_FIELDS: &[NumericField] = &[LOGPROBS, BEST_OF];

/// The numeric fields only /v1/chat/completions takes.
pub const CHAT_ONLY_FIELDS: &[NumericField] = &[TOP_LOGPROBS];

impl NumericField {
    /// Whether `x` is within the bounds (`also_off` is not: callers read it first).
    pub fn contains(&self, x: f64) -> bool {
        let above = if self.exclusive_min {
            x > self.min
        } else {
            x >= self.min
        };
        above && self.max.is_none_or(|max| x <= max)
    }

    /// Whether `x` is the value that turns the field off (the default, or `also_off`).
    pub fn is_off(&self, x: f64) -> bool {
        Some(x) == self.default || Some(x) == self.also_off
    }

    /// The lowest value accepted, `also_off` included.
    pub fn lowest(&self) -> f64 {
        self.also_off.map_or(self.min, |off| off.min(self.min))
    }

    /// The bounds as a refusal states them: "> 0 and <= 1", ">= 0 (0 or -1 turn it off)", "1".
    pub fn bound(&self) -> String {
        let lower = if self.exclusive_min { ">" } else { ">=" };
        let bounds = match self.max {
            Some(max) if max == self.min && !self.exclusive_min => format!("{max}"),
            Some(max) => format!("{lower} {} and <= {max}", self.min),
            None => format!("{lower} {}", self.min),
        };
        match self.note {
            "" => bounds,
            note => format!("{bounds} ({note})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_read_as_the_refusals_say_them() {
        assert_eq!(TEMPERATURE.bound(), ">= 0 and <= 2");
        assert_eq!(TOP_P.bound(), "> 0 and <= 1");
        assert_eq!(PRESENCE_PENALTY.bound(), ">= -2 and <= 2");
        assert_eq!(TOP_K.bound(), ">= 0 (0 or -1 turn it off)");
        assert_eq!(N.bound(), ">= 1 and <= 16");
        assert_eq!(
            BEST_OF.bound(),
            "1 (braid has no best-of sampling; `n` returns several choices)"
        );
        assert!(TOP_P.contains(1.0) && !TOP_P.contains(0.0) && !TOP_P.contains(1.01));
        assert!(TOP_K.contains(1e9) && !TOP_K.contains(-1.0) && TOP_K.is_off(-1.0));
        assert_eq!(TOP_K.lowest(), -1.0);
    }

    #[test]
    fn every_field_is_listed_once_and_its_default_is_accepted() {
        let all: Vec<_> = SAMPLING_FIELDS
            .iter()
            .chain(COMPLETION_ONLY_FIELDS)
            .chain(CHAT_ONLY_FIELDS)
            .collect();
        for (i, f) in all.iter().enumerate() {
            assert!(
                all[..i].iter().all(|g| g.name != f.name),
                "{} twice",
                f.name
            );
            assert!(f.default.is_none_or(|d| f.contains(d)), "{}", f.name);
        }
    }
}
