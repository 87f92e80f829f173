//! CPU kernels: dequantization, activation quantization, per-type dot products and `mul_mat`,
//! following upstream's CPU backend (`ggml/src/ggml-cpu`) so results match it closely.
//!
//! A weight is a byte slice in ggml's layout (rows of `row_bytes(t, k)` bytes, any alignment:
//! mmap'd or owned storage is read in place, never copied). `mul_mat` converts the f32
//! activations once into the weight type's vec_dot type ([`vec_dot_type`]), bit-exact with the
//! conversion upstream's CPU backend runs, then splits the output into chunks of rows x columns
//! that the pool's threads claim from an atomic counter (ggml's chunking).
//!
//! Entry points: [`mul_mat`] (one 2-D weight), [`mul_mat_rows`] (a row piece of a split weight
//! into a strided destination), [`prepare_activations`] + [`mul_mat_prepared`] (convert once,
//! multiply several weights or pieces), [`mul_mat_batched`] (ggml's batch dims with GQA
//! broadcast and strides: attention over the KV cache in place), [`dequantize_row`],
//! [`quantize_row`]. All panic on inconsistent sizes (the engine checks shapes when it builds
//! its graph).
//!
//! Kernels: each type has a scalar reference dot product ([`vec_dot_scalar`]); on x86-64 with
//! AVX2+FMA+F16C (detected once at run time) [`dot_fn`] hands out the SIMD version, and
//! [`tile_fn`] a kernel for several activation rows at once (batched products).
//! `LLAMA_HOTSWAP_KERNELS=scalar` forces the scalar path (as on a CPU without AVX2).
//! [`mode`]: the fast mode (default) or the exact one (`LLAMA_HOTSWAP_EXACT=1`, upstream's
//! portable build bit for bit), read once.

//!
//! Layout (ggml-cpu's): shared pieces that import nothing back ([`type_traits`] per-type
//! facts, `blocks` block formats, [`vec`] scalar vector helpers, `dot_scalar` / `dequant` /
//! `quantize` scalar references, [`pool`] threads); the SIMD kernels per ISA (`x86/`, split
//! by type family); `dispatch` choosing between them at run time; the ops on top
//! ([`mul_mat`], [`repack`], [`ops`] with attention in `ops/attn/`). This file only declares
//! the modules and re-exports the public API: nothing below imports it.

mod blocks;
mod dequant;
mod dispatch;
mod dot_scalar;
mod dot_tiled;
pub mod fast_float;
pub mod fast_gemm;
mod grid_iq;
pub mod iq_grids;
pub mod mode;
pub mod mul_mat;
pub mod mul_mat_id;
pub mod ops;
mod panel_layout;
pub mod pool;
mod quantize;
mod r8_layout;
mod r8_min;
pub mod repack;
mod repack_layout;
#[cfg(test)]
mod test_rng;
pub mod type_traits;
pub mod vec;
#[cfg(target_arch = "x86_64")]
mod x86;

pub use dispatch::{
    dequantize_row, dot_fn, matvec_dot_fn, quantize_row, quantize_row_scalar, scalar_dot_fn,
    simd_level, store_row, tile_fn, tile_shape, tiled_dot_fn, tiled_scalar_dot_fn,
    tiled_tile_shape, vec_dot, vec_dot_matvec, vec_dot_scalar,
};
pub use dot_tiled::{takes_tiled, TILED_MIN_ROWS};
pub use mode::{kernel_mode, KernelMode};
pub use mul_mat::{
    mul_mat, mul_mat_batched, mul_mat_prepared, mul_mat_rows, prepare_activations,
    set_weight_prefetch, Activations, BatchedLayout, Scratch,
};
pub use pool::{for_row_runs, ThreadPool, MAX_THREADS};
pub use repack::{repack_kind, RepackKind, Repacked};
pub use type_traits::{
    is_kv_cache_type, row_bytes, supports, vec_dot_type, DotFn, Tile, TileFn, TileOut, SUPPORTED,
    TILE_COLS, TILE_RUN_ROWS,
};
pub use vec::fmadd;
