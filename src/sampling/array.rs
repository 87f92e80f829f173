//! Operations on candidate arrays shared by the samplers: upstream's bucket partial sort,
//! softmax, temperature and top-k, and the seed and draw helpers.

use super::{Candidates, TokenData};
use crate::cpp::{self, Mt19937};

/// `LLAMA_DEFAULT_SEED`: "pick a random seed".
pub const DEFAULT_SEED: u32 = 0xFFFF_FFFF;
/// `LLAMA_TOKEN_NULL`.
pub const TOKEN_NULL: i32 = -1;

/// Descending by logit (upstream's comparator).
#[inline]
pub fn by_logit_desc(a: &TokenData, b: &TokenData) -> bool {
    a.logit > b.logit
}

/// Upstream's `get_rng_seed`: the seed itself, or a random one for `LLAMA_DEFAULT_SEED`.
fn rng_seed(seed: u32) -> u32 {
    if seed != DEFAULT_SEED {
        return seed;
    }
    // a per-process random key (std seeds it from the OS) mixed with the clock
    use std::hash::BuildHasher;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    std::collections::hash_map::RandomState::new().hash_one(nanos) as u32
}

/// The seeded `std::mt19937` of a sampler with a random stream (dist, XTC, mirostat 1 and 2,
/// adaptive-p), as upstream keeps it: the seed asked for, the seed in use (upstream's
/// `seed_cur`: a random one for `LLAMA_DEFAULT_SEED`) and the generator. `Clone` copies all
/// three (upstream's dist clone).
#[derive(Clone)]
pub struct SeededRng {
    seed: u32,
    seed_cur: u32,
    rng: Mt19937,
}

impl SeededRng {
    pub fn new(seed: u32) -> Self {
        let seed_cur = rng_seed(seed);
        SeededRng {
            seed,
            seed_cur,
            rng: Mt19937::new(seed_cur),
        }
    }

    /// The seed asked for (`LLAMA_DEFAULT_SEED` stays so).
    pub fn seed(&self) -> u32 {
        self.seed
    }

    /// The seed in use (what `llama_sampler_get_seed` reports).
    pub fn seed_cur(&self) -> u32 {
        self.seed_cur
    }

    pub fn generator(&mut self) -> &mut Mt19937 {
        &mut self.rng
    }

    /// Every seeded sampler's reset upstream: the seed in use derived anew from the seed (a new
    /// random one for `LLAMA_DEFAULT_SEED`) and the generator restarted from it.
    pub fn reseed(&mut self) {
        self.seed_cur = rng_seed(self.seed);
        self.rng.seed(self.seed_cur);
    }

    /// The copy upstream's XTC and mirostat clones make: a sampler initialised from the seed
    /// (which derives the seed in use anew) that then takes over the generator's state.
    pub fn clone_rederived(&self) -> Self {
        SeededRng {
            seed_cur: rng_seed(self.seed),
            ..self.clone()
        }
    }
}

/// Upstream's `llama_token_data_array_partial_sort`: the top `npartial` of `cur` by logit,
/// written into `res` (which may hold more, the rest of the last bucket) without touching
/// `cur`. 128 buckets over logits [-10, 10); buckets above the cut are fully sorted with
/// `std::sort`, the cut bucket partially with `std::partial_sort`.
pub fn partial_sort_buckets(cur: &[TokenData], npartial: usize, res: &mut Vec<TokenData>) {
    const NBUCKETS: i32 = 128;
    const LOW: f32 = -10.0;
    const HIGH: f32 = 10.0;
    const SCALE: f32 = NBUCKETS as f32 / (HIGH - LOW);
    const INTER: f32 = -LOW * SCALE;

    let mut bucket_idx = Vec::with_capacity(cur.len());
    let mut histo = [0usize; NBUCKETS as usize];
    for t in cur {
        let ib = cpp::f32_to_int(SCALE * t.logit + INTER).clamp(0, NBUCKETS - 1);
        bucket_idx.push(ib);
        histo[ib as usize] += 1;
    }
    let mut nhave = 0usize;
    let mut ib = NBUCKETS - 1;
    while ib >= 0 {
        nhave += histo[ib as usize];
        if nhave >= npartial {
            break;
        }
        ib -= 1;
    }
    // Callers never ask for more than there is; upstream reads out of bounds then.
    let ib = ib.max(0);
    res.clear();
    res.resize(
        nhave,
        TokenData {
            id: 0,
            logit: 0.0,
            p: 0.0,
        },
    );
    let mut starts = Vec::with_capacity((NBUCKETS - ib) as usize);
    let mut at = 0usize;
    for j in (ib..NBUCKETS).rev() {
        starts.push(at);
        at += histo[j as usize];
    }
    for (t, &j) in cur.iter().zip(&bucket_idx) {
        if j >= ib {
            let slot = &mut starts[(NBUCKETS - 1 - j) as usize];
            res[*slot] = *t;
            *slot += 1;
        }
    }
    let mut at = 0usize;
    let mut ndone = 0usize;
    for j in (ib + 1..NBUCKETS).rev() {
        let n = histo[j as usize];
        cpp::sort(&mut res[at..at + n], &by_logit_desc);
        at += n;
        ndone += n;
    }
    let n = histo[ib as usize];
    cpp::partial_sort(&mut res[at..at + n], npartial - ndone, &by_logit_desc);
}

/// Upstream's `llama_token_data_array_partial_sort_inplace`: keeps the top `npartial`
/// sorted (`std::partial_sort` up to 128, the bucket sort above) and marks the array sorted.
pub fn partial_sort_inplace(cur: &mut Candidates, npartial: usize) {
    if npartial <= 128 {
        cpp::partial_sort(cur.data_mut(), npartial, &by_logit_desc);
    } else {
        let mut tmp = Vec::new();
        partial_sort_buckets(cur.data(), npartial, &mut tmp);
        cur.data_mut()[..npartial].copy_from_slice(&tmp[..npartial]);
    }
    cur.truncate(npartial);
    cur.sorted = true;
}

/// Upstream's `llama_sampler_softmax_impl` (the caller checks `size > 0`, which upstream
/// asserts): optional sort, then `p = expf(logit - max) / sum` in float.
pub fn softmax(cur: &mut Candidates, do_sort: bool) {
    if cur.is_empty() {
        return;
    }
    if do_sort && !cur.sorted {
        let n = cur.len();
        partial_sort_inplace(cur, n);
    }
    let data = cur.data();
    let mut max_l = data[0].logit;
    if !cur.sorted {
        for t in &data[1..] {
            max_l = cpp::max_f32(max_l, t.logit);
        }
    }
    let mut cum_sum = 0.0f32;
    for t in cur.data_mut() {
        let p = (t.logit - max_l).exp();
        t.p = p;
        cum_sum += p;
    }
    for t in cur.data_mut() {
        t.p /= cum_sum;
    }
}

/// Upstream's `llama_sampler_temp_impl`: divides logits by `temp`; `temp <= 0` keeps only
/// the first maximum (the others become -inf).
pub fn temp(cur: &mut Candidates, temp: f32) {
    if cur.is_empty() {
        return;
    }
    let data = cur.data_mut();
    if temp <= 0.0 {
        let mut max_i = 0usize;
        let mut max_l = data[0].logit;
        for i in 1..data.len() {
            if data[i].logit > max_l {
                data[max_i].logit = f32::NEG_INFINITY;
                max_i = i;
                max_l = data[i].logit;
            } else {
                data[i].logit = f32::NEG_INFINITY;
            }
        }
        return;
    }
    for t in data {
        t.logit /= temp;
    }
}

/// Upstream's `llama_sampler_top_k_impl`.
pub fn top_k(cur: &mut Candidates, k: i32) {
    if k <= 0 {
        return;
    }
    let k = (k as usize).min(cur.len());
    if !cur.sorted {
        partial_sort_inplace(cur, k);
    }
    cur.truncate(k);
}

/// Upstream's `llama_sample_dist`: `std::discrete_distribution` over the `p` values.
pub fn sample_dist(cur: &Candidates, rng: &mut Mt19937) -> i32 {
    cpp::discrete(rng, cur.data().iter().map(|t| t.p))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidates(seed: u32, n: usize, spread: f32) -> Vec<TokenData> {
        let mut rng = Mt19937::new(seed);
        (0..n)
            .map(|i| TokenData {
                id: i as i32,
                // distinct values, some far outside the bucket range [-10, 10)
                logit: (cpp::canonical_f64(&mut rng) as f32 - 0.5) * spread + i as f32 * 1e-6,
                p: 0.0,
            })
            .collect()
    }

    #[test]
    fn partial_sorts_keep_the_top_k_in_order() {
        for (seed, n, k, spread) in [
            (1, 10, 3, 4.0),
            (2, 300, 128, 30.0),
            (3, 3000, 129, 30.0),
            (4, 3000, 3000, 2.0),
            (5, 5000, 700, 1e6),
        ] {
            let mut v = candidates(seed, n, spread);
            let mut expected = v.clone();
            expected.sort_by(|a, b| b.logit.total_cmp(&a.logit));
            let mut cur = Candidates::new(&mut v, -1, false);
            partial_sort_inplace(&mut cur, k);
            assert!(cur.sorted);
            assert_eq!(cur.len(), k);
            let got: Vec<i32> = cur.data().iter().map(|t| t.id).collect();
            let want: Vec<i32> = expected[..k].iter().map(|t| t.id).collect();
            assert_eq!(got, want, "n={n} k={k}");
        }
    }

    #[test]
    fn softmax_sums_to_one_and_top_k_truncates() {
        let mut v = candidates(9, 1000, 8.0);
        let mut cur = Candidates::new(&mut v, -1, false);
        softmax(&mut cur, true);
        let sum: f64 = cur.data().iter().map(|t| t.p as f64).sum();
        assert!((sum - 1.0).abs() < 1e-4, "sum {sum}");
        assert!(cur.data().windows(2).all(|w| w[0].p >= w[1].p));
        top_k(&mut cur, 10);
        assert_eq!(cur.len(), 10);
    }

    #[test]
    fn temperature_zero_keeps_the_first_maximum() {
        let mut v: Vec<TokenData> = [1.0f32, 3.0, 3.0, 2.0]
            .iter()
            .enumerate()
            .map(|(i, &l)| TokenData {
                id: i as i32,
                logit: l,
                p: 0.0,
            })
            .collect();
        let mut cur = Candidates::new(&mut v, -1, false);
        temp(&mut cur, 0.0);
        let finite: Vec<i32> = cur
            .data()
            .iter()
            .filter(|t| t.logit.is_finite())
            .map(|t| t.id)
            .collect();
        assert_eq!(finite, vec![1]);
    }

    #[test]
    fn discrete_distribution_follows_the_weights() {
        let mut rng = Mt19937::new(3);
        let mut counts = [0usize; 3];
        for _ in 0..30000 {
            counts[cpp::discrete(&mut rng, [0.2f32, 0.0, 0.8].into_iter()) as usize] += 1;
        }
        assert_eq!(counts[1], 0);
        assert!(
            (counts[2] as f64 / 30000.0 - 0.8).abs() < 0.02,
            "{counts:?}"
        );
        // fewer than two weights: index 0 without a draw
        let mut a = Mt19937::new(5);
        let b = a.clone();
        assert_eq!(cpp::discrete(&mut a, [1.0f32].into_iter()), 0);
        assert_eq!(a.clone().next_u32(), b.clone().next_u32());
    }

    #[test]
    fn seeded_rng_resets_clones_and_rederives_as_upstream() {
        let mut a = SeededRng::new(42);
        assert_eq!((a.seed(), a.seed_cur()), (42, 42));
        let first = a.generator().next_u32();
        assert_eq!(first, Mt19937::new(42).next_u32());
        // a clone takes over the generator's state: the next draws are the same
        let mut b = a.clone();
        let mut c = a.clone_rederived();
        let next = a.generator().next_u32();
        assert_eq!(b.generator().next_u32(), next);
        assert_eq!(c.generator().next_u32(), next);
        // reset restarts the stream from the seed
        a.reseed();
        assert_eq!(a.generator().next_u32(), first);
        // LLAMA_DEFAULT_SEED: a random seed in use, kept by a plain clone, drawn anew by a
        // re-deriving clone and by reset (two draws of 32 random bits differ but by chance)
        let mut r = SeededRng::new(DEFAULT_SEED);
        assert_eq!(r.seed(), DEFAULT_SEED);
        let used = r.seed_cur();
        assert_eq!(r.clone().seed_cur(), used);
        let rederived = r.clone_rederived().seed_cur();
        r.reseed();
        assert!(rederived != used || r.seed_cur() != used);
    }
}
