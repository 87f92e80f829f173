//! ggml's block layouts (`ggml-common.h`), read from bytes: a weight tensor is a byte slice of
//! whole blocks (mmap'd or owned, any alignment), so every field is read with `from_le_bytes`
//! at its C offset instead of casting to a `#[repr(C)]` struct.

use half::{bf16, f16};

/// Elements per block of the 32-wide formats (`QK4_0`, `QK8_0`, `QK4_NL`, ...).
pub const QK: usize = 32;
/// Elements per super-block of the K-quants and IQ4_XS (`QK_K`).
pub const QK_K: usize = 256;

/// Block sizes in bytes (`sizeof(block_*)`).
pub const Q4_0_BYTES: usize = 18; // f16 d; u8 qs[16]
pub const Q4_1_BYTES: usize = 20; // f16 d, m; u8 qs[16]
pub const Q5_0_BYTES: usize = 22; // f16 d; u8 qh[4]; u8 qs[16]
pub const Q5_1_BYTES: usize = 24; // f16 d, m; u8 qh[4]; u8 qs[16]
pub const Q8_0_BYTES: usize = 34; // f16 d; i8 qs[32]
pub const Q8_1_BYTES: usize = 36; // f16 d, s (= d * sum(qs)); i8 qs[32]
pub const Q2_K_BYTES: usize = 84; // u8 scales[16]; u8 qs[64]; f16 d, dmin
pub const Q3_K_BYTES: usize = 110; // u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d
pub const Q4_K_BYTES: usize = 144; // f16 d, dmin; u8 scales[12]; u8 qs[128]
pub const Q5_K_BYTES: usize = 176; // f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]
pub const Q6_K_BYTES: usize = 210; // u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d
pub const Q8_K_BYTES: usize = 292; // f32 d; i8 qs[256]; i16 bsums[16]
pub const IQ4_NL_BYTES: usize = 18; // f16 d; u8 qs[16]
pub const IQ4_XS_BYTES: usize = 136; // f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]

/// `kvalues_iq4nl`: the non-linear 4-bit code book of IQ4_NL and IQ4_XS.
pub const KVALUES_IQ4NL: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

#[inline(always)]
pub fn f16_at(bytes: &[u8], offset: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([bytes[offset], bytes[offset + 1]])).to_f32()
}

#[inline(always)]
pub fn bf16_at(bytes: &[u8], offset: usize) -> f32 {
    bf16::from_bits(u16::from_le_bytes([bytes[offset], bytes[offset + 1]])).to_f32()
}

#[inline(always)]
pub fn f32_at(bytes: &[u8], offset: usize) -> f32 {
    f32::from_le_bytes([
        bytes[offset],
        bytes[offset + 1],
        bytes[offset + 2],
        bytes[offset + 3],
    ])
}

#[inline(always)]
pub fn u32_at(bytes: &[u8], offset: usize) -> u32 {
    u32::from_le_bytes([
        bytes[offset],
        bytes[offset + 1],
        bytes[offset + 2],
        bytes[offset + 3],
    ])
}

#[inline(always)]
pub fn i16_at(bytes: &[u8], offset: usize) -> i16 {
    i16::from_le_bytes([bytes[offset], bytes[offset + 1]])
}

/// `get_scale_min_k4`: the 6-bit scale and min of sub-block `j` (0..8) of a Q4_K/Q5_K block,
/// packed in 12 bytes.
#[inline(always)]
pub fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// The 16 signed 6-bit scales of a Q3_K block (already minus 32), unpacked from 12 bytes as
/// `dequantize_row_q3_K` does with its `kmask` shuffles.
#[inline(always)]
pub fn q3_k_scales(packed: &[u8]) -> [i8; 16] {
    const KMASK1: u32 = 0x0303_0303;
    const KMASK2: u32 = 0x0f0f_0f0f;
    let a0 = u32_at(packed, 0);
    let a1 = u32_at(packed, 4);
    let tmp = u32_at(packed, 8);
    let aux = [
        (a0 & KMASK2) | ((tmp & KMASK1) << 4),
        (a1 & KMASK2) | (((tmp >> 2) & KMASK1) << 4),
        ((a0 >> 4) & KMASK2) | (((tmp >> 4) & KMASK1) << 4),
        ((a1 >> 4) & KMASK2) | (((tmp >> 6) & KMASK1) << 4),
    ];
    let mut out = [0i8; 16];
    for (i, word) in aux.iter().enumerate() {
        for (b, byte) in word.to_le_bytes().iter().enumerate() {
            out[i * 4 + b] = (*byte as i8).wrapping_sub(32);
        }
    }
    out
}

/// The 6-bit scale (minus 32) of sub-block `ib` (0..8) of an IQ4_XS block.
#[inline(always)]
pub fn iq4_xs_scale(block: &[u8], ib: usize) -> i32 {
    let scales_h = u16::from_le_bytes([block[2], block[3]]);
    let low = (block[4 + ib / 2] >> (4 * (ib % 2))) & 0xF;
    let high = ((scales_h >> (2 * ib)) & 3) as u8;
    i32::from(low | (high << 4)) - 32
}
