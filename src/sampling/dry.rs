//! DRY ("don't repeat yourself"): penalizes tokens that would extend a sequence repeated
//! from earlier in the context, up to sequence breakers (ported by upstream from koboldcpp).

use std::collections::HashMap;

use super::penalties::Ring;
use super::{Candidates, Sampler, VocabAccess};

/// Sequence breakers by head token: the tails (empty for single-token breakers).
pub type Breakers = HashMap<i32, Vec<Vec<i32>>>;

const MAX_CHAR_LEN: usize = 40;
const MAX_SEQ_LEN: usize = 20;

/// Upstream's breaker processing (`get_overlapping_token_sequences` per breaker): each token
/// whose text contains the breaker is a single-token breaker; a token whose text ends with
/// a prefix of the breaker heads the tokenization of the rest (at most 20 tokens).
/// Empty breakers are skipped with a warning; longer than 40 bytes are truncated.
pub fn process_breakers(vocab: &dyn VocabAccess, breakers: &[Vec<u8>]) -> Result<Breakers, String> {
    let mut out = Breakers::new();
    for (index, breaker) in breakers.iter().enumerate() {
        if breaker.is_empty() {
            crate::log_warn!("skipping null or empty DRY sequence breaker at index {index}");
            continue;
        }
        let mut s = breaker.clone();
        if s.len() > MAX_CHAR_LEN {
            crate::log_warn!("truncating DRY sequence breaker to {MAX_CHAR_LEN} characters");
            s.truncate(MAX_CHAR_LEN);
        }
        overlapping_sequences(vocab, &s, &mut out)?;
    }
    Ok(out)
}

fn overlapping_sequences(
    vocab: &dyn VocabAccess,
    s: &[u8],
    out: &mut Breakers,
) -> Result<(), String> {
    for id in 0..vocab.n_tokens() {
        let word = vocab
            .detokenize_one(id)
            .ok_or("sequence breakers need detokenization, which is unavailable")?;
        if word.windows(s.len()).any(|w| w == s) {
            out.entry(id).or_default().push(Vec::new());
            continue;
        }
        let mut pos = 0usize;
        while let Some(found) = word[pos..].iter().position(|&b| b == s[0]) {
            let p = pos + found;
            let mut i = 1usize;
            let mut matched = true;
            while i < s.len() && i + p < word.len() {
                if word[p + i] != s[i] {
                    matched = false;
                    break;
                }
                i += 1;
            }
            if matched {
                let mut tail = vocab
                    .tokenize(&s[i..])
                    .ok_or("sequence breakers need tokenization, which is unavailable")?;
                tail.truncate(MAX_SEQ_LEN);
                let seqs = out.entry(id).or_default();
                if !seqs.contains(&tail) {
                    seqs.push(tail);
                }
            }
            pos = p + 1;
        }
    }
    Ok(())
}

#[derive(Clone)]
pub struct Dry {
    multiplier: f32,
    base: f32,
    allowed_length: i32,
    penalty_last_n: i32,
    breakers: Breakers,
    repeat_count: Vec<i32>,
    max_token_repeat: HashMap<i32, i32>,
    last_tokens: Ring,
}

impl Dry {
    /// Whether the parameters enable DRY (otherwise the constructor returns the empty
    /// sampler "?dry"); `penalty_last_n` is clamped to >= 0 first.
    pub fn enabled(multiplier: f32, base: f32, penalty_last_n: i32) -> bool {
        multiplier != 0.0 && base >= 1.0 && penalty_last_n.max(0) != 0
    }

    pub fn new(
        multiplier: f32,
        base: f32,
        allowed_length: i32,
        penalty_last_n: i32,
        breakers: Breakers,
    ) -> Self {
        let last_n = penalty_last_n.max(0);
        Dry {
            multiplier,
            base,
            allowed_length,
            penalty_last_n: last_n,
            breakers,
            repeat_count: vec![0; last_n as usize],
            max_token_repeat: HashMap::new(),
            last_tokens: Ring::new(last_n as usize),
        }
    }

    fn active(&self) -> bool {
        !(self.multiplier == 0.0 || self.base < 1.0 || self.penalty_last_n == 0)
    }
}

impl Sampler for Dry {
    fn name(&self) -> &str {
        "dry"
    }
    fn accept(&mut self, token: i32) {
        if self.active() {
            self.last_tokens.push_back(token);
        }
    }
    fn apply(&mut self, cur: &mut Candidates) {
        if !self.active() {
            return;
        }
        let last_n_repeat = (self.last_tokens.len() as i32).min(self.penalty_last_n);
        if last_n_repeat <= self.allowed_length {
            return;
        }
        let n = last_n_repeat as usize;
        self.repeat_count.clear();
        self.repeat_count.resize(n, 0);
        self.max_token_repeat.clear();
        let lt = &self.last_tokens;

        // Step 1: the nearest restart sequence limits the repetition length.
        let mut rep_limit = last_n_repeat;
        for i in 0..n {
            let Some(tails) = self.breakers.get(&lt.rat(i)) else {
                continue;
            };
            let mut longest: i32 = -1;
            for tail in tails {
                let seq_len = tail.len() as i32;
                if seq_len > longest && seq_len <= i as i32 {
                    let matched = (0..tail.len()).all(|off| tail[off] == lt.rat(i - off - 1));
                    if matched {
                        longest = seq_len;
                    }
                }
            }
            if longest >= 0 {
                rep_limit = i as i32 - longest;
                break;
            }
        }
        if rep_limit < self.allowed_length {
            return;
        }

        // Step 2: reverse Z-algorithm over the last tokens.
        {
            let last = n - 1;
            let (mut rt, mut lft) = (0usize, 0usize);
            for k in 1..n {
                if k > rt {
                    let mut m = 0usize;
                    while m + k < n && lt.rat(m) == lt.rat(m + k) {
                        m += 1;
                    }
                    self.repeat_count[last - k] = (m as i32).min(rep_limit);
                    if m > 0 {
                        lft = k;
                        rt = k + m - 1;
                    }
                } else {
                    let p = k - lft;
                    let right_part_len = (rt - k + 1) as i32;
                    if self.repeat_count[last - p] < right_part_len {
                        let m = self.repeat_count[last - p].min(rep_limit);
                        self.repeat_count[last - k] = m;
                    } else {
                        let mut i = rt + 1;
                        while i < n && lt.rat(i) == lt.rat(i - k) {
                            i += 1;
                        }
                        self.repeat_count[last - k] = ((i - k) as i32).min(rep_limit);
                        lft = k;
                        rt = i - 1;
                    }
                }
            }
        }

        // Step 3: the longest repeat each next token would extend.
        for i in 0..n - 1 {
            let repeat_len = self.repeat_count[i];
            if repeat_len >= self.allowed_length {
                let token = lt.rat(n - 2 - i);
                let e = self.max_token_repeat.entry(token).or_insert(repeat_len);
                if *e < repeat_len {
                    *e = repeat_len;
                }
            }
        }

        // Step 4: penalties, the exponent clamped so pow stays finite.
        const FLOAT_MAX_LOG: f32 = 88.722_84; // upstream: 88.7228391f, the same float
        let mut max_exponent = 0i32;
        if self.base > 1.000_001 {
            max_exponent = crate::cpp::f32_to_int(FLOAT_MAX_LOG / self.base.ln());
        }
        for t in cur.data_mut() {
            let Some(&max_repeat) = self.max_token_repeat.get(&t.id) else {
                continue;
            };
            let single_token_breaker = self
                .breakers
                .get(&t.id)
                .is_some_and(|tails| tails.iter().any(|tail| tail.is_empty()));
            if !single_token_breaker {
                let mut repeat_exp = max_repeat - self.allowed_length;
                if max_exponent > 0 && repeat_exp > max_exponent {
                    repeat_exp = max_exponent;
                }
                let penalty =
                    (self.multiplier as f64 * (self.base as f64).powf(repeat_exp as f64)) as f32;
                t.logit -= penalty;
            }
        }
        cur.sorted = false;
    }
    fn reset(&mut self) {
        self.last_tokens.clear();
        self.repeat_count.clear();
        self.max_token_repeat.clear();
    }
    fn clone_sampler(&self) -> Option<Box<dyn Sampler>> {
        Some(Box::new(self.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampling::basic::Dist;
    use crate::sampling::TokenData;

    /// Upstream's tests/test-sampling.cpp `test_dry`: probabilities in, DRY with token
    /// breakers (head, tail...), then `dist` to renormalize; expected probabilities out.
    #[allow(clippy::too_many_arguments)]
    fn check(
        probs: &[f32],
        last: &[i32],
        expected: &[f32],
        mult: f32,
        base: f32,
        allowed: i32,
        last_n: i32,
        breakers: &[&[i32]],
    ) {
        let mut map = Breakers::new();
        for b in breakers {
            map.entry(b[0]).or_default().push(b[1..].to_vec());
        }
        let mut dry = Dry::new(mult, base, allowed, last_n, map);
        for &t in last {
            dry.accept(t);
        }
        let mut data: Vec<TokenData> = probs
            .iter()
            .enumerate()
            .map(|(i, &p)| TokenData {
                id: i as i32,
                logit: p.ln(),
                p,
            })
            .collect();
        let mut cur = Candidates::new(&mut data, -1, false);
        dry.apply(&mut cur);
        Dist::new(0).apply(&mut cur);
        for (t, &want) in cur.data().iter().zip(expected) {
            assert!(
                (t.p - want).abs() < 1e-5,
                "{:?} vs {expected:?}",
                cur.data()
            );
        }
    }

    #[test]
    fn upstream_dry_cases() {
        check(&[0.25; 4], &[0, 1], &[0.25; 4], 1.0, 1.1, 2, 4, &[]);
        check(
            &[0.25; 4],
            &[0, 1, 2, 0, 1],
            &[0.296923, 0.296923, 0.109232, 0.296923],
            1.0,
            1.1,
            2,
            5,
            &[],
        );
        check(
            &[0.2; 5],
            &[0, 1, 3, 4, 0, 1],
            &[0.2; 5],
            1.0,
            1.1,
            2,
            6,
            &[&[3]],
        );
        check(
            &[0.2; 5],
            &[0, 1, 2, 0, 1],
            &[0.241818, 0.241818, 0.032727, 0.241818, 0.241818],
            2.0,
            1.1,
            2,
            5,
            &[],
        );
        check(
            &[0.2; 5],
            &[0, 1, 2, 3, 4, 0, 1],
            &[0.2; 5],
            1.0,
            1.1,
            4,
            7,
            &[],
        );
    }

    /// A vocabulary of single characters plus a few words, tokenized one byte at a time.
    struct Toy(Vec<&'static str>);
    impl VocabAccess for Toy {
        fn n_tokens(&self) -> i32 {
            self.0.len() as i32
        }
        fn is_eog(&self, _: i32) -> bool {
            false
        }
        fn eot(&self) -> i32 {
            -1
        }
        fn eos(&self) -> i32 {
            -1
        }
        fn piece(&self, id: i32) -> Vec<u8> {
            self.0[id as usize].as_bytes().to_vec()
        }
        fn detokenize_one(&self, id: i32) -> Option<Vec<u8>> {
            Some(self.piece(id))
        }
        fn tokenize(&self, text: &[u8]) -> Option<Vec<i32>> {
            text.iter()
                .map(|&b| {
                    self.0
                        .iter()
                        .position(|t| t.as_bytes() == [b])
                        .map(|i| i as i32)
                })
                .collect()
        }
    }

    #[test]
    fn breakers_from_text() {
        let vocab = Toy(vec!["a", "b", ":", "x:", "ab", "zab:c"]);
        let map = process_breakers(&vocab, &[b"ab:".to_vec(), Vec::new()]).unwrap();
        // "zab:c" contains the breaker: a single-token breaker
        assert_eq!(map[&5], vec![Vec::<i32>::new()]);
        // "a" starts it: the rest "b:" tokenized; "ab" ends with "ab": the rest ":"
        assert_eq!(map[&0], vec![vec![1, 2]]);
        assert_eq!(map[&4], vec![vec![2]]);
        assert!(!map.contains_key(&3) && !map.contains_key(&1));
        // no tokenizer: an error, not a silent empty set
        struct NoTok;
        impl VocabAccess for NoTok {
            fn n_tokens(&self) -> i32 {
                1
            }
            fn is_eog(&self, _: i32) -> bool {
                false
            }
            fn eot(&self) -> i32 {
                -1
            }
            fn eos(&self) -> i32 {
                -1
            }
            fn piece(&self, _: i32) -> Vec<u8> {
                b"a".to_vec()
            }
            fn detokenize_one(&self, _: i32) -> Option<Vec<u8>> {
                Some(b"a".to_vec())
            }
            fn tokenize(&self, _: &[u8]) -> Option<Vec<i32>> {
                None
            }
        }
        assert!(process_breakers(&NoTok, &[b"ab".to_vec()]).is_err());
    }
}
