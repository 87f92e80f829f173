//! The incremental matcher: upstream's pushdown stacks over the parsed rules
//! (`llama_grammar_advance_stack`, `_accept`, `_reject_candidates_for_stack`,
//! `_detect_left_recursion`), with positions as (rule, index) pairs instead of pointers.

use std::collections::HashSet;

use super::parser::{Element, ElementType, Rule};
use super::utf8::PartialUtf8;

/// A position in the rules: element `idx` of rule `rule` (upstream: a pointer into it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Pos {
    pub rule: u32,
    pub idx: u32,
}

impl Pos {
    fn next(self) -> Pos {
        Pos {
            rule: self.rule,
            idx: self.idx + 1,
        }
    }
}

/// One pushdown stack; the top (last) is always a terminal (char set or token) position.
pub type Stack = Vec<Pos>;

/// The rules with element lookup by position.
#[derive(Clone, Debug)]
pub struct Rules(pub Vec<Rule>);

impl Rules {
    fn at(&self, p: Pos) -> Element {
        self.0[p.rule as usize][p.idx as usize]
    }
}

/// Upstream `llama_grammar_match_char`: does `chr` satisfy the char set at `pos`? Also
/// returns the position after the char set.
pub fn match_char(rules: &Rules, mut pos: Pos, chr: u32) -> (bool, Pos) {
    let first = rules.at(pos);
    let is_positive = matches!(first.kind, ElementType::Char | ElementType::CharAny);
    let mut found = false;
    loop {
        let cur = rules.at(pos);
        let nxt = rules.at(pos.next());
        if nxt.kind == ElementType::CharRngUpper {
            found = found || (cur.value <= chr && chr <= nxt.value);
            pos.idx += 2;
        } else if cur.kind == ElementType::CharAny {
            found = true;
            pos.idx += 1;
        } else {
            found = found || cur.value == chr;
            pos.idx += 1;
        }
        if rules.at(pos).kind != ElementType::CharAlt {
            break;
        }
    }
    (found == is_positive, pos)
}

/// Upstream `llama_grammar_match_partial_char`: could some completion of the partial UTF-8
/// sequence satisfy the char set at `pos`?
pub fn match_partial_char(rules: &Rules, mut pos: Pos, partial: PartialUtf8) -> bool {
    let first = rules.at(pos);
    let is_positive = matches!(first.kind, ElementType::Char | ElementType::CharAny);
    let partial_value = partial.value;
    let n_remain = partial.n_remain;

    // invalid sequence or 7-bit char split across 2 bytes (overlong)
    if n_remain < 0 || (n_remain == 1 && partial_value < 2) {
        return false;
    }
    // range of code points this partial sequence could complete to; upstream's shifts are
    // on 32-bit values (n_remain ≤ 3 so they never overflow)
    let shift = (n_remain * 6) as u32;
    let mut low = partial_value.wrapping_shl(shift);
    let high = low | (1u32.wrapping_shl(shift).wrapping_sub(1));
    if low == 0 {
        if n_remain == 2 {
            low = 1 << 11;
        } else if n_remain == 3 {
            low = 1 << 16;
        }
    }
    loop {
        let cur = rules.at(pos);
        let nxt = rules.at(pos.next());
        if nxt.kind == ElementType::CharRngUpper {
            if cur.value <= high && low <= nxt.value {
                return is_positive;
            }
            pos.idx += 2;
        } else if cur.kind == ElementType::CharAny {
            return true;
        } else {
            if low <= cur.value && cur.value <= high {
                return is_positive;
            }
            pos.idx += 1;
        }
        if rules.at(pos).kind != ElementType::CharAlt {
            break;
        }
    }
    !is_positive
}

fn match_token(elem: Element, token: i32) -> bool {
    match elem.kind {
        ElementType::Token => elem.value == token as u32,
        ElementType::TokenNot => elem.value != token as u32,
        _ => false,
    }
}

fn is_terminal(kind: ElementType) -> bool {
    matches!(
        kind,
        ElementType::Char
            | ElementType::CharNot
            | ElementType::CharAny
            | ElementType::Token
            | ElementType::TokenNot
    )
}

/// Upstream `llama_grammar_advance_stack`: expands `stack` into the stacks whose tops are
/// terminals (or that are empty: the grammar can end), appending those not already in
/// `new_stacks`.
pub fn advance_stack(rules: &Rules, stack: Stack, new_stacks: &mut Vec<Stack>) {
    let mut todo: Vec<Stack> = vec![stack];
    let mut seen: HashSet<Stack> = HashSet::new();

    while let Some(curr) = todo.pop() {
        if seen.contains(&curr) {
            continue;
        }
        let Some(&pos) = curr.last() else {
            if !new_stacks.contains(&curr) {
                new_stacks.push(curr.clone());
            }
            seen.insert(curr);
            continue;
        };
        let elem = rules.at(pos);
        match elem.kind {
            ElementType::RuleRef => {
                let rule_id = elem.value;
                let mut sub = Pos {
                    rule: rule_id,
                    idx: 0,
                };
                loop {
                    // the stack without its top, then what follows the reference, then the
                    // alternate's first element
                    let mut next_stack: Stack = curr[..curr.len() - 1].to_vec();
                    if !rules.at(pos.next()).is_end_of_sequence() {
                        next_stack.push(pos.next());
                    }
                    if !rules.at(sub).is_end_of_sequence() {
                        next_stack.push(sub);
                    }
                    todo.push(next_stack);
                    while !rules.at(sub).is_end_of_sequence() {
                        sub.idx += 1;
                    }
                    if rules.at(sub).kind == ElementType::Alt {
                        sub.idx += 1;
                    } else {
                        break;
                    }
                }
            }
            // a terminal on top: done, unless an equal stack is already there
            kind if is_terminal(kind) && !new_stacks.contains(&curr) => {
                new_stacks.push(curr.clone());
            }
            // a duplicate terminal stack; or End/Alt/CharAlt/CharRngUpper, which never sit on
            // top of a stack (upstream aborts; validated rules cannot produce one)
            _ => {}
        }
        seen.insert(curr);
    }
}

/// Upstream `llama_grammar_accept_chr` for one stack.
pub fn accept_chr(rules: &Rules, stack: &Stack, chr: u32, new_stacks: &mut Vec<Stack>) {
    let Some(&pos) = stack.last() else {
        return;
    };
    if matches!(
        rules.at(pos).kind,
        ElementType::Token | ElementType::TokenNot
    ) {
        return;
    }
    let (matched, after) = match_char(rules, pos, chr);
    if matched {
        let mut new_stack: Stack = stack[..stack.len() - 1].to_vec();
        if !rules.at(after).is_end_of_sequence() {
            new_stack.push(after);
        }
        advance_stack(rules, new_stack, new_stacks);
    }
}

/// Upstream `llama_grammar_accept`: every stack advanced by one code point.
pub fn accept(rules: &Rules, stacks: &[Stack], chr: u32) -> Vec<Stack> {
    let mut new_stacks = Vec::with_capacity(stacks.len());
    for stack in stacks {
        accept_chr(rules, stack, chr, &mut new_stacks);
    }
    new_stacks
}

/// Stacks after accepting a token: token elements match by id, char elements by the
/// piece's code points (`code_points` ends with upstream's terminating 0).
pub fn accept_token(
    rules: &Rules,
    stacks: &[Stack],
    token: i32,
    code_points: &[u32],
) -> Vec<Stack> {
    let chars = &code_points[..code_points.len().saturating_sub(1)];
    let mut stacks_new: Vec<Stack> = Vec::with_capacity(stacks.len());
    for stack in stacks {
        let Some(&pos) = stack.last() else {
            continue;
        };
        let elem = rules.at(pos);
        if matches!(elem.kind, ElementType::Token | ElementType::TokenNot) {
            if match_token(elem, token) {
                let mut new_stack: Stack = stack[..stack.len() - 1].to_vec();
                if !rules.at(pos.next()).is_end_of_sequence() {
                    new_stack.push(pos.next());
                }
                advance_stack(rules, new_stack, &mut stacks_new);
            }
        } else {
            let mut current: Vec<Stack> = vec![stack.clone()];
            for &chr in chars {
                let mut next = Vec::new();
                for cur in &current {
                    accept_chr(rules, cur, chr, &mut next);
                }
                current = next;
                if current.is_empty() {
                    break;
                }
            }
            for surviving in current {
                if !stacks_new.contains(&surviving) {
                    stacks_new.push(surviving);
                }
            }
        }
    }
    stacks_new
}

/// A token under test (upstream `llama_grammar_candidate`): its decoded code points (ending
/// in 0), how many of them are matched so far, and the unfinished UTF-8 tail.
#[derive(Clone, Copy, Debug)]
pub struct Candidate<'a> {
    pub index: usize,
    pub code_points: &'a [u32],
    pub offset: usize,
    pub partial: PartialUtf8,
    pub id: i32,
}

impl Candidate<'_> {
    fn first(&self) -> u32 {
        self.code_points.get(self.offset).copied().unwrap_or(0)
    }
}

/// Upstream `llama_grammar_reject_candidates`: the candidates no stack accepts.
pub fn reject_candidates<'a>(
    rules: &Rules,
    stacks: &[Stack],
    candidates: &[Candidate<'a>],
) -> Vec<Candidate<'a>> {
    if candidates.is_empty() {
        return Vec::new();
    }
    // Upstream asserts at least one stack; with none, nothing is accepted.
    let Some((first, rest)) = stacks.split_first() else {
        return candidates.to_vec();
    };
    let mut rejects = reject_candidates_for_stack(rules, first, candidates);
    for stack in rest {
        rejects = reject_candidates_for_stack(rules, stack, &rejects);
    }
    rejects
}

/// Upstream `llama_grammar_reject_candidates_for_stack`.
pub fn reject_candidates_for_stack<'a>(
    rules: &Rules,
    stack: &Stack,
    candidates: &[Candidate<'a>],
) -> Vec<Candidate<'a>> {
    let mut rejects = Vec::with_capacity(candidates.len());
    let Some(&stack_pos) = stack.last() else {
        // the grammar has ended: only tokens with nothing left are fine
        for tok in candidates {
            if tok.first() != 0 || tok.partial.n_remain != 0 {
                rejects.push(*tok);
            }
        }
        return rejects;
    };

    let top = rules.at(stack_pos);
    if matches!(top.kind, ElementType::Token | ElementType::TokenNot) {
        for tok in candidates {
            if tok.first() == 0 {
                // reached the end of a token consumed by char rules: reject iff it ended in
                // a partial sequence
                if tok.partial.n_remain != 0 {
                    rejects.push(*tok);
                }
            } else if !match_token(top, tok.id) {
                rejects.push(*tok);
            }
        }
        return rejects;
    }

    // candidates that match this char set move on to their next code point
    let mut next_candidates = Vec::with_capacity(candidates.len());
    for tok in candidates {
        if tok.first() == 0 {
            if tok.partial.n_remain != 0 && !match_partial_char(rules, stack_pos, tok.partial) {
                rejects.push(*tok);
            }
        } else if match_char(rules, stack_pos, tok.first()).0 {
            next_candidates.push(Candidate {
                offset: tok.offset + 1,
                ..*tok
            });
        } else {
            rejects.push(*tok);
        }
    }
    if next_candidates.is_empty() {
        return rejects;
    }

    let after = match_char(rules, stack_pos, 0).1;
    let mut stack_after: Stack = stack[..stack.len() - 1].to_vec();
    if !rules.at(after).is_end_of_sequence() {
        stack_after.push(after);
    }
    let mut next_stacks = Vec::new();
    advance_stack(rules, stack_after, &mut next_stacks);

    let next_rejects = reject_candidates(rules, &next_stacks, &next_candidates);
    for tok in next_rejects {
        rejects.push(Candidate {
            offset: tok.offset - 1,
            ..tok
        });
    }
    rejects
}

/// Upstream `llama_grammar_detect_left_recursion` over all rules: the index of the first
/// rule (in upstream's visiting order) that is left-recursive, if any. Iterative, so a long
/// chain of rules cannot overflow the stack.
pub fn find_left_recursion(rules: &[Rule]) -> Option<usize> {
    let n = rules.len();
    let mut visited = vec![false; n];
    let mut in_progress = vec![false; n];
    let mut may_be_empty = vec![false; n];

    // A frame: rule index, next element to look at, and whether a nonterminal there is still
    // in leftmost position.
    struct Frame {
        rule: usize,
        i: usize,
        recurse: bool,
    }

    for start in 0..n {
        if visited[start] {
            continue;
        }
        let mut frames: Vec<Frame> = Vec::new();
        // enter(start)
        if in_progress[start] {
            return Some(start);
        }
        enter(rules, start, &mut in_progress, &mut may_be_empty);
        frames.push(Frame {
            rule: start,
            i: 0,
            recurse: true,
        });
        // `returned` holds the rule whose frame just finished, so the caller can apply the
        // "may be empty" step for it.
        let mut returned: Option<usize> = None;
        while let Some(frame) = frames.last_mut() {
            let rule = &rules[frame.rule];
            if let Some(child) = returned.take() {
                // continuation after the recursive call on rule[frame.i]
                if !may_be_empty[child] {
                    frame.recurse = false;
                }
                frame.i += 1;
                continue;
            }
            if frame.i >= rule.len() {
                in_progress[frame.rule] = false;
                visited[frame.rule] = true;
                let done = frame.rule;
                frames.pop();
                if !frames.is_empty() {
                    returned = Some(done);
                }
                continue;
            }
            let elem = rule[frame.i];
            if elem.kind == ElementType::RuleRef && frame.recurse {
                let child = elem.value as usize;
                if child >= n {
                    // an undefined rule: the parser has refused it already
                    frame.i += 1;
                    continue;
                }
                if in_progress[child] {
                    return Some(start);
                }
                if visited[child] {
                    // explored before without finding a cycle: exploring it again (as
                    // upstream does) gives the same answer, in exponential time for
                    // hostile grammars
                    returned = Some(child);
                    continue;
                }
                enter(rules, child, &mut in_progress, &mut may_be_empty);
                frames.push(Frame {
                    rule: child,
                    i: 0,
                    recurse: true,
                });
            } else {
                frame.recurse = elem.is_end_of_sequence();
                frame.i += 1;
            }
        }
    }
    None
}

/// Marks `rule` in progress and records whether one of its alternates is empty.
fn enter(rules: &[Rule], rule: usize, in_progress: &mut [bool], may_be_empty: &mut [bool]) {
    in_progress[rule] = true;
    let mut at_rule_start = true;
    for elem in &rules[rule] {
        if elem.is_end_of_sequence() {
            if at_rule_start {
                may_be_empty[rule] = true;
                break;
            }
            at_rule_start = true;
        } else {
            at_rule_start = false;
        }
    }
}

/// The initial stacks: one per alternate of the start rule, advanced to terminals.
pub fn initial_stacks(rules: &Rules, start_rule: u32) -> Vec<Stack> {
    let mut stacks = Vec::new();
    let mut pos = Pos {
        rule: start_rule,
        idx: 0,
    };
    loop {
        let mut stack = Stack::new();
        if !rules.at(pos).is_end_of_sequence() {
            stack.push(pos);
        }
        advance_stack(rules, stack, &mut stacks);
        while !rules.at(pos).is_end_of_sequence() {
            pos.idx += 1;
        }
        if rules.at(pos).kind == ElementType::Alt {
            pos.idx += 1;
        } else {
            break;
        }
    }
    stacks
}
