//! A parsed grammar with its matcher state ([`Grammar`]): applying it to candidates,
//! accepting tokens, lazy triggers. Upstream's `llama_grammar` (`llama-grammar.cpp`).

use std::sync::Arc;

use super::error::GrammarError;
use super::matcher::{Candidate, Rules, Stack};
use super::parser::{Element, ElementType, ParsedGrammar, Rule};
use super::trigger::TriggerPattern;
use super::utf8::{decode_utf8, PartialUtf8};
use super::vocab::GrammarVocab;

/// Options of a lazy grammar: it accepts everything until a trigger token is accepted or a
/// trigger pattern matches the text generated so far.
#[derive(Clone, Debug, Default)]
pub struct Triggers<'a> {
    pub lazy: bool,
    pub patterns: &'a [&'a str],
    pub tokens: &'a [i32],
}

/// A grammar and its matching state (upstream `struct llama_grammar`).
#[derive(Clone, Debug)]
pub struct Grammar {
    vocab: Option<Arc<GrammarVocab>>,
    rules: Arc<Rules>,
    initial_stacks: Arc<Vec<Stack>>,
    stacks: Vec<Stack>,
    partial_utf8: PartialUtf8,
    lazy: bool,
    awaiting_trigger: bool,
    trigger_buffer: Vec<u8>,
    /// Buffered tokens and their byte ranges in `trigger_buffer`, replayed on a trigger.
    trigger_buffer_positions: Vec<(i32, (usize, usize))>,
    trigger_tokens: Vec<i32>,
    trigger_patterns: Arc<Vec<TriggerPattern>>,
}

/// Parses GBNF text with C-string semantics (it ends at the first NUL) after checking it is
/// UTF-8. The vocabulary resolves `<text>` token references.
pub fn parse_grammar(
    text: &[u8],
    vocab: Option<&GrammarVocab>,
) -> Result<ParsedGrammar, GrammarError> {
    let text = &text[..text.iter().position(|&b| b == 0).unwrap_or(text.len())];
    if let Err(e) = std::str::from_utf8(text) {
        return Err(GrammarError::InvalidUtf8(e.valid_up_to()));
    }
    super::parser::parse(text, vocab.map(|v| v as &dyn super::parser::TokenResolver))
}

impl Grammar {
    /// Upstream `llama_grammar_init_impl` from text: parse, find `root`, refuse left
    /// recursion, build the initial stacks, compile the trigger patterns.
    pub fn new(
        vocab: Option<Arc<GrammarVocab>>,
        text: &[u8],
        root: &str,
        triggers: Triggers<'_>,
    ) -> Result<Grammar, GrammarError> {
        let parsed = parse_grammar(text, vocab.as_deref())?;
        if parsed.rules.is_empty() {
            return Err(GrammarError::NoRules);
        }
        let Some(&start) = parsed.symbol_ids.get(root) else {
            return Err(GrammarError::NoRoot(root.to_string()));
        };
        let patterns = triggers
            .patterns
            .iter()
            .map(|p| TriggerPattern::new(p))
            .collect::<Result<Vec<_>, _>>()?;
        let mut grammar = Grammar::from_rules(vocab, parsed.rules, start as usize)?;
        grammar.lazy = triggers.lazy;
        grammar.awaiting_trigger = triggers.lazy;
        grammar.trigger_tokens = triggers.tokens.to_vec();
        grammar.trigger_patterns = Arc::new(patterns);
        Ok(grammar)
    }

    /// Upstream `llama_grammar_init_impl` from rules (each ends with `End`; the rules of a
    /// caller are checked: references in range, char-set elements in place).
    pub fn from_rules(
        vocab: Option<Arc<GrammarVocab>>,
        rules: Vec<Rule>,
        start_rule: usize,
    ) -> Result<Grammar, GrammarError> {
        for (i, rule) in rules.iter().enumerate() {
            if rule.last().map(|e| e.kind) != Some(ElementType::End) {
                return Err(GrammarError::MalformedRule(i));
            }
            for (k, elem) in rule.iter().enumerate() {
                if elem.kind == ElementType::RuleRef
                    && rules
                        .get(elem.value as usize)
                        .map_or(true, |r| r.is_empty())
                {
                    return Err(GrammarError::UndefinedRule {
                        rule: i,
                        target: elem.value,
                    });
                }
                if elem.kind == ElementType::End && k + 1 != rule.len() {
                    return Err(GrammarError::MalformedRule(i));
                }
                // a range end or alternate char must follow a char element; a range end
                // must not follow a range end
                if matches!(elem.kind, ElementType::CharAlt | ElementType::CharRngUpper) {
                    let prev = k.checked_sub(1).map(|p| rule[p].kind);
                    let ok = matches!(
                        prev,
                        Some(
                            ElementType::Char
                                | ElementType::CharNot
                                | ElementType::CharAlt
                                | ElementType::CharRngUpper
                        )
                    ) && !(elem.kind == ElementType::CharRngUpper
                        && prev == Some(ElementType::CharRngUpper));
                    if !ok {
                        return Err(GrammarError::MalformedRule(i));
                    }
                }
            }
        }
        if start_rule >= rules.len() {
            return Err(GrammarError::UndefinedRule {
                rule: start_rule,
                target: start_rule as u32,
            });
        }
        if let Some(i) = super::matcher::find_left_recursion(&rules) {
            return Err(GrammarError::LeftRecursion(i));
        }
        let rules = Rules(rules);
        let stacks = super::matcher::initial_stacks(&rules, start_rule as u32);
        Ok(Grammar {
            vocab,
            rules: Arc::new(rules),
            initial_stacks: Arc::new(stacks.clone()),
            stacks,
            partial_utf8: PartialUtf8::default(),
            lazy: false,
            awaiting_trigger: false,
            trigger_buffer: Vec::new(),
            trigger_buffer_positions: Vec::new(),
            trigger_tokens: Vec::new(),
            trigger_patterns: Arc::new(Vec::new()),
        })
    }

    pub fn rules(&self) -> &[Rule] {
        &self.rules.0
    }

    pub fn stacks(&self) -> &[Stack] {
        &self.stacks
    }

    /// Element at a stack position.
    pub fn element(&self, pos: super::matcher::Pos) -> Element {
        self.rules.0[pos.rule as usize][pos.idx as usize]
    }

    /// Whether the text accepted so far is a complete match (some stack is empty).
    pub fn can_end(&self) -> bool {
        self.stacks.iter().any(Vec::is_empty)
    }

    /// The unfinished UTF-8 sequence at the end of the accepted text.
    pub fn partial_utf8(&self) -> PartialUtf8 {
        self.partial_utf8
    }

    pub fn is_awaiting_trigger(&self) -> bool {
        self.awaiting_trigger
    }

    /// Back to the state right after construction (upstream re-parses the text; the result
    /// is the same).
    pub fn reset(&mut self) {
        self.stacks = self.initial_stacks.as_ref().clone();
        self.partial_utf8 = PartialUtf8::default();
        self.awaiting_trigger = self.lazy;
        self.trigger_buffer.clear();
        self.trigger_buffer_positions.clear();
    }

    /// Upstream `llama_grammar_apply_impl`: calls `reject(i)` for each candidate `i` (of
    /// `n`, token id `id_at(i)`) the grammar does not allow next. Nothing while a lazy
    /// grammar awaits its trigger.
    pub fn apply(
        &self,
        n: usize,
        id_at: impl Fn(usize) -> i32,
        mut reject: impl FnMut(usize),
    ) -> Result<(), GrammarError> {
        let vocab = self.vocab.as_deref().ok_or(GrammarError::NoVocab)?;
        if self.awaiting_trigger {
            return Ok(());
        }
        let allow_eog = self.can_end();

        let mut decoded: Vec<(usize, i32, Vec<u32>, PartialUtf8)> = Vec::with_capacity(n);
        let mut out_of_range = None;
        for i in 0..n {
            let id = id_at(i);
            let Some(piece) = vocab.piece(id) else {
                // upstream: std::out_of_range out of the piece cache (abort)
                out_of_range.get_or_insert(id);
                reject(i);
                continue;
            };
            if vocab.is_eog(id) {
                if !allow_eog {
                    reject(i);
                }
            } else if piece.first().map_or(true, |&b| b == 0) {
                reject(i);
            } else {
                let (cps, partial) = decode_utf8(piece, self.partial_utf8);
                decoded.push((i, id, cps, partial));
            }
        }
        if let Some(id) = out_of_range {
            crate::log_warn!(
                "grammar: candidate token {id} is outside the vocabulary ({} tokens); rejected",
                vocab.n_tokens()
            );
        }
        let candidates: Vec<Candidate<'_>> = decoded
            .iter()
            .map(|(i, id, cps, partial)| Candidate {
                index: *i,
                code_points: cps,
                offset: 0,
                partial: *partial,
                id: *id,
            })
            .collect();
        for r in super::matcher::reject_candidates(&self.rules, &self.stacks, &candidates) {
            reject(r.index);
        }
        Ok(())
    }

    /// Upstream `llama_grammar_accept_impl`: the sampler chose `token`. A lazy grammar
    /// buffers text until a trigger; then the buffered tokens from the trigger on are
    /// replayed into the grammar.
    pub fn accept(&mut self, token: i32) -> Result<(), GrammarError> {
        let vocab = self.vocab.clone().ok_or(GrammarError::NoVocab)?;
        let piece = vocab
            .piece(token)
            .ok_or(GrammarError::TokenOutOfRange(token))?;

        if self.awaiting_trigger {
            if self.trigger_tokens.contains(&token) {
                self.awaiting_trigger = false;
                self.trigger_buffer.clear();
                // upstream leaves the buffered positions in place; they are never read
                // again because the grammar does not wait a second time
                self.trigger_buffer_positions.clear();
                crate::log_debug!("Grammar triggered on token {token}");
                return self.accept_token(token, piece);
            }
            let start = self.trigger_buffer.len();
            self.trigger_buffer.extend_from_slice(piece);
            self.trigger_buffer_positions
                .push((token, (start, self.trigger_buffer.len())));
            let patterns = Arc::clone(&self.trigger_patterns);
            for pattern in patterns.iter() {
                if let Some(start) = pattern.find(&self.trigger_buffer) {
                    self.awaiting_trigger = false;
                    let buffer = std::mem::take(&mut self.trigger_buffer);
                    let positions = std::mem::take(&mut self.trigger_buffer_positions);
                    crate::log_debug!(
                        "Grammar triggered on regex: '{}'",
                        String::from_utf8_lossy(&buffer[start..])
                    );
                    // replay the tokens that overlap [start, end), the first one possibly
                    // in part; stop at the first the grammar refuses (upstream aborts)
                    for (tok, (tok_start, tok_end)) in positions {
                        if tok_end <= start {
                            continue;
                        }
                        let piece_start = tok_start.max(start);
                        self.accept_token(tok, &buffer[piece_start..tok_end])?;
                    }
                    return Ok(());
                }
            }
            return Ok(());
        }

        if vocab.is_eog(token) {
            if self.can_end() {
                return Ok(());
            }
            return Err(GrammarError::EarlyEndOfGeneration(token));
        }
        self.accept_token(token, piece)
    }

    /// Upstream `llama_grammar_accept_token`: advances the stacks by a token whose text is
    /// `piece` (token elements match `token`, char elements the piece's code points). When
    /// no stack survives, the state is left as it was.
    pub fn accept_token(&mut self, token: i32, piece: &[u8]) -> Result<(), GrammarError> {
        let (code_points, partial) = decode_utf8(piece, self.partial_utf8);
        let stacks = super::matcher::accept_token(&self.rules, &self.stacks, token, &code_points);
        if stacks.is_empty() {
            return Err(GrammarError::Rejected {
                token,
                piece: String::from_utf8_lossy(piece).into_owned(),
            });
        }
        self.stacks = stacks;
        self.partial_utf8 = partial;
        Ok(())
    }

    /// Upstream `llama_grammar_accept_str`: advances the stacks code point by code point
    /// (no token elements). When no stack survives, the state is left as it was.
    pub fn accept_str(&mut self, piece: &[u8]) -> Result<(), GrammarError> {
        let (code_points, partial) = decode_utf8(piece, self.partial_utf8);
        let mut stacks = self.stacks.clone();
        for &chr in &code_points[..code_points.len() - 1] {
            stacks = super::matcher::accept(&self.rules, &stacks, chr);
        }
        if stacks.is_empty() {
            return Err(GrammarError::Rejected {
                token: -1,
                piece: String::from_utf8_lossy(piece).into_owned(),
            });
        }
        self.stacks = stacks;
        self.partial_utf8 = partial;
        Ok(())
    }
}
