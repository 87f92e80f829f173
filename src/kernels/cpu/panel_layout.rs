//! The layout of the fast mode's float panel product (`fast_float.rs`): the panel and tile
//! shapes, the function types of the packing and the tile kernel, and their scalar
//! references, which the SIMD ones (`x86/gemm_f32.rs`) equal bit for bit.
//!
//! A panel holds [`PANEL_K`] elements of [`PANEL_ROWS`] weight rows as f32, element-major
//! (`panel[kk · 16 + r]`); a tile is [`PANEL_COLS`] activation columns × the panel's 16 rows,
//! each output one FMA chain over the elements in order. Leaf of the kernels: imports nothing
//! of them.

use crate::gguf::GgmlType;

/// Weight rows per panel (two 8-lane vectors).
pub const PANEL_ROWS: usize = 16;
/// Activation columns per register tile.
pub const PANEL_COLS: usize = 6;
/// Elements of `k` per panel: 16 KiB of f32, in L1 with the columns' slices.
pub const PANEL_K: usize = 256;
/// Activation columns swept over one panel before the next panel is made (a multiple of
/// [`PANEL_COLS`]): their [`PANEL_K`] slices (192 KiB) stay in L2 across the task's panels,
/// and a weight element is converted once per this many columns.
pub const PANEL_COL_BLOCK: usize = 192;
/// Fewest activation columns for which the panel product runs (below, the panel conversion
/// costs more than it saves).
pub const FLOAT_MIN_COLS: usize = 8;

/// One register tile's outputs: `acc[c][r]` for column `c`, panel row `r` (read as the
/// starting values, written back).
pub type PanelOut = [[f32; PANEL_ROWS]; PANEL_COLS];

/// Converts elements `k0 .. k0 + kc` of 16 weight rows (ggml bytes of the float type, each
/// slice starting at its row's element 0) into `panel[kk · 16 + r]`.
pub type PanelPackFn = fn(rows: [&[u8]; PANEL_ROWS], k0: usize, kc: usize, panel: &mut [f32]);

/// `acc[c][r] = fma(panel[kk · 16 + r], x[c · x_stride + kk], acc[c][r])` for `kk` in
/// `0..kc` in order, for the first `cols` (1..=[`PANEL_COLS`]) columns.
pub type PanelKernelFn =
    fn(kc: usize, panel: &[f32], x: &[f32], x_stride: usize, cols: usize, acc: &mut PanelOut);

/// The scalar reference of [`PanelPackFn`] for `t` (F16 or BF16).
pub fn pack_panel(t: GgmlType, rows: [&[u8]; PANEL_ROWS], k0: usize, kc: usize, panel: &mut [f32]) {
    let value = |row: &[u8], i: usize| {
        let bits = u16::from_le_bytes([row[2 * i], row[2 * i + 1]]);
        match t {
            GgmlType::F16 => half::f16::from_bits(bits).to_f32(),
            GgmlType::BF16 => half::bf16::from_bits(bits).to_f32(),
            _ => panic!("no panel packing for {t}"),
        }
    };
    for kk in 0..kc {
        for (r, row) in rows.iter().enumerate() {
            panel[kk * PANEL_ROWS + r] = value(row, k0 + kk);
        }
    }
}

#[cfg(test)]
/// The scalar reference of [`PanelPackFn`] for F16.
pub fn pack_panel_f16(rows: [&[u8]; PANEL_ROWS], k0: usize, kc: usize, panel: &mut [f32]) {
    pack_panel(GgmlType::F16, rows, k0, kc, panel)
}

#[cfg(test)]
/// The scalar reference of [`PanelPackFn`] for BF16.
pub fn pack_panel_bf16(rows: [&[u8]; PANEL_ROWS], k0: usize, kc: usize, panel: &mut [f32]) {
    pack_panel(GgmlType::BF16, rows, k0, kc, panel)
}

#[cfg(test)]
/// The scalar reference of [`PanelKernelFn`].
pub fn panel_kernel(
    kc: usize,
    panel: &[f32],
    x: &[f32],
    x_stride: usize,
    cols: usize,
    acc: &mut PanelOut,
) {
    assert!((1..=PANEL_COLS).contains(&cols), "{cols} columns");
    for (c, a) in acc.iter_mut().enumerate().take(cols) {
        for kk in 0..kc {
            let xv = x[c * x_stride + kk];
            for (r, a) in a.iter_mut().enumerate() {
                *a = panel[kk * PANEL_ROWS + r].mul_add(xv, *a);
            }
        }
    }
}
