//! The C++ standard library as upstream's samplers use it, reproduced bit for bit (GCC's
//! libstdc++, which builds upstream's libllama.so): `std::mt19937`, `generate_canonical`,
//! `std::uniform_real_distribution`, `std::discrete_distribution`, `std::sort` (introsort)
//! and `std::partial_sort` (heap select). `std::sort` and `std::partial_sort` are not stable:
//! elements that compare equal end up in an order that depends on the algorithm's exact steps,
//! so those steps are reproduced here rather than using Rust's sorts.

/// `std::mt19937` (32-bit Mersenne Twister, MT19937).
#[derive(Clone)]
pub struct Mt19937 {
    state: [u32; 624],
    index: usize,
}

impl Mt19937 {
    /// `std::mt19937(seed)`.
    pub fn new(seed: u32) -> Self {
        let mut state = [0u32; 624];
        state[0] = seed;
        for i in 1..624 {
            let prev = state[i - 1];
            state[i] = 1_812_433_253u32
                .wrapping_mul(prev ^ (prev >> 30))
                .wrapping_add(i as u32);
        }
        Mt19937 { state, index: 624 }
    }

    /// `rng.seed(seed)`.
    pub fn seed(&mut self, seed: u32) {
        *self = Mt19937::new(seed);
    }

    fn twist(&mut self) {
        const UPPER: u32 = 0x8000_0000;
        const LOWER: u32 = 0x7fff_ffff;
        const MATRIX: u32 = 0x9908_b0df;
        for i in 0..624 {
            let y = (self.state[i] & UPPER) | (self.state[(i + 1) % 624] & LOWER);
            let mut next = self.state[(i + 397) % 624] ^ (y >> 1);
            if y & 1 != 0 {
                next ^= MATRIX;
            }
            self.state[i] = next;
        }
        self.index = 0;
    }

    /// `rng()`: the next 32-bit output.
    pub fn next_u32(&mut self) -> u32 {
        if self.index >= 624 {
            self.twist();
        }
        let mut y = self.state[self.index];
        self.index += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^= y >> 18;
        y
    }
}

/// `std::generate_canonical<double, 53>(rng)`: two draws, `(g0 + g1 * 2^32) / 2^64`, and
/// the largest double below 1 when that rounds up to 1.
pub fn canonical_f64(rng: &mut Mt19937) -> f64 {
    const R: f64 = 4_294_967_296.0;
    let mut sum = 0.0f64;
    let mut tmp = 1.0f64;
    for _ in 0..2 {
        sum += rng.next_u32() as f64 * tmp;
        tmp *= R;
    }
    let ret = sum / tmp;
    if ret >= 1.0 {
        f64::from_bits(1.0f64.to_bits() - 1)
    } else {
        ret
    }
}

/// `std::generate_canonical<float, 24>(rng)`: one draw divided by 2^32 in `float`.
pub fn canonical_f32(rng: &mut Mt19937) -> f32 {
    let sum = rng.next_u32() as f32;
    let ret = sum / 4_294_967_296.0f32;
    if ret >= 1.0 {
        f32::from_bits(1.0f32.to_bits() - 1)
    } else {
        ret
    }
}

/// `std::uniform_real_distribution<double>(a, b)(rng)`.
pub fn uniform_f64(rng: &mut Mt19937, a: f64, b: f64) -> f64 {
    canonical_f64(rng) * (b - a) + a
}

/// `std::uniform_real_distribution<float>(a, b)(rng)`.
pub fn uniform_f32(rng: &mut Mt19937, a: f32, b: f32) -> f32 {
    canonical_f32(rng) * (b - a) + a
}

/// `std::discrete_distribution<int>(weights)(rng)`: weights as doubles, normalized by their
/// sum, cumulated, the last set to 1, then the first cumulative value not below one
/// canonical draw (`lower_bound`). Fewer than two weights: 0, without a draw.
pub fn discrete(rng: &mut Mt19937, weights: impl Iterator<Item = f32>) -> i32 {
    let mut prob: Vec<f64> = weights.map(f64::from).collect();
    if prob.len() < 2 {
        return 0;
    }
    let sum = prob.iter().fold(0.0f64, |acc, &p| acc + p);
    for p in prob.iter_mut() {
        *p /= sum;
    }
    let mut cp = Vec::with_capacity(prob.len());
    let mut acc = 0.0f64;
    for (i, &p) in prob.iter().enumerate() {
        acc = if i == 0 { p } else { acc + p };
        cp.push(acc);
    }
    let last = cp.len() - 1;
    cp[last] = 1.0;
    let p = canonical_f64(rng);
    // libstdc++'s __lower_bound, step for step (NaN weights make the answer order-dependent).
    let (mut first, mut len) = (0usize, cp.len());
    while len > 0 {
        let half = len >> 1;
        let middle = first + half;
        if cp[middle] < p {
            first = middle + 1;
            len = len - half - 1;
        } else {
            len = half;
        }
    }
    first as i32
}

/// `std::max(a, b)` for floats: `(a < b) ? b : a` (NaN handling differs from `f32::max`).
#[inline]
pub fn max_f32(a: f32, b: f32) -> f32 {
    if a < b {
        b
    } else {
        a
    }
}

/// `std::clamp(v, lo, hi)`.
#[inline]
pub fn clamp_f32(v: f32, lo: f32, hi: f32) -> f32 {
    if v < lo {
        lo
    } else if hi < v {
        hi
    } else {
        v
    }
}

/// `int(x)` for a float as x86-64 computes it (`cvttss2si`): truncation, and INT_MIN for
/// NaN and values out of range (undefined in C++; this is what upstream's binary does).
#[inline]
pub fn f32_to_int(x: f32) -> i32 {
    if x.is_nan() || !(-2_147_483_648.0..2_147_483_648.0).contains(&x) {
        i32::MIN
    } else {
        x as i32
    }
}

/// libstdc++'s `_S_threshold`.
const THRESHOLD: usize = 16;

/// `std::sort(v.begin(), v.end(), comp)` as libstdc++ runs it (introsort, depth limit
/// 2·log2(n), heap sort fallback, final insertion sort).
pub fn sort<T: Copy>(v: &mut [T], comp: &impl Fn(&T, &T) -> bool) {
    let n = v.len();
    if n == 0 {
        return;
    }
    let depth = 2 * (usize::BITS - 1 - n.leading_zeros()) as usize;
    introsort_loop(v, 0, n, depth, comp);
    final_insertion_sort(v, 0, n, comp);
}

/// `std::partial_sort(first, middle, last, comp)` over `v[..last]` with `middle` elements:
/// heap select, then heap sort of the first `middle`.
pub fn partial_sort<T: Copy>(v: &mut [T], middle: usize, comp: &impl Fn(&T, &T) -> bool) {
    let last = v.len();
    heap_select(v, 0, middle, last, comp);
    sort_heap(v, 0, middle, comp);
}

fn introsort_loop<T: Copy>(
    v: &mut [T],
    first: usize,
    mut last: usize,
    mut depth: usize,
    comp: &impl Fn(&T, &T) -> bool,
) {
    while last - first > THRESHOLD {
        if depth == 0 {
            heap_select(v, first, last, last, comp);
            sort_heap(v, first, last, comp);
            return;
        }
        depth -= 1;
        let cut = unguarded_partition_pivot(v, first, last, comp);
        introsort_loop(v, cut, last, depth, comp);
        last = cut;
    }
}

fn unguarded_partition_pivot<T: Copy>(
    v: &mut [T],
    first: usize,
    last: usize,
    comp: &impl Fn(&T, &T) -> bool,
) -> usize {
    let mid = first + (last - first) / 2;
    move_median_to_first(v, first, first + 1, mid, last - 1, comp);
    unguarded_partition(v, first + 1, last, first, comp)
}

fn move_median_to_first<T: Copy>(
    v: &mut [T],
    result: usize,
    a: usize,
    b: usize,
    c: usize,
    comp: &impl Fn(&T, &T) -> bool,
) {
    let pick = if comp(&v[a], &v[b]) {
        if comp(&v[b], &v[c]) {
            b
        } else if comp(&v[a], &v[c]) {
            c
        } else {
            a
        }
    } else if comp(&v[a], &v[c]) {
        a
    } else if comp(&v[b], &v[c]) {
        c
    } else {
        b
    };
    v.swap(result, pick);
}

fn unguarded_partition<T: Copy>(
    v: &mut [T],
    mut first: usize,
    mut last: usize,
    pivot: usize,
    comp: &impl Fn(&T, &T) -> bool,
) -> usize {
    loop {
        while comp(&v[first], &v[pivot]) {
            first += 1;
        }
        last -= 1;
        while comp(&v[pivot], &v[last]) {
            last -= 1;
        }
        if first >= last {
            return first;
        }
        v.swap(first, last);
        first += 1;
    }
}

fn final_insertion_sort<T: Copy>(
    v: &mut [T],
    first: usize,
    last: usize,
    comp: &impl Fn(&T, &T) -> bool,
) {
    if last - first > THRESHOLD {
        insertion_sort(v, first, first + THRESHOLD, comp);
        for i in first + THRESHOLD..last {
            unguarded_linear_insert(v, i, comp);
        }
    } else {
        insertion_sort(v, first, last, comp);
    }
}

fn insertion_sort<T: Copy>(v: &mut [T], first: usize, last: usize, comp: &impl Fn(&T, &T) -> bool) {
    if first == last {
        return;
    }
    for i in first + 1..last {
        if comp(&v[i], &v[first]) {
            let val = v[i];
            v.copy_within(first..i, first + 1);
            v[first] = val;
        } else {
            unguarded_linear_insert(v, i, comp);
        }
    }
}

fn unguarded_linear_insert<T: Copy>(v: &mut [T], mut last: usize, comp: &impl Fn(&T, &T) -> bool) {
    let val = v[last];
    let mut next = last.wrapping_sub(1);
    while comp(&val, &v[next]) {
        v[last] = v[next];
        last = next;
        next = next.wrapping_sub(1);
    }
    v[last] = val;
}

// Heap operations over `v[base..base + len]` (libstdc++'s stl_heap.h), with signed indices
// as there (`(hole - 1) / 2` truncates toward zero).

fn push_heap<T: Copy>(
    v: &mut [T],
    base: usize,
    mut hole: isize,
    top: isize,
    value: T,
    comp: &impl Fn(&T, &T) -> bool,
) {
    let mut parent = (hole - 1) / 2;
    while hole > top && comp(&v[base + parent as usize], &value) {
        v[base + hole as usize] = v[base + parent as usize];
        hole = parent;
        parent = (hole - 1) / 2;
    }
    v[base + hole as usize] = value;
}

fn adjust_heap<T: Copy>(
    v: &mut [T],
    base: usize,
    mut hole: isize,
    len: isize,
    value: T,
    comp: &impl Fn(&T, &T) -> bool,
) {
    let top = hole;
    let mut second = hole;
    while second < (len - 1) / 2 {
        second = 2 * (second + 1);
        if comp(&v[base + second as usize], &v[base + (second - 1) as usize]) {
            second -= 1;
        }
        v[base + hole as usize] = v[base + second as usize];
        hole = second;
    }
    if (len & 1) == 0 && second == (len - 2) / 2 {
        second = 2 * (second + 1);
        v[base + hole as usize] = v[base + (second - 1) as usize];
        hole = second - 1;
    }
    push_heap(v, base, hole, top, value, comp);
}

fn pop_heap<T: Copy>(
    v: &mut [T],
    first: usize,
    last: usize,
    result: usize,
    comp: &impl Fn(&T, &T) -> bool,
) {
    let value = v[result];
    v[result] = v[first];
    adjust_heap(v, first, 0, (last - first) as isize, value, comp);
}

fn make_heap<T: Copy>(v: &mut [T], first: usize, last: usize, comp: &impl Fn(&T, &T) -> bool) {
    if last - first < 2 {
        return;
    }
    let len = (last - first) as isize;
    let mut parent = (len - 2) / 2;
    loop {
        let value = v[first + parent as usize];
        adjust_heap(v, first, parent, len, value, comp);
        if parent == 0 {
            return;
        }
        parent -= 1;
    }
}

fn sort_heap<T: Copy>(v: &mut [T], first: usize, mut last: usize, comp: &impl Fn(&T, &T) -> bool) {
    while last - first > 1 {
        last -= 1;
        pop_heap(v, first, last, last, comp);
    }
}

fn heap_select<T: Copy>(
    v: &mut [T],
    first: usize,
    middle: usize,
    last: usize,
    comp: &impl Fn(&T, &T) -> bool,
) {
    make_heap(v, first, middle, comp);
    for i in middle..last {
        if comp(&v[i], &v[first]) {
            pop_heap(v, first, middle, i, comp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mt19937_matches_the_standard() {
        // C++11 [rand.predef]: the 10000th output of a default-constructed mt19937 (seed 5489).
        let mut rng = Mt19937::new(5489);
        let mut last = 0;
        for _ in 0..10000 {
            last = rng.next_u32();
        }
        assert_eq!(last, 4_123_659_995);
    }

    #[test]
    fn sorts_sort() {
        let mut seed = Mt19937::new(7);
        for n in [0usize, 1, 2, 5, 16, 17, 100, 1000] {
            let mut v: Vec<i32> = (0..n).map(|_| (seed.next_u32() % 50) as i32).collect();
            let mut expected = v.clone();
            expected.sort_by(|a, b| b.cmp(a));
            let mut s = v.clone();
            sort(&mut s, &|a: &i32, b: &i32| a > b);
            assert_eq!(s, expected);
            let k = n / 3;
            partial_sort(&mut v, k, &|a: &i32, b: &i32| a > b);
            assert_eq!(&v[..k], &expected[..k]);
        }
    }
}
