//! The engine's entry points into the CPU kernels: dequantize a row, and the matrix product
//! `dst[j][i] = w_i · x_j`. Until the kernels room lands, a plain scalar path (dequantize each
//! weight row to f32, then an f32 dot) stands in for F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1
//! and Q8_0.

use half::{bf16, f16};

use crate::gguf::GgmlType;

/// Whether [`dequantize_row`] and [`mul_mat`] handle `ty`.
pub fn supports(ty: GgmlType) -> bool {
    [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
    ]
    .contains(&ty)
}

fn h(b: &[u8], o: usize) -> f32 {
    f16::from_le_bytes([b[o], b[o + 1]]).to_f32()
}

/// Decodes one row (`out.len()` values) of type `ty` from `src`.
pub fn dequantize_row(ty: GgmlType, src: &[u8], out: &mut [f32]) {
    match ty {
        GgmlType::F32 => {
            for (d, c) in out.iter_mut().zip(src.chunks_exact(4)) {
                *d = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        }
        GgmlType::F16 => {
            for (d, c) in out.iter_mut().zip(src.chunks_exact(2)) {
                *d = f16::from_le_bytes([c[0], c[1]]).to_f32();
            }
        }
        GgmlType::BF16 => {
            for (d, c) in out.iter_mut().zip(src.chunks_exact(2)) {
                *d = bf16::from_le_bytes([c[0], c[1]]).to_f32();
            }
        }
        GgmlType::Q4_0 => {
            for (o, b) in out.chunks_exact_mut(32).zip(src.chunks_exact(18)) {
                let d = h(b, 0);
                for j in 0..16 {
                    o[j] = ((b[2 + j] & 0xF) as i32 - 8) as f32 * d;
                    o[j + 16] = ((b[2 + j] >> 4) as i32 - 8) as f32 * d;
                }
            }
        }
        GgmlType::Q4_1 => {
            for (o, b) in out.chunks_exact_mut(32).zip(src.chunks_exact(20)) {
                let (d, m) = (h(b, 0), h(b, 2));
                for j in 0..16 {
                    o[j] = (b[4 + j] & 0xF) as f32 * d + m;
                    o[j + 16] = (b[4 + j] >> 4) as f32 * d + m;
                }
            }
        }
        GgmlType::Q5_0 | GgmlType::Q5_1 => {
            let q51 = ty == GgmlType::Q5_1;
            let bs = if q51 { 24 } else { 22 };
            for (o, b) in out.chunks_exact_mut(32).zip(src.chunks_exact(bs)) {
                let d = h(b, 0);
                let (m, qo) = if q51 { (h(b, 2), 4) } else { (0.0, 2) };
                let qh = u32::from_le_bytes([b[qo], b[qo + 1], b[qo + 2], b[qo + 3]]);
                let qs = &b[qo + 4..];
                for j in 0..16 {
                    let xh0 = (((qh >> j) << 4) & 0x10) as u8;
                    let xh1 = ((qh >> (j + 12)) & 0x10) as u8;
                    let x0 = ((qs[j] & 0xF) | xh0) as i32;
                    let x1 = ((qs[j] >> 4) | xh1) as i32;
                    if q51 {
                        o[j] = x0 as f32 * d + m;
                        o[j + 16] = x1 as f32 * d + m;
                    } else {
                        o[j] = (x0 - 16) as f32 * d;
                        o[j + 16] = (x1 - 16) as f32 * d;
                    }
                }
            }
        }
        GgmlType::Q8_0 => {
            for (o, b) in out.chunks_exact_mut(32).zip(src.chunks_exact(34)) {
                let d = h(b, 0);
                for j in 0..32 {
                    o[j] = (b[2 + j] as i8) as f32 * d;
                }
            }
        }
        other => panic!("dequantize_row: type {other} not supported"),
    }
}

/// Reusable buffers of the matrix product.
#[derive(Default, Debug)]
pub struct MatScratch {
    row: Vec<f32>,
}

/// `dst[j * n_rows + i] = dot(row i of w, x[j * k ..][..k])` for `m` columns of `x`.
#[allow(clippy::too_many_arguments)]
pub fn mul_mat(
    ty: GgmlType,
    w: &[u8],
    n_rows: usize,
    k: usize,
    x: &[f32],
    m: usize,
    dst: &mut [f32],
    scratch: &mut MatScratch,
) {
    let row_bytes = ty.row_size(k as i64).expect("row size") as usize;
    scratch.row.resize(k, 0.0);
    for i in 0..n_rows {
        dequantize_row(ty, &w[i * row_bytes..(i + 1) * row_bytes], &mut scratch.row);
        for j in 0..m {
            dst[j * n_rows + i] = crate::kernels::cpu::ops::dot_f32(&scratch.row, &x[j * k..(j + 1) * k]);
        }
    }
}
