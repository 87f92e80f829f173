//! The samplers with a random stream besides `dist`: XTC, Mirostat 1 and 2, adaptive-p.

use super::array::{self, SeededRng, TOKEN_NULL};
use super::{Candidates, Sampler};
use crate::cpp;

/// XTC: with probability `probability`, removes the top tokens above `threshold` but the
/// last of them (by moving the start of the caller's array, as upstream).
#[derive(Clone)]
pub struct Xtc {
    probability: f32,
    threshold: f32,
    min_keep: usize,
    rng: SeededRng,
}

impl Xtc {
    pub fn new(probability: f32, threshold: f32, min_keep: usize, seed: u32) -> Self {
        Xtc {
            probability,
            threshold,
            min_keep,
            rng: SeededRng::new(seed),
        }
    }
}

impl Sampler for Xtc {
    fn name(&self) -> &str {
        "xtc"
    }
    fn apply(&mut self, cur: &mut Candidates) {
        if self.probability <= 0.0 || self.threshold > 0.5 || cur.len() < 2 {
            return;
        }
        let chance = cpp::uniform_f32(self.rng.generator(), 0.0, 1.0);
        if chance > self.probability {
            return;
        }
        array::softmax(cur, true);
        let mut pos_last = 0usize;
        for (i, t) in cur.data().iter().enumerate() {
            if t.p >= self.threshold {
                pos_last = i;
            } else {
                break;
            }
        }
        if cur.len() - pos_last >= self.min_keep && pos_last > 0 {
            cur.advance(pos_last);
        }
    }
    fn reset(&mut self) {
        self.rng.reseed();
    }
    fn clone_sampler(&self) -> Option<Box<dyn Sampler>> {
        Some(Box::new(Xtc {
            rng: self.rng.clone_rederived(),
            ..self.clone()
        }))
    }
}

/// What mirostat 1.0 and 2.0 share: the target surprise `tau`, the learning rate `eta`, the
/// running `mu` (starts at 2·tau) and the seeded generator.
#[derive(Clone)]
struct MirostatState {
    tau: f32,
    eta: f32,
    mu: f32,
    rng: SeededRng,
}

impl MirostatState {
    fn new(seed: u32, tau: f32, eta: f32) -> Self {
        MirostatState {
            tau,
            eta,
            mu: 2.0 * tau,
            rng: SeededRng::new(seed),
        }
    }

    /// Both versions' last step on the candidates they kept: softmax, a draw, and `mu` moved by
    /// the error between the picked token's surprise and `tau`.
    fn pick(&mut self, cur: &mut Candidates) {
        array::softmax(cur, true);
        let idx = array::sample_dist(cur, self.rng.generator());
        cur.selected = idx as i64;
        let observed_surprise = -cur.data()[idx as usize].p.log2();
        let e = observed_surprise - self.tau;
        self.mu -= self.eta * e;
    }

    fn reset(&mut self) {
        self.mu = 2.0 * self.tau;
        self.rng.reseed();
    }

    /// A copy for `llama_sampler_clone`: mu and the generator copied, the seed in use derived
    /// anew (as upstream).
    fn cloned(&self) -> Self {
        MirostatState {
            rng: self.rng.clone_rederived(),
            ..self.clone()
        }
    }
}

/// Mirostat 1.0.
#[derive(Clone)]
pub struct Mirostat {
    n_vocab: i32,
    m: i32,
    state: MirostatState,
}

impl Mirostat {
    pub fn new(n_vocab: i32, seed: u32, tau: f32, eta: f32, m: i32) -> Self {
        Mirostat {
            n_vocab,
            m,
            state: MirostatState::new(seed, tau, eta),
        }
    }
}

impl Sampler for Mirostat {
    fn name(&self) -> &str {
        "mirostat"
    }
    fn apply(&mut self, cur: &mut Candidates) {
        if cur.is_empty() {
            crate::log_error!("llama_sampler_apply: mirostat: no candidates; nothing selected");
            return;
        }
        array::softmax(cur, true);
        let data = cur.data();
        let mut sum_ti_bi = 0.0f32;
        let mut sum_ti_sq = 0.0f32;
        let limit = (self.m.wrapping_sub(1) as isize) as usize;
        let mut i = 0usize;
        while i < limit && i < data.len() - 1 {
            let t_i = ((i + 2) as f32 / (i + 1) as f32).ln();
            let b_i = (data[i].p / data[i + 1].p).ln();
            sum_ti_bi += t_i * b_i;
            sum_ti_sq += t_i * t_i;
            i += 1;
        }
        let s_hat = sum_ti_bi / sum_ti_sq;
        let epsilon_hat = s_hat - 1.0;
        let k = ((epsilon_hat * 2.0f32.powf(self.state.mu))
            / (1.0 - (self.n_vocab as f32).powf(-epsilon_hat)))
        .powf(1.0 / s_hat);
        array::top_k(cur, cpp::f32_to_int(k).max(1));
        self.state.pick(cur);
    }
    fn reset(&mut self) {
        self.state.reset();
    }
    fn seed(&self) -> Option<u32> {
        Some(self.state.rng.seed_cur())
    }
    fn clone_sampler(&self) -> Option<Box<dyn Sampler>> {
        Some(Box::new(Mirostat {
            state: self.state.cloned(),
            ..self.clone()
        }))
    }
}

/// Mirostat 2.0.
#[derive(Clone)]
pub struct MirostatV2 {
    state: MirostatState,
}

impl MirostatV2 {
    pub fn new(seed: u32, tau: f32, eta: f32) -> Self {
        MirostatV2 {
            state: MirostatState::new(seed, tau, eta),
        }
    }
}

impl Sampler for MirostatV2 {
    fn name(&self) -> &str {
        "mirostat-v2"
    }
    fn apply(&mut self, cur: &mut Candidates) {
        if cur.is_empty() {
            crate::log_error!("llama_sampler_apply: mirostat-v2: no candidates; nothing selected");
            return;
        }
        array::softmax(cur, true);
        let mu = self.state.mu;
        let n = cur
            .data()
            .iter()
            .position(|t| -t.p.log2() > mu)
            .unwrap_or(cur.len());
        cur.truncate(n.max(1));
        self.state.pick(cur);
    }
    fn reset(&mut self) {
        self.state.reset();
    }
    fn seed(&self) -> Option<u32> {
        Some(self.state.rng.seed_cur())
    }
    fn clone_sampler(&self) -> Option<Box<dyn Sampler>> {
        Some(Box::new(MirostatV2 {
            state: self.state.cloned(),
        }))
    }
}

const DISTRIBUTION_WIDTH: f32 = 0.3;
const PEAK_LOGIT_VALUE: f32 = 5.0;
const SHARPNESS: f32 = 10.0;
const INV_WIDTH: f32 = 1.0 / DISTRIBUTION_WIDTH;

/// Adaptive-p: reshapes the distribution around a target probability that adapts to the
/// moving average of the selected tokens' original probabilities, then draws.
pub struct AdaptiveP {
    target: f32,
    decay: f32,
    rng: SeededRng,
    weighted_sum: f32,
    total_weight: f32,
    original_probs: Vec<f32>,
    pending_token_id: i32,
    pending_token_idx: i32,
}

impl AdaptiveP {
    pub fn new(target: f32, decay: f32, seed: u32) -> Self {
        let decay = cpp::clamp_f32(decay, 0.0, 0.99);
        AdaptiveP {
            target,
            decay,
            rng: SeededRng::new(seed),
            weighted_sum: target / (1.0 - decay),
            total_weight: 1.0 / (1.0 - decay),
            original_probs: Vec::new(),
            pending_token_id: TOKEN_NULL,
            pending_token_idx: -1,
        }
    }
}

impl Sampler for AdaptiveP {
    fn name(&self) -> &str {
        "adaptive-p"
    }
    fn apply(&mut self, cur: &mut Candidates) {
        if cur.is_empty() {
            crate::log_error!("llama_sampler_apply: adaptive-p: no candidates; nothing selected");
            return;
        }
        array::softmax(cur, false);
        if self.target < 0.0 {
            cur.selected = array::sample_dist(cur, self.rng.generator()) as i64;
            return;
        }
        self.original_probs.clear();
        self.original_probs.extend(cur.data().iter().map(|t| t.p));
        let target = cpp::clamp_f32(self.target, 0.0, 1.0);
        let adapted = cpp::clamp_f32(
            if self.total_weight == 0.0 {
                target
            } else {
                2.0 * target - (self.weighted_sum / self.total_weight)
            },
            0.0,
            1.0,
        );
        for t in cur.data_mut() {
            if t.logit == f32::NEG_INFINITY {
                continue;
            }
            let dist = ((t.p - adapted) * INV_WIDTH).abs();
            t.logit = PEAK_LOGIT_VALUE - SHARPNESS * dist * dist / (1.0 + dist);
        }
        array::softmax(cur, false);
        let idx = array::sample_dist(cur, self.rng.generator());
        cur.selected = idx as i64;
        self.pending_token_id = cur.data()[idx as usize].id;
        self.pending_token_idx = idx;
    }
    fn accept(&mut self, token: i32) {
        if self.pending_token_id == token && token != TOKEN_NULL {
            // upstream asserts on a NULL pending token and reads out of bounds after a clone
            // (which does not copy the original probabilities): skipped here
            if let Some(&p) = usize::try_from(self.pending_token_idx)
                .ok()
                .and_then(|i| self.original_probs.get(i))
            {
                self.weighted_sum = p + self.decay * self.weighted_sum;
                self.total_weight = 1.0 + self.decay * self.total_weight;
            }
        }
        self.pending_token_id = TOKEN_NULL;
        self.pending_token_idx = -1;
    }
    fn reset(&mut self) {
        self.weighted_sum = self.target / (1.0 - self.decay);
        self.total_weight = 1.0 / (1.0 - self.decay);
        self.pending_token_id = TOKEN_NULL;
        self.pending_token_idx = -1;
        self.rng.reseed();
    }
    fn clone_sampler(&self) -> Option<Box<dyn Sampler>> {
        // as upstream: a fresh generator from the seed, the moving average and the pending
        // token copied (the original probabilities are not)
        let mut copy = AdaptiveP::new(self.target, self.decay, self.rng.seed());
        copy.weighted_sum = self.weighted_sum;
        copy.total_weight = self.total_weight;
        copy.pending_token_id = self.pending_token_id;
        copy.pending_token_idx = self.pending_token_idx;
        Some(Box::new(copy))
    }
}
