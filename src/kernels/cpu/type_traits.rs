//! What the CPU kernels know about each weight type (ggml's `type_traits_cpu`): which types
//! they compute with, the activation type of each one's dot product, row sizes, and the
//! signatures of the dot and tile kernels. Imports nothing else of the kernels.

use crate::gguf::GgmlType;

/// The weight types the CPU kernels compute with.
pub const SUPPORTED: [GgmlType; 22] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::IQ4_NL,
    GgmlType::IQ4_XS,
    GgmlType::IQ2_XXS,
    GgmlType::IQ2_XS,
    GgmlType::IQ2_S,
    GgmlType::IQ3_XXS,
    GgmlType::IQ3_S,
    GgmlType::IQ1_S,
    GgmlType::IQ1_M,
];

/// Whether `t` can be a `mul_mat` weight or a `dequantize_row` source.
pub fn supports(t: GgmlType) -> bool {
    SUPPORTED.contains(&t)
}

/// The type activations are converted to before a dot product with a weight of type `t`
/// (ggml's `vec_dot_type`): Q8_0 for Q4_0/Q5_0/Q8_0/IQ4_NL, Q8_1 for Q4_1/Q5_1, Q8_K for the
/// K-quants, IQ4_XS and the grid IQ types, and the type itself for F32/F16/BF16.
///
/// Panics if `t` is not [`supports`]ed.
pub fn vec_dot_type(t: GgmlType) -> GgmlType {
    match t {
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => t,
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 | GgmlType::IQ4_NL => GgmlType::Q8_0,
        GgmlType::Q4_1 | GgmlType::Q5_1 => GgmlType::Q8_1,
        GgmlType::Q2_K
        | GgmlType::Q3_K
        | GgmlType::Q4_K
        | GgmlType::Q5_K
        | GgmlType::Q6_K
        | GgmlType::IQ4_XS
        | GgmlType::IQ2_XXS
        | GgmlType::IQ2_XS
        | GgmlType::IQ2_S
        | GgmlType::IQ3_XXS
        | GgmlType::IQ3_S
        | GgmlType::IQ1_S
        | GgmlType::IQ1_M => GgmlType::Q8_K,
        _ => panic!("no CPU kernel for ggml type {t}"),
    }
}

/// Bytes of one row of `k` elements of type `t`. Panics if `k` is not a multiple of the block
/// size.
pub fn row_bytes(t: GgmlType, k: usize) -> usize {
    let block = t.block_size() as usize;
    assert!(
        k % block == 0,
        "{k} elements is not a multiple of the {t} block size {block}"
    );
    k / block * t.type_size() as usize
}

/// The types a KV cache can store here: F32, F16, BF16, Q8_0, Q4_0, Q4_1.
pub fn is_kv_cache_type(t: GgmlType) -> bool {
    matches!(
        t,
        GgmlType::F32
            | GgmlType::F16
            | GgmlType::BF16
            | GgmlType::Q8_0
            | GgmlType::Q4_0
            | GgmlType::Q4_1
    )
}

/// A dot product of `k` elements: a weight row of type `t` with an activation row already in
/// `vec_dot_type(t)`, both as bytes.
pub type DotFn = fn(k: usize, w: &[u8], x: &[u8]) -> f32;

/// Most weight rows one tile call covers (several tiles of one shape stacked along the weight
/// rows: one call, one set of checks for a run of tiles).
pub const TILE_RUN_ROWS: usize = 16;

/// Most activation rows of a tile.
pub const TILE_COLS: usize = 4;

/// The outputs of one tile call: `out[c][r] = dot(w row r, x row c)`.
pub type TileOut = [[f32; TILE_RUN_ROWS]; TILE_COLS];

/// A batched-product kernel of `tiles` tiles of `rows` × `cols` outputs (see [`Tile`]) stacked
/// along the weight rows: `out[c][r] = dot(w row r, x row c)` for the weight rows
/// `0..tiles * rows` (`w_stride` bytes apart; at most [`TILE_RUN_ROWS`]) and the activation
/// rows `0..cols` (`x_stride` bytes apart). Reusing each loaded weight block for several
/// activation rows and each activation block for several weight rows is what makes batched
/// products (prompt processing, attention) faster than one dot at a time.
pub type TileFn = fn(
    k: usize,
    tiles: usize,
    w: &[u8],
    w_stride: usize,
    x: &[u8],
    x_stride: usize,
    out: &mut TileOut,
);

/// A tile kernel and its shape.
#[derive(Clone, Copy)]
pub struct Tile {
    pub rows: usize,
    pub cols: usize,
    pub f: TileFn,
}
