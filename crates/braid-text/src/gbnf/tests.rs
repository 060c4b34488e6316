use super::*;
use crate::constraint::{Constraint, Grammars, TokenConstraint};
use std::collections::BTreeSet;

fn lark(src: &str) -> String {
    to_lark(src).unwrap_or_else(|e| panic!("{src:?}: {e}"))
}

fn error(src: &str) -> String {
    match to_lark(src) {
        Ok(lark) => panic!("{src:?} was accepted as {lark:?}"),
        Err(e) => e,
    }
}

/// The Lark of a one-rule grammar: its `root` rule's body.
fn root_body(src: &str) -> String {
    let out = lark(src);
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("start: r0_root"), "{out}");
    let body = lines.next().unwrap().strip_prefix("r0_root: ").unwrap();
    assert_eq!(lines.next(), None, "{out}");
    body.to_string()
}

#[test]
fn rules_are_renamed_apart_and_start_at_root() {
    assert_eq!(
        lark(
            "main ::= \"m\"\nroot ::= main my-rule Upper_case x X\nmy-rule ::= \"a\"\n\
              Upper_case ::= \"b\"\nx ::= \"1\"\nX ::= \"2\"\n"
        ),
        "start: r1_root\n\
         r0_main: \"m\"\n\
         r1_root: r0_main r2_my-rule r3_upper_case r4_x r5_x\n\
         r2_my-rule: \"a\"\n\
         r3_upper_case: \"b\"\n\
         r4_x: \"1\"\n\
         r5_x: \"2\"\n"
    );
}

#[test]
fn literals_are_unescaped_and_written_again_as_lark_strings() {
    assert_eq!(root_body(r#"root ::= "yes" | "no""#), r#""yes" | "no""#);
    assert_eq!(
        root_body(r#"root ::= "a\"b\\c\n\t\r\x41\u00e9\U0001F600\[\]\-\x01\x7F/#é""#),
        r#""a\"b\\c\n\t\rAé😀[]-\u0001\u007f/#é""#
    );
    assert_eq!(root_body(r#"root ::= "" "x""#), r#""" "x""#);
}

#[test]
fn classes_and_any_character_become_regexes() {
    assert_eq!(
        root_body(r#"root ::= [a-z0-9_] [^"\\\n] [/] [\x00-\x1F] [-a] [a-] [\]\[^] [ぁ-ゟ] [😀]"#),
        r#"/[a-z0-9_]/ /[^"\x{5c}\x{a}]/ /[\x{2f}]/ /[\x{0}-\x{1f}]/ /[\x{2d}a]/ /[a\x{2d}]/ /[\x{5d}\x{5b}\x{5e}]/ /[ぁ-ゟ]/ /[\x{1f600}]/"#
    );
    assert_eq!(root_body("root ::= . .*"), "/(?s:.)/ /(?s:.)/*");
}

#[test]
fn groups_alternatives_and_repetitions_keep_their_shape() {
    assert_eq!(
        root_body(
            r#"root ::= "a"* "b"+ "c"? "d"{3} "e"{2,} "f"{2,5} "g"{0} "h"{0,} "i"{1,} "j"{0,1} "k"{ 1 , 2 } "l"{0,0}"#
        ),
        r#""a"* "b"+ "c"? "d"{3} "e"{2,} "f"{2,5} "" "h"* "i"+ "j"? "k"{1,2} """#
    );
    // An operator on an operator applies to the repeated item, as in llama.cpp.
    assert_eq!(
        lark("root ::= (\"k\" | \"l\" \"m\")*? x{2}+\nx ::= \"x\""),
        "start: r0_root\nr0_root: ((\"k\" | \"l\" \"m\")*)? (r1_x{2})+\nr1_x: \"x\"\n"
    );
}

#[test]
fn a_rule_goes_on_past_a_line_break_where_llama_cpp_s_does() {
    // After `::=`, after `|` and inside parentheses; comments anywhere a space may be.
    let src = "# a comment\nroot ::=\n  \"a\" |  # trailing\n  \"b\" (\n \"c\" # in a group\n | \"d\" )\n\n\
               other ::= | \"x\" () # empty alternatives\r\n";
    assert_eq!(
        lark(src),
        "start: r0_root\nr0_root: \"a\" | \"b\" (\"c\" | \"d\")\nr1_other: \"\" | \"x\" (\"\")\n"
    );
    // Not before a `|` that starts a line, as in llama.cpp.
    let e = error("root ::= \"a\"\n  | \"b\"\n");
    assert!(
        e.starts_with("line 2: expected a rule name, found `|`"),
        "{e}"
    );
    // Nor after a symbol outside parentheses.
    let e = error("root ::= \"a\"\n  \"b\"\n");
    assert!(
        e.starts_with("line 2: expected a rule name, found `\"`"),
        "{e}"
    );
}

#[test]
fn groups_nested_deeper_than_lark_reads_become_rules() {
    let src = format!("root ::= {}\"a\"{}", "(".repeat(25), ")".repeat(25));
    let out = lark(&src);
    assert!(out.contains("\ng0: "), "{out}");
    for line in out.lines() {
        let depth = line
            .chars()
            .scan(0i32, |d, c| {
                *d += (c == '(') as i32 - (c == ')') as i32;
                Some(*d)
            })
            .max()
            .unwrap_or(0);
        assert!(depth <= MAX_LARK_DEPTH as i32, "{line}");
    }
}

#[test]
fn a_literal_that_another_terminal_could_end_inside_is_split_into_characters() {
    // "a" is a prefix of "ab": as one lexeme, "ab" would swallow the `b` that follows "a".
    assert_eq!(
        lark("root ::= x \"b\"\nx ::= \"a\" | \"ab\""),
        "start: r0_root\nr0_root: r1_x \"b\"\nr1_x: \"a\" | (\"a\" \"b\")\n"
    );
    // Splitting "abc" makes "a" a terminal, a prefix of "ab"; "xyz" stays whole.
    assert_eq!(
        root_body(r#"root ::= "ab" | "abc" | "xyz""#),
        r#"("a" "b") | ("a" "b" "c") | "xyz""#
    );
    // A class matching a literal's first character.
    assert_eq!(
        root_body(r#"root ::= [a-c]+ "cat" | "dog""#),
        r#"/[a-c]/+ ("c" "a" "t") | "dog""#
    );
    // `[^x]` matches the `y` of "yes" but not the `x` of "xyz".
    assert_eq!(
        root_body(r#"root ::= [^x]+ "yes" | "xyz""#),
        r#"/[^x]/+ ("y" "e" "s") | "xyz""#
    );
    // `.` matches every first character.
    assert_eq!(
        root_body(r#"root ::= . "dog""#),
        r#"/(?s:.)/ ("d" "o" "g")"#
    );
}

#[test]
fn detection_takes_rules_defined_with_the_gbnf_operator() {
    for gbnf in [
        "root ::= \"a\"",
        "# c\n  root::=\"a\"",
        "\troot-1 ::= x\nx ::= \"b\"",
    ] {
        assert!(
            matches!(Constraint::grammar(gbnf), Constraint::Gbnf(_)),
            "{gbnf}"
        );
    }
    for lark in ["start: \"a ::= b\"", "start: a\na: \"x\"", "start: /a::=b/"] {
        assert!(
            matches!(Constraint::grammar(lark), Constraint::Lark(_)),
            "{lark}"
        );
    }
}

#[test]
fn each_error_names_the_problem_and_its_line() {
    let cases: &[(&str, &str)] = &[
        (
            "root ::= \"a\"\nx ::= foo",
            "line 2: rule `foo` is used but never defined",
        ),
        (
            "root ::= foo bar\nbar ::= \"b\"",
            "line 1: rule `foo` is used but never defined",
        ),
        ("main ::= \"a\"", "no rule named `root`"),
        ("", "no rule named `root`"),
        (
            "root ::= \"a\"\nx ::= \"abc\n",
            "line 2: the literal that starts here is never closed",
        ),
        (
            "root ::= [a-z",
            "line 1: the character class that starts here is never closed",
        ),
        (
            "root ::= \"a\"{3,2}",
            "line 1: the repetition `{3,2}` allows at most 2, fewer than its least, 3",
        ),
        (
            "root ::= \"a\"{x}",
            "line 1: expected a number in the repetition, found `x`",
        ),
        (
            "root ::= \"a\"{,2}",
            "line 1: expected a number in the repetition, found `,`",
        ),
        (
            "root ::= \"a\"{2",
            "line 1: expected `,` or `}` in the repetition, found the end of the grammar",
        ),
        (
            "root ::= \"a\"{2,3\n",
            "line 1: expected `}` to close the repetition, found the end of the line",
        ),
        (
            "root ::= \"a\"{99999999999}",
            "line 1: the repetition count 99999999999 is too large",
        ),
        (
            "root ::= *\"a\"",
            "line 1: `*` has nothing before it to repeat",
        ),
        (
            "root ::= (+ \"a\")",
            "line 1: `+` has nothing before it to repeat",
        ),
        (
            "root ::=\n\"a\" | {2}",
            "line 2: `{2}` has nothing before it to repeat",
        ),
        ("root ::= \"\\q\"", "line 1: unknown escape `\\q`"),
        (
            "root ::= \"\\x4\"",
            "line 1: the escape `\\x` needs 2 hex digits",
        ),
        (
            "root ::= [\\u12]",
            "line 1: the escape `\\u` needs 4 hex digits",
        ),
        (
            "root ::= \"\\uD800\"",
            "line 1: `\\uD800` is not a Unicode character",
        ),
        (
            "root ::= \"\\U00110000\"",
            "line 1: `\\U00110000` is not a Unicode character",
        ),
        ("root ::= []", "line 1: `[]` is an empty character class"),
        ("root ::= [^]", "line 1: `[^]` is an empty character class"),
        (
            "root ::=\n [z-a]",
            "line 2: the range `z-a` in a character class is backwards",
        ),
        ("root ::= <|im_end|>", "line 1: token references"),
        ("root ::= <[1234]>", "line 1: token references"),
        ("root ::= !<[5]>", "line 1: token references"),
        (
            "root ::= \"a\"\nroot ::= \"b\"",
            "line 2: rule `root` is defined twice (first on line 1)",
        ),
        ("root ::= (\"a\"", "line 1: `(` is never closed"),
        (
            "root ::= (\"a\"\nfoo ::= \"b\"",
            "line 1: `(` is not closed: expected `)` on line 2, found `::=`",
        ),
        ("root ::= \"a\")", "line 1: `)` without a `(` before it"),
        (
            "root ::= 'a'",
            "line 1: unexpected `'`: GBNF literals are in double quotes",
        ),
        (
            "root = \"a\"",
            "line 1: expected `::=` after the rule name `root`, found `=`",
        ),
        (
            "root ::=\nnext ::= \"a\"",
            "line 2: unexpected `::=`: the rule before it goes on",
        ),
        ("root ::= \"a\" ; \"b\"", "line 1: unexpected `;`"),
    ];
    for (src, want) in cases {
        let e = error(src);
        assert!(e.starts_with(want), "{src:?}: got {e:?}, want {want:?}");
    }
    let deep = format!("root ::= {}\"a\"{}", "(".repeat(300), ")".repeat(300));
    assert!(error(&deep).contains("nest more than 200 deep"));
    let stars = format!("root ::= \"a\"{}", "*".repeat(300));
    assert!(error(&stars).contains("nest more than 200 deep"));
}

/// Compiles GBNF over the tiny model's byte-level vocabulary and feeds text a byte at a
/// time, as a model that spells everything out would write it.
pub(crate) struct Checker {
    grammars: Grammars,
    byte_ids: Vec<u32>,
    eos: u32,
    vocab: usize,
}

impl Checker {
    pub(crate) fn new() -> Self {
        let tok = crate::tiny_vocab::tokenizer();
        let byte_ids = (0..=255u8)
            .map(|b| {
                (0..tok.vocab_size() as u32)
                    .find(|&id| !tok.is_special(id) && tok.token_bytes(id) == [b])
                    .unwrap()
            })
            .collect();
        Self {
            grammars: Grammars::new(&tok).unwrap(),
            byte_ids,
            eos: tok.eos_token_ids()[0],
            vocab: tok.vocab_size(),
        }
    }

    fn compile(&self, gbnf: &str) -> TokenConstraint {
        self.constraint(&Constraint::Gbnf(gbnf.into()))
    }

    pub(crate) fn constraint(&self, c: &Constraint) -> TokenConstraint {
        self.grammars
            .compile(c)
            .unwrap_or_else(|e| panic!("{c:?}: {e}"))
    }

    /// Whether the grammar allows each byte of `text` in turn and then the end.
    /// Takes `text` a byte at a time, unmasked.
    pub(crate) fn feed(&self, constraint: &mut TokenConstraint, text: &str) {
        for b in text.bytes() {
            constraint.consume(self.byte_ids[b as usize]);
        }
    }

    pub(crate) fn accepts(&self, constraint: &TokenConstraint, text: &str) -> bool {
        let mut c = constraint.clone();
        let mut logits = vec![0.0; self.vocab];
        for b in text.bytes() {
            let id = self.byte_ids[b as usize];
            logits.fill(0.0);
            c.mask_logits(&mut logits);
            if logits[id as usize] == f32::NEG_INFINITY {
                return false;
            }
            c.consume(id);
        }
        logits.fill(0.0);
        c.mask_logits(&mut logits);
        logits[self.eos as usize] != f32::NEG_INFINITY
    }
}

/// JSON in the style of llama.cpp's grammars/json.gbnf, written out here.
const JSON: &str = r#"# any JSON value, spaced freely
root ::= ws value ws

value ::= object | array | string | number | ( "true" | "false" | "null" )

object ::= "{" ws (
member ( ws "," ws member )* ws
  )? "}"
member ::= string ws ":" ws value

array ::= "[" ws ( value ( ws "," ws value )* ws )? "]"

string ::= "\"" (
[^"\\\x00-\x1F] |
"\\" ( ["\\/bfnrt] | "u" hex{4} )  # an escape
  )* "\""
hex ::= [0-9a-fA-F]

number ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?
ws ::= [ \t\n]*
"#;

#[test]
fn a_json_grammar_accepts_json_and_refuses_the_rest() {
    let checker = Checker::new();
    let json = checker.compile(JSON);
    for good in [
        r#"{"a": [1, -2.5e3, true, null], "b\n": "x\u00e9\"", "c": {}}"#,
        "  [ 0 , \"\" ,\n\t-0.0E+1 ]\n",
        "\"é 😀\"",
        "false",
    ] {
        assert!(checker.accepts(&json, good), "{good:?}");
    }
    for bad in [
        r#"{"a": 01}"#,
        r#"{"a" 1}"#,
        "[1, 2,]",
        "\"tab\there\"",
        r#""\x41""#,
        "{\"a\": tru}",
        "nul",
        "",
    ] {
        assert!(!checker.accepts(&json, bad), "{bad:?}");
    }
}

#[test]
fn any_character_and_negated_classes_take_newlines_and_everything_else() {
    let checker = Checker::new();
    let g = checker.compile("root ::= \"<\" [^>]* \">\" . .");
    for good in ["<a\nb>\n\t", "<>\u{0}é", "<\r\n😀>😀\n", "<a>>>"] {
        assert!(checker.accepts(&g, good), "{good:?}");
    }
    for bad in ["<a>b", "<a>bcd", "a>bc"] {
        assert!(!checker.accepts(&g, bad), "{bad:?}");
    }
}

#[test]
fn a_gbnf_error_says_the_grammar_was_read_as_gbnf() {
    let checker = Checker::new();
    let e = checker
        .grammars
        .compile(&Constraint::Gbnf("root ::= foo".into()))
        .unwrap_err();
    assert_eq!(
        e,
        "GBNF grammar: line 1: rule `foo` is used but never defined"
    );
    let e = checker
        .grammars
        .compile(&Constraint::Gbnf("root ::= root".into()))
        .unwrap_err();
    assert!(e.starts_with("GBNF grammar: "), "{e}");
    let huge = format!("root ::= \"a\"{}", " ".repeat(200_000));
    let e = checker
        .grammars
        .compile(&Constraint::Gbnf(huge))
        .unwrap_err();
    assert!(e.contains("at most 131072"), "{e}");
}

/// Whether `text` is in the language of `grammar`'s root, by the definition: sets of end
/// positions over characters, no lexer (the grammars here are not left-recursive).
fn gbnf_accepts(grammar: &Grammar, text: &str) -> bool {
    fn ends(g: &Grammar, item: &Item, text: &[char], start: usize) -> BTreeSet<usize> {
        let at = |pred: &dyn Fn(char) -> bool| -> BTreeSet<usize> {
            text.get(start)
                .filter(|&&c| pred(c))
                .map(|_| start + 1)
                .into_iter()
                .collect()
        };
        match item {
            Item::Literal(s) => {
                let s: Vec<char> = s.chars().collect();
                let hit = text.get(start..start + s.len()) == Some(&s[..]);
                hit.then_some(start + s.len()).into_iter().collect()
            }
            Item::Class { negated, ranges } => {
                at(&|c| ranges.iter().any(|&(lo, hi)| lo <= c && c <= hi) != *negated)
            }
            Item::Any => at(&|_| true),
            Item::Ref(rule) => alternatives(g, &g.rules[*rule].1, text, start),
            Item::Group(alts) => alternatives(g, alts, text, start),
            Item::Repeat { item, min, max } => {
                let mut out = BTreeSet::new();
                let mut frontier = BTreeSet::from([start]);
                if *min == 0 {
                    out.insert(start);
                }
                let limit = max.unwrap_or(u32::MAX).min(min + text.len() as u32 + 1);
                for k in 1..=limit {
                    frontier = frontier
                        .iter()
                        .flat_map(|&p| ends(g, item, text, p))
                        .collect();
                    if k >= *min {
                        out.extend(&frontier);
                    }
                    if frontier.is_empty() {
                        break;
                    }
                }
                out
            }
        }
    }
    fn alternatives(
        g: &Grammar,
        alts: &Alternatives,
        text: &[char],
        start: usize,
    ) -> BTreeSet<usize> {
        let mut out = BTreeSet::new();
        for seq in alts {
            let mut positions = BTreeSet::from([start]);
            for item in seq {
                positions = positions
                    .iter()
                    .flat_map(|&p| ends(g, item, text, p))
                    .collect();
            }
            out.extend(positions);
        }
        out
    }
    let text: Vec<char> = text.chars().collect();
    ends(grammar, &Item::Ref(grammar.root), &text, 0).contains(&text.len())
}

/// Every string over `alphabet` up to `len` characters.
fn strings(alphabet: &[char], len: usize) -> Vec<String> {
    let mut all = vec![String::new()];
    let mut last = vec![String::new()];
    for _ in 0..len {
        last = last
            .iter()
            .flat_map(|s| alphabet.iter().map(move |c| format!("{s}{c}")))
            .collect();
        all.extend(last.iter().cloned());
    }
    all
}

#[test]
fn the_translation_accepts_exactly_what_gbnf_does() {
    let checker = Checker::new();
    let grammars = [
        "root ::= x \"b\"\nx ::= \"a\" | \"ab\"",
        "root ::= \"ab\" | \"abc\" | \"ba\"",
        "root ::= [a-c]* \"ab\" .?",
        "root ::= ( \"a\" | \"aa\" )* \"b\"",
        "root ::= \"a\"{2,3} \"aa\"? \"b\"{0,1}",
        "root ::= ( \"ab\" | [ab] )+ \"ba\" | \"\" ",
        "root ::= [^a]* \"\\n\" x\nx ::= \"ca\" | \"c\" x | \"\"",
        "root ::= (\"a\"? \"b\"?)* \"c\"+?",
    ];
    for src in grammars {
        let grammar = Parser::new(src).grammar().unwrap();
        let constraint = checker.compile(src);
        let mut accepted = 0;
        for text in strings(&['a', 'b', 'c', '\n'], 5) {
            let want = gbnf_accepts(&grammar, &text);
            assert_eq!(
                checker.accepts(&constraint, &text),
                want,
                "{src:?} on {text:?}"
            );
            accepted += want as usize;
        }
        assert!(accepted > 0, "{src:?} accepts nothing here");
    }
}
