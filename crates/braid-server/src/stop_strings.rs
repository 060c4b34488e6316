//! Stop strings, matched on the text as it streams.
//!
//! A stop string can span tokens ("\n\n" from "\n" + "\n", "User:" from "Us" + "er:"), so
//! matching happens on detokenized text, not on ids. Text that could still be the start of a
//! stop string is held back until the next piece decides it: a client never receives part
//! of a stop string, and never the stop string itself.

/// What became of one piece of text.
#[derive(Debug, PartialEq, Eq)]
pub enum StopOutcome {
    /// No stop string yet; this text is safe to send (possibly empty while text is held).
    Continue(String),
    /// A stop string matched; this is the text before it, and the generation is over.
    Stopped(String),
}

#[derive(Debug, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    /// The matched stop string ends the released text instead of being cut off.
    keep_stop: bool,
    held: String,
    stopped: bool,
    /// The stop string that ended the text, once one has.
    matched: Option<String>,
}

impl StopMatcher {
    /// `stops` must not contain the empty string (validation rejects it).
    pub fn new(stops: Vec<String>, keep_stop: bool) -> Self {
        debug_assert!(stops.iter().all(|s| !s.is_empty()));
        Self {
            stops,
            keep_stop,
            held: String::new(),
            stopped: false,
            matched: None,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.stops.is_empty()
    }

    /// Feeds the next piece of text.
    pub fn push(&mut self, text: &str) -> StopOutcome {
        if self.stopped {
            return StopOutcome::Stopped(String::new());
        }
        if self.stops.is_empty() {
            return StopOutcome::Continue(text.to_string());
        }
        self.held.push_str(text);
        // The held text never contains a whole stop string, so the earliest match in the
        // buffer is the earliest match in the stream.
        // Of two starting at the same place, the shorter is the one the stream completed first.
        let first = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()).map(|at| (at, s.len())))
            .min();
        if let Some((at, len)) = first {
            self.stopped = true;
            self.matched = Some(self.held[at..at + len].to_string());
            let mut before = std::mem::take(&mut self.held);
            before.truncate(if self.keep_stop { at + len } else { at });
            return StopOutcome::Stopped(before);
        }
        let keep = self.longest_partial_suffix();
        let cut = self.held.len() - keep;
        let rest = self.held.split_off(cut);
        StopOutcome::Continue(std::mem::replace(&mut self.held, rest))
    }

    /// The stop string that ended the text (Anthropic's `stop_sequence`), if one did.
    pub fn matched(&self) -> Option<&str> {
        self.matched.as_deref()
    }

    /// The generation ended for another reason: whatever was held is ordinary text.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }

    /// Length in bytes of the longest suffix of the held text that is a proper prefix of a
    /// stop string (always at a character boundary, since both are `str`).
    fn longest_partial_suffix(&self) -> usize {
        let held = self.held.as_str();
        let mut best = 0;
        for stop in &self.stops {
            let max = (stop.len() - 1).min(held.len());
            for len in (best + 1..=max).rev() {
                let start = held.len() - len;
                if held.is_char_boundary(start)
                    && stop.as_bytes().starts_with(&held.as_bytes()[start..])
                {
                    best = len;
                    break;
                }
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds pieces, returns (everything emitted, whether it stopped).
    fn run(stops: &[&str], pieces: &[&str]) -> (String, bool) {
        let mut m = StopMatcher::new(stops.iter().map(|s| s.to_string()).collect(), false);
        let mut out = String::new();
        for p in pieces {
            match m.push(p) {
                StopOutcome::Continue(t) => out.push_str(&t),
                StopOutcome::Stopped(t) => {
                    out.push_str(&t);
                    return (out, true);
                }
            }
        }
        out.push_str(&m.finish());
        (out, false)
    }

    #[test]
    fn the_matched_stop_string_is_kept() {
        let mut m = StopMatcher::new(vec!["END".into(), "\n\n".into()], false);
        assert!(matches!(m.push("a\n"), StopOutcome::Continue(t) if t == "a"));
        assert_eq!(m.matched(), None);
        assert!(matches!(m.push("\nb"), StopOutcome::Stopped(t) if t.is_empty()));
        assert_eq!(m.matched(), Some("\n\n"));
    }

    #[test]
    fn no_stops_passes_everything_through() {
        assert_eq!(run(&[], &["a", "b"]), ("ab".into(), false));
    }

    #[test]
    fn stop_inside_one_piece() {
        assert_eq!(run(&["STOP"], &["abcSTOPdef"]), ("abc".into(), true));
    }

    #[test]
    fn stop_spanning_pieces() {
        assert_eq!(
            run(&["User:"], &["Hello ", "Us", "er", ":", " more"]),
            ("Hello ".into(), true)
        );
        assert_eq!(run(&["\n\n"], &["a\n", "\nb"]), ("a".into(), true));
    }

    #[test]
    fn partial_match_is_held_then_released() {
        let mut m = StopMatcher::new(vec!["abc".into()], false);
        assert_eq!(m.push("xa"), StopOutcome::Continue("x".into()));
        assert_eq!(m.push("b"), StopOutcome::Continue("".into()));
        assert_eq!(m.push("d"), StopOutcome::Continue("abd".into()));
        assert_eq!(m.finish(), "");
    }

    #[test]
    fn held_text_is_flushed_at_the_end() {
        assert_eq!(run(&["abc"], &["x", "ab"]), ("xab".into(), false));
    }

    #[test]
    fn earliest_of_several_stops_wins() {
        assert_eq!(
            run(&["world", "lo"], &["hello world"]),
            ("hel".into(), true)
        );
        assert_eq!(run(&["bc", "abcd"], &["a", "b", "c"]), ("a".into(), true));
    }

    #[test]
    fn overlapping_prefixes_are_found() {
        // "aab": after "aa" the held text must be "aa"-aware, not just "a".
        assert_eq!(run(&["aab"], &["a", "a", "a", "b"]), ("a".into(), true));
    }

    #[test]
    fn multibyte_text_is_never_split() {
        assert_eq!(run(&["é!"], &["café", "!"]), ("caf".into(), true));
        let mut m = StopMatcher::new(vec!["ék".into()], false);
        assert_eq!(m.push("aé"), StopOutcome::Continue("a".into()));
        assert_eq!(m.push("x"), StopOutcome::Continue("éx".into()));
    }

    #[test]
    fn nothing_after_a_stop() {
        let mut m = StopMatcher::new(vec!["x".into()], false);
        assert_eq!(m.push("axb"), StopOutcome::Stopped("a".into()));
        assert_eq!(m.push("more"), StopOutcome::Stopped("".into()));
    }

    #[test]
    fn a_kept_stop_string_ends_the_text() {
        let mut m = StopMatcher::new(vec!["User:".into(), "\n".into()], true);
        assert_eq!(m.push("Hi Us"), StopOutcome::Continue("Hi ".into()));
        assert_eq!(m.push("er: more"), StopOutcome::Stopped("User:".into()));
        let mut m = StopMatcher::new(vec!["ab".into(), "a".into()], true);
        assert_eq!(m.push("xab"), StopOutcome::Stopped("xa".into()));
    }
}
