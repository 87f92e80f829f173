//! GBNF grammars: upstream's own test cases as facts (tests/test-grammar-parser.cpp,
//! test-grammar-integration.cpp, test-llama-grammar.cpp, grammars/*.gbnf of the pinned
//! llama.cpp), written here as expectations, plus lazy triggers, the sampler and hostile input.

use std::path::PathBuf;
use std::sync::Arc;

use llama::sampling::grammar::matcher::{self, Candidate};
use llama::sampling::grammar::parser::{Element, ElementType as T};
use llama::sampling::grammar::utf8::PartialUtf8;
use llama::sampling::grammar::{
    parse_grammar, Grammar, GrammarError, GrammarSampler, GrammarSpec, GrammarVocab, Triggers,
};
use llama::sampling::{Candidates, Sampler, TokenData};

// ---------------------------------------------------------------------------------------------
// Parser: symbol ids and rules (upstream test-grammar-parser.cpp), checked through the printed
// form, which shows every element (char sets keep their CHAR/CHAR_ALT/RNG structure).
// ---------------------------------------------------------------------------------------------

fn check_parse(text: &str, symbols: &[(&str, u32)], printed: &str) {
    let parsed = parse_grammar(text.as_bytes(), None)
        .unwrap_or_else(|e| panic!("grammar {text:?} should parse: {e}"));
    let got: Vec<(&str, u32)> = parsed
        .symbol_ids
        .iter()
        .map(|(k, &v)| (k.as_str(), v))
        .collect();
    assert_eq!(got, symbols, "symbols of {text:?}");
    assert_eq!(parsed.print().unwrap(), printed, "rules of {text:?}");
}

fn check_parse_fails(text: &str) {
    assert!(
        parse_grammar(text.as_bytes(), None).is_err(),
        "grammar {text:?} should not parse"
    );
}

#[test]
fn parser_repetition_limits() {
    check_parse_fails("\n        root ::= \"a\"{,}\"\n    ");
    check_parse_fails(
        "\n        root ::= (((((([^x]*){0,99}){0,99}){0,99}){0,99}){0,99}){0,99}\n    ",
    );
    check_parse_fails("\n        root ::= \"a\"{,10}\"\n    ");
    check_parse_fails("\n        root ::= \"a\"{5000}\n    ");
    check_parse_fails("\n        root ::= \"a\"{5000,}\n    ");
    check_parse_fails("\n        root ::= \"a\"{5000,6000}\n    ");
    // a maximum above the threshold means "no maximum"
    check_parse(
        "root ::= \"a\"{0,5000}",
        &[("root", 0), ("root_1", 1)],
        "root ::= root_1 \nroot_1 ::= [a] root_1 | \n",
    );
    check_parse(
        "root ::= \"a\"{3,5000}",
        &[("root", 0), ("root_1", 1)],
        "root ::= [a] [a] [a] root_1 \nroot_1 ::= [a] root_1 | \n",
    );
}

#[test]
fn parser_basics() {
    check_parse("\n root  ::= \"a\"\n", &[("root", 0)], "root ::= [a] \n");
    check_parse(
        "root  ::= \"a\" | [bdx-z] | [^1-3]",
        &[("root", 0)],
        "root ::= [a] | [bdx-z] | [^1-3] \n",
    );
    let parsed = parse_grammar(b"root  ::= \"a\" | [bdx-z] | [^1-3]", None).unwrap();
    let e = |kind, c: char| Element::new(kind, c as u32);
    assert_eq!(
        parsed.rules[0],
        vec![
            e(T::Char, 'a'),
            Element::new(T::Alt, 0),
            e(T::Char, 'b'),
            e(T::CharAlt, 'd'),
            e(T::CharAlt, 'x'),
            e(T::CharRngUpper, 'z'),
            Element::new(T::Alt, 0),
            e(T::CharNot, '1'),
            e(T::CharRngUpper, '3'),
            Element::new(T::End, 0),
        ]
    );
}

#[test]
fn parser_quantifiers() {
    check_parse(
        "root  ::= a+\na     ::= \"a\"",
        &[("a", 1), ("root", 0), ("root_2", 2)],
        "root ::= a root_2 \na ::= [a] \nroot_2 ::= a root_2 | \n",
    );
    check_parse(
        "root  ::= \"a\"+",
        &[("root", 0), ("root_1", 1)],
        "root ::= [a] root_1 \nroot_1 ::= [a] root_1 | \n",
    );
    check_parse(
        "root  ::= a?\na     ::= \"a\"",
        &[("a", 1), ("root", 0), ("root_2", 2)],
        "root ::= root_2 \na ::= [a] \nroot_2 ::= a | \n",
    );
    check_parse(
        "root  ::= \"a\"?",
        &[("root", 0), ("root_1", 1)],
        "root ::= root_1 \nroot_1 ::= [a] | \n",
    );
    check_parse(
        "root  ::= a*\na     ::= \"a\"",
        &[("a", 1), ("root", 0), ("root_2", 2)],
        "root ::= root_2 \na ::= [a] \nroot_2 ::= a root_2 | \n",
    );
    check_parse(
        "root  ::= \"a\"*",
        &[("root", 0), ("root_1", 1)],
        "root ::= root_1 \nroot_1 ::= [a] root_1 | \n",
    );
    check_parse("root  ::= \"a\"{2}", &[("root", 0)], "root ::= [a] [a] \n");
    check_parse(
        "root  ::= \"a\"{2,}",
        &[("root", 0), ("root_1", 1)],
        "root ::= [a] [a] root_1 \nroot_1 ::= [a] root_1 | \n",
    );
    check_parse(
        "root  ::= \"a\"{ 4}",
        &[("root", 0)],
        "root ::= [a] [a] [a] [a] \n",
    );
    check_parse(
        "root  ::= \"a\"{2,4}",
        &[("root", 0), ("root_1", 1), ("root_2", 2)],
        "root ::= [a] [a] root_2 \nroot_1 ::= [a] | \nroot_2 ::= [a] root_1 | \n",
    );
}

const ARITHMETIC_SMALL: &str = r#"
        root  ::= (expr "=" term "\n")+
        expr  ::= term ([-+*/] term)*
        term  ::= [0-9]+
    "#;

const ARITHMETIC: &str = r#"
        root  ::= (expr "=" ws term "\n")+
        expr  ::= term ([-+*/] term)*
        term  ::= ident | num | "(" ws expr ")" ws
        ident ::= [a-z] [a-z0-9_]* ws
        num   ::= [0-9]+ ws
        ws    ::= [ \t\n]*
    "#;

#[test]
fn parser_arithmetic() {
    check_parse(
        ARITHMETIC_SMALL,
        &[
            ("expr", 2),
            ("expr_5", 5),
            ("expr_6", 6),
            ("root", 0),
            ("root_1", 1),
            ("root_4", 4),
            ("term", 3),
            ("term_7", 7),
        ],
        "root ::= root_1 root_4 \n\
         root_1 ::= expr [=] term [<U+000A>] \n\
         expr ::= term expr_6 \n\
         term ::= [0-9] term_7 \n\
         root_4 ::= root_1 root_4 | \n\
         expr_5 ::= [-+*/] term \n\
         expr_6 ::= expr_5 expr_6 | \n\
         term_7 ::= [0-9] term_7 | \n",
    );
    check_parse(
        ARITHMETIC,
        &[
            ("expr", 2),
            ("expr_6", 6),
            ("expr_7", 7),
            ("ident", 8),
            ("ident_10", 10),
            ("num", 9),
            ("num_11", 11),
            ("root", 0),
            ("root_1", 1),
            ("root_5", 5),
            ("term", 4),
            ("ws", 3),
            ("ws_12", 12),
        ],
        "root ::= root_1 root_5 \n\
         root_1 ::= expr [=] ws term [<U+000A>] \n\
         expr ::= term expr_7 \n\
         ws ::= ws_12 \n\
         term ::= ident | num | [(] ws expr [)] ws \n\
         root_5 ::= root_1 root_5 | \n\
         expr_6 ::= [-+*/] term \n\
         expr_7 ::= expr_6 expr_7 | \n\
         ident ::= [a-z] ident_10 ws \n\
         num ::= [0-9] num_11 ws \n\
         ident_10 ::= [a-z0-9_] ident_10 | \n\
         num_11 ::= [0-9] num_11 | \n\
         ws_12 ::= [ <U+0009><U+000A>] ws_12 | \n",
    );
}

#[test]
fn parser_tokens() {
    check_parse(
        "root  ::= <[1000]> !<[1001]> <[1001]>",
        &[("root", 0)],
        "root ::= <[1000]> !<[1001]> <[1001]> \n",
    );
    let parsed = parse_grammar(b"root ::= <[1000]> !<[1001]>", None).unwrap();
    assert_eq!(parsed.rules[0][0], Element::new(T::Token, 1000));
    assert_eq!(parsed.rules[0][1], Element::new(T::TokenNot, 1001));
    // `<text>` needs a vocabulary; with one, a special token's text resolves to its id
    assert!(parse_grammar(b"root ::= <think>", None).is_err());
    let vocab = GrammarVocab::new(vec![], []).with_special(b"<think>", 7);
    let parsed = parse_grammar(b"root ::= <think> \"x\"", Some(&vocab)).unwrap();
    assert_eq!(parsed.rules[0][0], Element::new(T::Token, 7));
    assert!(parse_grammar(b"root ::= <nope>", Some(&vocab)).is_err());
    assert!(parse_grammar(b"root ::= <[4294967296]>", None).is_err());
    assert!(parse_grammar(b"root ::= <[12>", None).is_err());
}

#[test]
fn parser_syntax_and_errors() {
    // escapes, comments, CRLF line ends, `.`
    check_parse(
        "# c\r\nroot ::= \"\\x41\\u00e9\\t\\\\\" . [\\]\\-] # tail\r\n",
        &[("root", 0)],
        // upstream's printer leaves a char set open when `.` follows it (its switch lists
        // CHAR_ANY with the continuation elements), hence "[\\." for `"\\" .`
        "root ::= [A] [<U+00E9>] [<U+0009>] [\\.] []-] \n",
    );
    for bad in [
        "root ::= \"abc",                       // unterminated string
        "root ::= [abc",                        // unterminated class
        "root ::= [a-",                         // unterminated range
        "root ::= \"\\q\"",                     // unknown escape
        "root ::= \"\\x4\"",                    // short hex
        "root ::= (\"a\"",                      // unclosed group
        "root ::= \"a\")",                      // stray paren
        "root := \"a\"",                        // no ::=
        "root ::= *",                           // quantifier without item
        "root ::= \"a\"{2,1}",                  // max below min (upstream loops ~2^64 times)
        "root ::= \"a\"{99999999999999999999}", // overflow
        "root ::= foo",                         // undefined reference
        "::= \"a\"",                            // no name
    ] {
        check_parse_fails(bad);
    }
    // missing reference (upstream test_failure_missing_reference)
    check_parse_fails(
        "root ::= expr\n        expr ::= term (\"+\" term)*\n        term ::= numero\n        number ::= [0-9]+",
    );
    // missing root is not a parse error (upstream test_failure_missing_root)
    let parsed = parse_grammar(
        b"\n        rot ::= expr\n        expr ::= term (\"+\" term)*\n        term ::= number\n        number ::= [0-9]+",
        None,
    )
    .unwrap();
    assert!(!parsed.rules.is_empty());
    assert!(!parsed.symbol_ids.contains_key("root"));
}

// ---------------------------------------------------------------------------------------------
// Matching strings (upstream test-grammar-integration.cpp: `match_string` feeds one code point
// per step, or a token id whose piece is `<[id]>`)
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy)]
enum In<'a> {
    S(&'a str),
    Tok(i32),
}

fn build(text: &str) -> Grammar {
    Grammar::new(None, text.as_bytes(), "root", Triggers::default())
        .unwrap_or_else(|e| panic!("grammar should build: {e}\n{text}"))
}

fn matches(grammar: &Grammar, input: &[In]) -> bool {
    let mut g = grammar.clone();
    for part in input {
        match *part {
            In::Tok(id) => {
                if g.accept_token(id, format!("<[{id}]>").as_bytes()).is_err() {
                    return false;
                }
            }
            In::S(s) => {
                for c in s.chars() {
                    let mut buf = [0u8; 4];
                    if g.accept_token(0, c.encode_utf8(&mut buf).as_bytes())
                        .is_err()
                    {
                        return false;
                    }
                }
            }
        }
    }
    g.can_end()
}

fn check_strings(text: &str, passing: &[&str], failing: &[&str]) {
    let g = build(text);
    for s in passing {
        assert!(matches(&g, &[In::S(s)]), "{s:?} should match\n{text}");
        // the same through accept_str, all at once
        let mut g2 = g.clone();
        assert!(
            g2.accept_str(s.as_bytes()).is_ok() && g2.can_end(),
            "{s:?} (accept_str)"
        );
    }
    for s in failing {
        assert!(!matches(&g, &[In::S(s)]), "{s:?} should not match\n{text}");
    }
}

fn check_inputs(text: &str, passing: &[&[In]], failing: &[&[In]]) {
    let g = build(text);
    for (i, input) in passing.iter().enumerate() {
        assert!(matches(&g, input), "passing input {i} should match\n{text}");
    }
    for (i, input) in failing.iter().enumerate() {
        assert!(
            !matches(&g, input),
            "failing input {i} should not match\n{text}"
        );
    }
}

#[test]
fn integration_simple_grammar() {
    check_strings(
        "\n            root ::= expr\n            expr ::= term (\"+\" term)*\n            term ::= number\n            number ::= [0-9]+",
        &["42", "1+2+3+4+5", "123+456"],
        &["+", "/ 3", "1+2+3+4+5+", "12a45"],
    );
}

#[test]
fn integration_tokens() {
    use In::{Tok, S};
    check_inputs(
        "\n            root ::= <[10]> content <[11]>\n            content ::= (!<[11]>)*",
        &[
            &[Tok(10), S("hello world"), Tok(11)],
            &[
                Tok(10),
                S("text with "),
                Tok(12),
                S(" other tokens "),
                Tok(13),
                S(" mixed in"),
                Tok(11),
            ],
            &[Tok(10), Tok(11)],
            &[Tok(10), Tok(12), Tok(13), Tok(14), Tok(15), Tok(11)],
            &[Tok(10), S("a"), Tok(11)],
        ],
        &[
            &[Tok(10), S("missing end token")],
            &[Tok(10)],
            &[S("missing start token"), Tok(11)],
            &[Tok(10), Tok(11), Tok(11)],
            &[Tok(11), S("wrong order"), Tok(10)],
        ],
    );
    check_inputs(
        "\n            root ::= reasoning+ content tool-call*\n            reasoning ::= <[10]> (!<[11]>)* <[11]>\n            content ::= <[20]> (!<[21]>)* <[21]>\n            tool-call ::= <[12]> name <[13]> args <[14]>\n            name ::= (!<[13]>)+\n            args ::= (!<[14]>)*",
        &[
            &[
                Tok(10),
                S("I am thinking"),
                Tok(11),
                Tok(20),
                S("hello world!"),
                Tok(21),
                Tok(12),
                S("search"),
                Tok(13),
                S("query=test"),
                Tok(14),
            ],
            &[
                Tok(10),
                S("reasoning 1"),
                Tok(11),
                Tok(10),
                S("reasoning 2"),
                Tok(11),
                Tok(20),
                Tok(21),
                Tok(12),
                S("tool"),
                Tok(13),
                Tok(14),
            ],
            &[Tok(10), Tok(11), Tok(20), S("content"), Tok(21)],
            &[
                Tok(10),
                S("think"),
                Tok(12),
                S(" nested"),
                Tok(11),
                Tok(20),
                Tok(10),
                S("more content"),
                Tok(21),
                Tok(12),
                S("fn"),
                Tok(13),
                S("x=1,y=2"),
                Tok(14),
                Tok(12),
                S("fn2"),
                Tok(13),
                Tok(14),
            ],
        ],
        &[
            &[Tok(20), S("content only"), Tok(21)],
            &[Tok(10), S("no closing reasoning")],
            &[Tok(10), Tok(11), Tok(20), S("no closing content")],
            &[Tok(10), Tok(11), Tok(20), Tok(21), Tok(12), S("incomplete tool")],
            &[Tok(10), Tok(11), Tok(11), Tok(20), Tok(21)],
        ],
    );
}

#[test]
fn integration_complex_grammar() {
    check_strings(
        r#"
            root ::= expression
            expression ::= term ws (("+"|"-") ws term)*
            term ::= factor ws (("*"|"/") ws factor)*
            factor ::= number | variable | "(" expression ")" | function-call
            number ::= [0-9]+
            variable ::= [a-zA-Z_][a-zA-Z0-9_]*
            function-call ::= variable ws "(" (expression ("," ws expression)*)? ")"
            ws ::= [ \t\n\r]?"#,
        &[
            "42",
            "1*2*3*4*5",
            "x",
            "x+10",
            "x1+y2",
            "(a+b)*(c-d)",
            "func()",
            "func(x,y+2)",
            "a*(b+c)-d/e",
            "f(g(x),h(y,z))",
            "x + 10",
            "x1 + y2",
            "(a + b) * (c - d)",
            "func(x, y + 2)",
            "a * (b + c) - d / e",
            "f(g(x), h(y, z))",
            "123+456",
            "123*456*789-123/456+789*123",
            "123+456*789-123/456+789*123-456/789+123*456-789/123+456*789-123/456+789*123-456",
        ],
        &[
            "+",
            "/ 3x",
            "x + + y",
            "a * / b",
            "func(,)",
            "func(x y)",
            "(a + b",
            "x + y)",
            "a + b * (c - d",
            "42 +",
            "x +",
            "x + 10 +",
            "(a + b) * (c - d",
            "func(",
            "func(x, y + 2",
            "a * (b + c) - d /",
            "f(g(x), h(y, z)",
            "123+456*789-123/456+789*123-456/789+123*456-789/123+456*789-123/456+789*123-456/",
        ],
    );
}

#[test]
fn integration_special_chars() {
    check_strings(
        "\n            root ::= ... \"abc\" ...\n            ",
        &["abcabcabc", "aaaabcccc", "🔵🟠✅abc❌🟠🔵"],
        &[
            "aaabcccc",
            "aaaaabcccc",
            "aaaabccc",
            "aaaabccccc",
            "🔵🟠✅❌abc❌✅🟠🔵",
            "🔵🟠abc🟠🔵",
        ],
    );
}

#[test]
fn integration_quantifiers() {
    let long_a = "a".repeat(62);
    let long_ab = format!("{}b", "a".repeat(62));
    check_strings(
        "root ::= \"a\"*",
        &["", "a", "aaaaa", "aaaaaaaaaaaaaaaaaa", &long_a],
        &["b", "ab", "aab", "ba", &long_ab],
    );
    check_strings(
        "root ::= \"a\"+",
        &["a", "aaaaa", "aaaaaaaaaaaaaaaaaa", &long_a],
        &["", "b", "ab", "aab", "ba", &long_ab],
    );
    check_strings("root ::= \"a\"?", &["", "a"], &["b", "ab", "aa", "ba"]);
    check_strings(
        "\n            root ::= cons+ vowel* cons? (vowel cons)*\n            vowel ::= [aeiouy]\n            cons ::= [bcdfghjklmnpqrstvwxyz]\n            ",
        &["yes", "no", "noyes", "crwth", "four", "bryyyy"],
        &["yess", "yesno", "forty", "catyyy"],
    );
    check_strings(
        "root ::= [ab]{4}",
        &["aaaa", "bbbb", "abab"],
        &["a", "b", "aaaaa"],
    );
    check_strings(
        "root ::= [ab]{4,}",
        &["aaaa", "aaaaab", "bbbb", "ababab"],
        &["", "aba"],
    );
    check_strings(
        "root ::= [ab]{0,4}",
        &["", "a", "aa", "aaa", "aaab"],
        &["aaaaa"],
    );
    check_strings(
        "root ::= (\"0x\" [A-F0-9]{2} \" \"?){3,5}",
        &["0xFF 0x12 0xAB", "0xFF 0x12 0xAB 0x00 0x00"],
        &["", "0xFF", "0xFF 0x12", "0xFF 0x12 0xAB 0x00 0x00 0x00"],
    );
    // upstream's "segfault" case
    check_strings("root ::= ( [x]* )*", &["", "x", "xx"], &["y", "yy"]);
}

#[test]
fn integration_build_failures() {
    let fails = |text: &str, root: &str| {
        Grammar::new(None, text.as_bytes(), root, Triggers::default()).err()
    };
    // left recursion (upstream test_failure_left_recursion)
    for text in [
        "root ::= \"a\" | root \"a\"",
        "\n        root ::= asdf\n        asdf ::= \"a\" | asdf \"a\"\n        ",
        "\n        root ::= asdf\n        asdf ::= \"a\" | foo \"b\"\n        foo ::= \"c\" | asdf \"d\" | \"e\"",
        "\n        root ::= asdf\n        asdf ::= \"a\" | foo \"b\"\n        foo ::= \"c\" | empty asdf \"d\" | \"e\"\n        empty ::= \"blah\" | ",
    ] {
        assert!(
            matches!(fails(text, "root"), Some(GrammarError::LeftRecursion(_))),
            "{text}"
        );
    }
    // right recursion is fine
    assert!(fails("root ::= \"a\" root | \"a\"", "root").is_none());
    // missing root symbol, custom root (test_failure_missing_root_symbol, _custom_root_...)
    assert!(matches!(
        fails("\n        root ::= \"foobar\"\n    ", "nonexistent"),
        Some(GrammarError::NoRoot(_))
    ));
    assert!(fails("\n        foobar ::= \"foobar\"\n    ", "root").is_some());
    assert!(fails("\n        foobar ::= \"foobar\"\n    ", "foobar").is_none());
    // nothing but comments: no rules
    assert!(matches!(
        fails("# only a comment\n", "root"),
        Some(GrammarError::NoRules)
    ));
}

// ---------------------------------------------------------------------------------------------
// Stacks and candidate rejection from hand-built rules (upstream test-llama-grammar.cpp)
// ---------------------------------------------------------------------------------------------

#[test]
fn llama_grammar_stacks_and_rejects() {
    use T::*;
    let e = Element::new;
    let rules: Vec<Vec<Element>> = vec![
        vec![e(RuleRef, 5), e(End, 0)],
        vec![
            e(RuleRef, 2),
            e(Char, 61),
            e(RuleRef, 3),
            e(RuleRef, 4),
            e(Char, 10),
            e(End, 0),
        ],
        vec![e(RuleRef, 4), e(RuleRef, 7), e(End, 0)],
        vec![e(RuleRef, 12), e(End, 0)],
        vec![
            e(RuleRef, 8),
            e(Alt, 0),
            e(RuleRef, 9),
            e(Alt, 0),
            e(Char, 40),
            e(RuleRef, 3),
            e(RuleRef, 2),
            e(Char, 41),
            e(RuleRef, 3),
            e(End, 0),
        ],
        vec![
            e(RuleRef, 1),
            e(RuleRef, 5),
            e(Alt, 0),
            e(RuleRef, 1),
            e(End, 0),
        ],
        vec![
            e(Char, 45),
            e(CharAlt, 43),
            e(CharAlt, 42),
            e(CharAlt, 47),
            e(RuleRef, 4),
            e(End, 0),
        ],
        vec![e(RuleRef, 6), e(RuleRef, 7), e(Alt, 0), e(End, 0)],
        vec![
            e(Char, 97),
            e(CharRngUpper, 122),
            e(RuleRef, 10),
            e(RuleRef, 3),
            e(End, 0),
        ],
        vec![e(RuleRef, 11), e(RuleRef, 3), e(End, 0)],
        vec![
            e(Char, 97),
            e(CharRngUpper, 122),
            e(CharAlt, 48),
            e(CharRngUpper, 57),
            e(CharAlt, 95),
            e(RuleRef, 10),
            e(Alt, 0),
            e(End, 0),
        ],
        vec![
            e(Char, 48),
            e(CharRngUpper, 57),
            e(RuleRef, 11),
            e(Alt, 0),
            e(Char, 48),
            e(CharRngUpper, 57),
            e(End, 0),
        ],
        vec![
            e(Char, 32),
            e(CharAlt, 9),
            e(CharAlt, 10),
            e(RuleRef, 12),
            e(Alt, 0),
            e(End, 0),
        ],
    ];
    let grammar = Grammar::from_rules(None, rules, 0).expect("rules are valid");

    let expected_stacks: Vec<Vec<Element>> = vec![
        vec![e(Char, 61), e(RuleRef, 7), e(Char, 40)],
        vec![e(Char, 61), e(RuleRef, 7), e(RuleRef, 3), e(Char, 48)],
        vec![e(Char, 61), e(RuleRef, 7), e(RuleRef, 3), e(Char, 48)],
        vec![e(Char, 61), e(RuleRef, 7), e(Char, 97)],
        vec![e(RuleRef, 5), e(Char, 61), e(RuleRef, 7), e(Char, 40)],
        vec![
            e(RuleRef, 5),
            e(Char, 61),
            e(RuleRef, 7),
            e(RuleRef, 3),
            e(Char, 48),
        ],
        vec![
            e(RuleRef, 5),
            e(Char, 61),
            e(RuleRef, 7),
            e(RuleRef, 3),
            e(Char, 48),
        ],
        vec![e(RuleRef, 5), e(Char, 61), e(RuleRef, 7), e(Char, 97)],
    ];
    let got: Vec<Vec<Element>> = grammar
        .stacks()
        .iter()
        .map(|s| s.iter().map(|&p| grammar.element(p)).collect())
        .collect();
    assert_eq!(got, expected_stacks);

    // 23 one-code-point candidates '%' (37) ..= ';' (59)
    let cps: Vec<[u32; 2]> = (0..23).map(|i| [37 + i, 0]).collect();
    let candidates: Vec<Candidate> = cps
        .iter()
        .enumerate()
        .map(|(i, cp)| Candidate {
            index: i,
            code_points: cp,
            offset: 0,
            partial: PartialUtf8::default(),
            id: 0,
        })
        .collect();
    // Rejected per stack, as (index, code point): everything but '(' for stacks ending in
    // '(', everything but the digits for [0-9] tops, everything but nothing in a-z range
    // (all of 37..=59 are rejected there).
    let all_but = |keep: &[u32]| -> Vec<(usize, u32)> {
        (0..23u32)
            .filter(|i| !keep.contains(&(37 + i)))
            .map(|i| (i as usize, 37 + i))
            .collect()
    };
    let digits: Vec<u32> = (48..=57).collect();
    let expected_rejects = [
        all_but(&[40]),
        all_but(&digits),
        all_but(&digits),
        all_but(&[]),
        all_but(&[40]),
        all_but(&digits),
        all_but(&digits),
        all_but(&[]),
    ];
    let rules = matcher::Rules(grammar.rules().to_vec());
    for (k, stack) in grammar.stacks().iter().enumerate() {
        let rejects: Vec<(usize, u32)> =
            matcher::reject_candidates_for_stack(&rules, stack, &candidates)
                .iter()
                .map(|c| (c.index, c.code_points[c.offset]))
                .collect();
        assert_eq!(rejects, expected_rejects[k], "stack {k}");
    }
}

#[test]
fn from_rules_refuses_malformed_rules() {
    use T::*;
    let e = Element::new;
    let bad: Vec<Vec<Vec<Element>>> = vec![
        vec![vec![e(Char, 97)]],               // no END
        vec![vec![e(RuleRef, 3), e(End, 0)]],  // undefined rule
        vec![vec![e(CharAlt, 97), e(End, 0)]], // CHAR_ALT first
        vec![vec![e(Char, 97), e(Alt, 0), e(CharRngUpper, 98), e(End, 0)]],
        vec![vec![e(Char, 97), e(End, 0), e(Char, 98), e(End, 0)]], // END inside
        vec![vec![e(RuleRef, 0), e(End, 0)]],                       // left recursion
    ];
    for rules in bad {
        assert!(
            Grammar::from_rules(None, rules.clone(), 0).is_err(),
            "{rules:?}"
        );
    }
    assert!(Grammar::from_rules(None, vec![vec![e(Char, 97), e(End, 0)]], 1).is_err());
}

// ---------------------------------------------------------------------------------------------
// grammars/*.gbnf from the pinned llama.cpp
// ---------------------------------------------------------------------------------------------

fn upstream_grammars_dir() -> Option<PathBuf> {
    let llama = match std::env::var_os("UPSTREAM_LLAMA") {
        Some(dir) => PathBuf::from(dir),
        None => {
            let cache = match std::env::var_os("LLAMA_HOTSWAP_CACHE") {
                Some(c) => PathBuf::from(c),
                None => std::env::var_os("XDG_CACHE_HOME")
                    .map(PathBuf::from)
                    .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?
                    .join("llama-hotswap"),
            };
            cache.join("llama_cpp_python-0.3.36/vendor/llama.cpp")
        }
    };
    let dir = llama.join("grammars");
    dir.is_dir().then_some(dir)
}

#[test]
fn upstream_gbnf_files() {
    let Some(dir) = upstream_grammars_dir() else {
        eprintln!("SKIP: upstream sources not in the cache (make setup)");
        return;
    };
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".gbnf"))
        .collect();
    names.sort();
    assert!(
        names.len() >= 8,
        "expected the 8 sample grammars, found {names:?}"
    );
    let samples: &[(&str, &[&str], &[&str])] = &[
        (
            "arithmetic.gbnf",
            &["1+2=3\n", "(a+b)*2=x\n", "a=1\nb=2\n"],
            &["1+2", "=3\n", "1+=3\n"],
        ),
        (
            "c.gbnf",
            &["int main(){return 0;}", "float f(int x){x = x+1;}"],
            &["int main(", "main(){}"],
        ),
        (
            "chess.gbnf",
            &["1. e4 e5\n2. Nf3 Nc6\n", "1. d4 Nf6\n2. O-O exd5+\n"],
            &["1. e4 e5\n", "1. e9 e5\n2. Nf3 Nc6\n"],
        ),
        (
            "english.gbnf",
            &["Hello, world!", "a b\tc"],
            &["", "héllo", "a  b"],
        ),
        (
            "japanese.gbnf",
            &["こんにちは", "カタカナ 漢字。"],
            &["", "abc"],
        ),
        (
            "json.gbnf",
            &[
                "{}",
                "{\"a\": [1, 2.5, -3e4, true, false, null, \"x\\u00e9\\n\"], \"b\": {\"c\": \"d\"}}",
                "{ \"k\" : \"v\" }\n",
            ],
            &["[1]", "{\"a\": 01x}", "{\"a\"}", "{'a': 1}", "{\"a\": 1,}"],
        ),
        (
            "json_arr.gbnf",
            &["[\n1,\n\"a\",\n{\"b\": []}]", "[\n]"],
            &["[1]", "{}", "[\n1,]"],
        ),
        (
            "list.gbnf",
            &["- one\n- two\n"],
            &["one\n", "- \n", "- a"],
        ),
    ];
    for name in &names {
        let text = std::fs::read(dir.join(name)).unwrap();
        let grammar = Grammar::new(None, &text, "root", Triggers::default())
            .unwrap_or_else(|e| panic!("{name} should build: {e}"));
        // the parse prints (every rule well formed, every name known)
        parse_grammar(&text, None).unwrap().print().unwrap();
        let Some((_, passing, failing)) = samples.iter().find(|(n, _, _)| n == name) else {
            continue;
        };
        for s in *passing {
            assert!(matches(&grammar, &[In::S(s)]), "{name}: {s:?} should match");
        }
        for s in *failing {
            assert!(
                !matches(&grammar, &[In::S(s)]),
                "{name}: {s:?} should not match"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The sampler over a small vocabulary: apply/accept, partial UTF-8 across tokens, EOG, lazy
// triggers, reset and clone
// ---------------------------------------------------------------------------------------------

const EOS: i32 = 0;

/// Token 0 is EOS; the others are pieces.
fn small_vocab(pieces: &[&[u8]]) -> Arc<GrammarVocab> {
    let mut all: Vec<Vec<u8>> = vec![b"</s>".to_vec()];
    all.extend(pieces.iter().map(|p| p.to_vec()));
    Arc::new(GrammarVocab::new(all, [EOS]))
}

/// Ids of the tokens that stay finite after apply.
fn allowed(sampler: &mut GrammarSampler, n_vocab: usize) -> Vec<i32> {
    let mut data: Vec<TokenData> = (0..n_vocab as i32)
        .map(|id| TokenData {
            id,
            logit: 0.0,
            p: 0.0,
        })
        .collect();
    let mut cur = Candidates::new(&mut data, -1, false);
    sampler.apply(&mut cur);
    data.iter()
        .filter(|t| t.logit.is_finite())
        .map(|t| t.id)
        .collect()
}

fn sampler(vocab: &Arc<GrammarVocab>, spec: GrammarSpec) -> GrammarSampler {
    GrammarSampler::new(Some(vocab.clone()), &spec).expect("sampler builds")
}

#[test]
fn sampler_apply_accept() {
    let pieces: &[&[u8]] = &[
        b"a",
        b"b",
        b"ab",
        b"ba",
        b"\xC3",
        b"\xA9",
        b"\xC3\xA9",
        b"",
        b"c",
    ];
    let vocab = small_vocab(pieces);
    let n = pieces.len() + 1;
    let text = "root ::= (\"a\" | \"b\")+ \"é\"?";
    let mut s = sampler(
        &vocab,
        GrammarSpec {
            text: Some(text.as_bytes()),
            root: Some("root"),
            ..Default::default()
        },
    );
    assert_eq!(s.name(), "grammar");
    // start: a, b, ab, ba; not EOS (grammar not complete), not the empty piece, not "é" parts
    assert_eq!(allowed(&mut s, n), vec![1, 2, 3, 4]);
    s.accept(3); // "ab"
                 // now anything of a/b, the first byte of é, the whole é, and EOS
    assert_eq!(allowed(&mut s, n), vec![0, 1, 2, 3, 4, 5, 7]);
    s.accept(5); // 0xC3: a partial code point
                 // only the continuation byte completes an allowed code point
    assert_eq!(allowed(&mut s, n), vec![6]);
    s.accept(6);
    assert_eq!(allowed(&mut s, n), vec![0]);
    s.accept(EOS);
    // a token the grammar refuses leaves the state unchanged (upstream aborts)
    let mut s2 = s.clone();
    s2.reset();
    s2.accept(9); // "c"
    assert_eq!(allowed(&mut s2, n), vec![1, 2, 3, 4]);
    // EOS before the grammar can end: refused, state unchanged (upstream aborts)
    s2.accept(EOS);
    assert_eq!(allowed(&mut s2, n), vec![1, 2, 3, 4]);
    // out-of-range candidate ids are rejected, not a crash
    let mut data = vec![
        TokenData {
            id: 99,
            logit: 0.0,
            p: 0.0,
        },
        TokenData {
            id: -1,
            logit: 0.0,
            p: 0.0,
        },
        TokenData {
            id: 1,
            logit: 0.0,
            p: 0.0,
        },
    ];
    s2.apply(&mut Candidates::new(&mut data, -1, false));
    assert!(data[0].logit.is_infinite() && data[1].logit.is_infinite());
    assert_eq!(data[2].logit, 0.0);
    s2.accept(99);
    assert_eq!(allowed(&mut s2, n), vec![1, 2, 3, 4]);
}

#[test]
fn sampler_token_elements() {
    // token 1 "<think>" as a special token
    let vocab = Arc::new(
        GrammarVocab::new(
            vec![
                b"</s>".to_vec(),
                b"<think>".to_vec(),
                b"x".to_vec(),
                b"y".to_vec(),
            ],
            [EOS],
        )
        .with_special(b"<think>", 1),
    );
    let mut s = sampler(
        &vocab,
        GrammarSpec {
            text: Some(b"root ::= <think> [xy]* !<[2]>"),
            root: Some("root"),
            ..Default::default()
        },
    );
    assert_eq!(allowed(&mut s, 4), vec![1]);
    s.accept(1);
    // [xy]* or any token but 2: x and y by chars, y (3) and <think> (1) by the TOKEN_NOT
    assert_eq!(allowed(&mut s, 4), vec![1, 2, 3]);
    s.accept(1);
    assert_eq!(allowed(&mut s, 4), vec![0]);
}

#[test]
fn sampler_lazy_triggers() {
    let pieces: &[&[u8]] = &[b"hi ", b"<tool>", b"{", b"}", b"<to", b"ol>{", b"z"];
    let vocab = small_vocab(pieces);
    let n = pieces.len() + 1;
    let grammar = b"root ::= \"<tool>\"? \"{\" \"}\"";
    // by word: nothing constrained until "<tool>" appears in the text, however it is split
    let mut s = sampler(
        &vocab,
        GrammarSpec {
            text: Some(grammar),
            root: Some("root"),
            lazy: true,
            trigger_words: &["<tool>"],
            ..Default::default()
        },
    );
    assert_eq!(allowed(&mut s, n).len(), n);
    s.accept(1); // "hi "
    assert!(s.grammar().unwrap().is_awaiting_trigger());
    s.accept(5); // "<to"
    s.accept(6); // "ol>{": triggers; the grammar is fed "<tool>{"
    assert!(!s.grammar().unwrap().is_awaiting_trigger());
    assert_eq!(allowed(&mut s, n), vec![4]);
    s.accept(4);
    assert_eq!(allowed(&mut s, n), vec![0]);
    // reset waits again
    s.reset();
    assert!(s.grammar().unwrap().is_awaiting_trigger());
    assert_eq!(allowed(&mut s, n).len(), n);

    // by pattern: the grammar starts at the first non-empty group
    let mut s = sampler(
        &vocab,
        GrammarSpec {
            text: Some(grammar),
            root: Some("root"),
            lazy: true,
            trigger_patterns: &["[\\s\\S]*?(\\{)[\\s\\S]*"],
            ..Default::default()
        },
    );
    s.accept(1);
    s.accept(2); // "<tool>" alone does not match
    assert!(s.grammar().unwrap().is_awaiting_trigger());
    s.accept(3); // "{": fed "{"
    assert_eq!(allowed(&mut s, n), vec![4]);

    // by token
    let mut s = sampler(
        &vocab,
        GrammarSpec {
            text: Some(grammar),
            root: Some("root"),
            lazy: true,
            trigger_tokens: &[2],
            ..Default::default()
        },
    );
    s.accept(7);
    s.accept(2);
    assert_eq!(allowed(&mut s, n), vec![3]);

    // a trigger whose replay the grammar refuses: logged, the grammar is active
    let mut s = sampler(
        &vocab,
        GrammarSpec {
            text: Some(grammar),
            root: Some("root"),
            lazy: true,
            trigger_patterns: &["(z)"],
            ..Default::default()
        },
    );
    s.accept(7);
    assert!(!s.grammar().unwrap().is_awaiting_trigger());
    // "<to" is a prefix of "<tool>"
    assert_eq!(allowed(&mut s, n), vec![2, 3, 5]);
}

#[test]
fn sampler_construction_errors() {
    let vocab = small_vocab(&[b"a"]);
    let build = |spec: GrammarSpec| GrammarSampler::new(Some(vocab.clone()), &spec).err();
    let base = GrammarSpec {
        text: Some(b"root ::= \"a\""),
        root: Some("root"),
        ..Default::default()
    };
    assert!(build(base.clone()).is_none());
    // empty grammar: a sampler that does nothing
    let mut empty = GrammarSampler::new(
        None,
        &GrammarSpec {
            text: Some(b""),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(allowed(&mut empty, 2), vec![0, 1]);
    assert!(matches!(
        build(GrammarSpec {
            root: None,
            ..base.clone()
        }),
        Some(GrammarError::NoRoot(_))
    ));
    assert!(matches!(
        GrammarSampler::new(None, &base).err(),
        Some(GrammarError::NoVocab)
    ));
    assert!(matches!(
        build(GrammarSpec {
            lazy: true,
            trigger_patterns: &["(unclosed"],
            ..base.clone()
        }),
        Some(GrammarError::BadPattern { .. })
    ));
    assert!(matches!(
        build(GrammarSpec {
            text: Some(b"root ::= \"\xff\""),
            ..base.clone()
        }),
        Some(GrammarError::InvalidUtf8(10))
    ));
}

// ---------------------------------------------------------------------------------------------
// Hostile grammar text
// ---------------------------------------------------------------------------------------------

#[test]
fn hostile_grammars_fail_cleanly() {
    let cases: Vec<Vec<u8>> = vec![
        b"root ::= \"\xc3".to_vec(),
        b"root ::= [\xe2\x82".to_vec(),
        b"root ::= \"abc".to_vec(),
        b"root ::= [a-z".to_vec(),
        b"root ::= [^".to_vec(),
        b"root ::= \"\\".to_vec(),
        format!(
            "root ::= {}\"a\"{}",
            "(".repeat(100_000),
            ")".repeat(100_000)
        )
        .into_bytes(),
        b"root ::= \"a\"{2001}".to_vec(),
        b"root ::= \"a\"{18446744073709551616}".to_vec(),
        b"root ::= (\"a\"{0,2000}){2}".to_vec(),
        b"root ::= <[99999999999]>".to_vec(),
        b"root ::= x\x00 ::= y".to_vec(), // NUL ends the text: x undefined
    ];
    for text in cases {
        let shown = String::from_utf8_lossy(&text[..text.len().min(40)]).into_owned();
        assert!(
            Grammar::new(None, &text, "root", Triggers::default()).is_err(),
            "{shown:?} should fail"
        );
    }
    // groups nested up to the limit parse; deeper ones are refused (upstream recurses
    // without limit and overflows its stack)
    let nested = |depth: usize| {
        format!("root ::= {}\"a\"{}", "(".repeat(depth), ")".repeat(depth)).into_bytes()
    };
    assert!(Grammar::new(None, &nested(150), "root", Triggers::default()).is_ok());
    assert!(Grammar::new(None, &nested(1000), "root", Triggers::default()).is_err());
    // a long chain of rules, each leftmost in the previous: the left-recursion check is
    // iterative (no stack overflow) ...
    let mut text = String::from("root ::= r0\n");
    for i in 0..100_000 {
        text.push_str(&format!("r{i} ::= r{} | \"x\"\n", i + 1));
    }
    text.push_str("r100000 ::= \"y\" | r0\n");
    let parsed = parse_grammar(text.as_bytes(), None).unwrap();
    assert!(matcher::find_left_recursion(&parsed.rules).is_some());
    // ... and linear: a DAG of nullable rules, each referenced twice in leftmost position
    let mut text = String::from("root ::= a0 \"z\"\n");
    for i in 0..200 {
        text.push_str(&format!("a{i} ::= a{j} a{j} | \"\"\n", j = i + 1));
    }
    text.push_str("a200 ::= \"q\" | \"\"\n");
    let parsed = parse_grammar(text.as_bytes(), None).unwrap();
    assert_eq!(matcher::find_left_recursion(&parsed.rules), None);
}

// ---------------------------------------------------------------------------------------------
// The fuzz harness: the committed corpus (fuzz/corpus/grammar_parser) and seeded mutations of it
// ---------------------------------------------------------------------------------------------

fn corpus() -> Vec<Vec<u8>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/grammar_parser");
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files.iter().map(|f| std::fs::read(f).unwrap()).collect()
}

#[test]
fn fuzz_corpus_never_panics() {
    let seeds = corpus();
    assert!(seeds.len() >= 5);
    for seed in &seeds {
        llama::sampling::grammar::harness::check_input(seed);
    }
}

#[test]
fn mutated_grammars_never_panic() {
    // GBNF's own characters make mutations reach deeper than random bytes would
    const ALPHABET: &[u8] = b"\"[]()^-|*+?{},.:=<>!\\ \n#0123456789abxyz\x00\xc3\xa9";
    let seeds = corpus();
    let mut state = 0x2545F4914F6CDD1Du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..3000 {
        let mut data = seeds[(next() % seeds.len() as u64) as usize].clone();
        for _ in 0..1 + next() % 4 {
            let pos = (next() % (data.len() as u64 + 1)) as usize;
            let c = ALPHABET[(next() % ALPHABET.len() as u64) as usize];
            match next() % 3 {
                0 => data.insert(pos, c),
                1 if pos < data.len() => data[pos] = c,
                _ if pos < data.len() => {
                    data.remove(pos);
                }
                _ => data.push(c),
            }
        }
        llama::sampling::grammar::harness::check_input(&data);
    }
}
