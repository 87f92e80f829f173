//! Weights repacked at load into 8-row interleaved layouts, as upstream's CPU backend does on
//! AVX2 (`ggml-cpu/repack.cpp`, the `CPU_REPACK` buffer type): a Q4_0 weight with a multiple
//! of 8 rows becomes `block_q4_0x8`s (`q4_0_8x8_q8_0`), so one pass over a block column
//! yields the dot products of 8 weight rows with an activation row (upstream's gemv), or with
//! 4 activation rows at once (its gemm).
//!
//! IQ4_NL weights become `block_iq4_nlx8`s (`iq4_nl_8x8_q8_0`) the same way. Q4_K weights
//! (`q4_K_8x8_q8_K`) get a layout of ours ([`Q4KX8_BYTES`]: the 6-bit scales unpacked, 2.8%
//! larger than the blocks) with upstream's two float orders: its gemm makes the FMAs per pair
//! of sub-blocks, its gemv per super-block, and its 4-row Q8_K quantizer breaks a tie of
//! magnitudes differently from the row quantizer ([`q8_k_mat_fixup`]).
//!
//! Layout of one `block_q4_0x8` (144 bytes: the 8 blocks it came from, same size): the 8 f16
//! scales of rows `8g .. 8g + 8` at one block index, then 128 bytes of quants, interleaved 8
//! bytes at a time: bytes `8i .. 8i + 8` are bytes `8 (i / 8) .. 8 (i / 8) + 8` of row
//! `i % 8`'s `qs` (upstream's `make_block_q4_0x8` with interleave 8). Upstream also XORs every
//! nibble with 8 for its signed lookup; we keep the nibbles unsigned and subtract `8 · Σ x`
//! from the integer sum, the same integer.
//!
//! Float order (what makes results bit-identical to upstream's): per output, one f32
//! accumulator over the blocks in order, `acc = fma(isum_b as f32, d_w · d_x, acc)`, where
//! `isum_b` is the exact integer dot product of block `b` and `d_w · d_x` the product of the two
//! f16 scales rounded to f32 (upstream's `_mm256_fmadd_ps(cvtepi32(iacc), col_scale *
//! row_scale, acc)` in both its gemv and its gemm). Activations are Q8_0 rows quantized as
//! `quantize_row_q8_0` does; upstream's `quantize_mat_q8_0` interleaves 4 rows but computes
//! the same values, so plain rows serve both shapes here.

//!
//! The layouts themselves and the repacking are in `cpu/repack_layout.rs` (shared with the SIMD
//! kernels); `scalar` holds the reference kernels; here the products over repacked weights
//! with run-time kernel choice (AVX2 in `x86/repack.rs`).

mod scalar;

pub use super::repack_layout::{
    repack, GroupFn, GroupKernels, RepackKind, Repacked, Q4KX8_BYTES, ROWS,
};
pub use scalar::scalar_kernels;

use crate::gguf::GgmlType;
use crate::kernels::cpu::blocks::*;
use crate::kernels::cpu::mul_mat::{
    prepare_activations, prepare_activations_done, Activations, Scratch,
};
use crate::kernels::cpu::pool::{SharedOut, ThreadPool};
use crate::kernels::cpu::type_traits::{row_bytes, vec_dot_type};

/// The layout upstream's `ggml_repack_get_optimal_repack_type` picks for a weight of type
/// `t` and shape `ne` on this CPU, when the weight feeds MUL_MAT (2-D): `q4_0_8x8_q8_0`,
/// `iq4_nl_8x8_q8_0` and `q4_K_8x8_q8_K` for Q4_0, IQ4_NL and Q4_K with a multiple of 8 rows,
/// on a CPU with AVX2 (off with `LLAMA_HOTSWAP_KERNELS=scalar`,
/// as upstream's generic build does not repack).
pub fn repack_kind(t: GgmlType, ne: [i64; 4]) -> Option<RepackKind> {
    if !simd() || ne[2] != 1 || ne[3] != 1 || ne[1] <= 0 || ne[1] % ROWS as i64 != 0 {
        return None;
    }
    match t {
        GgmlType::Q4_0 if ne[0] > 0 && ne[0] % QK as i64 == 0 => Some(RepackKind::Q4_0x8),
        GgmlType::IQ4_NL if ne[0] > 0 && ne[0] % QK as i64 == 0 => Some(RepackKind::Iq4NlX8),
        GgmlType::Q4_K if ne[0] > 0 && ne[0] % QK_K as i64 == 0 => Some(RepackKind::Q4Kx8),
        _ => None,
    }
}

fn simd() -> bool {
    #[cfg(target_arch = "x86_64")]
    return crate::kernels::cpu::x86::available();
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// The fastest kernels on this CPU (AVX2 when present, else the scalar reference).
pub fn kernels(kind: RepackKind) -> GroupKernels {
    #[cfg(target_arch = "x86_64")]
    if let Some(k) = crate::kernels::cpu::x86::repacked_kernels(kind) {
        return k;
    }
    scalar_kernels(kind)
}

/// Per activation row and block: the f16 scale as f32 bits and `8 · Σ x` (the Q4_0 offset
/// term), computed once per product instead of once per row group.
pub fn fill_meta(kind: RepackKind, act: &Activations<'_>, meta: &mut Vec<u32>) {
    meta.clear();
    if kind == RepackKind::Q4Kx8 {
        // the Q8_K scale, then the sums of the 8 sub-blocks of 32
        let nb = act.k() / QK_K;
        meta.reserve(act.m() * nb * 9);
        for j in 0..act.m() {
            let row = act.row(j);
            for b in 0..nb {
                let blk = &row[b * Q8_K_BYTES..(b + 1) * Q8_K_BYTES];
                meta.push(f32_at(blk, 0).to_bits());
                for sub in 0..8 {
                    let s = |i: usize| i32::from(i16_at(blk, 4 + QK_K + 2 * i));
                    meta.push((s(2 * sub) + s(2 * sub + 1)) as u32);
                }
            }
        }
        return;
    }
    let nb = act.k() / QK;
    meta.reserve(act.m() * nb * 2);
    for j in 0..act.m() {
        let row = act.row(j);
        for b in 0..nb {
            let blk = &row[b * Q8_0_BYTES..(b + 1) * Q8_0_BYTES];
            let sum: i32 = blk[2..].iter().map(|&q| i32::from(q as i8)).sum();
            meta.push(f16_at(blk, 0).to_bits());
            meta.push((8 * sum) as u32);
        }
    }
}

/// [`mul_mat_repacked`] with explicit kernels (tests run the scalar and SIMD ones).
#[allow(clippy::too_many_arguments)]
pub fn mul_mat_repacked_with(
    kernels: GroupKernels,
    w: &Repacked,
    act: &Activations<'_>,
    meta: &[u32],
    dst: &mut [f32],
    dst_stride: usize,
    dst_row_offset: usize,
    pool: &ThreadPool,
) {
    assert_eq!(
        act.vec_dot_type(),
        vec_dot_type(w.ty),
        "activations for {}",
        w.ty
    );
    assert_eq!(
        act.k(),
        w.k,
        "activations of {} for a weight of {}",
        act.k(),
        w.k
    );
    let (m, n_rows) = (act.m(), w.n_rows);
    if m == 0 || n_rows == 0 {
        return;
    }
    assert!(
        m == 1 || dst_row_offset + n_rows <= dst_stride,
        "dst rows overlap"
    );
    let need = (m - 1) * dst_stride + dst_row_offset + n_rows;
    assert!(dst.len() >= need, "dst: {} values, needs {need}", dst.len());
    let nb = w.k / w.kind.block_elems();
    let mw = w.kind.meta_words();
    assert!(
        meta.len() >= m * nb * mw,
        "meta of {} for {m} rows",
        meta.len()
    );
    let meta_row = |j: usize| &meta[j * nb * mw..(j + 1) * nb * mw];
    let groups = n_rows / ROWS;
    let gbytes = w.group_bytes();
    // Four chunks per thread (as upstream's repacked MUL_MAT); every output's arithmetic is
    // the same whatever the chunking.
    let nth = pool.n_threads();
    let nchunk = groups.min(nth * 4).max(1);
    let per = groups.div_ceil(nchunk);
    let nchunk = groups.div_ceil(per);
    let out = SharedOut::new(dst);
    let store = |col: usize, g: usize, vals: &[f32; ROWS]| {
        let at = col * dst_stride + dst_row_offset + g * ROWS;
        // SAFETY: (col, g) belongs to one task (groups are split among tasks, every task
        // covers all columns); the 8 indices are in bounds (checked above) and distinct per
        // (col, row); `dst` stays mutably borrowed until parallel_for returns.
        unsafe { std::ptr::copy_nonoverlapping(vals.as_ptr(), out.ptr().add(at), ROWS) };
    };
    let run = |task: usize, _thread: usize| {
        let (g0, g1) = (task * per, ((task + 1) * per).min(groups));
        for g in g0..g1 {
            let wg = &w.bytes[g * gbytes..(g + 1) * gbytes];
            let mut col = 0;
            while col + 4 <= m {
                let mut vals = [[0f32; ROWS]; 4];
                let x = [
                    act.row(col),
                    act.row(col + 1),
                    act.row(col + 2),
                    act.row(col + 3),
                ];
                let mt = [
                    meta_row(col),
                    meta_row(col + 1),
                    meta_row(col + 2),
                    meta_row(col + 3),
                ];
                (kernels.four)(nb, wg, x, mt, &mut vals);
                for (c, v) in vals.iter().enumerate() {
                    store(col + c, g, v);
                }
                col += 4;
            }
            while col < m {
                let mut vals = [[0f32; ROWS]; 1];
                (kernels.one)(nb, wg, [act.row(col)], [meta_row(col)], &mut vals);
                store(col, g, &vals[0]);
                col += 1;
            }
        }
    };
    pool.parallel_for(nchunk, &run);
}

/// ggml's MUL_MAT with a repacked weight: `dst[j * dst_stride + dst_row_offset + i] =
/// w row i · x row j` for the weight's rows and the `m` f32 rows of `x` (converted to Q8_0
/// first, as for the plain weight).
#[allow(clippy::too_many_arguments)]
pub fn mul_mat_repacked(
    w: &Repacked,
    x: &[f32],
    m: usize,
    dst: &mut [f32],
    dst_stride: usize,
    dst_row_offset: usize,
    pool: &ThreadPool,
    scratch: &mut Scratch,
) {
    let fast = match w.kind {
        RepackKind::Q4_0x8 => Some(crate::kernels::cpu::fast_gemm::FastWeight::Q4_0x8(&w.bytes)),
        RepackKind::Iq4NlX8 => Some(crate::kernels::cpu::fast_gemm::FastWeight::Iq4NlX8(
            &w.bytes,
        )),
        RepackKind::Q4Kx8 => Some(crate::kernels::cpu::fast_gemm::FastWeight::Q4Kx8(&w.bytes)),
    };
    if let Some(fw) =
        fast.filter(|_| crate::kernels::cpu::fast_gemm::takes_repacked(w.ty, w.n_rows, m))
    {
        // the fast mode's batched kernels (prompt processing); their float order per output
        // (one FMA per block of the exact integer sum, by d_w · d_x) is the repacked gemm's, so
        // a Q4_0 or IQ4_NL weight gives the exact mode's bits here, only sooner
        let act = prepare_activations(w.ty, x, w.k, m, pool, scratch);
        crate::kernels::cpu::fast_gemm::mul_mat_fast(
            fw,
            w.n_rows,
            w.k,
            act.bytes_all(),
            act.row_bytes_len(),
            m,
            dst,
            dst_stride,
            dst_row_offset,
            pool,
        );
        return;
    }
    mul_mat_repacked_using(
        kernels(w.kind),
        w,
        x,
        m,
        dst,
        dst_stride,
        dst_row_offset,
        pool,
        scratch,
    )
}

/// [`mul_mat_repacked`] with explicit kernels (tests run the scalar and SIMD ones).
#[allow(clippy::too_many_arguments)]
pub fn mul_mat_repacked_using(
    kernels: GroupKernels,
    w: &Repacked,
    x: &[f32],
    m: usize,
    dst: &mut [f32],
    dst_stride: usize,
    dst_row_offset: usize,
    pool: &ThreadPool,
    scratch: &mut Scratch,
) {
    let mut meta = std::mem::take(&mut scratch.repack_meta);
    {
        let _ = prepare_activations(w.ty, x, w.k, m, pool, scratch);
        if w.kind == RepackKind::Q4Kx8 {
            // rows in groups of 4 take upstream's `quantize_mat_q8_K_4x8` (see below)
            let row = row_bytes(GgmlType::Q8_K, w.k);
            for j in 0..m - m % 4 {
                let dst = &mut scratch.activations[j * row..(j + 1) * row];
                q8_k_mat_fixup(&x[j * w.k..(j + 1) * w.k], dst);
            }
        }
        let act = prepare_activations_done(w.ty, x, w.k, m, scratch);
        fill_meta(w.kind, &act, &mut meta);
        mul_mat_repacked_with(
            kernels,
            w,
            &act,
            &meta,
            dst,
            dst_stride,
            dst_row_offset,
            pool,
        );
    }
    scratch.repack_meta = meta;
}

/// Upstream's `quantize_mat_q8_K_4x8` (the activations of its repacked Q4_K gemm) differs from
/// `quantize_row_q8_K` in one case: when a super-block's largest magnitude occurs with both
/// signs, the row quantizer keeps the sign of its first occurrence, the 4-row one takes the
/// positive (scale `-127 / amax`). Re-quantizes such blocks of a row made by the former.
pub fn q8_k_mat_fixup(x: &[f32], dst: &mut [u8]) {
    for (xb, yb) in x.chunks_exact(QK_K).zip(dst.chunks_exact_mut(Q8_K_BYTES)) {
        let (max, amax) = crate::kernels::cpu::quantize::q8_k_extreme(xb);
        if max < 0.0 && xb.contains(&amax) {
            crate::kernels::cpu::quantize::q8_k_block(xb, yb, -127.0 / amax);
        }
    }
}

#[cfg(test)]
mod unrepack_tests {
    use super::*;

    /// Every byte pattern (scales, quants, the Q4_K 6-bit fields) comes back unchanged.
    #[test]
    fn unrepack_gives_back_the_bytes_repack_was_given() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        };
        for (kind, ty, block, elems) in [
            (RepackKind::Q4_0x8, GgmlType::Q4_0, Q4_0_BYTES, QK),
            (RepackKind::Iq4NlX8, GgmlType::IQ4_NL, Q4_0_BYTES, QK),
            (RepackKind::Q4Kx8, GgmlType::Q4_K, Q4_K_BYTES, QK_K),
        ] {
            let (n_rows, nb) = (16, 3);
            let src: Vec<u8> = (0..n_rows * nb * block).map(|_| next()).collect();
            let packed = repack(kind, ty, &src, n_rows, nb * elems);
            assert_eq!(packed.plain_nbytes(), src.len(), "{kind:?}");
            let mut back = vec![0u8; src.len()];
            packed.unrepack_into(&mut back);
            assert!(back == src, "{kind:?}: the plain bytes come back");
        }
    }
}
