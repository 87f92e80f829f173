//! Reference conversions between `f32` and a few ggml storage types, bit-exact with ggml's
//! reference code, so tests and fixtures can build typed tensors and check them:
//! F16 (round to nearest even, via `half`), BF16 (`ggml_compute_fp32_to_bf16`), and Q8_0 and
//! Q4_0 (`quantize_row_q8_0_ref` / `quantize_row_q4_0_ref` and their dequantizers).

use half::f16;

use super::types::GgmlType;

/// Elements per Q8_0 / Q4_0 block (`QK8_0`, `QK4_0`).
pub const QK8_0: usize = 32;
pub const QK4_0: usize = 32;
const Q8_0_BLOCK_BYTES: usize = 2 + QK8_0;
const Q4_0_BLOCK_BYTES: usize = 2 + QK4_0 / 2;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum QuantError {
    #[error("no reference conversion for ggml type {0}")]
    UnsupportedType(GgmlType),
    #[error("{len} values is not a multiple of the {ty} block size {block}")]
    NotBlockMultiple {
        ty: GgmlType,
        len: usize,
        block: u64,
    },
    #[error("{len} bytes is not a whole number of {ty} blocks of {block_bytes} bytes")]
    NotWholeBlocks {
        ty: GgmlType,
        len: usize,
        block_bytes: u64,
    },
}

/// The types this module converts: F32, F16, BF16, Q8_0 and Q4_0.
pub fn is_supported(ty: GgmlType) -> bool {
    [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::Q8_0,
        GgmlType::Q4_0,
    ]
    .contains(&ty)
}

/// Encodes `values` as `ty`; the length must be a multiple of the block size.
pub fn quantize(ty: GgmlType, values: &[f32]) -> Result<Vec<u8>, QuantError> {
    if !is_supported(ty) {
        return Err(QuantError::UnsupportedType(ty));
    }
    if values.len() as u64 % ty.block_size() != 0 {
        return Err(QuantError::NotBlockMultiple {
            ty,
            len: values.len(),
            block: ty.block_size(),
        });
    }
    Ok(match ty {
        GgmlType::F32 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        GgmlType::F16 => values
            .iter()
            .flat_map(|&v| f32_to_f16_bits(v).to_le_bytes())
            .collect(),
        GgmlType::BF16 => values
            .iter()
            .flat_map(|&v| f32_to_bf16_bits(v).to_le_bytes())
            .collect(),
        GgmlType::Q8_0 => quantize_q8_0(values),
        _ => quantize_q4_0(values),
    })
}

/// Decodes `bytes` of type `ty` into `f32`s; the length must be whole blocks.
pub fn dequantize(ty: GgmlType, bytes: &[u8]) -> Result<Vec<f32>, QuantError> {
    if !is_supported(ty) {
        return Err(QuantError::UnsupportedType(ty));
    }
    if bytes.len() as u64 % ty.type_size() != 0 {
        return Err(QuantError::NotWholeBlocks {
            ty,
            len: bytes.len(),
            block_bytes: ty.type_size(),
        });
    }
    Ok(match ty {
        GgmlType::F32 => bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
        GgmlType::F16 => bytes
            .chunks_exact(2)
            .map(|b| f16_bits_to_f32(u16::from_le_bytes([b[0], b[1]])))
            .collect(),
        GgmlType::BF16 => bytes
            .chunks_exact(2)
            .map(|b| bf16_bits_to_f32(u16::from_le_bytes([b[0], b[1]])))
            .collect(),
        GgmlType::Q8_0 => dequantize_q8_0(bytes),
        _ => dequantize_q4_0(bytes),
    })
}

/// IEEE half precision, rounding to nearest even (ggml's `GGML_FP32_TO_FP16`).
pub fn f32_to_f16_bits(value: f32) -> u16 {
    f16::from_f32(value).to_bits()
}

pub fn f16_bits_to_f32(bits: u16) -> f32 {
    f16::from_bits(bits).to_f32()
}

/// `ggml_compute_fp32_to_bf16`: NaNs are forced quiet, everything else rounds to nearest
/// even on the upper 16 bits.
pub fn f32_to_bf16_bits(value: f32) -> u16 {
    let bits = value.to_bits();
    if bits & 0x7fff_ffff > 0x7f80_0000 {
        return ((bits >> 16) | 64) as u16;
    }
    // Computed in u64 so the rounding carry of the largest finite values cannot overflow.
    ((u64::from(bits) + 0x7fff + u64::from((bits >> 16) & 1)) >> 16) as u16
}

pub fn bf16_bits_to_f32(bits: u16) -> f32 {
    f32::from_bits(u32::from(bits) << 16)
}

/// `quantize_row_q8_0_ref`: per block of 32, scale d = amax / 127 stored as f16, and
/// q = round(x / d) with halves away from zero.
fn quantize_q8_0(values: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(values.len() / QK8_0 * Q8_0_BLOCK_BYTES);
    for block in values.chunks_exact(QK8_0) {
        let amax = block.iter().fold(0.0f32, |acc, v| acc.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        out.extend_from_slice(&f32_to_f16_bits(d).to_le_bytes());
        // `as i8` saturates where C's conversion would be undefined (NaN, out of range).
        out.extend(block.iter().map(|&x| (x * id).round() as i8 as u8));
    }
    out
}

fn dequantize_q8_0(bytes: &[u8]) -> Vec<f32> {
    let mut out = Vec::with_capacity(bytes.len() / Q8_0_BLOCK_BYTES * QK8_0);
    for block in bytes.chunks_exact(Q8_0_BLOCK_BYTES) {
        let d = f16_bits_to_f32(u16::from_le_bytes([block[0], block[1]]));
        out.extend(block[2..].iter().map(|&q| f32::from(q as i8) * d));
    }
    out
}

/// `quantize_row_q4_0_ref`: per block of 32, d = (the value of largest magnitude) / -8,
/// q = min(15, trunc(x / d + 8.5)); element j goes in the low nibble of byte j and element
/// j + 16 in its high nibble.
fn quantize_q4_0(values: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(values.len() / QK4_0 * Q4_0_BLOCK_BYTES);
    for block in values.chunks_exact(QK4_0) {
        // The first element of largest magnitude, keeping its sign.
        let mut amax = 0.0f32;
        let mut max = 0.0f32;
        for &v in block {
            if amax < v.abs() {
                amax = v.abs();
                max = v;
            }
        }
        let d = max / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        out.extend_from_slice(&f32_to_f16_bits(d).to_le_bytes());
        let nibble = |x: f32| ((x * id + 8.5) as i8).min(15) as u8;
        let (low, high) = block.split_at(QK4_0 / 2);
        out.extend(
            low.iter()
                .zip(high)
                .map(|(&x0, &x1)| nibble(x0) | (nibble(x1) << 4)),
        );
    }
    out
}

fn dequantize_q4_0(bytes: &[u8]) -> Vec<f32> {
    let mut out = vec![0.0f32; bytes.len() / Q4_0_BLOCK_BYTES * QK4_0];
    for (block, values) in bytes
        .chunks_exact(Q4_0_BLOCK_BYTES)
        .zip(out.chunks_exact_mut(QK4_0))
    {
        let d = f16_bits_to_f32(u16::from_le_bytes([block[0], block[1]]));
        for (j, &packed) in block[2..].iter().enumerate() {
            values[j] = f32::from((packed & 0x0f) as i8 - 8) * d;
            values[j + QK4_0 / 2] = f32::from((packed >> 4) as i8 - 8) * d;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_rounds_to_nearest_even_and_quiets_nan() {
        assert_eq!(f32_to_bf16_bits(1.0), 0x3f80);
        // 1 + 2^-8 is a tie between 1.0 and 1 + 2^-7: goes to the even one (1.0).
        assert_eq!(f32_to_bf16_bits(f32::from_bits(0x3f80_8000)), 0x3f80);
        assert_eq!(f32_to_bf16_bits(f32::from_bits(0x3f81_8000)), 0x3f82);
        assert_eq!(f32_to_bf16_bits(f32::from_bits(0x7f80_0001)), 0x7fc0);
        assert_eq!(f32_to_bf16_bits(f32::MAX), 0x7f80);
    }

    #[test]
    fn q8_0_round_trips_within_a_step() {
        let values: Vec<f32> = (0..64).map(|i| (i as f32 - 31.5) / 7.0).collect();
        let bytes = quantize(GgmlType::Q8_0, &values).unwrap();
        assert_eq!(bytes.len(), 68);
        let back = dequantize(GgmlType::Q8_0, &bytes).unwrap();
        for (a, b) in values.iter().zip(&back) {
            assert!((a - b).abs() <= 4.5 / 127.0 / 2.0 + 1e-3, "{a} vs {b}");
        }
    }

    #[test]
    fn q4_0_matches_hand_computed_block() {
        // Largest magnitude is -8 at index 0, so d = 1 and q = trunc(x + 8.5) clamped.
        let mut values = [0.0f32; 32];
        values[0] = -8.0;
        values[1] = 7.0;
        values[16] = 3.0;
        let bytes = quantize(GgmlType::Q4_0, &values).unwrap();
        assert_eq!(&bytes[..2], &f32_to_f16_bits(1.0).to_le_bytes());
        assert_eq!(bytes[2], 11 << 4); // low nibble 0 (index 0), high 11 (index 16)
        assert_eq!(bytes[3], 15 | (8 << 4));
        let back = dequantize(GgmlType::Q4_0, &bytes).unwrap();
        assert_eq!(back[0], -8.0);
        assert_eq!(back[1], 7.0);
        assert_eq!(back[16], 3.0);
    }

    #[test]
    fn rejects_partial_blocks_and_other_types() {
        assert!(quantize(GgmlType::Q8_0, &[0.0; 31]).is_err());
        assert!(dequantize(GgmlType::Q4_0, &[0; 17]).is_err());
        assert!(quantize(GgmlType::Q4_K, &[0.0; 256]).is_err());
    }
}
