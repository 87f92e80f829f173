//! `check_tensors`: NaN/Inf in float data and in the fp16 scales of block types, as
//! upstream's `ggml_validate_row_data` checks them.

use crate::gguf::GgmlType;

/// Byte offsets of the fp16 scales inside one block of each block type (upstream's block
/// layouts); f32 scales are listed separately.
fn f16_scale_offsets(ty: GgmlType) -> &'static [usize] {
    match ty.name() {
        "q4_0" | "q5_0" | "q8_0" | "iq4_nl" | "iq2_xxs" | "iq2_xs" | "iq3_xxs" | "iq1_s"
        | "iq3_s" | "iq2_s" | "iq4_xs" => &[0],
        "q4_1" | "q5_1" | "q8_1" | "q4_k" | "q5_k" => &[0, 2],
        "q2_k" => &[80, 82],
        "q3_k" => &[108],
        "q6_k" => &[208],
        "tq1_0" => &[52],
        "tq2_0" => &[64],
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
    match ty.name() {
        "f32" => check(4, &bad_f32),
        "f64" => check(8, &|b| {
            !f64::from_le_bytes(b.try_into().unwrap_or([0; 8])).is_finite()
        }),
        "f16" => check(2, &bad_f16),
        // bf16: exponent all ones is NaN or infinity.
        "bf16" => check(2, &|b| u16::from_le_bytes([b[0], b[1]]) & 0x7f80 == 0x7f80),
        "q8_k" => data
            .chunks_exact(ty.type_size() as usize)
            .position(|block| bad_f32(&block[..4]))
            .map(|i| format!("non-finite scale in block {i}")),
        "mxfp4" => data
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
}
