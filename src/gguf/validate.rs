//! `check_tensors` (at load, and for hot-swapped bytes): NaN/Inf in float data and in the
//! fp16 scales of block types, as upstream's `ggml_validate_row_data` checks them. Here, below
//! both `loader` and `hotswap`, because it is about a type's bytes only.

use crate::gguf::GgmlType;

/// Byte offsets of the fp16 scales inside one block of each block type (upstream's block
/// layouts); f32 scales are listed separately.
fn f16_scale_offsets(ty: GgmlType) -> &'static [usize] {
    match ty {
        GgmlType::Q4_0
        | GgmlType::Q5_0
        | GgmlType::Q8_0
        | GgmlType::IQ4_NL
        | GgmlType::IQ2_XXS
        | GgmlType::IQ2_XS
        | GgmlType::IQ3_XXS
        | GgmlType::IQ1_S
        | GgmlType::IQ3_S
        | GgmlType::IQ2_S
        | GgmlType::IQ4_XS => &[0],
        GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q8_1 | GgmlType::Q4_K | GgmlType::Q5_K => {
            &[0, 2]
        }
        GgmlType::Q2_K => &[80, 82],
        GgmlType::Q3_K => &[108],
        GgmlType::Q6_K => &[208],
        GgmlType::TQ1_0 => &[52],
        GgmlType::TQ2_0 => &[64],
        _ => &[],
    }
}

/// Returns a reason when the data holds a NaN or infinity where upstream checks for one.
pub fn find_invalid(ty: GgmlType, data: &[u8]) -> Option<String> {
    let bad_f16 = |b: &[u8]| {
        let bits = u16::from_le_bytes([b[0], b[1]]);
        bits & 0x7c00 == 0x7c00
    };
    let bad_f32 = |b: &[u8]| !f32::from_le_bytes([b[0], b[1], b[2], b[3]]).is_finite();
    let check = |width: usize, bad: &dyn Fn(&[u8]) -> bool| {
        data.chunks_exact(width)
            .position(bad)
            .map(|i| format!("non-finite value at element {i}"))
    };
    match ty {
        GgmlType::F32 => check(4, &bad_f32),
        GgmlType::F64 => check(8, &|b| {
            !f64::from_le_bytes(b.try_into().unwrap_or([0; 8])).is_finite()
        }),
        GgmlType::F16 => check(2, &bad_f16),
        // bf16: exponent all ones is NaN or infinity.
        GgmlType::BF16 => check(2, &|b| u16::from_le_bytes([b[0], b[1]]) & 0x7f80 == 0x7f80),
        GgmlType::Q8_K => data
            .chunks_exact(ty.type_size() as usize)
            .position(|block| bad_f32(&block[..4]))
            .map(|i| format!("non-finite scale in block {i}")),
        GgmlType::MXFP4 => data
            .chunks_exact(ty.type_size() as usize)
            .position(|block| block[0] == 0xff)
            .map(|i| format!("invalid E8M0 scale in block {i}")),
        _ => {
            let offsets = f16_scale_offsets(ty);
            if offsets.is_empty() {
                return None;
            }
            data.chunks_exact(ty.type_size() as usize)
                .position(|block| offsets.iter().any(|&o| bad_f16(&block[o..o + 2])))
                .map(|i| format!("non-finite scale in block {i}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_nan_in_f32_and_inf_in_q8_0_scale() {
        let f32_ty = GgmlType::from_id(0).unwrap();
        let mut data = 1.0f32.to_le_bytes().repeat(4);
        assert!(find_invalid(f32_ty, &data).is_none());
        data[4..8].copy_from_slice(&f32::NAN.to_le_bytes());
        assert!(find_invalid(f32_ty, &data).unwrap().contains("element 1"));

        let q8 = GgmlType::from_id(8).unwrap();
        let mut block = vec![0u8; 34 * 2];
        assert!(find_invalid(q8, &block).is_none());
        block[34..36].copy_from_slice(&0x7c00u16.to_le_bytes());
        assert!(find_invalid(q8, &block).unwrap().contains("block 1"));
    }

    #[test]
    fn finds_inf_in_k_quant_scales() {
        // Q4_K: d and dmin are the first two fp16 values of each 144-byte block.
        let mut blocks = vec![0u8; 144 * 2];
        assert!(find_invalid(GgmlType::Q4_K, &blocks).is_none());
        blocks[144 + 2..144 + 4].copy_from_slice(&0xfc00u16.to_le_bytes());
        assert!(find_invalid(GgmlType::Q4_K, &blocks)
            .unwrap()
            .contains("block 1"));
        // Q6_K: d sits at byte 208 of each 210-byte block.
        let mut block = vec![0u8; 210];
        block[208..210].copy_from_slice(&0x7e00u16.to_le_bytes());
        assert!(find_invalid(GgmlType::Q6_K, &block).is_some());
    }
}
