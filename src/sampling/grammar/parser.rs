//! The GBNF parser, following upstream's `llama_grammar_parser` (src/llama-grammar.cpp) step
//! for step, so that rule ids, generated rule names (`name_N`) and the printed form match.
//!
//! The parser reads bytes with C-string semantics: a NUL byte (or the end of the slice) ends
//! the input. Where upstream would overflow its stack (deeply nested groups) we stop with an
//! error instead (see [`MAX_NESTING`]).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::error::GrammarError;

/// Upstream's `MAX_REPETITION_THRESHOLD`.
pub const MAX_REPETITION_THRESHOLD: u64 = 2000;

/// Deepest nesting of `( ... )` groups accepted. Upstream has no limit and recurses once
/// per group, so a hostile grammar overflows its stack; we refuse instead. Generated grammars
/// (JSON schema) nest a few dozen levels at most.
pub const MAX_NESTING: usize = 200;

/// `enum llama_gretype`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u32)]
pub enum ElementType {
    /// End of rule definition.
    End = 0,
    /// Start of an alternate definition of the rule.
    Alt = 1,
    /// Reference to a rule (value: rule id).
    RuleRef = 2,
    /// A character (value: code point).
    Char = 3,
    /// Inverse char(s): `[^a]`, `[^a-b]`, `[^abc]`.
    CharNot = 4,
    /// Makes the preceding `Char`/`CharAlt` an inclusive range (`[a-z]`).
    CharRngUpper = 5,
    /// An alternate char of the preceding char set (`[ab]`, `[a-zA]`).
    CharAlt = 6,
    /// Any character (`.`).
    CharAny = 7,
    /// A token (`<[id]>` or `<text>`; value: token id).
    Token = 8,
    /// Any token but this one (`!<[id]>`).
    TokenNot = 9,
}

/// `llama_grammar_element`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Element {
    pub kind: ElementType,
    pub value: u32,
}

impl Element {
    pub const fn new(kind: ElementType, value: u32) -> Element {
        Element { kind, value }
    }

    /// `LLAMA_GRETYPE_END` or `LLAMA_GRETYPE_ALT`: the end of one alternate.
    pub fn is_end_of_sequence(self) -> bool {
        matches!(self.kind, ElementType::End | ElementType::Alt)
    }

    fn is_char(self) -> bool {
        matches!(
            self.kind,
            ElementType::Char
                | ElementType::CharNot
                | ElementType::CharAlt
                | ElementType::CharRngUpper
                | ElementType::CharAny
        )
    }
}

/// A rule: alternates separated by `Alt`, terminated by `End`.
pub type Rule = Vec<Element>;

/// Resolves `<text>` token references (upstream: the vocab tokenizes the text with special
/// tokens parsed and requires exactly one token). `None` means "not exactly one token".
pub trait TokenResolver {
    fn single_token(&self, text: &[u8]) -> Option<i32>;
}

/// The result of a successful parse: rules indexed by id and the name of every symbol.
#[derive(Clone, Debug, Default)]
pub struct ParsedGrammar {
    pub symbol_ids: BTreeMap<String, u32>,
    pub rules: Vec<Rule>,
}

impl ParsedGrammar {
    /// Upstream's `llama_grammar_parser::print`: one line per rule, `name ::= ...`.
    pub fn print(&self) -> Result<String, GrammarError> {
        let names: BTreeMap<u32, &str> = self
            .symbol_ids
            .iter()
            .map(|(k, &v)| (v, k.as_str()))
            .collect();
        let mut out = String::new();
        for (id, rule) in self.rules.iter().enumerate() {
            print_rule(&mut out, id as u32, rule, &names)?;
        }
        Ok(out)
    }
}

/// Parses GBNF text. `resolver` is the vocabulary for `<text>` tokens (upstream's
/// `vocab`; without one such tokens are an error, as upstream).
pub fn parse(
    src: &[u8],
    resolver: Option<&dyn TokenResolver>,
) -> Result<ParsedGrammar, GrammarError> {
    let mut parser = Parser {
        src,
        resolver,
        symbol_ids: BTreeMap::new(),
        rules: Vec::new(),
        depth: 0,
    };
    parser.parse_all()?;
    Ok(ParsedGrammar {
        symbol_ids: parser.symbol_ids,
        rules: parser.rules,
    })
}

struct Parser<'a> {
    src: &'a [u8],
    resolver: Option<&'a dyn TokenResolver>,
    symbol_ids: BTreeMap<String, u32>,
    rules: Vec<Rule>,
    depth: usize,
}

fn is_digit_char(c: u8) -> bool {
    c.is_ascii_digit()
}

fn is_word_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'-'
}

fn err(msg: impl Into<String>) -> GrammarError {
    GrammarError::Parse(msg.into())
}

impl<'a> Parser<'a> {
    /// The byte at `i`, or 0 past the end (C-string semantics).
    fn at(&self, i: usize) -> u8 {
        self.src.get(i).copied().unwrap_or(0)
    }

    /// The rest of the input from `i` for error messages (upstream prints `... at <rest>`),
    /// cut to a readable length.
    fn rest(&self, i: usize) -> String {
        let end = self.src[i.min(self.src.len())..]
            .iter()
            .position(|&b| b == 0)
            .map_or(self.src.len(), |n| i + n);
        let tail = &self.src[i.min(end)..end];
        let cut = &tail[..tail.len().min(40)];
        let mut s = String::from_utf8_lossy(cut).into_owned();
        if cut.len() < tail.len() {
            s.push_str("...");
        }
        s
    }

    fn parse_space(&self, mut pos: usize, newline_ok: bool) -> usize {
        loop {
            let c = self.at(pos);
            if c == b'#' {
                while !matches!(self.at(pos), 0 | b'\r' | b'\n') {
                    pos += 1;
                }
            } else if c == b' ' || c == b'\t' || (newline_ok && (c == b'\r' || c == b'\n')) {
                pos += 1;
            } else {
                return pos;
            }
        }
    }

    fn parse_name(&self, src: usize) -> Result<usize, GrammarError> {
        let mut pos = src;
        while is_word_char(self.at(pos)) {
            pos += 1;
        }
        if pos == src {
            return Err(err(format!("expecting name at {}", self.rest(src))));
        }
        Ok(pos)
    }

    fn parse_int(&self, src: usize) -> Result<usize, GrammarError> {
        let mut pos = src;
        while is_digit_char(self.at(pos)) {
            pos += 1;
        }
        if pos == src {
            return Err(err(format!("expecting integer at {}", self.rest(src))));
        }
        Ok(pos)
    }

    /// Digits `src..end` as u64 (upstream's `std::stoull`, which throws on overflow).
    fn int_value(&self, src: usize, end: usize) -> Result<u64, GrammarError> {
        let digits = std::str::from_utf8(&self.src[src..end]).unwrap_or("");
        digits
            .parse::<u64>()
            .map_err(|_| err(format!("integer out of range at {}", self.rest(src))))
    }

    fn parse_hex(&self, src: usize, size: usize) -> Result<(u32, usize), GrammarError> {
        let end = src + size;
        let mut pos = src;
        let mut value: u32 = 0;
        while pos < end {
            let digit = match self.at(pos) {
                c @ b'a'..=b'f' => c - b'a' + 10,
                c @ b'A'..=b'F' => c - b'A' + 10,
                c @ b'0'..=b'9' => c - b'0',
                _ => break,
            };
            value = (value << 4).wrapping_add(u32::from(digit));
            pos += 1;
        }
        if pos != end {
            return Err(err(format!(
                "expecting {size} hex chars at {}",
                self.rest(src)
            )));
        }
        Ok((value, pos))
    }

    /// Upstream's single-code-point `decode_utf8` (assumes valid UTF-8, stops at NUL).
    fn decode_utf8(&self, src: usize) -> (u32, usize) {
        const LOOKUP: [usize; 16] = [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4];
        let first = self.at(src);
        let len = LOOKUP[usize::from(first >> 4)];
        let mask = (1u32 << (8 - len)) - 1;
        let mut value = u32::from(first) & mask;
        let end = src + len;
        let mut pos = src + 1;
        while pos < end && self.at(pos) != 0 {
            value = (value << 6) + (u32::from(self.at(pos)) & 0x3F);
            pos += 1;
        }
        (value, pos)
    }

    fn parse_char(&self, src: usize) -> Result<(u32, usize), GrammarError> {
        if self.at(src) == b'\\' {
            return match self.at(src + 1) {
                b'x' => self.parse_hex(src + 2, 2),
                b'u' => self.parse_hex(src + 2, 4),
                b'U' => self.parse_hex(src + 2, 8),
                b't' => Ok((u32::from(b'\t'), src + 2)),
                b'r' => Ok((u32::from(b'\r'), src + 2)),
                b'n' => Ok((u32::from(b'\n'), src + 2)),
                c @ (b'\\' | b'"' | b'[' | b']' | b'-') => Ok((u32::from(c), src + 2)),
                _ => Err(err(format!("unknown escape at {}", self.rest(src)))),
            };
        }
        if self.at(src) != 0 {
            return Ok(self.decode_utf8(src));
        }
        Err(err("unexpected end of input"))
    }

    fn parse_token(&self, src: usize) -> Result<(u32, usize), GrammarError> {
        let mut pos = src;
        if self.at(pos) != b'<' {
            return Err(err(format!("expecting '<' at {}", self.rest(pos))));
        }
        pos += 1;

        if self.at(pos) == b'[' {
            pos += 1;
            let int_end = self.parse_int(pos)?;
            let id = self.int_value(pos, int_end)?;
            let token_id = u32::try_from(id)
                .map_err(|_| err(format!("parsed token id is too big at {}", self.rest(pos))))?;
            pos = int_end;
            if self.at(pos) != b']' {
                return Err(err(format!("expecting ']' at {}", self.rest(pos))));
            }
            pos += 1;
            if self.at(pos) != b'>' {
                return Err(err(format!("expecting '>' at {}", self.rest(pos))));
            }
            return Ok((token_id, pos + 1));
        }

        let Some(resolver) = self.resolver else {
            return Err(err(format!(
                "no vocab to parse token at {}",
                self.rest(src)
            )));
        };
        while self.at(pos) != 0 && self.at(pos) != b'>' {
            pos += 1;
        }
        if self.at(pos) != b'>' {
            return Err(err(format!("expecting '>' at {}", self.rest(pos))));
        }
        pos += 1;
        let text = &self.src[src..pos];
        match resolver.single_token(text) {
            Some(id) => Ok((id as u32, pos)),
            None => Err(err(format!(
                "invalid token '{}'",
                String::from_utf8_lossy(text)
            ))),
        }
    }

    fn get_symbol_id(&mut self, name: &[u8]) -> u32 {
        let next_id = self.symbol_ids.len() as u32;
        // Names are [a-zA-Z0-9-]: always ASCII.
        let name = String::from_utf8_lossy(name).into_owned();
        *self.symbol_ids.entry(name).or_insert(next_id)
    }

    fn generate_symbol_id(&mut self, base_name: &str) -> u32 {
        let next_id = self.symbol_ids.len() as u32;
        // Upstream assigns (overwrites) the generated name; it cannot collide with a named
        // symbol of a different id unless the user wrote `name_N` themselves, and then upstream
        // overwrites that entry too, so we do the same.
        self.symbol_ids
            .insert(format!("{base_name}_{next_id}"), next_id);
        next_id
    }

    fn add_rule(&mut self, rule_id: u32, rule: Rule) {
        let id = rule_id as usize;
        if self.rules.len() <= id {
            self.rules.resize(id + 1, Vec::new());
        }
        self.rules[id] = rule;
    }

    fn parse_alternates(
        &mut self,
        src: usize,
        rule_name: &str,
        rule_id: u32,
        is_nested: bool,
    ) -> Result<usize, GrammarError> {
        let mut rule = Rule::new();
        let mut pos = self.parse_sequence(src, rule_name, &mut rule, is_nested)?;
        while self.at(pos) == b'|' {
            rule.push(Element::new(ElementType::Alt, 0));
            pos = self.parse_space(pos + 1, true);
            pos = self.parse_sequence(pos, rule_name, &mut rule, is_nested)?;
        }
        rule.push(Element::new(ElementType::End, 0));
        self.add_rule(rule_id, rule);
        Ok(pos)
    }

    /// Rewrites the symbol `rule[last_sym_start..]` repeated `{min_times, max_times}`
    /// (`max_times == None`: unbounded) exactly as upstream's `handle_repetitions`:
    /// `S{m,n}` → `S` m times, then a chain of n-m optional rules `S' ::= S S'' |`.
    #[allow(clippy::too_many_arguments)]
    fn handle_repetitions(
        &mut self,
        rule: &mut Rule,
        rule_name: &str,
        last_sym_start: usize,
        n_prev_rules: &mut u64,
        min_times: u64,
        max_times: Option<u64>,
        pos: usize,
    ) -> Result<(), GrammarError> {
        if last_sym_start == rule.len() {
            return Err(err(format!(
                "expecting preceding item to */+/?/{{ at {}",
                self.rest(pos)
            )));
        }
        let prev_rule: Rule = rule[last_sym_start..].to_vec();

        let total_rules = match max_times {
            Some(max) if max > 0 => max,
            _ if min_times > 0 => min_times,
            _ => 1,
        };
        if n_prev_rules.saturating_mul(total_rules) > MAX_REPETITION_THRESHOLD {
            return Err(err(
                "number of rules that are going to be repeated multiplied by the new repetition \
                 exceeds sane defaults, please reduce the number of repetitions or rule complexity",
            ));
        }

        if min_times == 0 {
            rule.truncate(last_sym_start);
        } else {
            for _ in 1..min_times {
                rule.extend_from_slice(&prev_rule);
            }
        }

        let mut last_rec_rule_id = 0u32;
        // Upstream computes `max_times - min_times` in unsigned arithmetic; with max < min
        // that wraps to a huge count, and the threshold check above has already refused it
        // (max < min ≤ 2000 means total_rules = max ≥ 1 ... and the loop would run ~2^64
        // times). We refuse max < min explicitly instead of looping.
        let n_opt = match max_times {
            None => 1,
            Some(max) => max.checked_sub(min_times).ok_or_else(|| {
                err(format!(
                    "repetition maximum {max} is below minimum {min_times} at {}",
                    self.rest(pos)
                ))
            })?,
        };
        let no_max = max_times.is_none();
        let mut rec_rule = prev_rule.clone();
        for i in 0..n_opt {
            rec_rule.truncate(prev_rule.len());
            let rec_rule_id = self.generate_symbol_id(rule_name);
            if i > 0 || no_max {
                let target = if no_max {
                    rec_rule_id
                } else {
                    last_rec_rule_id
                };
                rec_rule.push(Element::new(ElementType::RuleRef, target));
            }
            rec_rule.push(Element::new(ElementType::Alt, 0));
            rec_rule.push(Element::new(ElementType::End, 0));
            self.add_rule(rec_rule_id, rec_rule.clone());
            last_rec_rule_id = rec_rule_id;
        }
        if n_opt > 0 {
            rule.push(Element::new(ElementType::RuleRef, last_rec_rule_id));
        }
        *n_prev_rules = n_prev_rules.saturating_mul(total_rules);
        Ok(())
    }

    fn parse_sequence(
        &mut self,
        src: usize,
        rule_name: &str,
        rule: &mut Rule,
        is_nested: bool,
    ) -> Result<usize, GrammarError> {
        let mut last_sym_start = rule.len();
        let mut pos = src;
        let mut n_prev_rules: u64 = 1;

        loop {
            let c = self.at(pos);
            if c == 0 {
                break;
            }
            if c == b'"' {
                // literal string
                pos += 1;
                last_sym_start = rule.len();
                n_prev_rules = 1;
                while self.at(pos) != b'"' {
                    if self.at(pos) == 0 {
                        return Err(err("unexpected end of input"));
                    }
                    let (chr, next) = self.parse_char(pos)?;
                    pos = next;
                    rule.push(Element::new(ElementType::Char, chr));
                }
                pos = self.parse_space(pos + 1, is_nested);
            } else if c == b'[' {
                // char range(s)
                pos += 1;
                let mut start_type = ElementType::Char;
                if self.at(pos) == b'^' {
                    pos += 1;
                    start_type = ElementType::CharNot;
                }
                last_sym_start = rule.len();
                n_prev_rules = 1;
                while self.at(pos) != b']' {
                    if self.at(pos) == 0 {
                        return Err(err("unexpected end of input"));
                    }
                    let (chr, next) = self.parse_char(pos)?;
                    pos = next;
                    let kind = if last_sym_start < rule.len() {
                        ElementType::CharAlt
                    } else {
                        start_type
                    };
                    rule.push(Element::new(kind, chr));
                    if self.at(pos) == b'-' && self.at(pos + 1) != b']' {
                        if self.at(pos + 1) == 0 {
                            return Err(err("unexpected end of input"));
                        }
                        let (end_chr, next) = self.parse_char(pos + 1)?;
                        pos = next;
                        rule.push(Element::new(ElementType::CharRngUpper, end_chr));
                    }
                }
                pos = self.parse_space(pos + 1, is_nested);
            } else if c == b'<' || c == b'!' {
                // token
                let mut kind = ElementType::Token;
                if c == b'!' {
                    kind = ElementType::TokenNot;
                    pos += 1;
                }
                let (token, token_end) = self.parse_token(pos)?;
                last_sym_start = rule.len();
                n_prev_rules = 1;
                rule.push(Element::new(kind, token));
                pos = self.parse_space(token_end, is_nested);
            } else if is_word_char(c) {
                // rule reference
                let name_end = self.parse_name(pos)?;
                let ref_rule_id = self.get_symbol_id(&self.src[pos..name_end]);
                pos = self.parse_space(name_end, is_nested);
                last_sym_start = rule.len();
                n_prev_rules = 1;
                rule.push(Element::new(ElementType::RuleRef, ref_rule_id));
            } else if c == b'(' {
                // grouping: nested alternates into a synthesized rule
                if self.depth >= MAX_NESTING {
                    return Err(err(format!(
                        "groups nested deeper than {MAX_NESTING} levels at {}",
                        self.rest(pos)
                    )));
                }
                pos = self.parse_space(pos + 1, true);
                let n_rules_before = self.symbol_ids.len() as u32;
                let sub_rule_id = self.generate_symbol_id(rule_name);
                self.depth += 1;
                let result = self.parse_alternates(pos, rule_name, sub_rule_id, true);
                self.depth -= 1;
                pos = result?;
                let generated = (self.symbol_ids.len() as u32).wrapping_sub(n_rules_before);
                n_prev_rules = u64::from(generated.max(1));
                last_sym_start = rule.len();
                rule.push(Element::new(ElementType::RuleRef, sub_rule_id));
                if self.at(pos) != b')' {
                    return Err(err(format!("expecting ')' at {}", self.rest(pos))));
                }
                pos = self.parse_space(pos + 1, is_nested);
            } else if c == b'.' {
                // any char
                last_sym_start = rule.len();
                n_prev_rules = 1;
                rule.push(Element::new(ElementType::CharAny, 0));
                pos = self.parse_space(pos + 1, is_nested);
            } else if c == b'*' || c == b'+' || c == b'?' {
                pos = self.parse_space(pos + 1, is_nested);
                let (min, max) = match c {
                    b'*' => (0, None),
                    b'+' => (1, None),
                    _ => (0, Some(1)),
                };
                self.handle_repetitions(
                    rule,
                    rule_name,
                    last_sym_start,
                    &mut n_prev_rules,
                    min,
                    max,
                    pos,
                )?;
            } else if c == b'{' {
                pos = self.parse_space(pos + 1, is_nested);
                if !is_digit_char(self.at(pos)) {
                    return Err(err(format!("expecting an int at {}", self.rest(pos))));
                }
                let int_end = self.parse_int(pos)?;
                let min_times = self.int_value(pos, int_end)?;
                pos = self.parse_space(int_end, is_nested);

                let mut max_times: Option<u64> = None;
                if self.at(pos) == b'}' {
                    max_times = Some(min_times);
                    pos = self.parse_space(pos + 1, is_nested);
                } else if self.at(pos) == b',' {
                    pos = self.parse_space(pos + 1, is_nested);
                    if is_digit_char(self.at(pos)) {
                        let int_end = self.parse_int(pos)?;
                        max_times = Some(self.int_value(pos, int_end)?);
                        pos = self.parse_space(int_end, is_nested);
                    }
                    if self.at(pos) != b'}' {
                        return Err(err(format!("expecting '}}' at {}", self.rest(pos))));
                    }
                    pos = self.parse_space(pos + 1, is_nested);
                } else {
                    return Err(err(format!("expecting ',' at {}", self.rest(pos))));
                }
                if min_times > MAX_REPETITION_THRESHOLD {
                    return Err(err(
                        "number of repetitions exceeds sane defaults, please reduce the number \
                         of repetitions",
                    ));
                }
                // Upstream: a maximum above the threshold means "no maximum". (Its sentinel
                // for "none" is UINT64_MAX, so an explicit {m,18446744073709551615} is also
                // unbounded there; it is above the threshold here too.)
                if max_times.is_some_and(|m| m > MAX_REPETITION_THRESHOLD) {
                    max_times = None;
                }
                self.handle_repetitions(
                    rule,
                    rule_name,
                    last_sym_start,
                    &mut n_prev_rules,
                    min_times,
                    max_times,
                    pos,
                )?;
            } else {
                break;
            }
        }
        Ok(pos)
    }

    fn parse_rule(&mut self, src: usize) -> Result<usize, GrammarError> {
        let name_end = self.parse_name(src)?;
        let mut pos = self.parse_space(name_end, false);
        let name = String::from_utf8_lossy(&self.src[src..name_end]).into_owned();
        let rule_id = self.get_symbol_id(&self.src[src..name_end]);

        if !(self.at(pos) == b':' && self.at(pos + 1) == b':' && self.at(pos + 2) == b'=') {
            return Err(err(format!("expecting ::= at {}", self.rest(pos))));
        }
        pos = self.parse_space(pos + 3, true);
        pos = self.parse_alternates(pos, &name, rule_id, false)?;

        match self.at(pos) {
            b'\r' => pos += if self.at(pos + 1) == b'\n' { 2 } else { 1 },
            b'\n' => pos += 1,
            0 => {}
            _ => {
                return Err(err(format!(
                    "expecting newline or end at {}",
                    self.rest(pos)
                )))
            }
        }
        Ok(self.parse_space(pos, true))
    }

    fn parse_all(&mut self) -> Result<(), GrammarError> {
        let mut pos = self.parse_space(0, true);
        while self.at(pos) != 0 {
            pos = self.parse_rule(pos)?;
        }
        // Every rule defined, every reference to a defined rule.
        for rule in &self.rules {
            if rule.is_empty() {
                return Err(err("Undefined rule"));
            }
            for elem in rule {
                if elem.kind == ElementType::RuleRef {
                    let defined = self
                        .rules
                        .get(elem.value as usize)
                        .is_some_and(|r| !r.is_empty());
                    if !defined {
                        if let Some((name, _)) =
                            self.symbol_ids.iter().find(|(_, &id)| id == elem.value)
                        {
                            return Err(err(format!("Undefined rule identifier '{name}'")));
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

fn print_grammar_char(out: &mut String, c: u32) {
    if (0x20..=0x7f).contains(&c) {
        out.push(c as u8 as char);
    } else {
        let _ = write!(out, "<U+{c:04X}>");
    }
}

fn print_rule(
    out: &mut String,
    rule_id: u32,
    rule: &Rule,
    names: &BTreeMap<u32, &str>,
) -> Result<(), GrammarError> {
    let malformed = |msg: String| GrammarError::Parse(msg);
    if rule.last().map(|e| e.kind) != Some(ElementType::End) {
        return Err(malformed(format!(
            "malformed rule, does not end with LLAMA_GRETYPE_END: {rule_id}"
        )));
    }
    let name_of = |id: u32| {
        names
            .get(&id)
            .copied()
            .ok_or_else(|| malformed(format!("no name for rule {id}")))
    };
    let _ = write!(out, "{} ::= ", name_of(rule_id)?);
    for i in 0..rule.len() - 1 {
        let elem = rule[i];
        match elem.kind {
            ElementType::End => {
                return Err(malformed(format!("unexpected end of rule: {rule_id},{i}")))
            }
            ElementType::Alt => out.push_str("| "),
            ElementType::RuleRef => {
                let _ = write!(out, "{} ", name_of(elem.value)?);
            }
            ElementType::Char => {
                out.push('[');
                print_grammar_char(out, elem.value);
            }
            ElementType::CharNot => {
                out.push_str("[^");
                print_grammar_char(out, elem.value);
            }
            ElementType::CharRngUpper | ElementType::CharAlt => {
                if i == 0 || !rule[i - 1].is_char() {
                    let what = if elem.kind == ElementType::CharAlt {
                        "LLAMA_GRETYPE_CHAR_ALT"
                    } else {
                        "LLAMA_GRETYPE_CHAR_RNG_UPPER"
                    };
                    return Err(malformed(format!(
                        "{what} without preceding char: {rule_id},{i}"
                    )));
                }
                if elem.kind == ElementType::CharRngUpper {
                    out.push('-');
                }
                print_grammar_char(out, elem.value);
            }
            ElementType::CharAny => out.push('.'),
            ElementType::Token => {
                let _ = write!(out, "<[{}]> ", elem.value);
            }
            ElementType::TokenNot => {
                let _ = write!(out, "!<[{}]> ", elem.value);
            }
        }
        if elem.is_char()
            && !matches!(
                rule[i + 1].kind,
                ElementType::CharAlt | ElementType::CharRngUpper | ElementType::CharAny
            )
        {
            out.push_str("] ");
        }
    }
    out.push('\n');
    Ok(())
}
