//! AVX2 activation quantizers (Q8_0, Q8_1) and the f32 → f16 conversion, bit-exact with the
//! scalar ones in `cpu/quantize.rs`.

use std::arch::x86_64::*;

use super::simd::{available, hsum_i32x8};
use crate::kernels::cpu::blocks::*;

/// Q8_0 (`sum == false`) or Q8_1 (`sum == true`) quantization of `x` (a multiple of 32
/// values), bit-exact with the scalar `quantize::q8_0` / `q8_1` (ggml's AVX2 quantizer: scale
/// from the block's largest magnitude, multiply by 127 / amax, round half to even, saturating
/// packs). Returns false when the SIMD path is unavailable.
pub fn quantize_q8(x: &[f32], dst: &mut [u8], sum: bool) -> bool {
    if !available() {
        return false;
    }
    let nb = x.len() / QK;
    let block = if sum { Q8_1_BYTES } else { Q8_0_BYTES };
    assert!(
        dst.len() >= nb * block,
        "quantize_q8: {} bytes for {nb} blocks",
        dst.len()
    );
    // SAFETY: AVX2/FMA/F16C are available (checked above); the kernel reads nb * 32 floats of
    // `x` and writes nb blocks of `dst`, both within the slices (x.len() >= nb * 32 by the
    // definition of nb, dst checked above).
    unsafe { quantize_q8_avx2(x.as_ptr(), nb, dst.as_mut_ptr(), sum) };
    true
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn quantize_q8_avx2(x: *const f32, nb: usize, dst: *mut u8, sum: bool) {
    let sign = _mm256_set1_ps(-0.0);
    let perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    let (block, qs) = if sum {
        (Q8_1_BYTES, 4)
    } else {
        (Q8_0_BYTES, 2)
    };
    for i in 0..nb {
        let xp = x.add(i * QK);
        let v = [
            _mm256_loadu_ps(xp),
            _mm256_loadu_ps(xp.add(8)),
            _mm256_loadu_ps(xp.add(16)),
            _mm256_loadu_ps(xp.add(24)),
        ];
        let mut m = _mm256_andnot_ps(sign, v[0]);
        for vv in &v[1..] {
            m = _mm256_max_ps(m, _mm256_andnot_ps(sign, *vv));
        }
        let mut m4 = _mm_max_ps(_mm256_extractf128_ps(m, 1), _mm256_castps256_ps128(m));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        let amax = _mm_cvtss_f32(m4);
        let d = amax / 127.0;
        let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
        let mul = _mm256_set1_ps(id);
        let q: [__m256i; 4] = std::array::from_fn(|j| {
            let r = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
                _mm256_mul_ps(v[j], mul),
            );
            _mm256_cvtps_epi32(r)
        });
        let out = dst.add(i * block);
        let d_bits = _mm_extract_epi16::<0>(_mm_cvtps_ph::<0>(_mm_set_ss(d))) as u16;
        out.cast::<u16>().write_unaligned(d_bits);
        if sum {
            let total =
                _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
            let s = d * hsum_i32x8(total) as f32;
            let s_bits = _mm_extract_epi16::<0>(_mm_cvtps_ph::<0>(_mm_set_ss(s))) as u16;
            out.add(2).cast::<u16>().write_unaligned(s_bits);
        }
        let p16a = _mm256_packs_epi32(q[0], q[1]);
        let p16b = _mm256_packs_epi32(q[2], q[3]);
        let p8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p16a, p16b), perm);
        _mm256_storeu_si256(out.add(qs).cast(), p8);
    }
}

/// f32 to f16 (round to nearest even, as `half` and ggml's `_mm256_cvtps_ph(x, 0)`), 8 at a
/// time. Returns false when the SIMD path is unavailable.
pub fn convert_f16(x: &[f32], dst: &mut [u8]) -> bool {
    if !available() {
        return false;
    }
    assert!(
        dst.len() >= 2 * x.len(),
        "convert_f16: {} bytes for {} values",
        dst.len(),
        x.len()
    );
    let n8 = x.len() / 8 * 8;
    // SAFETY: F16C is available (checked above); reads x[..n8] and writes dst[..2 * n8], both
    // inside the slices (dst checked above).
    unsafe { convert_f16_f16c(x.as_ptr(), n8, dst.as_mut_ptr()) };
    for (v, out) in x[n8..].iter().zip(dst[2 * n8..].chunks_exact_mut(2)) {
        out.copy_from_slice(&half::f16::from_f32(*v).to_bits().to_le_bytes());
    }
    true
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn convert_f16_f16c(x: *const f32, n8: usize, dst: *mut u8) {
    let mut i = 0;
    while i < n8 {
        let h = _mm256_cvtps_ph::<{ _MM_FROUND_TO_NEAREST_INT }>(_mm256_loadu_ps(x.add(i)));
        _mm_storeu_si128(dst.add(2 * i).cast(), h);
        i += 8;
    }
}
