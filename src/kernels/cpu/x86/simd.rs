//! Shared AVX2 pieces of the x86 kernels: the run-time feature check ([`available`]),
//! loads, horizontal sums, nibble and bit unpacking, the integer dot steps (`maddubs` / `madd`)
//! and the cache prefetch hint. Imports nothing else of the x86 kernels.

use std::arch::x86_64::*;
use std::sync::OnceLock;

/// Whether this CPU has AVX2, FMA and F16C (checked once), and the SIMD kernels are not
/// turned off with `LLAMA_HOTSWAP_KERNELS=scalar` (to run the scalar reference end to end, as
/// on a CPU without AVX2).
pub fn available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        let forced_scalar =
            std::env::var_os("LLAMA_HOTSWAP_KERNELS").is_some_and(|v| v == "scalar");
        !forced_scalar
            && is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c")
    })
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn hsum_f32x8(x: __m256) -> f32 {
    let mut r = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    _mm_cvtss_f32(r)
}

/// The f16 at `p` as f32 (one `vcvtph2ps`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn f16_load(p: *const u8) -> f32 {
    let bits = p.cast::<u16>().read_unaligned();
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(bits))))
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn f32_load(p: *const u8) -> f32 {
    p.cast::<f32>().read_unaligned()
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn load256(p: *const u8) -> __m256i {
    _mm256_loadu_si256(p.cast())
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn load128(p: *const u8) -> __m128i {
    _mm_loadu_si128(p.cast())
}

/// 16 bytes of nibbles into 32 bytes: low nibbles in the low half (elements 0..16), high
/// nibbles in the high half (16..32), as ggml's `bytes_from_nibbles_32`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn nibbles_32(p: *const u8) -> __m256i {
    let tmp = load128(p);
    let bytes = _mm256_set_m128i(_mm_srli_epi16(tmp, 4), tmp);
    _mm256_and_si256(bytes, _mm256_set1_epi8(0xF))
}

/// 32 bits into 32 bytes: 0xFF where the bit is set (ggml's `bytes_from_bits_32`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn bits_32(p: *const u8) -> __m256i {
    let x32 = p.cast::<u32>().read_unaligned() as i32;
    let shuf = _mm256_set_epi64x(
        0x0303_0303_0303_0303,
        0x0202_0202_0202_0202,
        0x0101_0101_0101_0101,
        0,
    );
    let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(x32), shuf);
    let bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbf_dfef_f7fb_fdfe));
    _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1))
}

/// Pairwise u8 × i8 products summed into 8 × i32 (ggml's `maddubs` + `madd(1)`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dot_u8_i8(ax: __m256i, sy: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sy), _mm256_set1_epi16(1))
}

/// i8 × i8 through the sign trick (|x| × sign(x)·y), into 8 × i32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dot_i8_i8(x: __m256i, y: __m256i) -> __m256i {
    dot_u8_i8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x))
}

/// i8 × i8 pairwise into 16 × i16 (sign trick), for the K-quant scale `madd`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn mul_i8_pairs_i16(x: __m256i, y: __m256i) -> __m256i {
    _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x))
}

/// `_mm256_shuffle_epi8` masks for [`pair_scales`]: from 8 i16 (duplicated in both halves),
/// lane 2h to the low half and lane 2h + 1 to the high half.
static PAIR_MASKS: [[u8; 32]; 4] = {
    let mut masks = [[0u8; 32]; 4];
    let mut h = 0;
    while h < 4 {
        let mut b = 0;
        while b < 32 {
            let lane = 2 * h + b / 16;
            masks[h][b] = (2 * lane + b % 2) as u8;
            b += 1;
        }
        h += 1;
    }
    masks
};

/// 16 i8 sub-block scales (of 16 values each) as 8 vectors: vector g holds scale 2g in its
/// low 8 i16 lanes and scale 2g + 1 in its high 8, matching a 32-byte `maddubs` product.
#[inline(always)]
pub(super) unsafe fn pair_scales(sc: __m128i) -> [__m256i; 8] {
    let lo = _mm_cvtepi8_epi16(sc);
    let hi = _mm_cvtepi8_epi16(_mm_srli_si128(sc, 8));
    let (vlo, vhi) = (_mm256_set_m128i(lo, lo), _mm256_set_m128i(hi, hi));
    let mut out = [_mm256_setzero_si256(); 8];
    for (g, o) in out.iter_mut().enumerate() {
        let mask = _mm256_loadu_si256(PAIR_MASKS[g % 4].as_ptr().cast());
        *o = _mm256_shuffle_epi8(if g < 4 { vlo } else { vhi }, mask);
    }
    out
}
/// Σ of 4 i32 lanes (exact: integer).
#[inline(always)]
pub(super) unsafe fn hsum_i32x4(x: __m128i) -> i32 {
    let r = _mm_add_epi32(x, _mm_unpackhi_epi64(x, x));
    _mm_cvtsi128_si32(_mm_add_epi32(r, _mm_shuffle_epi32(r, 0b01)))
}

#[inline(always)]
pub(super) unsafe fn hsum_f32x4(x: __m128) -> f32 {
    let r = _mm_add_ps(x, _mm_movehl_ps(x, x));
    _mm_cvtss_f32(_mm_add_ss(r, _mm_movehdup_ps(r)))
}

#[inline(always)]
pub(super) unsafe fn hsum_i32x8(x: __m256i) -> i32 {
    let r = _mm_add_epi32(_mm256_extracti128_si256(x, 1), _mm256_castsi256_si128(x));
    let r = _mm_add_epi32(r, _mm_unpackhi_epi64(r, r));
    let r = _mm_add_epi32(r, _mm_shuffle_epi32(r, 0b01));
    _mm_cvtsi128_si32(r)
}

/// Asks the CPU to fetch `bytes` into its caches (one hint per 64-byte line): a hint only, with
/// no effect on results.
#[inline(always)]
pub fn prefetch(bytes: &[u8]) {
    for line in bytes.chunks(64) {
        // SAFETY: PREFETCHT0 is SSE, part of x86_64's baseline; it reads nothing architecturally
        // and never faults, and the address is inside a live slice anyway.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(line.as_ptr().cast()) };
    }
}
