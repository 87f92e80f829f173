//! AVX2/FMA/F16C dot products, chosen at run time (`is_x86_feature_detected!`, checked once).
//!
//! The integer work follows ggml's AVX2 kernels (`ggml-cpu/arch/x86/quants.c`): unpack to
//! bytes, `maddubs` (u8 × i8 pairs into i16, sign trick for i8 × i8), `madd` into i32 (with
//! the sub-block scales for the K-quants), one FMA per block with the f32 scales. Results equal
//! the scalar reference up to f32 summation order.
//!
//! Each kernel is an `unsafe fn` with `#[target_feature]` taking raw pointers to whole blocks;
//! its safe wrapper (the [`DotFn`] installed in the table) checks the slice lengths first, and
//! the table is only handed out when the CPU has the features.
//!
//! This folder, by type family (ggml's `arch/x86/`): `simd` (feature check and shared
//! helpers), `float`, `quants` (legacy 32-element blocks), `k_quants`, `iq`, `tiles` (batched
//! products), `quantize` (activation quantizers), `vec` (the ops' vector helpers), `repack`.
//! This file holds the dot-product tables and re-exports what `cpu/dispatch.rs` hands out.

mod float;
mod gemm_f32;
mod gemm_k;
mod gemm_r8;
mod iq;
mod k_quants;
mod k_tiled;
mod quantize;
mod quants;
mod r8_min;
mod repack;
mod simd;
mod tiles;
mod vec;

use crate::gguf::GgmlType;
use crate::kernels::cpu::blocks::*;
use crate::kernels::cpu::type_traits::DotFn;
use float::{bf16_avx2, bf16_vec_avx2, f16_avx2, f32_avx2};
use iq::{iq4_nl_avx2, iq4_nl_vec_avx2, iq4_xs_avx2};
use k_quants::{q2_k_avx2, q3_k_avx2, q4_k_avx2, q5_k_avx2, q6_k_avx2};
use quants::{q4_0_avx2, q4_1_avx2, q5_0_avx2, q5_1_avx2, q8_0_avx2};
use vec::dot_f16_ggml_bytes;

pub use gemm_f32::float_panel_fns;
pub use gemm_k::k_kernel;
pub use gemm_r8::{
    r8_iq4_nl_values, r8_kernel, r8_pack_q4_0, r8_pack_q4_0x8, r8_pack_q5_0, r8_pack_q8_0,
};
pub use quantize::{convert_f16, quantize_q8};
pub use r8_min::{r8_min_term, r8_pack_q4_1, r8_pack_q5_1};
pub use repack::repacked_kernels;
pub use simd::{available, prefetch};
pub use tiles::{tile_fn, tile_shape, tiled_tile_shape};
pub use vec::{dot_f16_ggml, f16_scale_mad, gemm_acc, silu_row, soft_max};

/// The AVX2 dot product for `t`, when this CPU has AVX2+FMA+F16C.
pub fn dot_fn(t: GgmlType) -> Option<DotFn> {
    if !available() {
        return None;
    }
    Some(match t {
        GgmlType::F32 => f32_dot,
        GgmlType::F16 => f16_dot,
        GgmlType::BF16 => bf16_dot,
        GgmlType::Q4_0 => q4_0,
        GgmlType::Q4_1 => q4_1,
        GgmlType::Q5_0 => q5_0,
        GgmlType::Q5_1 => q5_1,
        GgmlType::Q8_0 => q8_0,
        GgmlType::IQ4_NL => iq4_nl,
        GgmlType::Q2_K => q2_k,
        GgmlType::Q3_K => q3_k,
        GgmlType::Q4_K => q4_k,
        GgmlType::Q5_K => q5_k,
        GgmlType::Q6_K => q6_k,
        GgmlType::IQ4_XS => iq4_xs,
        _ => return None,
    })
}

/// The AVX2 dot for `t` in a matrix-vector product (one activation row), where upstream's
/// order differs from its batched products: F16 and BF16 run ggml's `ggml_vec_dot_f16` /
/// `ggml_vec_dot_bf16` there (four 8-lane accumulators over 32-element steps), IQ4_NL its
/// `ggml_vec_dot_iq4_nl_q8_0` (even and odd blocks on two accumulators), while batched
/// products run llamafile's tinyBLAS (one accumulator, [`dot_fn`]'s order). Other types:
/// [`dot_fn`].
pub fn matvec_dot_fn(t: GgmlType) -> Option<DotFn> {
    if !available() {
        return None;
    }
    match t {
        GgmlType::F16 => Some(dot_f16_ggml_bytes),
        GgmlType::BF16 => Some(bf16_vec_dot),
        GgmlType::IQ4_NL => Some(iq4_nl_vec),
        _ => dot_fn(t),
    }
}

/// The AVX2 dot for `t` in the float order of upstream's tiled K-quant matmul (see
/// `dot_tiled.rs`), for the types it handles.
pub fn tiled_dot_fn(t: GgmlType) -> Option<DotFn> {
    if !available() {
        return None;
    }
    Some(match t {
        GgmlType::Q2_K => q2_k_tiled,
        GgmlType::Q3_K => q3_k_tiled,
        GgmlType::Q4_K => q4_k_tiled,
        GgmlType::Q5_K => q5_k_tiled,
        GgmlType::Q6_K => q6_k_tiled,
        GgmlType::IQ4_XS => iq4_xs_tiled,
        _ => return None,
    })
}

/// One output of a `*_tiled_cols` kernel (one activation row).
macro_rules! tiled_single {
    ($name:ident, $cols:ident) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn $name(nb: usize, w: *const u8, x: *const u8) -> f32 {
            let mut out = [0f32; 1];
            k_tiled::$cols::<1>(nb, w, x, 0, &mut out);
            out[0]
        }
    };
}

tiled_single!(q2_k_tiled_avx2, q2_k_tiled_cols);
tiled_single!(q3_k_tiled_avx2, q3_k_tiled_cols);
tiled_single!(q4_k_tiled_avx2, q4_k_tiled_cols);
tiled_single!(q5_k_tiled_avx2, q5_k_tiled_cols);
tiled_single!(q6_k_tiled_avx2, q6_k_tiled_cols);
tiled_single!(iq4_xs_tiled_avx2, iq4_xs_tiled_cols);

/// Safe entry points: check that `w` and `x` hold the blocks the kernel reads, then call it.
macro_rules! entry {
    ($name:ident, $kernel:ident, $elems_per_block:expr, $w_bytes:expr, $x_bytes:expr) => {
        fn $name(n: usize, w: &[u8], x: &[u8]) -> f32 {
            let nb = n / $elems_per_block;
            assert!(
                w.len() >= nb * $w_bytes && x.len() >= nb * $x_bytes,
                "dot of {n}: {} / {} bytes",
                w.len(),
                x.len()
            );
            // SAFETY: this function is only reachable through `dot_fn`, which hands it out when
            // `available()` saw AVX2, FMA and F16C; the kernel reads `nb` blocks of each
            // operand, whose presence was checked just above; unaligned loads throughout.
            unsafe { $kernel(nb, w.as_ptr(), x.as_ptr()) }
        }
    };
}

entry!(f32_dot, f32_avx2, 1, 4, 4);
entry!(f16_dot, f16_avx2, 1, 2, 2);
entry!(bf16_dot, bf16_avx2, 1, 2, 2);
entry!(bf16_vec_dot, bf16_vec_avx2, 1, 2, 2);
entry!(q4_0, q4_0_avx2, QK, Q4_0_BYTES, Q8_0_BYTES);
entry!(q4_1, q4_1_avx2, QK, Q4_1_BYTES, Q8_1_BYTES);
entry!(q5_0, q5_0_avx2, QK, Q5_0_BYTES, Q8_0_BYTES);
entry!(q5_1, q5_1_avx2, QK, Q5_1_BYTES, Q8_1_BYTES);
entry!(q8_0, q8_0_avx2, QK, Q8_0_BYTES, Q8_0_BYTES);
entry!(iq4_nl, iq4_nl_avx2, QK, IQ4_NL_BYTES, Q8_0_BYTES);
entry!(iq4_nl_vec, iq4_nl_vec_avx2, QK, IQ4_NL_BYTES, Q8_0_BYTES);
entry!(q2_k, q2_k_avx2, QK_K, Q2_K_BYTES, Q8_K_BYTES);
entry!(q3_k, q3_k_avx2, QK_K, Q3_K_BYTES, Q8_K_BYTES);
entry!(q4_k, q4_k_avx2, QK_K, Q4_K_BYTES, Q8_K_BYTES);
entry!(q5_k, q5_k_avx2, QK_K, Q5_K_BYTES, Q8_K_BYTES);
entry!(q6_k, q6_k_avx2, QK_K, Q6_K_BYTES, Q8_K_BYTES);
entry!(iq4_xs, iq4_xs_avx2, QK_K, IQ4_XS_BYTES, Q8_K_BYTES);
entry!(q2_k_tiled, q2_k_tiled_avx2, QK_K, Q2_K_BYTES, Q8_K_BYTES);
entry!(q3_k_tiled, q3_k_tiled_avx2, QK_K, Q3_K_BYTES, Q8_K_BYTES);
entry!(q4_k_tiled, q4_k_tiled_avx2, QK_K, Q4_K_BYTES, Q8_K_BYTES);
entry!(q5_k_tiled, q5_k_tiled_avx2, QK_K, Q5_K_BYTES, Q8_K_BYTES);
entry!(q6_k_tiled, q6_k_tiled_avx2, QK_K, Q6_K_BYTES, Q8_K_BYTES);
entry!(
    iq4_xs_tiled,
    iq4_xs_tiled_avx2,
    QK_K,
    IQ4_XS_BYTES,
    Q8_K_BYTES
);
