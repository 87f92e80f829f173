//! Weight quantizers: f32 rows into every block format upstream's `llama-quantize` writes on
//! the CPU, bit-identical to ggml's `ggml_quantize_chunk` (the `quantize_row_*_ref` functions
//! and, with an importance matrix, the `quantize_row_*_impl` ones in `ggml-quants.c`).
//!
//! These are ggml-base's portable reference quantizers, not per-ISA kernels: upstream runs
//! the same scalar code on every machine so quantized files do not depend on the host. One
//! file per type family: `legacy` (32-element blocks, MXFP4, Q1_0/Q2_0), `kquants`
//! (Q2_K..Q6_K), `iq4` (IQ4_NL/IQ4_XS), `iq2` (IQ2_XXS/XS/S), `iq3` (IQ3_XXS/S), `iq1`
//! (IQ1_S/M), `ternary` (TQ1_0/TQ2_0); `helpers` holds the shared scale searches
//! (`make_qx_quants`, `make_qkx2/3_quants`, `make_qp_quants`, ...), `grids` the grid IQ
//! types' search tables (built once, on first use).

mod blocks;
mod grid_search;
mod grids;
pub mod helpers;
mod iq1;
mod iq2;
mod iq3;
mod iq4;
mod kquants;
mod legacy;
mod ternary;

use crate::gguf::quant::f32_to_bf16_bits;
use crate::gguf::GgmlType;

type RowFn = fn(&[f32], &mut [u8], Option<&[f32]>);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum QuantizeRowError {
    #[error("quantizing to type {0} is not supported")]
    Unsupported(&'static str),
    #[error("type {ty} needs rows of a multiple of {block} elements, got {n_per_row}")]
    RowSize {
        ty: &'static str,
        n_per_row: usize,
        block: u64,
    },
    #[error("type {0} requires an importance matrix")]
    NeedsImatrix(&'static str),
    #[error("importance matrix has {got} values, the rows have {want}")]
    ImatrixLength { got: usize, want: usize },
    #[error("buffer sizes do not match: {src} values, {dst} bytes for {rows} rows of {ty}")]
    Buffers {
        ty: &'static str,
        src: usize,
        dst: usize,
        rows: usize,
    },
}

fn row_fn(ty: GgmlType) -> Option<RowFn> {
    Some(match ty {
        GgmlType::Q4_0 => legacy::q4_0,
        GgmlType::Q4_1 => legacy::q4_1,
        GgmlType::Q5_0 => legacy::q5_0,
        GgmlType::Q5_1 => legacy::q5_1,
        GgmlType::Q8_0 => legacy::q8_0,
        GgmlType::MXFP4 => legacy::mxfp4,
        GgmlType::NVFP4 => legacy::nvfp4,
        GgmlType::Q1_0 => legacy::q1_0,
        GgmlType::Q2_0 => legacy::q2_0,
        GgmlType::Q2_K => kquants::q2_k,
        GgmlType::Q3_K => kquants::q3_k,
        GgmlType::Q4_K => kquants::q4_k,
        GgmlType::Q5_K => kquants::q5_k,
        GgmlType::Q6_K => kquants::q6_k,
        GgmlType::IQ2_XXS => iq2::iq2_xxs,
        GgmlType::IQ2_XS => iq2::iq2_xs,
        GgmlType::IQ2_S => iq2::iq2_s,
        GgmlType::IQ3_XXS => iq3::iq3_xxs,
        GgmlType::IQ3_S => iq3::iq3_s,
        GgmlType::IQ1_S => iq1::iq1_s,
        GgmlType::IQ1_M => iq1::iq1_m,
        GgmlType::IQ4_NL => iq4::iq4_nl,
        GgmlType::IQ4_XS => iq4::iq4_xs,
        GgmlType::TQ1_0 => ternary::tq1_0,
        GgmlType::TQ2_0 => ternary::tq2_0,
        _ => return None,
    })
}

/// Whether [`quantize_rows`] can write `ty`.
pub fn supports(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16) || row_fn(ty).is_some()
}

/// `ggml_quantize_requires_imatrix`.
pub fn requires_imatrix(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::IQ2_XXS | GgmlType::IQ2_XS | GgmlType::IQ1_S)
}

/// `ggml_quantize_chunk` for whole rows: quantizes `src` (rows of `n_per_row` values) into
/// `dst` (rows of `ty.row_size(n_per_row)` bytes). `imatrix`, when given, has `n_per_row`
/// values and weighs every row. Returns the bytes written.
pub fn quantize_rows(
    ty: GgmlType,
    src: &[f32],
    dst: &mut [u8],
    n_per_row: usize,
    imatrix: Option<&[f32]>,
) -> Result<usize, QuantizeRowError> {
    let name = ty.name();
    if !supports(ty) {
        return Err(QuantizeRowError::Unsupported(name));
    }
    if n_per_row == 0 || n_per_row as u64 % ty.block_size() != 0 {
        return Err(QuantizeRowError::RowSize {
            ty: name,
            n_per_row,
            block: ty.block_size(),
        });
    }
    if requires_imatrix(ty) && imatrix.is_none() {
        return Err(QuantizeRowError::NeedsImatrix(name));
    }
    if let Some(w) = imatrix {
        if w.len() != n_per_row {
            return Err(QuantizeRowError::ImatrixLength {
                got: w.len(),
                want: n_per_row,
            });
        }
    }
    let row_bytes = (n_per_row as u64 / ty.block_size() * ty.type_size()) as usize;
    let rows = src.len() / n_per_row;
    if src.len() % n_per_row != 0 || dst.len() != rows * row_bytes {
        return Err(QuantizeRowError::Buffers {
            ty: name,
            src: src.len(),
            dst: dst.len(),
            rows,
        });
    }
    match ty {
        GgmlType::F32 => {
            for (d, s) in dst.chunks_exact_mut(4).zip(src) {
                d.copy_from_slice(&s.to_le_bytes());
            }
        }
        GgmlType::F16 => {
            for (d, &s) in dst.chunks_exact_mut(2).zip(src) {
                d.copy_from_slice(&helpers::fp16(s).to_le_bytes());
            }
        }
        GgmlType::BF16 => {
            for (d, &s) in dst.chunks_exact_mut(2).zip(src) {
                d.copy_from_slice(&f32_to_bf16_bits(s).to_le_bytes());
            }
        }
        _ => {
            let f = row_fn(ty).expect("checked by supports");
            for (x, y) in src
                .chunks_exact(n_per_row)
                .zip(dst.chunks_exact_mut(row_bytes))
            {
                f(x, y, imatrix);
            }
        }
    }
    Ok(rows * row_bytes)
}

/// Byte offsets of the f16 scales `ggml_validate_row_data` checks in each block.
fn f16_scale_offsets(ty: GgmlType) -> &'static [usize] {
    match ty {
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 | GgmlType::IQ4_NL | GgmlType::IQ4_XS => {
            &[0]
        }
        GgmlType::Q1_0 | GgmlType::Q2_0 => &[0],
        GgmlType::IQ2_XXS
        | GgmlType::IQ2_XS
        | GgmlType::IQ2_S
        | GgmlType::IQ3_XXS
        | GgmlType::IQ3_S
        | GgmlType::IQ1_S => &[0],
        GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
        GgmlType::Q2_K => &[80, 82],
        GgmlType::Q3_K => &[108],
        GgmlType::Q6_K => &[208],
        GgmlType::TQ1_0 => &[52],
        GgmlType::TQ2_0 => &[64],
        _ => &[],
    }
}

/// `ggml_validate_row_data` for the types written here: no NaN or infinity in values (F32,
/// F16, BF16) or block scales, no 0xFF exponent in MXFP4.
pub fn validate_row_data(ty: GgmlType, data: &[u8]) -> bool {
    let f16_bad = |h: u16| h & 0x7c00 == 0x7c00;
    match ty {
        GgmlType::F32 => data
            .chunks_exact(4)
            .all(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]).is_finite()),
        GgmlType::F16 => data
            .chunks_exact(2)
            .all(|b| !f16_bad(u16::from_le_bytes([b[0], b[1]]))),
        GgmlType::BF16 => data
            .chunks_exact(2)
            .all(|b| u16::from_le_bytes([b[0], b[1]]) & 0x7fff < 0x7f80),
        GgmlType::MXFP4 => data.chunks_exact(legacy::MXFP4_BYTES).all(|b| b[0] != 0xff),
        // IQ1_M keeps its f16 scale in the top nibbles of its four u16 sub-scale words.
        GgmlType::IQ1_M => data.chunks_exact(iq1::IQ1_M_BYTES).all(|b| {
            let sc = |i: usize| u16::from_le_bytes([b[48 + 2 * i], b[49 + 2 * i]]);
            let h = (sc(0) >> 12)
                | ((sc(1) >> 8) & 0x00f0)
                | ((sc(2) >> 4) & 0x0f00)
                | (sc(3) & 0xf000);
            !f16_bad(h)
        }),
        _ => {
            let size = ty.type_size() as usize;
            let offsets = f16_scale_offsets(ty);
            data.chunks_exact(size).all(|b| {
                offsets
                    .iter()
                    .all(|&o| !f16_bad(u16::from_le_bytes([b[o], b[o + 1]])))
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wave(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| {
                let t = (i as f32 + seed as f32 * 0.37) * 0.173;
                t.sin() * 0.8 + (t * 3.1).cos() * 0.3 + if i % 17 == 0 { 2.0 } else { 0.0 }
            })
            .collect()
    }

    /// Every type round-trips through the engine's dequantizer with a bounded error, so the
    /// layouts written here are the layouts the engine reads.
    #[test]
    fn quantized_rows_dequantize_close_to_the_input() {
        let n = 512;
        let x = wave(2 * n, 1);
        let imatrix: Vec<f32> = (0..n).map(|i| 1.0 + (i % 7) as f32).collect();
        let cases = [
            (GgmlType::Q4_0, 0.25),
            (GgmlType::Q4_1, 0.25),
            (GgmlType::Q5_0, 0.12),
            (GgmlType::Q5_1, 0.12),
            (GgmlType::Q8_0, 0.02),
            (GgmlType::Q2_K, 1.0),
            (GgmlType::Q3_K, 0.7),
            (GgmlType::Q4_K, 0.35),
            (GgmlType::Q5_K, 0.2),
            (GgmlType::Q6_K, 0.1),
            (GgmlType::IQ4_NL, 0.3),
            (GgmlType::IQ4_XS, 0.3),
        ];
        for (ty, tol) in cases {
            for w in [None, Some(imatrix.as_slice())] {
                let row = ty.row_size(n as i64).unwrap() as usize;
                let mut q = vec![0u8; 2 * row];
                quantize_rows(ty, &x, &mut q, n, w).unwrap();
                assert!(validate_row_data(ty, &q));
                let mut back = vec![0.0f32; 2 * n];
                crate::kernels::cpu::dequantize_row(ty, &q, &mut back);
                let worst = x
                    .iter()
                    .zip(&back)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0.0f32, f32::max);
                assert!(
                    worst < tol,
                    "{} imatrix={} max error {worst}",
                    ty.name(),
                    w.is_some()
                );
            }
        }
    }

    #[test]
    fn refuses_bad_shapes_and_missing_imatrix() {
        let x = vec![0.5f32; 96];
        let mut q = vec![0u8; 1000];
        assert!(matches!(
            quantize_rows(GgmlType::Q4_K, &x, &mut q, 96, None),
            Err(QuantizeRowError::RowSize { .. })
        ));
        assert!(matches!(
            quantize_rows(GgmlType::IQ2_XXS, &vec![0.0; 256], &mut q, 256, None),
            Err(QuantizeRowError::Unsupported(_)) | Err(QuantizeRowError::NeedsImatrix(_))
        ));
        assert!(matches!(
            quantize_rows(GgmlType::Q8_0, &x, &mut q[..10], 96, None),
            Err(QuantizeRowError::Buffers { .. })
        ));
    }

    #[test]
    fn validation_catches_non_finite_scales() {
        let x = vec![f32::INFINITY; 32];
        let mut q = vec![0u8; super::blocks::Q8_0_BYTES];
        quantize_rows(GgmlType::Q8_0, &x, &mut q, 32, None).unwrap();
        assert!(!validate_row_data(GgmlType::Q8_0, &q));
    }
}
