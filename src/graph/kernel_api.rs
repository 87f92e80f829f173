//! The engine's entry points into the CPU kernels (`crate::kernels::cpu`): the weight types
//! they compute with, row dequantization, and the matrix product over the context's thread
//! pool.

use crate::gguf::GgmlType;
use crate::kernels::cpu;

pub use cpu::{for_row_runs, Scratch, ThreadPool};

/// Whether the CPU kernels compute with weights of type `ty`.
pub fn supports(ty: GgmlType) -> bool {
    cpu::supports(ty)
}

/// Decodes one row (`out.len()` values) of type `ty` from `src`.
pub fn dequantize_row(ty: GgmlType, src: &[u8], out: &mut [f32]) {
    cpu::dequantize_row(ty, src, out)
}

/// `dst[j * dst_stride + offset + i] = w_i · x_j` for the `n_rows` rows of `w` and the `m`
/// rows of `x` (activations converted to the weight type's dot type first, as ggml does).
#[allow(clippy::too_many_arguments)]
pub fn mul_mat(
    ty: GgmlType,
    w: &[u8],
    n_rows: usize,
    k: usize,
    x: &[f32],
    m: usize,
    dst: &mut [f32],
    dst_stride: usize,
    offset: usize,
    pool: &ThreadPool,
    scratch: &mut Scratch,
) {
    cpu::mul_mat_rows(
        ty, w, n_rows, k, x, m, dst, dst_stride, offset, pool, scratch,
    )
}

/// `dst[j * n + i] = w_i · x_j` for a weight in a repacked layout (`n` its rows, `m` the rows
/// of `x`): upstream's repacked MUL_MAT (its gemm for groups of 4 activation rows, gemv for
/// the rest).
pub fn mul_mat_repacked(
    w: &cpu::Repacked,
    x: &[f32],
    m: usize,
    dst: &mut [f32],
    pool: &ThreadPool,
    scratch: &mut Scratch,
) {
    cpu::repack::mul_mat_repacked(w, x, m, dst, w.n_rows, 0, pool, scratch)
}

pub use cpu::mul_mat_id::Experts;

/// Whether [`mul_mat_id`] takes this MUL_MAT_ID (`routes[e]`: the (activation row, output
/// row) pairs routed to expert `e`); otherwise the engine multiplies expert by expert.
pub fn mul_mat_id_takes(
    ty: GgmlType,
    n_rows: usize,
    k: usize,
    routes: &[Vec<(usize, usize)>],
) -> bool {
    cpu::mul_mat_id::takes(ty, n_rows, k, routes)
}

/// ggml's MUL_MAT_ID over all routed experts in one parallel job (see
/// `kernels::cpu::mul_mat_id`): `dst[dst_row * n_rows + i] = s_e · (expert e row i · x row
/// x_row)` for every `(x_row, dst_row)` in `routes[e]`.
pub fn mul_mat_id(
    w: &Experts<'_>,
    x: &[f32],
    routes: &[Vec<(usize, usize)>],
    scales: Option<&[f32]>,
    dst: &mut [f32],
    pool: &ThreadPool,
    scratch: &mut Scratch,
) {
    cpu::mul_mat_id::mul_mat_id(w, x, routes, scales, dst, pool, scratch)
}
