//! GBNF, llama.cpp's grammar format, read into llguidance's Lark dialect.
//!
//! Clients that learned structured outputs on llama.cpp or vLLM send GBNF in `guided_grammar`.
//! braid compiles every grammar with llguidance, which reads Lark, so GBNF is translated
//! rather than given an engine of its own: one compiler, one set of limits on what a grammar
//! may cost, one way of masking. The syntax read is llama.cpp's, down to where a rule may go
//! on past the end of a line (after `::=`, after `|`, inside parentheses), so a grammar that
//! works there reads the same here. Token references (`<[id]>`, `<|im_end|>`) name tokens, not
//! text, and are refused with their line rather than dropped.
//!
//! The translation keeps GBNF's meaning where Lark's differs. GBNF matches characters: a rule
//! may end after `"a"` and the next begin with `b` even where `"ab"` was also possible.
//! llguidance first cuts text into lexemes (each literal, each regex), and a lexeme runs as
//! far as it can, so where one terminal could end inside a literal, the shorter reading is
//! lost: `x "b"` with `x ::= "a" | "ab"` would refuse `ab`. A literal therefore stays one
//! lexeme only when no terminal of the grammar matches a proper prefix of it, and is otherwise
//! written a character per lexeme; character classes and `.` match one character each. Every
//! lexeme then either matches one character or cannot end early, and the lexer, like GBNF,
//! never has to choose where one ends.
//!
//! GBNF names are not all Lark names (Lark wants rules lowercase, and `Name` and `name` are
//! two GBNF rules), so each rule gets its index in its Lark name. Machine-written GBNF nests
//! groups deeper than llguidance's Lark parser reads (llama.cpp's JSON-schema converter nests
//! a group per character of a property name), so deep groups become rules of their own.

use std::collections::{HashMap, HashSet};
use std::fmt::Write;

/// Whether `src` defines its rules GBNF's way, `name ::= ...` at the start of a line, which a
/// Lark grammar never does (Lark writes `name: ...`; `::=` could only be inside its strings).
pub fn defines_rules(src: &str) -> bool {
    src.lines().any(|line| {
        let rest = line.trim_start_matches([' ', '\t']);
        let name = rest.find(|c: char| !is_name_char(c)).unwrap_or(rest.len());
        name > 0
            && rest[name..]
                .trim_start_matches([' ', '\t'])
                .starts_with("::=")
    })
}

/// The Lark grammar that accepts what the GBNF grammar `src` accepts, starting at its `root`;
/// or what is wrong with `src`, with the line.
pub fn to_lark(src: &str) -> Result<String, String> {
    Parser::new(src).grammar().map(|g| g.to_lark())
}

/// The largest repetition count: llguidance reads counts as `i32`, its maximum meaning
/// "unbounded".
const MAX_COUNT: u32 = i32::MAX as u32 - 1;

/// How deep groups and repetitions may nest. The parser recurses once per level; a thousand
/// nested `(` in a small request should not reach the end of a thread's stack.
const MAX_DEPTH: usize = 200;

/// How deep parentheses may nest in one Lark rule (llguidance reads at most 30).
const MAX_LARK_DEPTH: usize = 10;

/// Rule names are letters, digits and `-` in llama.cpp; its README also allows `_`.
fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_'
}

type Sequence = Vec<Item>;
type Alternatives = Vec<Sequence>;

#[derive(Clone, Debug, PartialEq)]
enum Item {
    /// These characters in order; empty matches the empty string.
    Literal(String),
    /// One character in one of these inclusive ranges or, negated, in none of them.
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
    /// Any one character, newlines included.
    Any,
    /// A rule, by index.
    Ref(usize),
    /// Parenthesized alternatives.
    Group(Alternatives),
    /// The item `min` to `max` times.
    Repeat {
        item: Box<Item>,
        min: u32,
        /// None: unbounded.
        max: Option<u32>,
    },
}

struct Rule<'a> {
    name: &'a str,
    /// Byte offset of its first mention, reference or definition.
    first_seen: usize,
    /// Where it is defined, and its body; None while it is only referred to.
    body: Option<(usize, Alternatives)>,
}

struct Parser<'a> {
    src: &'a str,
    pos: usize,
    /// Byte offset where each line starts.
    line_starts: Vec<usize>,
    rules: Vec<Rule<'a>>,
    by_name: HashMap<&'a str, usize>,
    /// Groups open around the current position.
    depth: usize,
}

impl<'a> Parser<'a> {
    fn new(src: &'a str) -> Self {
        let line_starts = std::iter::once(0)
            .chain(src.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        Self {
            src,
            pos: 0,
            line_starts,
            rules: Vec::new(),
            by_name: HashMap::new(),
            depth: 0,
        }
    }

    fn grammar(mut self) -> Result<Grammar, String> {
        self.skip_space(true);
        while self.pos < self.src.len() {
            self.rule()?;
        }
        // Rules are numbered by first mention, so this names the undefined one mentioned first.
        if let Some(rule) = self.rules.iter().find(|r| r.body.is_none()) {
            return Err(self.error(
                rule.first_seen,
                format!("rule `{}` is used but never defined", rule.name),
            ));
        }
        let root = *self
            .by_name
            .get("root")
            .ok_or("no rule named `root`, where a GBNF grammar starts")?;
        Ok(Grammar {
            root,
            rules: self
                .rules
                .into_iter()
                .map(|r| (r.name.to_owned(), r.body.expect("checked above").1))
                .collect(),
        })
    }

    /// `name ::= alternatives`, ending at a line break (or the end of the grammar).
    fn rule(&mut self) -> Result<(), String> {
        let start = self.pos;
        let Some(name) = self.name() else {
            let hint = if self.peek() == Some('|') {
                " (a rule goes on to the next line only after `::=` or `|`, or inside parentheses: \
                 end the previous line with `|` instead)"
            } else {
                ""
            };
            return Err(self.error(
                start,
                format!("expected a rule name, found {}{hint}", self.found()),
            ));
        };
        // Numbered before its body, so rules are numbered in the order the text mentions them.
        let index = self.rule_index(name, start);
        self.skip_space(false);
        if !self.rest().starts_with("::=") {
            return Err(self.error(
                self.pos,
                format!(
                    "expected `::=` after the rule name `{name}`, found {}",
                    self.found()
                ),
            ));
        }
        self.pos += 3;
        self.skip_space(true);
        let body = self.alternatives(false)?;
        match self.peek() {
            None => {}
            Some('\n') => self.pos += 1,
            Some('\r') => {
                self.pos += 1;
                if self.peek() == Some('\n') {
                    self.pos += 1;
                }
            }
            Some(_) => return Err(self.unexpected()),
        }
        self.skip_space(true);
        if let Some((first, _)) = &self.rules[index].body {
            return Err(self.error(
                start,
                format!(
                    "rule `{name}` is defined twice (first on line {})",
                    self.line(*first)
                ),
            ));
        }
        self.rules[index].body = Some((start, body));
        Ok(())
    }

    fn alternatives(&mut self, nested: bool) -> Result<Alternatives, String> {
        let mut alternatives = vec![self.sequence(nested)?];
        while self.peek() == Some('|') {
            self.pos += 1;
            self.skip_space(true);
            alternatives.push(self.sequence(nested)?);
        }
        Ok(alternatives)
    }

    /// Items up to what cannot start or repeat one: `|`, `)`, the end of the line outside
    /// parentheses, or something the caller finds wrong.
    fn sequence(&mut self, nested: bool) -> Result<Sequence, String> {
        let mut sequence = Vec::new();
        while let Some(c) = self.peek() {
            let start = self.pos;
            match c {
                '"' => {
                    self.pos += 1;
                    let text = self.literal(start)?;
                    sequence.push(Item::Literal(text));
                }
                '[' => {
                    self.pos += 1;
                    let class = self.class(start)?;
                    sequence.push(class);
                }
                '.' => {
                    self.pos += 1;
                    sequence.push(Item::Any);
                }
                '(' => {
                    self.pos += 1;
                    self.enter(start)?;
                    self.skip_space(true);
                    let alternatives = self.alternatives(true)?;
                    self.depth -= 1;
                    if self.peek() != Some(')') {
                        let what = if self.peek().is_none() {
                            "`(` is never closed".to_string()
                        } else {
                            format!(
                                "`(` is not closed: expected `)` on line {}, found {}",
                                self.line(self.pos),
                                self.found()
                            )
                        };
                        return Err(self.error(start, what));
                    }
                    self.pos += 1;
                    sequence.push(Item::Group(alternatives));
                }
                '*' | '+' | '?' => {
                    self.pos += 1;
                    let (min, max) = match c {
                        '*' => (0, None),
                        '+' => (1, None),
                        _ => (0, Some(1)),
                    };
                    self.repeat(&mut sequence, start, min, max)?;
                }
                '{' => {
                    self.pos += 1;
                    let (min, max) = self.counts(start, nested)?;
                    self.repeat(&mut sequence, start, min, max)?;
                }
                '<' | '!' => {
                    return Err(self.error(
                        start,
                        "token references (`<[id]>`, `<token>`, `!<...>`) are not supported: \
                         the grammar can only describe text",
                    ))
                }
                c if is_name_char(c) => {
                    let name = self.name().expect("starts with a name character");
                    let index = self.rule_index(name, start);
                    sequence.push(Item::Ref(index));
                }
                _ => break,
            }
            self.skip_space(nested);
        }
        Ok(sequence)
    }

    /// The rest of `"..."` after the opening quote.
    fn literal(&mut self, start: usize) -> Result<String, String> {
        let mut text = String::new();
        loop {
            match self.peek() {
                None => {
                    return Err(self.error(
                        start,
                        "the literal that starts here is never closed (no closing `\"`)",
                    ))
                }
                Some('"') => {
                    self.pos += 1;
                    return Ok(text);
                }
                Some(_) => text.push(self.char()?),
            }
        }
    }

    /// The rest of `[...]` or `[^...]` after the `[`.
    fn class(&mut self, start: usize) -> Result<Item, String> {
        let negated = self.peek() == Some('^');
        if negated {
            self.pos += 1;
        }
        let mut ranges = Vec::new();
        loop {
            match self.peek() {
                None => {
                    return Err(self.error(
                        start,
                        "the character class that starts here is never closed (no closing `]`)",
                    ))
                }
                Some(']') => {
                    self.pos += 1;
                    break;
                }
                Some(_) => {}
            }
            let from = self.pos;
            let lo = self.char()?;
            let mut hi = lo;
            // As in llama.cpp, `-` before `]` is itself a member.
            if self.peek() == Some('-') && !matches!(self.peek_second(), None | Some(']')) {
                self.pos += 1;
                hi = self.char()?;
                if hi < lo {
                    return Err(self.error(
                        from,
                        format!(
                            "the range `{}-{}` in a character class is backwards",
                            shown(lo),
                            shown(hi)
                        ),
                    ));
                }
            }
            ranges.push((lo, hi));
        }
        if ranges.is_empty() {
            let what = if negated {
                "`[^]` is an empty character class (`.` is any character)"
            } else {
                "`[]` is an empty character class"
            };
            return Err(self.error(start, what));
        }
        Ok(Item::Class { negated, ranges })
    }

    /// One character of a literal or a class, escapes read.
    fn char(&mut self) -> Result<char, String> {
        let start = self.pos;
        let c = self.bump().expect("the caller saw a character");
        if c != '\\' {
            return Ok(c);
        }
        let Some(e) = self.bump() else {
            return Err(self.error(start, "the grammar ends inside an escape (`\\`)"));
        };
        let digits = match e {
            'n' => return Ok('\n'),
            'r' => return Ok('\r'),
            't' => return Ok('\t'),
            '\\' | '"' | '[' | ']' | '-' => return Ok(e),
            'x' => 2,
            'u' => 4,
            'U' => 8,
            _ => {
                return Err(self.error(
                    start,
                    format!(
                        "unknown escape `\\{}` (GBNF has \\n \\r \\t \\\\ \\\" \\[ \\] \\- \\xHH \
                         \\uHHHH \\UHHHHHHHH)",
                        shown(e)
                    ),
                ))
            }
        };
        let hex: String = self
            .rest()
            .chars()
            .take(digits)
            .take_while(char::is_ascii_hexdigit)
            .collect();
        if hex.len() != digits {
            return Err(self.error(
                start,
                format!("the escape `\\{e}` needs {digits} hex digits"),
            ));
        }
        self.pos += digits;
        let value = u32::from_str_radix(&hex, 16).expect("hex digits");
        char::from_u32(value)
            .ok_or_else(|| self.error(start, format!("`\\{e}{hex}` is not a Unicode character")))
    }

    /// The rest of `{m}`, `{m,}` or `{m,n}` after the `{`.
    fn counts(&mut self, start: usize, nested: bool) -> Result<(u32, Option<u32>), String> {
        self.skip_space(nested);
        let min = self.count()?;
        self.skip_space(nested);
        let max = match self.peek() {
            Some('}') => Some(min),
            Some(',') => {
                self.pos += 1;
                self.skip_space(nested);
                let max = if self.peek().is_some_and(|c| c.is_ascii_digit()) {
                    Some(self.count()?)
                } else {
                    None
                };
                self.skip_space(nested);
                if self.peek() != Some('}') {
                    return Err(self.error(
                        self.pos,
                        format!(
                            "expected `}}` to close the repetition, found {}",
                            self.found()
                        ),
                    ));
                }
                max
            }
            _ => {
                return Err(self.error(
                    self.pos,
                    format!(
                        "expected `,` or `}}` in the repetition, found {}",
                        self.found()
                    ),
                ))
            }
        };
        self.pos += 1;
        if let Some(max) = max {
            if max < min {
                return Err(self.error(
                    start,
                    format!(
                        "the repetition `{}` allows at most {max}, fewer than its least, {min}",
                        &self.src[start..self.pos]
                    ),
                ));
            }
        }
        Ok((min, max))
    }

    fn count(&mut self) -> Result<u32, String> {
        let rest = self.rest();
        let len = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if len == 0 {
            return Err(self.error(
                self.pos,
                format!(
                    "expected a number in the repetition, found {}",
                    self.found()
                ),
            ));
        }
        let digits = &rest[..len];
        let n = digits
            .parse::<u32>()
            .ok()
            .filter(|&n| n <= MAX_COUNT)
            .ok_or_else(|| {
                self.error(
                    self.pos,
                    format!("the repetition count {digits} is too large (at most {MAX_COUNT})"),
                )
            })?;
        self.pos += len;
        Ok(n)
    }

    /// Applies a repetition operator (which starts at `start`) to the item before it.
    fn repeat(
        &mut self,
        sequence: &mut Sequence,
        start: usize,
        min: u32,
        max: Option<u32>,
    ) -> Result<(), String> {
        let op = &self.src[start..self.pos];
        let Some(item) = sequence.pop() else {
            return Err(self.error(start, format!("`{op}` has nothing before it to repeat")));
        };
        if self.depth + item_depth(&item) + 1 > MAX_DEPTH {
            return Err(self.too_deep(start));
        }
        sequence.push(Item::Repeat {
            item: Box::new(item),
            min,
            max,
        });
        Ok(())
    }

    /// Into a group, which `start` opens.
    fn enter(&mut self, start: usize) -> Result<(), String> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.too_deep(start));
        }
        Ok(())
    }

    fn too_deep(&self, at: usize) -> String {
        self.error(
            at,
            format!("groups and repetitions nest more than {MAX_DEPTH} deep"),
        )
    }

    fn rule_index(&mut self, name: &'a str, at: usize) -> usize {
        let rules = &mut self.rules;
        *self.by_name.entry(name).or_insert_with(|| {
            rules.push(Rule {
                name,
                first_seen: at,
                body: None,
            });
            rules.len() - 1
        })
    }

    fn name(&mut self) -> Option<&'a str> {
        let src: &'a str = self.src;
        let rest = &src[self.pos..];
        let len = rest.find(|c: char| !is_name_char(c)).unwrap_or(rest.len());
        (len > 0).then(|| {
            self.pos += len;
            &rest[..len]
        })
    }

    /// Spaces, tabs and `#` comments; line breaks too where a rule may go on past them.
    fn skip_space(&mut self, newlines: bool) {
        while let Some(c) = self.peek() {
            match c {
                ' ' | '\t' => self.pos += 1,
                '\r' | '\n' if newlines => self.pos += 1,
                '#' => self.pos += self.rest().find(['\r', '\n']).unwrap_or(self.rest().len()),
                _ => break,
            }
        }
    }

    /// What stops a rule where it cannot stop.
    fn unexpected(&self) -> String {
        let what = if self.rest().starts_with("::=") {
            "unexpected `::=`: the rule before it goes on past the end of its line (a line \
             break ends a rule only outside parentheses, and not right after `::=` or `|`)"
                .to_string()
        } else if self.peek() == Some(')') {
            "`)` without a `(` before it".to_string()
        } else if self.peek() == Some('\'') {
            "unexpected `'`: GBNF literals are in double quotes".to_string()
        } else {
            format!("unexpected {}", self.found())
        };
        self.error(self.pos, what)
    }

    /// The text at the current position, for an error.
    fn found(&self) -> String {
        match self.peek() {
            None => "the end of the grammar".into(),
            Some('\r' | '\n') => "the end of the line".into(),
            Some(_) if self.rest().starts_with("::=") => "`::=`".into(),
            Some(c) => format!("`{}`", shown(c)),
        }
    }

    fn error(&self, pos: usize, what: impl std::fmt::Display) -> String {
        format!("line {}: {what}", self.line(pos))
    }

    fn line(&self, pos: usize) -> usize {
        self.line_starts.partition_point(|&start| start <= pos)
    }

    fn rest(&self) -> &'a str {
        &self.src[self.pos..]
    }

    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    fn peek_second(&self) -> Option<char> {
        self.rest().chars().nth(1)
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }
}

/// `c` as an error message shows it: itself, unless it is a control character.
fn shown(c: char) -> String {
    if c.is_control() {
        c.escape_debug().to_string()
    } else {
        c.to_string()
    }
}

/// How deep groups and repetitions nest in `item`, itself included. Every item is checked as
/// it is made (its depth and the groups around it within [`MAX_DEPTH`]), so this recursion,
/// and every other over the items, is bounded.
fn item_depth(item: &Item) -> usize {
    match item {
        Item::Repeat { item, .. } => 1 + item_depth(item),
        Item::Group(alternatives) => {
            1 + alternatives
                .iter()
                .flatten()
                .map(item_depth)
                .max()
                .unwrap_or(0)
        }
        _ => 0,
    }
}

/// A parsed grammar: every rule defined, `root` among them.
struct Grammar {
    rules: Vec<(String, Alternatives)>,
    root: usize,
}

impl Grammar {
    fn to_lark(&self) -> String {
        let mut writer = LarkWriter {
            names: self
                .rules
                .iter()
                .enumerate()
                .map(|(i, (name, _))| format!("r{i}_{}", name.to_ascii_lowercase()))
                .collect(),
            whole: self.whole_literals(),
            extra: Vec::new(),
        };
        let mut out = format!("start: {}\n", writer.names[self.root]);
        for (i, (_, body)) in self.rules.iter().enumerate() {
            let mut line = format!("{}: ", writer.names[i]);
            writer.alternatives(body, 0, &mut line);
            out.push_str(&line);
            out.push('\n');
        }
        for (i, body) in writer.extra.iter().enumerate() {
            let _ = writeln!(out, "g{i}: {body}");
        }
        out
    }

    /// The literals of two or more characters that can be one lexeme: those no terminal of the
    /// grammar matches a proper prefix of (see the module's documentation). The others are
    /// written a character per lexeme, which makes their characters terminals in turn.
    fn whole_literals(&self) -> HashSet<String> {
        let mut terminals = Terminals::default();
        for (_, body) in &self.rules {
            terminals.add_alternatives(body);
        }
        let Terminals {
            literals,
            mut single,
            classes,
            any,
        } = terminals;
        if any {
            return HashSet::new();
        }
        let mut whole: HashSet<&str> = literals.iter().map(String::as_str).collect();
        let classes = CharSet::union(classes);
        let mut by_first: HashMap<char, Vec<&str>> = HashMap::new();
        for &lit in &whole {
            let first = lit.chars().next().expect("two or more characters");
            by_first.entry(first).or_default().push(lit);
        }
        // A literal with another literal as a proper prefix: in sorted order its prefixes come
        // before it, and the ones still on the stack are exactly the prefixes of the last one.
        let mut sorted: Vec<&str> = whole.iter().copied().collect();
        sorted.sort_unstable();
        let mut stack: Vec<&str> = Vec::new();
        let mut split: Vec<&str> = Vec::new();
        for lit in sorted {
            while stack.last().is_some_and(|p| !lit.starts_with(p)) {
                stack.pop();
            }
            if !stack.is_empty() {
                split.push(lit);
            }
            stack.push(lit);
        }
        for (&first, lits) in &by_first {
            if single.contains(&first) || classes.contains(first) {
                split.extend(lits);
            }
        }
        while let Some(lit) = split.pop() {
            if !whole.remove(lit) {
                continue;
            }
            for c in lit.chars() {
                if single.insert(c) {
                    split.extend(by_first.get(&c).into_iter().flatten());
                }
            }
        }
        whole.into_iter().map(str::to_owned).collect()
    }
}

/// Every terminal of a grammar, as the lexer would see them.
#[derive(Default)]
struct Terminals {
    /// Literals of two or more characters.
    literals: HashSet<String>,
    /// Characters matched by one-character literals.
    single: HashSet<char>,
    classes: Vec<CharSet>,
    /// Whether `.` is used.
    any: bool,
}

impl Terminals {
    fn add_alternatives(&mut self, alternatives: &Alternatives) {
        for item in alternatives.iter().flatten() {
            self.add(item);
        }
    }

    fn add(&mut self, item: &Item) {
        match item {
            Item::Literal(text) => {
                let mut chars = text.chars();
                match (chars.next(), chars.next()) {
                    (None, _) => {}
                    (Some(c), None) => {
                        self.single.insert(c);
                    }
                    _ => {
                        self.literals.insert(text.clone());
                    }
                }
            }
            Item::Class { negated, ranges } => {
                self.classes.push(CharSet::new(*negated, ranges));
            }
            Item::Any => self.any = true,
            Item::Ref(_) => {}
            Item::Group(alternatives) => self.add_alternatives(alternatives),
            Item::Repeat { item, .. } => self.add(item),
        }
    }
}

/// A set of characters as sorted, disjoint, non-adjacent inclusive ranges of code points.
struct CharSet(Vec<(u32, u32)>);

impl CharSet {
    fn new(negated: bool, ranges: &[(char, char)]) -> Self {
        let merged = merge(
            ranges
                .iter()
                .map(|&(lo, hi)| (lo as u32, hi as u32))
                .collect(),
        );
        if !negated {
            return Self(merged);
        }
        let mut complement = Vec::with_capacity(merged.len() + 1);
        let mut next = 0;
        for (lo, hi) in merged {
            if lo > next {
                complement.push((next, lo - 1));
            }
            next = hi + 1;
        }
        if next <= char::MAX as u32 {
            complement.push((next, char::MAX as u32));
        }
        Self(complement)
    }

    fn union(sets: Vec<CharSet>) -> Self {
        Self(merge(sets.into_iter().flat_map(|s| s.0).collect()))
    }

    fn contains(&self, c: char) -> bool {
        let c = c as u32;
        let i = self.0.partition_point(|&(_, hi)| hi < c);
        self.0.get(i).is_some_and(|&(lo, _)| lo <= c)
    }
}

/// `ranges` sorted, overlapping and adjacent ones made one.
fn merge(mut ranges: Vec<(u32, u32)>) -> Vec<(u32, u32)> {
    ranges.sort_unstable();
    let mut merged: Vec<(u32, u32)> = Vec::with_capacity(ranges.len());
    for (lo, hi) in ranges {
        match merged.last_mut() {
            Some(last) if lo <= last.1 + 1 => last.1 = last.1.max(hi),
            _ => merged.push((lo, hi)),
        }
    }
    merged
}

struct LarkWriter {
    /// Each GBNF rule's Lark name.
    names: Vec<String>,
    /// Literals written as one lexeme.
    whole: HashSet<String>,
    /// Bodies of the rules made of groups nested too deep for one Lark rule.
    extra: Vec<String>,
}

impl LarkWriter {
    fn alternatives(&mut self, alternatives: &Alternatives, depth: usize, out: &mut String) {
        for (i, sequence) in alternatives.iter().enumerate() {
            if i > 0 {
                out.push_str(" | ");
            }
            self.sequence(sequence, depth, out);
        }
    }

    fn sequence(&mut self, sequence: &Sequence, depth: usize, out: &mut String) {
        if sequence.is_empty() {
            out.push_str("\"\"");
        }
        for (i, item) in sequence.iter().enumerate() {
            if i > 0 {
                out.push(' ');
            }
            self.item(item, depth, out);
        }
    }

    /// Writes `item` as one Lark atom (an operator may follow it).
    fn item(&mut self, item: &Item, depth: usize, out: &mut String) {
        match item {
            Item::Literal(text) => {
                if text.chars().nth(1).is_none() || self.whole.contains(text) {
                    quote(text, out);
                } else {
                    out.push('(');
                    for (i, c) in text.chars().enumerate() {
                        if i > 0 {
                            out.push(' ');
                        }
                        quote(c.encode_utf8(&mut [0; 4]), out);
                    }
                    out.push(')');
                }
            }
            Item::Class { negated, ranges } => {
                out.push_str(if *negated { "/[^" } else { "/[" });
                for &(lo, hi) in ranges {
                    class_char(lo, out);
                    if hi != lo {
                        out.push('-');
                        class_char(hi, out);
                    }
                }
                out.push_str("]/");
            }
            // `.` in GBNF is any character; in a regex, newlines only with the `s` flag.
            Item::Any => out.push_str("/(?s:.)/"),
            Item::Ref(rule) => out.push_str(&self.names[*rule]),
            Item::Group(alternatives) => {
                self.parenthesized(depth, out, |w, depth, out| {
                    w.alternatives(alternatives, depth, out)
                });
            }
            Item::Repeat { item, min, max } => {
                // Lark refuses `x{0}` and an empty literal repeated is still empty.
                if *max == Some(0) || matches!(&**item, Item::Literal(text) if text.is_empty()) {
                    out.push_str("\"\"");
                    return;
                }
                if matches!(**item, Item::Repeat { .. }) {
                    // Lark takes one operator per atom.
                    self.parenthesized(depth, out, |w, depth, out| w.item(item, depth, out));
                } else {
                    self.item(item, depth, out);
                }
                match (min, max) {
                    (0, None) => out.push('*'),
                    (1, None) => out.push('+'),
                    (0, Some(1)) => out.push('?'),
                    (m, None) => {
                        let _ = write!(out, "{{{m},}}");
                    }
                    (m, Some(n)) if m == n => {
                        let _ = write!(out, "{{{m}}}");
                    }
                    (m, Some(n)) => {
                        let _ = write!(out, "{{{m},{n}}}");
                    }
                }
            }
        }
    }

    /// `( inner )`, or a reference to a new rule holding `inner` where Lark would find the
    /// parentheses nested too deep.
    fn parenthesized(
        &mut self,
        depth: usize,
        out: &mut String,
        inner: impl FnOnce(&mut Self, usize, &mut String),
    ) {
        if depth < MAX_LARK_DEPTH {
            out.push('(');
            inner(self, depth + 1, out);
            out.push(')');
        } else {
            let index = self.extra.len();
            self.extra.push(String::new());
            let mut body = String::new();
            inner(self, 0, &mut body);
            self.extra[index] = body;
            let _ = write!(out, "g{index}");
        }
    }
}

/// `text` as a Lark string literal, which is a JSON string.
fn quote(text: &str, out: &mut String) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c < ' ' || c == '\u{7f}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// `c` inside a regex character class within Lark's `/.../`: as itself where that cannot
/// mean anything else, else as `\x{...}` (never a bare `/`, which would end the regex).
fn class_char(c: char, out: &mut String) {
    if c.is_alphanumeric() || " !\"#$%'(),.:;<=>?@_`{|}*+".contains(c) {
        out.push(c);
    } else {
        let _ = write!(out, "\\x{{{:x}}}", c as u32);
    }
}

#[cfg(test)]
pub(crate) mod tests;
