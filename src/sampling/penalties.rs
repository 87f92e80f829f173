//! Repetition, frequency and presence penalties over the last accepted tokens.

use std::collections::{HashMap, VecDeque};

use super::{Candidates, Sampler};

/// Upstream's `ring_buffer` as the samplers use it: the last `capacity` tokens.
#[derive(Clone, Default)]
pub struct Ring {
    capacity: usize,
    items: VecDeque<i32>,
}

impl Ring {
    pub fn new(capacity: usize) -> Self {
        Ring {
            capacity,
            items: VecDeque::with_capacity(capacity.min(1 << 16)),
        }
    }
    pub fn push_back(&mut self, token: i32) {
        if self.capacity == 0 {
            return;
        }
        if self.items.len() == self.capacity {
            self.items.pop_front();
        }
        self.items.push_back(token);
    }
    pub fn len(&self) -> usize {
        self.items.len()
    }
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
    pub fn front(&self) -> Option<i32> {
        self.items.front().copied()
    }
    /// The `i`-th token from the end (upstream's `rat`).
    pub fn rat(&self, i: usize) -> i32 {
        self.items[self.items.len() - 1 - i]
    }
    pub fn clear(&mut self) {
        self.items.clear();
    }
}

/// Penalties on the logits of tokens among the last `penalty_last_n` accepted.
#[derive(Clone)]
pub struct Penalties {
    penalty_last_n: i32,
    penalty_repeat: f32,
    penalty_freq: f32,
    penalty_present: f32,
    prev: Ring,
    token_count: HashMap<i32, i32>,
    /// The vocabulary size given to the constructor: the backend form needs a positive one.
    n_vocab: i32,
}

impl Penalties {
    /// Upstream's `is_disabled`: the constructor returns the empty sampler then.
    pub fn is_disabled(last_n: i32, repeat: f32, freq: f32, present: f32) -> bool {
        last_n == 0 || (repeat == 1.0 && freq == 0.0 && present == 0.0)
    }

    pub fn new(n_vocab: i32, last_n: i32, repeat: f32, freq: f32, present: f32) -> Self {
        let last_n = last_n.max(0);
        Penalties {
            penalty_last_n: last_n,
            penalty_repeat: repeat,
            penalty_freq: freq,
            penalty_present: present,
            prev: Ring::new(last_n as usize),
            token_count: HashMap::new(),
            n_vocab,
        }
    }
}

impl Sampler for Penalties {
    fn name(&self) -> &str {
        "penalties"
    }
    fn accept(&mut self, token: i32) {
        if self.penalty_last_n == 0 {
            return;
        }
        *self.token_count.entry(token).or_insert(0) += 1;
        if self.prev.len() >= self.penalty_last_n as usize {
            if let Some(old) = self.prev.front() {
                let c = self.token_count.entry(old).or_insert(0);
                *c -= 1;
                if *c == 0 {
                    self.token_count.remove(&old);
                }
            }
        }
        self.prev.push_back(token);
    }
    fn apply(&mut self, cur: &mut Candidates) {
        if Self::is_disabled(
            self.penalty_last_n,
            self.penalty_repeat,
            self.penalty_freq,
            self.penalty_present,
        ) {
            return;
        }
        for t in cur.data_mut() {
            let Some(&count) = self.token_count.get(&t.id) else {
                continue;
            };
            if t.logit <= 0.0 {
                t.logit *= self.penalty_repeat;
            } else {
                t.logit /= self.penalty_repeat;
            }
            t.logit -=
                count as f32 * self.penalty_freq + (count > 0) as i32 as f32 * self.penalty_present;
        }
        cur.sorted = false;
    }
    fn reset(&mut self) {
        self.prev.clear();
        self.token_count.clear();
    }
    fn backend_init(&mut self, n_outputs_max_per_seq: u32) -> Option<bool> {
        // one output per sequence only: the counts move with each accepted token. A
        // non-positive vocabulary size fails upstream's graph (an assert); here the sampler
        // stays on the CPU.
        Some(n_outputs_max_per_seq <= 1 && self.n_vocab > 0)
    }
    fn backend_apply(&mut self, row: &mut super::backend::Row) {
        super::backend::penalties(
            row,
            &self.token_count,
            self.penalty_repeat,
            self.penalty_freq,
            self.penalty_present,
        );
    }
    fn clone_sampler(&self) -> Option<Box<dyn Sampler>> {
        Some(Box::new(self.clone()))
    }
}
