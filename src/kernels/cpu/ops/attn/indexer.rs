//! DeepSeek's lightning indexer on the CPU (ggml's LIGHTNING_INDEXER, then TOP_K): which
//! cached positions a token's sparse attention reads.

use super::common::KvRows;
use super::nofa::reduce;
use crate::kernels::cpu::vec::fmadd;

/// `ggml_vec_dot_f32` in its AVX2 order: four 8-lane FMA accumulators over blocks of 32,
/// reduced pairwise, the tail fused into the sum.
pub(super) fn vec_dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let full = n / 32 * 32;
    let mut acc = [0f32; 32];
    for (e, (&x, &y)) in a[..full].iter().zip(&b[..full]).enumerate() {
        acc[e % 32] = fmadd(x, y, acc[e % 32]);
    }
    let mut s = reduce(&acc, false);
    for (&x, &y) in a[full..n].iter().zip(&b[full..n]) {
        s = fmadd(x, y, s);
    }
    s
}

/// One token's scores over the cells `cells` of the indexer's key cache `k` (rows of `head`
/// values): `Σ_h relu(q_h · k_j) · w_h` in head order (ggml's fused kernel; `w` is
/// pre-scaled), `-inf` where `visible` says the token does not see the cell (upstream adds its
/// KQ mask).
pub fn indexer_scores(
    q: &[f32],
    w: &[f32],
    head: usize,
    k: &dyn KvRows,
    cells: std::ops::Range<u32>,
    visible: &dyn Fn(u32) -> bool,
    krow: &mut Vec<f32>,
    out: &mut Vec<f32>,
) {
    out.clear();
    krow.resize(head, 0.0);
    for j in cells {
        if !visible(j) {
            out.push(f32::NEG_INFINITY);
            continue;
        }
        k.read(j as usize, 0, krow);
        let mut score = 0.0f32;
        for (qh, &wh) in q.chunks_exact(head).zip(w) {
            let qk = vec_dot_f32(qh, krow);
            score = fmadd(qk.max(0.0), wh, score);
        }
        out.push(score);
    }
}

/// The indices of the `k` largest of `data`, as the set ggml's TOP_K picks it:
/// `std::partial_sort` of the indices `0..n` by `data[a] > data[b]` (libstdc++'s heap
/// selection, whose tie order decides which of equal scores are kept), order unspecified.
pub fn top_k_set(data: &[f32], k: usize, idx: &mut Vec<i32>) {
    let k = k.min(data.len());
    idx.clear();
    idx.extend(0..data.len() as i32);
    let less = |a: i32, b: i32| data[a as usize] > data[b as usize];
    // __make_heap over the first k
    if k >= 2 {
        let mut parent = (k - 2) / 2;
        loop {
            let v = idx[parent];
            adjust_heap(idx, parent, k, v, &less);
            if parent == 0 {
                break;
            }
            parent -= 1;
        }
    }
    // __heap_select: a later element that beats the heap's top replaces it (__pop_heap)
    for i in k..data.len() {
        if k > 0 && less(idx[i], idx[0]) {
            let v = idx[i];
            idx[i] = idx[0];
            adjust_heap(idx, 0, k, v, &less);
        }
    }
    idx.truncate(k);
}

/// ggml's TOP_K on the CPU in its output order: `std::partial_sort` of the indices `0..n` by
/// `data[a] > data[b]` (libstdc++: the heap selection of [`top_k_set`], then `__sort_heap`,
/// so the `k` largest in descending order, ties as the heap leaves them), then the first two
/// swapped ("the order is not important").
pub fn top_k_ordered(data: &[f32], k: usize, idx: &mut Vec<i32>) {
    top_k_set(data, k, idx);
    let less = |a: i32, b: i32| data[a as usize] > data[b as usize];
    // __sort_heap: pop the heap's top to the end, one place at a time
    let mut last = idx.len();
    while last > 1 {
        last -= 1;
        let v = idx[last];
        idx[last] = idx[0];
        adjust_heap(idx, 0, last, v, &less);
    }
    if idx.len() > 1 {
        idx.swap(0, 1);
    }
}

/// libstdc++'s `__adjust_heap` (then `__push_heap`) on `h[..len]`.
fn adjust_heap(
    h: &mut [i32],
    mut hole: usize,
    len: usize,
    v: i32,
    less: &dyn Fn(i32, i32) -> bool,
) {
    let top = hole;
    let mut child = hole;
    while len > 2 && child < (len - 1) / 2 {
        child = 2 * (child + 1);
        if less(h[child], h[child - 1]) {
            child -= 1;
        }
        h[hole] = h[child];
        hole = child;
    }
    if len % 2 == 0 && len >= 2 && child == (len - 2) / 2 {
        child = 2 * (child + 1);
        h[hole] = h[child - 1];
        hole = child - 1;
    }
    // __push_heap
    while hole > top {
        let parent = (hole - 1) / 2;
        if !less(h[parent], v) {
            break;
        }
        h[hole] = h[parent];
        hole = parent;
    }
    h[hole] = v;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// TOP_K's order: descending, then the first two swapped; the set is [`top_k_set`]'s.
    #[test]
    fn top_k_ordered_sorts_then_swaps_the_first_two() {
        let data = [0.5, 3.0, -1.0, 2.0, f32::NEG_INFINITY, 7.0, 0.0];
        let mut idx = Vec::new();
        top_k_ordered(&data, 4, &mut idx);
        assert_eq!(idx, vec![1, 5, 3, 0]);
        top_k_ordered(&data, 1, &mut idx);
        assert_eq!(idx, vec![5]);
        top_k_ordered(&data, 7, &mut idx);
        assert_eq!(idx, vec![1, 5, 3, 0, 6, 2, 4]);
        let mut set = Vec::new();
        let mut x = 777u32;
        for n in 1..30 {
            let row: Vec<f32> = (0..n)
                .map(|_| {
                    x = x.wrapping_mul(1103515245).wrapping_add(12345);
                    ((x >> 16) % 5) as f32
                })
                .collect();
            for k in 0..=n {
                top_k_ordered(&row, k, &mut idx);
                top_k_set(&row, k, &mut set);
                let (mut a, mut b) = (idx.clone(), set.clone());
                a.sort();
                b.sort();
                assert_eq!(a, b, "n {n} k {k}: the same set");
                let mut sorted = idx.clone();
                if sorted.len() > 1 {
                    sorted.swap(0, 1);
                }
                assert!(sorted
                    .windows(2)
                    .all(|w| row[w[0] as usize] >= row[w[1] as usize]));
            }
        }
    }

    /// The selected set is the k largest whatever their order; with ties at the boundary it
    /// is the set libstdc++'s partial_sort keeps (worked by hand: a heap of the first k, later
    /// elements replace the top only when strictly larger).
    #[test]
    fn top_k_set_keeps_the_largest() {
        let data = [0.5, 3.0, -1.0, 2.0, f32::NEG_INFINITY, 7.0, 0.0];
        let mut idx = Vec::new();
        top_k_set(&data, 3, &mut idx);
        idx.sort();
        assert_eq!(idx, vec![1, 3, 5]);
        top_k_set(&data, 10, &mut idx);
        assert_eq!(idx.len(), data.len());
        top_k_set(&data, 0, &mut idx);
        assert!(idx.is_empty());
        // ties: equal later values never replace an equal top
        let ties = [1.0, 1.0, 1.0, 1.0];
        top_k_set(&ties, 2, &mut idx);
        idx.sort();
        assert_eq!(idx, vec![0, 1]);
        // many random rows: the set's minimum is >= every value left out
        let mut x = 12345u32;
        for n in 1..40 {
            let row: Vec<f32> = (0..n)
                .map(|_| {
                    x = x.wrapping_mul(1103515245).wrapping_add(12345);
                    ((x >> 16) % 7) as f32
                })
                .collect();
            for k in 0..=n {
                top_k_set(&row, k, &mut idx);
                assert_eq!(idx.len(), k);
                let min_in = idx
                    .iter()
                    .map(|&i| row[i as usize])
                    .fold(f32::INFINITY, f32::min);
                for (i, &v) in row.iter().enumerate() {
                    if !idx.contains(&(i as i32)) {
                        assert!(v <= min_in, "n {n} k {k}: {v} left out, {min_in} kept");
                    }
                }
            }
        }
    }
}
