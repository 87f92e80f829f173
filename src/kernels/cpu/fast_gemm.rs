//! The fast mode's batched matrix products (prompt processing): Q8_0 and Q4_0 weights, in
//! groups of 8 rows, times Q8_0 activations quantized once per product, with integer sums per
//! block and the float work once per 8 rows (`r8_layout.rs`). Each task packs its groups into
//! its own buffer (the weight keeps its layout: mmapped bytes stay mapped, a swapped tensor
//! needs nothing re-derived) and sweeps every activation column over a group while it sits in
//! L1; threads split the output rows. Results differ from the exact mode's only by float
//! summation order (KL ≤ 1e-4 on the real models, `scripts/test-engine.sh`).
//!
//! The K-quants (Q4_K repacked at load into `Q4Kx8`, plain Q4_K/Q5_K/Q6_K rows) take the
//! group kernels of `r8_layout::KGroupFn` over the exact mode's Q8_K activations: per
//! super-block of 8 rows the quants made ready once for all columns, the sub-block scales and
//! mins inside the integer sums, the min term from the activations' `bsums`, the float work
//! once per super-block (ik_llama.cpp's technique; our layout and code).

use super::blocks::{
    Q4_0_BYTES, Q4_1_BYTES, Q5_0_BYTES, Q5_1_BYTES, Q8_0_BYTES, Q8_1_BYTES, Q8_K_BYTES, QK, QK_K,
};
use super::dispatch::{
    k_kernel, r8_iq4_nl_values_fn, r8_kernel, r8_min_term_fn, r8_pack_min_fn, r8_pack_q4_0_fn,
    r8_pack_q4_0x8_fn, r8_pack_q5_0_fn, r8_pack_q8_0_fn,
};
use super::pool::{SharedOut, ThreadPool};
use super::r8_layout::*;
use super::r8_min::q8_1_as_q8_0;
use crate::gguf::GgmlType;

// the r8 packing reads the repacked layout's super-blocks
const _: () = assert!(Q4_KX8_BLOCK_BYTES == super::repack_layout::Q4KX8_BYTES);

/// Fewest activation columns for which the fast products pay (packing costs about what one
/// column's products do).
pub const FAST_MIN_COLS: usize = 8;

/// A weight the fast products take.
#[derive(Clone, Copy, Debug)]
pub enum FastWeight<'a> {
    /// ggml rows of `t` (an [`r8_type`]), `row_stride` bytes apart.
    Plain {
        t: GgmlType,
        bytes: &'a [u8],
        row_stride: usize,
    },
    /// The bytes of a repacked `q4_0x8` weight (groups of 8 rows).
    Q4_0x8(&'a [u8]),
    /// The bytes of a repacked `iq4_nl_8x8` weight (`q4_0x8`'s layout, code-book nibbles).
    Iq4NlX8(&'a [u8]),
    /// The bytes of a repacked `Q4Kx8` weight (groups of 8 Q4_K rows); its activations are
    /// Q8_K rows (the exact mode's), not Q8_0.
    Q4Kx8(&'a [u8]),
    /// Plain rows of a K-quant ([`k_layout`]), `row_stride` bytes apart; Q8_K activations.
    KRows {
        layout: KLayout,
        bytes: &'a [u8],
        row_stride: usize,
    },
}

/// Whether Q5_1 products take the r8 kernels: not by default. Their results agree with the
/// scalar reference (ggml's generic order: mean KL 2.3e-3 on SmolLM2 requantized to Q5_1,
/// as Q4_1's), but upstream's AVX2 build, which the exact mode reproduces bit for bit, is
/// 0.67 away from its own generic order on that model (greedy tokens differ after 12 steps;
/// measured 2026-11-29), so the fast mode could not stay within the exact mode's bounds.
const Q5_1_FAST: bool = false;

/// The weight types the r8 kernels take: blocks of 32 with one f16 scale (Q8_0 activations),
/// or a scale and a min ([`has_min`]: Q8_1 activations; Q5_1 when [`Q5_1_FAST`]).
pub fn r8_type(t: GgmlType) -> bool {
    matches!(
        t,
        GgmlType::Q8_0 | GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::IQ4_NL | GgmlType::Q4_1
    ) || (Q5_1_FAST && t == GgmlType::Q5_1)
}

/// Whether `t` is an [`r8_type`] with a per-block min (Q4_1, Q5_1: `r8_min.rs`), whose
/// activations are Q8_1 rows and whose products add the min term.
pub fn has_min(t: GgmlType) -> bool {
    matches!(t, GgmlType::Q4_1 | GgmlType::Q5_1)
}

/// Whether the fast mode takes a product of a `t` weight of `n_rows` rows with `m` activation
/// columns: an [`r8_type`] with a multiple of 8 rows and at least [`FAST_MIN_COLS`] columns,
/// when the mode is fast.
pub fn takes(t: GgmlType, n_rows: usize, m: usize) -> bool {
    r8_type(t) && n_rows % R8_ROWS == 0 && n_rows > 0 && m >= FAST_MIN_COLS && super::mode::fast()
}

/// The [`KLayout`] of the fast K-quant products of plain rows of `t`, if they take it.
pub fn k_layout(t: GgmlType) -> Option<KLayout> {
    match t {
        GgmlType::Q4_K => Some(KLayout::Q4K),
        GgmlType::Q5_K => Some(KLayout::Q5K),
        GgmlType::Q6_K => Some(KLayout::Q6K),
        GgmlType::IQ4_XS => Some(KLayout::IQ4XS),
        _ => None,
    }
}

/// Whether the fast mode takes a product of a plain `t` weight (a [`k_layout`] type) of
/// `n_rows` rows of `k` with `m` activation columns: a multiple of 8 rows and of 256
/// elements, at least [`FAST_MIN_COLS`] columns, when the mode is fast.
pub fn takes_k(t: GgmlType, n_rows: usize, k: usize, m: usize) -> bool {
    k_layout(t).is_some()
        && n_rows % R8_ROWS == 0
        && n_rows > 0
        && k % QK_K == 0
        && k > 0
        && m >= FAST_MIN_COLS
        && super::mode::fast()
}

/// Whether Q4_K prompt products take [`FastWeight::Q4Kx8`] (the K-quant group kernel).
const Q4_K_FAST: bool = true;

/// Whether the fast mode takes a product of a repacked weight of plain type `t` (the
/// [`r8_type`]s and Q4_K) with `n_rows` rows and `m` activation columns.
pub fn takes_repacked(t: GgmlType, n_rows: usize, m: usize) -> bool {
    (r8_type(t) || (Q4_K_FAST && t == GgmlType::Q4_K))
        && n_rows % R8_ROWS == 0
        && n_rows > 0
        && m >= FAST_MIN_COLS
        && super::mode::fast()
}

/// `dst[j * dst_stride + dst_offset + i] = w row i · x row j` for the `n_rows` rows of `w` and
/// the `m` Q8_0 rows of `x` (`x_row_bytes` apart, `k` elements each; Q8_1 rows for the
/// [`has_min`] types, Q8_K rows for [`FastWeight::Q4Kx8`]).
#[allow(clippy::too_many_arguments)]
pub fn mul_mat_fast(
    w: FastWeight<'_>,
    n_rows: usize,
    k: usize,
    x: &[u8],
    x_row_bytes: usize,
    m: usize,
    dst: &mut [f32],
    dst_stride: usize,
    dst_offset: usize,
    pool: &ThreadPool,
) {
    assert!(
        k % QK == 0 && n_rows % R8_ROWS == 0,
        "fast product of {n_rows} × {k}"
    );
    if m == 0 || n_rows == 0 {
        return;
    }
    let x3 = (x, x_row_bytes, m);
    match w {
        FastWeight::Q4Kx8(bytes) => {
            let w = (KLayout::Q4Kx8, bytes, 0);
            return mul_mat_fast_k(w, n_rows, k, x3, dst, dst_stride, dst_offset, pool);
        }
        FastWeight::KRows {
            layout,
            bytes,
            row_stride,
        } => {
            let w = (layout, bytes, row_stride);
            return mul_mat_fast_k(w, n_rows, k, x3, dst, dst_stride, dst_offset, pool);
        }
        _ => {}
    }
    let nb = k / QK;
    let min = matches!(w, FastWeight::Plain { t, .. } if has_min(t));
    let x_block = if min { Q8_1_BYTES } else { Q8_0_BYTES };
    assert!(
        x_row_bytes >= nb * x_block && x.len() >= (m - 1) * x_row_bytes + nb * x_block,
        "activations: {} bytes for {m} rows of {k}",
        x.len()
    );
    assert!(
        m == 1 || dst_offset + n_rows <= dst_stride,
        "dst rows overlap"
    );
    let need = (m - 1) * dst_stride + dst_offset + n_rows;
    assert!(dst.len() >= need, "dst: {} values, needs {need}", dst.len());
    let (values, group_src_bytes) = match w {
        FastWeight::Plain {
            t,
            bytes,
            row_stride,
        } => {
            let block = match t {
                GgmlType::Q8_0 => Q8_0_BYTES,
                GgmlType::Q4_0 | GgmlType::IQ4_NL => Q4_0_BYTES,
                GgmlType::Q5_0 => Q5_0_BYTES,
                GgmlType::Q4_1 => Q4_1_BYTES,
                GgmlType::Q5_1 => Q5_1_BYTES,
                _ => panic!("no fast product for {t}"),
            };
            assert!(
                row_stride >= nb * block && bytes.len() >= (n_rows - 1) * row_stride + nb * block,
                "{t} weight: {} bytes for {n_rows} rows of {k}",
                bytes.len()
            );
            (values_of(t), 0)
        }
        FastWeight::Q4_0x8(bytes) | FastWeight::Iq4NlX8(bytes) => {
            let g = nb * R8_ROWS * Q4_0_BYTES;
            assert!(
                bytes.len() >= n_rows / R8_ROWS * g,
                "q4_0x8 weight: {} bytes",
                bytes.len()
            );
            let values = match w {
                FastWeight::Q4_0x8(_) => R8Values::Nibble4,
                _ => R8Values::Signed8,
            };
            (values, g)
        }
        FastWeight::Q4Kx8(_) | FastWeight::KRows { .. } => unreachable!("K-quants"),
    };
    // per column and block: the scale, and the values' offset × the quants' sum; for the
    // min types the Q8_1 rows copied into Q8_0 shape, no offset, and `s_x` for the min term
    let offset = match w {
        FastWeight::Plain { t, .. } => nibble_offset(t),
        FastWeight::Q4_0x8(_) => nibble_offset(GgmlType::Q4_0),
        _ => 0,
    };
    let mut dx = vec![0f32; m * nb];
    let mut sx = vec![0i32; m * nb];
    let (mut x8, mut sm) = (Vec::new(), Vec::new());
    if min {
        x8 = vec![0u8; m * nb * Q8_0_BYTES];
        sm = vec![0f32; m * nb];
        for j in 0..m {
            let (b0, b1) = (j * nb, (j + 1) * nb);
            q8_1_as_q8_0(
                &x[j * x_row_bytes..],
                nb,
                &mut x8[b0 * Q8_0_BYTES..b1 * Q8_0_BYTES],
                &mut dx[b0..b1],
                &mut sm[b0..b1],
            );
        }
    } else {
        for j in 0..m {
            let row = &x[j * x_row_bytes..j * x_row_bytes + nb * Q8_0_BYTES];
            activation_meta(
                row,
                nb,
                &mut dx[j * nb..(j + 1) * nb],
                &mut sx[j * nb..(j + 1) * nb],
                offset,
            );
        }
    }
    let (x, x_row_bytes) = if min {
        (&x8[..], nb * Q8_0_BYTES)
    } else {
        (x, x_row_bytes)
    };
    let min_term = r8_min_term_fn();
    let kernel = r8_kernel();
    let pack4x8 = r8_pack_q4_0x8_fn();
    let groups = n_rows / R8_ROWS;
    let (nchunk, per) = pool.even_tasks(groups);
    let out = SharedOut::new(dst);
    let run = |task: usize, _thread: usize| {
        let mut packed = vec![0u8; nb * R8_BLOCK_BYTES];
        let mut mins = vec![0f32; if min { nb * R8_ROWS } else { 0 }];
        let mut terms = vec![[0f32; R8_ROWS]; if min { m } else { 0 }];
        for g in task * per..((task + 1) * per).min(groups) {
            match w {
                FastWeight::Plain {
                    t,
                    bytes,
                    row_stride,
                } if min => pack_group_min(t, bytes, row_stride, g, nb, &mut packed, &mut mins),
                FastWeight::Plain {
                    t,
                    bytes,
                    row_stride,
                } => pack_group(t, bytes, row_stride, g, nb, &mut packed),
                FastWeight::Q4Kx8(_) | FastWeight::KRows { .. } => unreachable!("K-quants"),
                FastWeight::Q4_0x8(bytes) | FastWeight::Iq4NlX8(bytes) => {
                    let src = &bytes[g * group_src_bytes..(g + 1) * group_src_bytes];
                    pack4x8(src, nb, &mut packed);
                    if let FastWeight::Iq4NlX8(_) = w {
                        r8_iq4_nl_values_fn()(nb, &mut packed);
                    }
                }
            }
            if min {
                // every column's min term at once: one column's is a chain of dependent FMAs
                min_term(nb, &mins, &sm, m, &mut terms);
            }
            let cols = GroupColumns {
                kernel,
                values,
                nb,
                x,
                x_row_bytes,
                dx: &dx,
                sx: &sx,
            };
            cols.run(&packed, 0..m, |c, v| {
                let at = c * dst_stride + dst_offset + g * R8_ROWS;
                // SAFETY: group g belongs to this task alone (groups are split among the
                // tasks, each task covers every column), so these 8 outputs of column c are
                // written once, by this task; in bounds as asserted above; `dst` stays
                // mutably borrowed until parallel_for returns.
                let o = unsafe { out.slice(at, R8_ROWS) };
                if min {
                    o.iter_mut()
                        .zip(v.iter().zip(terms[c]))
                        .for_each(|(o, (v, t))| *o = v + t);
                } else {
                    o.copy_from_slice(v);
                }
            });
        }
    };
    pool.parallel_for(nchunk, &run);
}

/// [`mul_mat_fast`] of a K-quant weight `(layout, bytes, row_stride)` (a repacked `Q4Kx8`
/// weight, or plain rows) with `x` = (Q8_K rows, their stride, `m`): the group kernel of
/// `r8_layout::KGroupFn` (sub-block scales and mins inside the integer sums, the min term
/// from the activations' `bsums`, float work once per super-block); the activations are the
/// exact mode's, only the float order differs. Tasks split the groups; each sweeps all
/// columns over its groups.
#[allow(clippy::too_many_arguments)]
fn mul_mat_fast_k(
    (layout, w, row_stride): (KLayout, &[u8], usize),
    n_rows: usize,
    k: usize,
    (x, x_row_bytes, m): (&[u8], usize, usize),
    dst: &mut [f32],
    dst_stride: usize,
    dst_offset: usize,
    pool: &ThreadPool,
) {
    assert!(k % QK_K == 0, "{layout:?} product of {k} columns");
    let nbk = k / QK_K;
    // bytes from one group's start to the next
    let group_bytes = match layout {
        KLayout::Q4Kx8 => nbk * Q4_KX8_BLOCK_BYTES,
        _ => R8_ROWS * row_stride,
    };
    assert!(
        w.len() >= (n_rows / R8_ROWS - 1) * group_bytes,
        "{layout:?} weight: {} bytes",
        w.len()
    );
    assert!(
        x_row_bytes >= nbk * Q8_K_BYTES && x.len() >= (m - 1) * x_row_bytes + nbk * Q8_K_BYTES,
        "activations: {} bytes for {m} Q8_K rows of {k}",
        x.len()
    );
    assert!(
        m == 1 || dst_offset + n_rows <= dst_stride,
        "dst rows overlap"
    );
    let need = (m - 1) * dst_stride + dst_offset + n_rows;
    assert!(dst.len() >= need, "dst: {} values, needs {need}", dst.len());
    let kernel = k_kernel(layout);
    let groups = n_rows / R8_ROWS;
    let (nchunk, per) = pool.even_tasks(groups);
    let out = SharedOut::new(dst);
    let run = |task: usize, _thread: usize| {
        let mut vals = vec![[0f32; R8_ROWS]; m];
        for g in task * per..((task + 1) * per).min(groups) {
            // the kernel checks that the group's rows are all there
            kernel(
                nbk,
                &w[g * group_bytes..],
                row_stride,
                x,
                x_row_bytes,
                m,
                &mut vals,
            );
            for (c, v) in vals.iter().enumerate() {
                let at = c * dst_stride + dst_offset + g * R8_ROWS;
                // SAFETY: group g belongs to this task alone (groups are split among the
                // tasks, each task covers every column), so these 8 outputs of column c are
                // written once, by this task; in bounds as asserted above; `dst` stays
                // mutably borrowed until parallel_for returns.
                unsafe { out.slice(at, R8_ROWS) }.copy_from_slice(v);
            }
        }
    };
    pool.parallel_for(nchunk, &run);
}

/// The r8 values of a plain `t` weight (an [`r8_type`]; the [`has_min`] types' unsigned
/// values take the nibble path with no offset).
pub(super) fn values_of(t: GgmlType) -> R8Values {
    match t {
        GgmlType::Q8_0 | GgmlType::IQ4_NL => R8Values::Signed8,
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q4_1 | GgmlType::Q5_1 => R8Values::Nibble4,
        _ => panic!("no fast product for {t}"),
    }
}

/// What a plain `t` weight's [`R8Values::Nibble4`] values hold above the weights' integers
/// (the kernels take it off with `offset · Σ x` per block): 8 for Q4_0 (and its repacked
/// `q4_0x8`), 16 for Q5_0, else 0 (the min types' quants are the values themselves).
pub(super) fn nibble_offset(t: GgmlType) -> i32 {
    match t {
        GgmlType::Q4_0 => 8,
        GgmlType::Q5_0 => 16,
        _ => 0,
    }
}

/// Packs rows `8g .. 8g + 8` of a plain Q8_0, Q4_0, Q5_0 or IQ4_NL weight (`row_stride` bytes apart in
/// `bytes`, `nb` blocks each) into `packed` (`nb` r8 blocks).
pub(super) fn pack_group(
    t: GgmlType,
    bytes: &[u8],
    row_stride: usize,
    g: usize,
    nb: usize,
    packed: &mut [u8],
) {
    let rows: [&[u8]; R8_ROWS] = std::array::from_fn(|r| {
        let at = (g * R8_ROWS + r) * row_stride;
        &bytes[at..]
    });
    match t {
        GgmlType::Q8_0 => r8_pack_q8_0_fn()(rows, nb, packed),
        GgmlType::Q5_0 => r8_pack_q5_0_fn()(rows, nb, packed),
        GgmlType::IQ4_NL => {
            r8_pack_q4_0_fn()(rows, nb, packed);
            r8_iq4_nl_values_fn()(nb, packed);
        }
        _ => r8_pack_q4_0_fn()(rows, nb, packed),
    }
}

/// Packs rows `8g .. 8g + 8` of a plain Q4_1 or Q5_1 weight (a [`has_min`] type) into
/// `packed` (`nb` r8 blocks) and their block mins into `mins` (`8 · nb`, row order).
pub(super) fn pack_group_min(
    t: GgmlType,
    bytes: &[u8],
    row_stride: usize,
    g: usize,
    nb: usize,
    packed: &mut [u8],
    mins: &mut [f32],
) {
    let rows: [&[u8]; R8_ROWS] = std::array::from_fn(|r| {
        let at = (g * R8_ROWS + r) * row_stride;
        &bytes[at..]
    });
    let pack = r8_pack_min_fn(t).unwrap_or_else(|| panic!("{t} has no min"));
    pack(rows, nb, packed, mins);
}

/// Activation columns for one packed group: Q8_0 rows `x_row_bytes` apart with their
/// [`activation_meta`] (`nb` entries a column in `dx`, `sx`).
pub(super) struct GroupColumns<'a> {
    pub kernel: R8Fn,
    pub values: R8Values,
    pub nb: usize,
    pub x: &'a [u8],
    pub x_row_bytes: usize,
    pub dx: &'a [f32],
    pub sx: &'a [i32],
}

impl GroupColumns<'_> {
    /// The 8 outputs of the packed group for each column in `cols`, handed to `put(column,
    /// outputs)` in row order, [`R8_MAX_COLS`] columns per kernel call.
    pub fn run(
        &self,
        packed: &[u8],
        cols: std::ops::Range<usize>,
        mut put: impl FnMut(usize, &[f32; R8_ROWS]),
    ) {
        let mut vals: R8Out = [[0f32; R8_ROWS]; R8_MAX_COLS];
        let mut col = cols.start;
        while col < cols.end {
            let n = R8_MAX_COLS.min(cols.end - col);
            let meta = col * self.nb;
            (self.kernel)(
                self.values,
                self.nb,
                packed,
                &self.x[col * self.x_row_bytes..],
                self.x_row_bytes,
                n,
                &self.dx[meta..],
                &self.sx[meta..],
                self.nb,
                &mut vals,
            );
            for (c, v) in vals.iter().enumerate().take(n) {
                put(col + c, v);
            }
            col += n;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::cpu::dispatch::{quantize_row, vec_dot_scalar};
    use crate::kernels::cpu::type_traits::row_bytes;

    use crate::kernels::cpu::test_rng::xorshift_f32 as xorshift;

    /// The fast product of real quantized rows agrees with the scalar reference dot products
    /// (exact integer sums, so only the float summation order differs), for plain Q8_0,
    /// Q4_0, Q5_0, IQ4_NL, Q4_1 and Q5_1 rows (Q8_1 activations for the last two), repacked q4_0x8 and iq4_nl_8x8 weights, at 1 and 3 threads and column counts that
    /// leave every tail shape.
    #[test]
    fn fast_products_agree_with_the_reference_dots() {
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
        let (n_rows, k, m) = (24, 96, 11);
        let wf: Vec<f32> = (0..n_rows * k).map(|_| next()).collect();
        let xf: Vec<f32> = (0..m * k).map(|_| next()).collect();
        // IQ4_NL rows: Q4_0's bytes read through the code book (any nibbles are valid)
        for t in [
            GgmlType::Q8_0,
            GgmlType::Q4_0,
            GgmlType::Q5_0,
            GgmlType::IQ4_NL,
            GgmlType::Q4_1,
            GgmlType::Q5_1,
        ] {
            let vt = crate::kernels::cpu::type_traits::vec_dot_type(t);
            let xq_row = row_bytes(vt, k);
            let mut xq = vec![0u8; m * xq_row];
            for j in 0..m {
                quantize_row(vt, &xf[j * k..(j + 1) * k], &mut xq[j * xq_row..]);
            }
            let wr = row_bytes(t, k);
            let mut wq = vec![0u8; n_rows * wr];
            for i in 0..n_rows {
                let row = &wf[i * k..(i + 1) * k];
                let out = &mut wq[i * wr..(i + 1) * wr];
                match t {
                    GgmlType::Q8_0 => quantize_row(t, row, out),
                    GgmlType::Q5_0 | GgmlType::Q4_1 | GgmlType::Q5_1 => {
                        // any bits are a valid block: random ones under a sane scale (and a
                        // min of either sign)
                        let (size, head) = match t {
                            GgmlType::Q5_0 => (Q5_0_BYTES, 2),
                            GgmlType::Q4_1 => (Q4_1_BYTES, 4),
                            _ => (Q5_1_BYTES, 4),
                        };
                        for (e, blk) in out.chunks_exact_mut(size).enumerate() {
                            let d = half::f16::from_f32(0.01 + 0.01 * row[e].abs());
                            blk[..2].copy_from_slice(&d.to_le_bytes());
                            if head == 4 {
                                let mn = half::f16::from_f32(0.1 * row[(e + 7) % k]);
                                blk[2..4].copy_from_slice(&mn.to_le_bytes());
                            }
                            for (j, q) in blk[head..].iter_mut().enumerate() {
                                *q = (row[(e * 20 + j) % k] * 1e4) as i32 as u8;
                            }
                        }
                    }
                    _ => crate::kernels::cpu::quantize::q4_0(row, out),
                }
            }
            let mut want = vec![0f32; m * n_rows];
            for j in 0..m {
                for i in 0..n_rows {
                    want[j * n_rows + i] = vec_dot_scalar(t, k, &wq[i * wr..], &xq[j * xq_row..]);
                }
            }
            let repacked;
            let mut weights = vec![FastWeight::Plain {
                t,
                bytes: &wq,
                row_stride: wr,
            }];
            if matches!(t, GgmlType::Q4_0 | GgmlType::IQ4_NL) {
                use crate::kernels::cpu::repack_layout::RepackKind;
                let kind = if t == GgmlType::Q4_0 {
                    RepackKind::Q4_0x8
                } else {
                    RepackKind::Iq4NlX8
                };
                repacked = crate::kernels::cpu::repack_layout::repack(kind, t, &wq, n_rows, k);
                weights.push(if t == GgmlType::Q4_0 {
                    FastWeight::Q4_0x8(repacked.bytes())
                } else {
                    FastWeight::Iq4NlX8(repacked.bytes())
                });
            }
            for (wi, w) in weights.into_iter().enumerate() {
                for threads in [1, 3] {
                    let pool = ThreadPool::new(threads);
                    let mut got = vec![f32::NAN; m * n_rows];
                    mul_mat_fast(w, n_rows, k, &xq, xq_row, m, &mut got, n_rows, 0, &pool);
                    for (i, (g, e)) in got.iter().zip(&want).enumerate() {
                        assert!(
                            (g - e).abs() <= 1e-5 * (1.0 + e.abs()),
                            "{t} weight {wi}, {threads} threads: output {i}: {g} vs {e}"
                        );
                    }
                }
            }
        }
    }

    /// The fast K-quant products (a repacked Q4_K weight, plain Q4_K, Q5_K, Q6_K, IQ4_XS rows;
    /// random blocks: every bit pattern is valid given sane f16 scales) with Q8_K activations
    /// agree with the scalar reference dot products (the same integers; the scales and the
    /// min term in another float order), at 1 and 3 threads and column counts that leave
    /// every tail shape.
    #[test]
    fn k_quant_fast_products_agree_with_the_reference_dots() {
        use crate::kernels::cpu::repack_layout::{repack, RepackKind};
        let mut next = xorshift(0x51_7cc1_b727_220a);
        let (n_rows, k, m) = (24, 512, 11);
        let xf: Vec<f32> = (0..m * k).map(|_| next()).collect();
        let xq_row = row_bytes(GgmlType::Q8_K, k);
        let mut xq = vec![0u8; m * xq_row];
        for j in 0..m {
            quantize_row(
                GgmlType::Q8_K,
                &xf[j * k..(j + 1) * k],
                &mut xq[j * xq_row..],
            );
        }
        for (t, f16_fields) in [
            (GgmlType::Q4_K, &[0usize, 2][..]),
            (GgmlType::Q5_K, &[0, 2][..]),
            (GgmlType::Q6_K, &[208][..]),
            (GgmlType::IQ4_XS, &[0][..]),
        ] {
            let wr = row_bytes(t, k);
            let mut wq = vec![0u8; n_rows * wr];
            for blk in wq.chunks_exact_mut(t.type_size() as usize) {
                for q in blk.iter_mut() {
                    *q = (next() * 1e4) as i32 as u8;
                }
                for &at in f16_fields {
                    let v = half::f16::from_f32(0.001 + 0.002 * next().abs());
                    blk[at..at + 2].copy_from_slice(&v.to_le_bytes());
                }
            }
            let mut want = vec![0f32; m * n_rows];
            for j in 0..m {
                for i in 0..n_rows {
                    want[j * n_rows + i] = vec_dot_scalar(t, k, &wq[i * wr..], &xq[j * xq_row..]);
                }
            }
            let layout = k_layout(t).expect("a K-quant");
            let mut weights = vec![FastWeight::KRows {
                layout,
                bytes: &wq,
                row_stride: wr,
            }];
            let repacked;
            if t == GgmlType::Q4_K {
                repacked = repack(RepackKind::Q4Kx8, t, &wq, n_rows, k);
                weights.push(FastWeight::Q4Kx8(repacked.bytes()));
            }
            for (wi, w) in weights.into_iter().enumerate() {
                for threads in [1, 3] {
                    let pool = ThreadPool::new(threads);
                    for m in [m, 8] {
                        let mut got = vec![f32::NAN; m * n_rows];
                        mul_mat_fast(w, n_rows, k, &xq, xq_row, m, &mut got, n_rows, 0, &pool);
                        for (i, (g, e)) in got.iter().zip(&want).enumerate() {
                            assert!(
                                (g - e).abs() <= 1e-4 * (1.0 + e.abs()),
                                "{t} weight {wi}, {threads} threads, {m} columns: output {i}: {g} vs {e}"
                            );
                        }
                    }
                }
            }
        }
    }
}
