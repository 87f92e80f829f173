//! The stateless filters and transforms (greedy, top-k, top-p, min-p, typical, temp,
//! temp-ext, top-n-sigma, logit-bias), `dist`, and upstream's "empty" sampler, which the
//! constructors return for parameters that disable a sampler (named "?top-k" and so on).

use super::array::{self, SeededRng};
use super::{backend, Candidates, Sampler, TokenData};
use crate::cpp;

macro_rules! clone_self {
    () => {
        fn clone_sampler(&self) -> Option<Box<dyn Sampler>> {
            Some(Box::new(self.clone()))
        }
    };
}

/// Upstream's `llama_sampler_init_empty(name)`: does nothing.
#[derive(Clone)]
pub struct Empty {
    pub name: &'static str,
}

impl Sampler for Empty {
    fn name(&self) -> &str {
        self.name
    }
    fn backend_init(&mut self, _n_outputs_max_per_seq: u32) -> Option<bool> {
        Some(true)
    }
    fn backend_marks_name(&self) -> bool {
        false
    }
    fn apply(&mut self, _cur: &mut Candidates) {}
    clone_self!();
}

/// Selects the first token with the highest logit.
#[derive(Clone)]
pub struct Greedy;

impl Sampler for Greedy {
    fn name(&self) -> &str {
        "greedy"
    }
    fn backend_init(&mut self, _n_outputs_max_per_seq: u32) -> Option<bool> {
        Some(true)
    }
    fn backend_apply(&mut self, row: &mut backend::Row) {
        backend::greedy(row);
    }
    fn apply(&mut self, cur: &mut Candidates) {
        cur.selected = 0;
        let data = cur.data();
        let mut sel = 0usize;
        for i in 1..data.len() {
            if data[i].logit > data[sel].logit {
                sel = i;
            }
        }
        cur.selected = sel as i64;
    }
    clone_self!();
}

/// Draws a token from the softmax of the logits with the sampler's `std::mt19937`.
#[derive(Clone)]
pub struct Dist {
    rng: SeededRng,
    /// Inside a decode with several outputs per sequence, upstream draws from a copy of the
    /// generator (`rng_backend`) and advances the real one only as tokens are accepted, so
    /// rejected drafts do not consume draws.
    transactional: bool,
    rng_backend: cpp::Mt19937,
    draws_generated: usize,
    draws_committed: usize,
}

impl Dist {
    pub fn new(seed: u32) -> Self {
        let mut rng = SeededRng::new(seed);
        let rng_backend = rng.generator().clone();
        Dist {
            rng,
            transactional: false,
            rng_backend,
            draws_generated: 0,
            draws_committed: 0,
        }
    }

    fn restart_backend_stream(&mut self) {
        self.rng_backend = self.rng.generator().clone();
        self.draws_generated = 0;
        self.draws_committed = 0;
    }
}

impl Sampler for Dist {
    fn name(&self) -> &str {
        "dist"
    }
    fn apply(&mut self, cur: &mut Candidates) {
        if cur.is_empty() {
            cur.selected = -1;
            return;
        }
        cur.selected = 0;
        if cur.len() == 1 {
            // upstream draws once anyway, keeping the stream aligned with backend sampling
            cpp::uniform_f64(self.rng.generator(), 0.0, 1.0);
            cur.data_mut()[0].p = 1.0;
            return;
        }
        let sorted = cur.sorted;
        let data = cur.data_mut();
        let mut max_l = data[0].logit;
        if !sorted {
            for t in &data[1..] {
                max_l = cpp::max_f32(max_l, t.logit);
            }
        }
        let mut sum_cum = 0.0f64;
        for t in data.iter_mut() {
            let p = (t.logit - max_l).exp();
            t.p = p;
            sum_cum += p as f64;
        }
        let rnd = cpp::uniform_f64(self.rng.generator(), 0.0, 1.0);
        let mut sum_run = 0.0f64;
        let sum_tgt = sum_cum * rnd;
        let mut found = None;
        for (i, t) in data.iter_mut().enumerate() {
            if found.is_none() {
                sum_run += t.p as f64;
                if sum_run >= sum_tgt {
                    found = Some(i);
                }
            }
            t.p = (t.p as f64 / sum_cum) as f32;
        }
        let n = data.len();
        cur.selected = found.unwrap_or(n - 1) as i64;
    }
    fn reset(&mut self) {
        self.rng.reseed();
        self.restart_backend_stream();
    }
    fn seed(&self) -> Option<u32> {
        Some(self.rng.seed_cur())
    }
    fn accept(&mut self, _token: i32) {
        // commits one backend draw: the real generator catches up with the copy
        if !self.transactional || self.draws_committed >= self.draws_generated {
            return;
        }
        cpp::uniform_f64(self.rng.generator(), 0.0, 1.0);
        self.draws_committed += 1;
    }
    fn backend_init(&mut self, n_outputs_max_per_seq: u32) -> Option<bool> {
        self.transactional = n_outputs_max_per_seq > 1;
        self.restart_backend_stream();
        Some(true)
    }
    fn backend_begin(&mut self) {
        if self.transactional {
            self.restart_backend_stream();
        }
    }
    fn backend_apply(&mut self, row: &mut backend::Row) {
        // upstream draws in f64 (as the CPU form) and hands the graph an f32
        let rng = if self.transactional {
            self.draws_generated += 1;
            &mut self.rng_backend
        } else {
            self.rng.generator()
        };
        let u = cpp::uniform_f64(rng, 0.0, 1.0) as f32;
        backend::dist(row, u);
    }
    // upstream's clone copies the seed in use and the generator
    clone_self!();
}

/// Keeps the `k` highest logits (sorted).
#[derive(Clone)]
pub struct TopK {
    pub k: i32,
}

impl Sampler for TopK {
    fn name(&self) -> &str {
        "top-k"
    }
    fn backend_init(&mut self, _n_outputs_max_per_seq: u32) -> Option<bool> {
        Some(true)
    }
    fn backend_apply(&mut self, row: &mut backend::Row) {
        backend::top_k(row, self.k);
    }
    fn apply(&mut self, cur: &mut Candidates) {
        array::top_k(cur, self.k);
    }
    clone_self!();
}

/// Nucleus filtering: the smallest sorted prefix whose probability reaches `p`.
#[derive(Clone)]
pub struct TopP {
    pub p: f32,
    pub min_keep: usize,
    buf_sort: Vec<TokenData>,
}

impl TopP {
    pub fn new(p: f32, min_keep: usize) -> Self {
        TopP {
            p,
            min_keep,
            buf_sort: Vec::new(),
        }
    }
}

impl Sampler for TopP {
    fn name(&self) -> &str {
        "top-p"
    }
    fn backend_init(&mut self, _n_outputs_max_per_seq: u32) -> Option<bool> {
        Some(true)
    }
    fn backend_apply(&mut self, row: &mut backend::Row) {
        backend::top_p(row, self.p);
    }
    fn apply(&mut self, cur: &mut Candidates) {
        if self.p >= 1.0 {
            return;
        }
        array::softmax(cur, false);
        let size = cur.len();
        let mut k = size;
        // `use_buf`: the sorted candidates are in `buf_sort` (upstream's `pdata`)
        let mut use_buf = false;
        if !cur.sorted && size > 1024 {
            k = 256.min(size);
            array::partial_sort_buckets(cur.data(), k, &mut self.buf_sort);
            use_buf = true;
        } else if !cur.sorted {
            array::partial_sort_inplace(cur, k);
        }
        let mut cum_sum = 0.0f32;
        let mut last_idx = size;
        for i in 0..size {
            let p = if use_buf {
                self.buf_sort[i].p
            } else {
                cur.data()[i].p
            };
            cum_sum += p;
            if cum_sum >= self.p && i + 1 >= self.min_keep {
                last_idx = i + 1;
                break;
            }
            if !cur.sorted && i == k - 1 {
                k = size;
                array::partial_sort_buckets(cur.data(), k, &mut self.buf_sort);
                use_buf = true;
            }
        }
        if !cur.sorted {
            cur.data_mut()[..last_idx].copy_from_slice(&self.buf_sort[..last_idx]);
            cur.sorted = true;
        }
        cur.truncate(last_idx);
    }
    clone_self!();
}

/// Keeps tokens whose probability is at least `p` times the highest.
#[derive(Clone)]
pub struct MinP {
    pub p: f32,
    pub min_keep: usize,
}

impl Sampler for MinP {
    fn name(&self) -> &str {
        "min-p"
    }
    fn backend_init(&mut self, _n_outputs_max_per_seq: u32) -> Option<bool> {
        Some(true)
    }
    fn backend_apply(&mut self, row: &mut backend::Row) {
        backend::min_p(row, self.p);
    }
    fn apply(&mut self, cur: &mut Candidates) {
        if self.p <= 0.0 || cur.is_empty() {
            return;
        }
        let mut applied = false;
        if !cur.sorted {
            let mut max_logit = -f32::MAX;
            for t in cur.data() {
                max_logit = cpp::max_f32(max_logit, t.logit);
            }
            let min_logit = max_logit + self.p.ln();
            let filtered: Vec<TokenData> = cur
                .data()
                .iter()
                .filter(|t| t.logit >= min_logit)
                .copied()
                .collect();
            if !filtered.is_empty() && filtered.len() >= self.min_keep {
                cur.data_mut()[..filtered.len()].copy_from_slice(&filtered);
                cur.truncate(filtered.len());
                applied = true;
            }
        }
        if !applied {
            if !cur.sorted {
                let n = cur.len();
                array::partial_sort_inplace(cur, n);
            }
            let data = cur.data();
            let min_logit = data[0].logit + self.p.ln();
            let mut i = 1;
            while i < data.len() {
                if data[i].logit < min_logit && i >= self.min_keep {
                    break;
                }
                i += 1;
            }
            cur.truncate(i);
        }
    }
    clone_self!();
}

/// Locally typical sampling.
#[derive(Clone)]
pub struct Typical {
    pub p: f32,
    pub min_keep: usize,
}

impl Sampler for Typical {
    fn name(&self) -> &str {
        "typical"
    }
    fn apply(&mut self, cur: &mut Candidates) {
        if self.p >= 1.0 {
            return;
        }
        array::softmax(cur, true);
        let data = cur.data();
        let mut entropy = 0.0f32;
        for t in data {
            entropy += -t.p * t.p.ln();
        }
        let shifted: Vec<f32> = data.iter().map(|t| (-t.p.ln() - entropy).abs()).collect();
        let mut indices: Vec<usize> = (0..data.len()).collect();
        cpp::sort(&mut indices, &|a: &usize, b: &usize| {
            shifted[*a] < shifted[*b]
        });
        let mut cum_sum = 0.0f32;
        let mut last_idx = indices.len();
        for (i, &idx) in indices.iter().enumerate() {
            cum_sum += data[idx].p;
            if cum_sum > self.p && (self.min_keep == 0 || i >= self.min_keep - 1) {
                last_idx = i + 1;
                break;
            }
        }
        let kept: Vec<TokenData> = indices[..last_idx].iter().map(|&i| data[i]).collect();
        cur.data_mut()[..kept.len()].copy_from_slice(&kept);
        cur.truncate(kept.len());
        cur.sorted = false;
    }
    clone_self!();
}

/// Temperature.
#[derive(Clone)]
pub struct Temp {
    pub temp: f32,
}

impl Sampler for Temp {
    fn name(&self) -> &str {
        "temp"
    }
    fn backend_init(&mut self, _n_outputs_max_per_seq: u32) -> Option<bool> {
        Some(true)
    }
    fn backend_apply(&mut self, row: &mut backend::Row) {
        backend::temp(row, self.temp);
    }
    fn apply(&mut self, cur: &mut Candidates) {
        array::temp(cur, self.temp);
    }
    clone_self!();
}

/// Dynamic temperature from the entropy of the distribution.
#[derive(Clone)]
pub struct TempExt {
    pub temp: f32,
    pub delta: f32,
    pub exponent: f32,
}

impl Sampler for TempExt {
    fn name(&self) -> &str {
        "temp-ext"
    }
    fn backend_init(&mut self, _n_outputs_max_per_seq: u32) -> Option<bool> {
        Some(true)
    }
    fn backend_apply(&mut self, row: &mut backend::Row) {
        backend::temp_ext(row, self.temp, self.delta, self.exponent);
    }
    fn apply(&mut self, cur: &mut Candidates) {
        if self.delta <= 0.0 {
            array::temp(cur, self.temp);
            return;
        }
        let min_temp = cpp::max_f32(0.0, self.temp - self.delta);
        let max_temp = self.temp + self.delta;
        if cur.len() <= 1 {
            return;
        }
        let max_entropy = -(1.0f32 / cur.len() as f32).ln();
        array::softmax(cur, true);
        let mut entropy = 0.0f32;
        for t in cur.data() {
            if t.p > 0.0 {
                entropy -= t.p * t.p.ln();
            }
        }
        let normalized = entropy / max_entropy;
        let dyn_temp = min_temp + (max_temp - min_temp) * normalized.powf(self.exponent);
        array::temp(cur, dyn_temp);
        let data = cur.data_mut();
        let max_l = data[0].logit as f64;
        let mut cum_sum = 0.0f64;
        for t in data.iter_mut() {
            let p = (t.logit as f64 - max_l).exp();
            t.p = p as f32;
            cum_sum += p;
        }
        for t in data.iter_mut() {
            t.p = (t.p as f64 / cum_sum) as f32;
        }
    }
    clone_self!();
}

/// Masks logits more than `n` standard deviations below the maximum.
#[derive(Clone)]
pub struct TopNSigma {
    pub n: f32,
}

impl Sampler for TopNSigma {
    fn name(&self) -> &str {
        "top-n-sigma"
    }
    fn apply(&mut self, cur: &mut Candidates) {
        if self.n <= 0.0 || cur.len() <= 1 {
            return;
        }
        let data = cur.data_mut();
        let mut max = data[0].logit;
        let mut sum = 0.0f32;
        let mut valid = 0usize;
        for t in data.iter() {
            if t.logit != f32::NEG_INFINITY {
                max = cpp::max_f32(max, t.logit);
                sum += t.logit;
                valid += 1;
            }
        }
        let mean = if valid > 0 { sum / valid as f32 } else { 0.0 };
        let mut acc = 0.0f32;
        for t in data.iter() {
            if t.logit != f32::NEG_INFINITY {
                // upstream: `acc += pow(logit - mean, 2)`, ::pow in double
                acc = (acc as f64 + ((t.logit - mean) as f64).powf(2.0)) as f32;
            }
        }
        let std = if valid > 0 {
            ((acc / valid as f32) as f64).sqrt() as f32
        } else {
            0.0
        };
        let cut = max - self.n * std;
        for t in data.iter_mut() {
            if t.logit < cut {
                t.logit = f32::NEG_INFINITY;
            }
        }
    }
    clone_self!();
}

/// A bias per token, added to its logit.
#[derive(Clone)]
pub struct LogitBias {
    pub biases: Vec<(i32, f32)>,
}

impl Sampler for LogitBias {
    fn name(&self) -> &str {
        "logit-bias"
    }
    fn backend_init(&mut self, _n_outputs_max_per_seq: u32) -> Option<bool> {
        Some(true)
    }
    fn backend_apply(&mut self, row: &mut backend::Row) {
        backend::logit_bias(row, &self.biases);
    }
    fn apply(&mut self, cur: &mut Candidates) {
        if self.biases.is_empty() {
            return;
        }
        let data = cur.data_mut();
        let mut to_search = Vec::new();
        // first the candidates still at their vocabulary index (idx == id)
        for &(token, bias) in &self.biases {
            if token >= 0 && data.len() > token as usize && data[token as usize].id == token {
                data[token as usize].logit += bias;
            } else {
                to_search.push((token, bias));
            }
        }
        if to_search.is_empty() {
            return;
        }
        for t in data.iter_mut() {
            if let Some(&(_, bias)) = to_search.iter().find(|(token, _)| *token == t.id) {
                t.logit += bias;
            }
        }
    }
    clone_self!();
}

/// Upstream's own expectations (tests/test-sampling.cpp): probabilities in, the sampler, then
/// `dist` to renormalize, probabilities out (within 1e-5).
#[cfg(test)]
mod upstream_cases {
    use super::*;
    use crate::sampling::mirostat::Xtc;
    use crate::sampling::penalties::Penalties;

    fn run(probs: &[f32], samplers: Vec<Box<dyn Sampler>>) -> Vec<f32> {
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
        for mut s in samplers {
            s.apply(&mut cur);
        }
        cur.data().iter().map(|t| t.p).collect()
    }

    fn check(probs: &[f32], s: impl Sampler + 'static, expected: &[f32]) {
        let got = run(probs, vec![Box::new(s), Box::new(Dist::new(0))]);
        assert_eq!(got.len(), expected.len(), "{got:?} vs {expected:?}");
        for (g, e) in got.iter().zip(expected) {
            assert!((g - e).abs() < 1e-5, "{got:?} vs {expected:?}");
        }
    }

    const P: [f32; 4] = [0.1, 0.2, 0.3, 0.4];

    #[test]
    fn dist_draws_once_for_a_single_candidate() {
        let pick = |s: &mut Dist, n: usize| {
            let mut data: Vec<TokenData> = (0..n)
                .map(|i| TokenData {
                    id: i as i32,
                    logit: 0.0,
                    p: 0.0,
                })
                .collect();
            let mut cur = Candidates::new(&mut data, -1, false);
            s.apply(&mut cur);
            cur.selected
        };
        let (mut single, mut control) = (Dist::new(4242), Dist::new(4242));
        assert_eq!(pick(&mut single, 1), 0);
        pick(&mut control, 2);
        for _ in 0..4 {
            assert_eq!(pick(&mut single, 256), pick(&mut control, 256));
        }
    }

    #[test]
    fn temperature_top_k_top_p_min_p() {
        check(&P, Temp { temp: 1.0 }, &P);
        check(&P, Temp { temp: 0.0 }, &[0.0, 0.0, 0.0, 1.0]);
        check(
            &P,
            TempExt {
                temp: 0.0,
                delta: 0.0,
                exponent: 1.0,
            },
            &[0.0, 0.0, 0.0, 1.0],
        );
        check(&P, TopK { k: 1 }, &[1.0]);
        check(&P, TopK { k: 3 }, &[0.44444, 0.33333, 0.22222]);
        check(&P, TopK { k: 4 }, &[0.4, 0.3, 0.2, 0.1]);
        check(&P, TopK { k: 0 }, &P);
        check(&P, TopP::new(0.0, 0), &[1.0]);
        check(&P, TopP::new(0.7, 0), &[0.571429, 0.428571]);
        check(&P, TopP::new(0.8, 0), &[0.44444, 0.33333, 0.22222]);
        check(
            &P,
            MinP {
                p: 0.24,
                min_keep: 0,
            },
            &P,
        );
        check(
            &P,
            MinP {
                p: 0.26,
                min_keep: 0,
            },
            &[0.2 / 0.9, 0.3 / 0.9, 0.4 / 0.9],
        );
        check(
            &P,
            MinP {
                p: 0.51,
                min_keep: 0,
            },
            &[0.3 / 0.7, 0.4 / 0.7],
        );
        check(
            &P,
            MinP {
                p: 0.76,
                min_keep: 0,
            },
            &[1.0],
        );
        check(
            &P,
            MinP {
                p: 1.05,
                min_keep: 0,
            },
            &[1.0],
        );
    }

    #[test]
    fn xtc_typical_top_n_sigma() {
        let xtc = |t: f32| {
            run(
                &[0.4, 0.3, 0.2, 0.1],
                vec![Box::new(Xtc::new(0.99, t, 0, 0))],
            )
        };
        let close = |a: Vec<f32>, b: &[f32]| {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-5)
        };
        assert!(close(xtc(0.09), &[0.1]));
        assert!(close(xtc(0.19), &[0.2, 0.1]));
        assert!(close(xtc(0.29), &[0.3, 0.2, 0.1]));
        assert!(close(xtc(0.39), &[0.4, 0.3, 0.2, 0.1]));
        let typical = |probs: &[f32]| {
            run(
                probs,
                vec![Box::new(Typical {
                    p: 0.5,
                    min_keep: 0,
                })],
            )
        };
        assert!(close(typical(&[0.97, 0.01, 0.01, 0.01]), &[0.97]));
        assert!(close(typical(&[0.4, 0.2, 0.2, 0.2]), &[0.2, 0.2, 0.2]));
        check(&P, TopNSigma { n: 1.0 }, &[0.0, 0.0, 0.428571, 0.571429]);
        check(&P, TopNSigma { n: 3.0 }, &P);
    }

    #[test]
    fn penalties() {
        let case = |last: &[i32], repeat: f32, freq: f32, present: f32, expected: &[f32]| {
            let mut s = Penalties::new(32000, last.len() as i32, repeat, freq, present);
            for &t in last {
                s.accept(t);
            }
            check(&[0.2; 5], s, expected);
        };
        case(&[0], 50.0, 0.0, 0.0, &[0.0, 0.25, 0.25, 0.25, 0.25]);
        case(&[0, 1, 2], 50.0, 0.0, 0.0, &[0.0, 0.0, 0.0, 0.5, 0.5]);
        case(&[0, 1, 2, 0, 0], 50.0, 0.0, 0.0, &[0.0, 0.0, 0.0, 0.5, 0.5]);
        case(
            &[0],
            1.0,
            5.0,
            5.0,
            &[0.000011, 0.249997, 0.249997, 0.249997, 0.249997],
        );
        case(
            &[0, 1, 2],
            1.0,
            5.0,
            5.0,
            &[0.000023, 0.000023, 0.000023, 0.499966, 0.499966],
        );
        case(
            &[0, 1, 2, 0, 0],
            1.0,
            5.0,
            5.0,
            &[0.0, 0.000023, 0.000023, 0.499977, 0.499977],
        );
    }
}
