//! Run-time kernel selection: for each op the ISA kernel when this CPU has it (x86-64:
//! AVX2/FMA/F16C, `x86/`), else the scalar reference, plus the checked entry points over
//! them. `LLAMA_HOTSWAP_KERNELS=scalar` forces the scalar path. A new ISA adds its folder
//! and one branch per function here.

use super::r8_layout::{
    iq4_nl_values, iq4_xs_rows_scalar, pack_q4_0, pack_q4_0x8, pack_q5_0, pack_q8_0,
    q4_k_rows_scalar, q4_kx8_scalar, q5_k_rows_scalar, q6_k_rows_scalar, r8_scalar, KGroupFn,
    KLayout, R8Fn, R8_ROWS,
};
use super::r8_min::{min_term, pack_q4_1, pack_q5_1, R8MinPackFn, R8MinTermFn};
use super::type_traits::*;
use super::vec::*;
#[cfg(target_arch = "x86_64")]
use super::x86;
use super::{dequant, dot_scalar, dot_tiled, grid_iq, quantize};
use crate::gguf::GgmlType;

/// ggml's `to_float` for `t`: decodes `dst.len()` values from the whole blocks at the start of
/// `src`. Bit-identical to ggml's `dequantize_row_*` (and gguf-py's `dequantize`); Q8_1 and
/// Q8_K (activation types) are accepted too.
///
/// Panics if `t` is not supported, `dst.len()` is not a multiple of the block size, or `src`
/// is shorter than `row_bytes(t, dst.len())`.
pub fn dequantize_row(t: GgmlType, src: &[u8], dst: &mut [f32]) {
    let n = row_bytes(t, dst.len());
    assert!(
        src.len() >= n,
        "{t} row of {} values needs {n} bytes, got {}",
        dst.len(),
        src.len()
    );
    let src = &src[..n];
    let f: fn(&[u8], &mut [f32]) = match t {
        GgmlType::F32 => dequant::f32_row,
        GgmlType::F16 => dequant::f16_row,
        GgmlType::BF16 => dequant::bf16_row,
        GgmlType::Q4_0 => dequant::q4_0,
        GgmlType::Q4_1 => dequant::q4_1,
        GgmlType::Q5_0 => dequant::q5_0,
        GgmlType::Q5_1 => dequant::q5_1,
        GgmlType::Q8_0 => dequant::q8_0,
        GgmlType::Q8_1 => dequant::q8_1,
        GgmlType::Q2_K => dequant::q2_k,
        GgmlType::Q3_K => dequant::q3_k,
        GgmlType::Q4_K => dequant::q4_k,
        GgmlType::Q5_K => dequant::q5_k,
        GgmlType::Q6_K => dequant::q6_k,
        GgmlType::Q8_K => dequant::q8_k,
        GgmlType::IQ4_NL => dequant::iq4_nl,
        GgmlType::IQ4_XS => dequant::iq4_xs,
        GgmlType::IQ2_XXS => grid_iq::dequant_iq2_xxs,
        GgmlType::IQ2_XS => grid_iq::dequant_iq2_xs,
        GgmlType::IQ2_S => grid_iq::dequant_iq2_s,
        GgmlType::IQ3_XXS => grid_iq::dequant_iq3_xxs,
        GgmlType::IQ3_S => grid_iq::dequant_iq3_s,
        GgmlType::IQ1_S => grid_iq::dequant_iq1_s,
        GgmlType::IQ1_M => grid_iq::dequant_iq1_m,
        _ => panic!("no CPU dequantization for ggml type {t}"),
    };
    f(src, dst);
}

/// Converts one f32 row into `vt`, one of the vec_dot types (F32, F16, BF16, Q8_0, Q8_1,
/// Q8_K), bit-exact with the `from_float` upstream's CPU backend runs on x86-64 (see
/// `quantize.rs`). `dst` must hold at least `row_bytes(vt, x.len())` bytes.
pub fn quantize_row(vt: GgmlType, x: &[f32], dst: &mut [u8]) {
    let n = row_bytes(vt, x.len());
    assert!(
        dst.len() >= n,
        "{vt} row of {} values needs {n} bytes",
        x.len()
    );
    let dst = &mut dst[..n];
    match vt {
        #[cfg(target_arch = "x86_64")]
        GgmlType::Q8_0 | GgmlType::Q8_1 if x86::quantize_q8(x, dst, vt == GgmlType::Q8_1) => {}
        #[cfg(target_arch = "x86_64")]
        GgmlType::F16 if x86::convert_f16(x, dst) => {}
        _ => quantize_row_scalar(vt, x, dst),
    }
}

/// Stores one f32 row as type `t` the way the CPU backend's SET_ROWS does (its `from_float`):
/// [`quantize_row`] for F32/F16/BF16/Q8_0, the reference quantizers for Q4_0/Q4_1. Panics for
/// another type (see [`is_kv_cache_type`]).
pub fn store_row(t: GgmlType, x: &[f32], dst: &mut [u8]) {
    match t {
        GgmlType::Q4_0 | GgmlType::Q4_1 => {
            let n = row_bytes(t, x.len());
            let dst = &mut dst[..n];
            if t == GgmlType::Q4_0 {
                quantize::q4_0(x, dst)
            } else {
                quantize::q4_1(x, dst)
            }
        }
        _ => quantize_row(t, x, dst),
    }
}

/// [`quantize_row`] with the scalar reference only (the SIMD quantizers are tested against it,
/// bit for bit).
pub fn quantize_row_scalar(vt: GgmlType, x: &[f32], dst: &mut [u8]) {
    let n = row_bytes(vt, x.len());
    assert!(
        dst.len() >= n,
        "{vt} row of {} values needs {n} bytes",
        x.len()
    );
    let dst = &mut dst[..n];
    match vt {
        GgmlType::F32 => quantize::f32_row(x, dst),
        GgmlType::F16 => quantize::f16_row(x, dst),
        GgmlType::BF16 => quantize::bf16_row(x, dst),
        GgmlType::Q8_0 => quantize::q8_0(x, dst),
        GgmlType::Q8_1 => quantize::q8_1(x, dst),
        GgmlType::Q8_K => quantize::q8_k(x, dst),
        _ => panic!("{vt} is not a vec_dot type"),
    }
}

/// The scalar reference dot product for weight type `t` (ggml's generic code).
pub fn scalar_dot_fn(t: GgmlType) -> DotFn {
    match t {
        GgmlType::F32 => dot_scalar::f32,
        GgmlType::F16 => dot_scalar::f16,
        GgmlType::BF16 => dot_scalar::bf16,
        GgmlType::Q4_0 => dot_scalar::q4_0,
        GgmlType::Q4_1 => dot_scalar::q4_1,
        GgmlType::Q5_0 => dot_scalar::q5_0,
        GgmlType::Q5_1 => dot_scalar::q5_1,
        GgmlType::Q8_0 => dot_scalar::q8_0,
        GgmlType::Q2_K => dot_scalar::q2_k,
        GgmlType::Q3_K => dot_scalar::q3_k,
        GgmlType::Q4_K => dot_scalar::q4_k,
        GgmlType::Q5_K => dot_scalar::q5_k,
        GgmlType::Q6_K => dot_scalar::q6_k,
        GgmlType::IQ4_NL => dot_scalar::iq4_nl,
        GgmlType::IQ4_XS => dot_scalar::iq4_xs,
        GgmlType::IQ2_XXS => grid_iq::dot_iq2_xxs,
        GgmlType::IQ2_XS => grid_iq::dot_iq2_xs,
        GgmlType::IQ2_S => grid_iq::dot_iq2_s,
        GgmlType::IQ3_XXS => grid_iq::dot_iq3_xxs,
        GgmlType::IQ3_S => grid_iq::dot_iq3_s,
        GgmlType::IQ1_S => grid_iq::dot_iq1_s,
        GgmlType::IQ1_M => grid_iq::dot_iq1_m,
        _ => panic!("no CPU kernel for ggml type {t}"),
    }
}

/// The fastest dot product for `t` on this machine: the SIMD one when the CPU has it (checked
/// once), else the scalar reference.
pub fn dot_fn(t: GgmlType) -> DotFn {
    #[cfg(target_arch = "x86_64")]
    if let Some(f) = x86::dot_fn(t) {
        return f;
    }
    scalar_dot_fn(t)
}

/// The dot product upstream runs for a product with one activation row (ggml's vec_dot,
/// where llamafile's sgemm declines): F16 and BF16 in `ggml_vec_dot_f16` / `_bf16`'s order,
/// IQ4_NL in `ggml_vec_dot_iq4_nl_q8_0`'s (two accumulators), where batched products run
/// tinyBLAS's order ([`dot_fn`]); for the other types the same as [`dot_fn`]. Without AVX2:
/// the scalar references (F16 in `ggml_vec_dot_f16`'s order, [`ops::dot_f16_ggml_by`]).
pub fn matvec_dot_fn(t: GgmlType) -> DotFn {
    #[cfg(target_arch = "x86_64")]
    if let Some(f) = x86::matvec_dot_fn(t) {
        return f;
    }
    if t == GgmlType::F16 {
        return f16_ggml_scalar;
    }
    scalar_dot_fn(t)
}

fn f16_ggml_scalar(k: usize, w: &[u8], x: &[u8]) -> f32 {
    let at = |b: &[u8], i: usize| half::f16::from_le_bytes([b[2 * i], b[2 * i + 1]]).to_f32();
    dot_f16_ggml_by(k, |i| at(w, i), |i| at(x, i))
}

/// The scalar reference of upstream's tiled K-quant order (`dot_tiled.rs`) for `t`, one of
/// the types it handles (Q2_K..Q6_K, IQ4_XS); `None` for another type.
pub fn tiled_scalar_dot_fn(t: GgmlType) -> Option<DotFn> {
    Some(match t {
        GgmlType::Q2_K => dot_tiled::q2_k,
        GgmlType::Q3_K => dot_tiled::q3_k,
        GgmlType::Q4_K => dot_tiled::q4_k,
        GgmlType::Q5_K => dot_tiled::q5_k,
        GgmlType::Q6_K => dot_tiled::q6_k,
        GgmlType::IQ4_XS => dot_tiled::iq4_xs,
        _ => return None,
    })
}

/// The dot product in the float order of upstream's tiled K-quant matmul, which computes
/// products of these types with 8 activation rows or more ([`takes_tiled`]): the AVX2 one
/// when the CPU has it, else the scalar reference; `None` for another type.
///
/// [`takes_tiled`]: super::takes_tiled
pub fn tiled_dot_fn(t: GgmlType) -> Option<DotFn> {
    #[cfg(target_arch = "x86_64")]
    if let Some(f) = x86::tiled_dot_fn(t) {
        return Some(f);
    }
    tiled_scalar_dot_fn(t)
}

/// The tile of `rows` × `cols` outputs in [`tiled_dot_fn`]'s arithmetic (AVX2: 1 × up to 4),
/// if one exists.
pub fn tiled_tile_shape(t: GgmlType, rows: usize, cols: usize) -> Option<Tile> {
    #[cfg(target_arch = "x86_64")]
    return x86::tiled_tile_shape(t, rows, cols);
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (t, rows, cols);
        None
    }
}

/// The main tile kernel for `t` on this machine, if one exists (AVX2: 4 weight rows × 3
/// activation rows for F16, 4 × 2 for F32/BF16 and Q4_0/Q5_0/Q8_0/IQ4_NL, 2 × 4 for
/// Q4_1/Q5_1, 1 × 4 for Q4_K/Q6_K). Every tile computes each output with exactly the arithmetic of
/// [`dot_fn`], so results never depend on the batch size nor on the thread count.
pub fn tile_fn(t: GgmlType) -> Option<Tile> {
    #[cfg(target_arch = "x86_64")]
    return x86::tile_fn(t);
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = t;
        None
    }
}

/// The tile kernel of exactly `rows` × `cols` outputs for `t`, for the edges of a product
/// (shapes up to [`tile_fn`]'s main one in each direction), if one exists.
pub fn tile_shape(t: GgmlType, rows: usize, cols: usize) -> Option<Tile> {
    #[cfg(target_arch = "x86_64")]
    return x86::tile_shape(t, rows, cols);
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (t, rows, cols);
        None
    }
}

/// Which SIMD level [`dot_fn`] uses: "avx2" or "scalar" (the mode's ISA level).
pub fn simd_level() -> &'static str {
    super::mode::isa_level()
}

fn check_dot_args(t: GgmlType, k: usize, w: &[u8], x: &[u8]) {
    let (nw, nx) = (row_bytes(t, k), row_bytes(vec_dot_type(t), k));
    assert!(
        w.len() >= nw && x.len() >= nx,
        "{t} dot of {k}: {} / {} bytes",
        w.len(),
        x.len()
    );
}

/// One dot product with [`dot_fn`]: weight row `w` (type `t`) · activation row `x` (bytes in
/// `vec_dot_type(t)`), `k` elements.
pub fn vec_dot(t: GgmlType, k: usize, w: &[u8], x: &[u8]) -> f32 {
    check_dot_args(t, k, w, x);
    dot_fn(t)(k, w, x)
}

/// One dot product with [`matvec_dot_fn`] (upstream's `vec_dot`, as a matrix-vector product
/// runs it).
pub fn vec_dot_matvec(t: GgmlType, k: usize, w: &[u8], x: &[u8]) -> f32 {
    check_dot_args(t, k, w, x);
    matvec_dot_fn(t)(k, w, x)
}

/// As [`vec_dot`], with the scalar reference.
pub fn vec_dot_scalar(t: GgmlType, k: usize, w: &[u8], x: &[u8]) -> f32 {
    check_dot_args(t, k, w, x);
    scalar_dot_fn(t)(k, w, x)
}

/// ggml's `ggml_vec_dot_f16` as its AVX2 build computes it (K·Q in flash attention): four
/// 8-lane f32 FMA accumulators over steps of 32, reduced 0+2 and 1+3, then 0+1, then the two
/// halves and two horizontal adds; the leftover elements added in f64. Following its order
/// keeps attention scores equal to upstream's, so near-ties in the logits break the same way.
pub fn dot_f16_ggml(x: &[half::f16], y: &[half::f16]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if let Some(v) = x86::dot_f16_ggml(x, y) {
        return v;
    }
    dot_f16_ggml_scalar(x, y)
}

/// ggml's `vec_scale_f16` (when `ms` is given) followed by `vec_mad_f16` on a half-precision
/// accumulator: `acc = f16(acc * ms)`, then `acc = f16(fma(v, vs, acc))`, elementwise. The
/// SIMD version (F16C) rounds exactly as this one does.
pub fn f16_scale_mad(acc: &mut [half::f16], v: &[half::f16], ms: Option<f32>, vs: f32) {
    assert!(
        v.len() >= acc.len(),
        "f16 mad: v shorter than the accumulator"
    );
    #[cfg(target_arch = "x86_64")]
    if x86::f16_scale_mad(acc, v, ms, vs) {
        return;
    }
    f16_scale_mad_scalar(acc, v, ms, vs);
}

/// `C[m×n] += A[m×k] · B[k×n]` (row-major), each element one chain of FMAs over `k` in order
/// starting from its value in C: ggml's `simd_gemm`, whose register blocking does not change
/// any element's order.
pub fn gemm_acc(c: &mut [f32], a: &[f32], b: &[f32], m: usize, k: usize, n: usize) {
    #[cfg(target_arch = "x86_64")]
    if x86::gemm_acc(c, a, b, m, k, n) {
        return;
    }
    gemm_acc_scalar(c, a, b, m, k, n);
}

/// ggml's `ggml_vec_soft_max_f32` (AVX2 build): `x[i] = ggml_v_expf(x[i] - max)` in groups
/// of 8, each group's lanes summed as `((0+4)+(2+6))+((1+5)+(3+7))` and the group sums added
/// in f64; leftover values with libm's `expf`. Returns the sum.
pub fn soft_max(x: &mut [f32], max: f32) -> f64 {
    #[cfg(target_arch = "x86_64")]
    if let Some(s) = x86::soft_max(x, max) {
        return s;
    }
    soft_max_scalar(x, max)
}

/// The fast mode's r8 kernel (`r8_layout.rs`): AVX2 when the CPU has it, else the scalar
/// reference (the same bits either way).
pub fn r8_kernel() -> R8Fn {
    #[cfg(target_arch = "x86_64")]
    if let Some(f) = x86::r8_kernel() {
        return f;
    }
    r8_scalar
}

/// The packing of a repacked `q4_0x8` group into r8 blocks: AVX2 when the CPU has it, else
/// the scalar one (the same bytes either way).
pub fn r8_pack_q4_0x8_fn() -> fn(&[u8], usize, &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    if let Some(f) = x86::r8_pack_q4_0x8() {
        return f;
    }
    pack_q4_0x8
}

/// The packing of 8 Q8_0 rows into r8 blocks: AVX2 when the CPU has it, else the scalar one
/// (the same bytes either way).
pub fn r8_pack_q8_0_fn() -> fn([&[u8]; R8_ROWS], usize, &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    if let Some(f) = x86::r8_pack_q8_0() {
        return f;
    }
    pack_q8_0
}

/// The packing of 8 plain Q4_0 rows into r8 blocks: AVX2 when the CPU has it, else the scalar
/// one (the same bytes either way).
pub fn r8_pack_q4_0_fn() -> fn([&[u8]; R8_ROWS], usize, &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    if let Some(f) = x86::r8_pack_q4_0() {
        return f;
    }
    pack_q4_0
}

/// The packing of 8 Q5_0 rows into r8 blocks: AVX2 when the CPU has it, else the scalar one
/// (the same bytes either way).
pub fn r8_pack_q5_0_fn() -> fn([&[u8]; R8_ROWS], usize, &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    if let Some(f) = x86::r8_pack_q5_0() {
        return f;
    }
    pack_q5_0
}

/// The IQ4_NL code book over packed r8 blocks (`r8_layout::iq4_nl_values`): AVX2 when the CPU
/// has it, else the scalar one (the same bytes either way).
pub fn r8_iq4_nl_values_fn() -> fn(usize, &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    if let Some(f) = x86::r8_iq4_nl_values() {
        return f;
    }
    iq4_nl_values
}

/// The packing of 8 rows of a min type (Q4_1 or Q5_1, `r8_min.rs`) into r8 blocks and mins:
/// AVX2 when the CPU has it, else the scalar one (the same values either way); `None` for
/// another type.
pub fn r8_pack_min_fn(t: GgmlType) -> Option<R8MinPackFn> {
    #[cfg(target_arch = "x86_64")]
    let simd = match t {
        GgmlType::Q4_1 => x86::r8_pack_q4_1(),
        GgmlType::Q5_1 => x86::r8_pack_q5_1(),
        _ => None,
    };
    #[cfg(not(target_arch = "x86_64"))]
    let simd = None;
    simd.or(match t {
        GgmlType::Q4_1 => Some(pack_q4_1 as R8MinPackFn),
        GgmlType::Q5_1 => Some(pack_q5_1 as R8MinPackFn),
        _ => None,
    })
}

/// The min term of the min types' r8 products (`r8_min::min_term`): AVX2 when the CPU has
/// it, else the scalar one (the same bits either way).
pub fn r8_min_term_fn() -> R8MinTermFn {
    #[cfg(target_arch = "x86_64")]
    if let Some(f) = x86::r8_min_term() {
        return f;
    }
    min_term
}

/// The fast mode's float panel packing and tile kernel for a `t` weight (F16, BF16:
/// `fast_float.rs`): AVX2 when the CPU has it; `None` otherwise (the scalar references are
/// for tests, not for use: far slower than the exact kernels).
pub fn float_panel_fns(
    t: GgmlType,
) -> Option<(
    super::panel_layout::PanelPackFn,
    super::panel_layout::PanelKernelFn,
)> {
    #[cfg(target_arch = "x86_64")]
    return x86::float_panel_fns(t);
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = t;
        None
    }
}

/// The fast mode's K-quant group kernel for `layout` (`r8_layout::KGroupFn`): AVX2 when the
/// CPU has it, else the scalar reference (the same bits either way).
pub fn k_kernel(layout: KLayout) -> KGroupFn {
    #[cfg(target_arch = "x86_64")]
    if let Some(f) = x86::k_kernel(layout) {
        return f;
    }
    match layout {
        KLayout::Q4Kx8 => q4_kx8_scalar,
        KLayout::Q4K => q4_k_rows_scalar,
        KLayout::Q5K => q5_k_rows_scalar,
        KLayout::Q6K => q6_k_rows_scalar,
        KLayout::IQ4XS => iq4_xs_rows_scalar,
    }
}
