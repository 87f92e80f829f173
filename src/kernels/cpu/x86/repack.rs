//! AVX2 kernels for the repacked weight layouts (`q4_0_8x8`, `iq4_nl_8x8`, `q4_K_8x8`; see
//! `cpu/repack/`), upstream's `arch/x86/repack.cpp`.

use std::arch::x86_64::*;

use super::simd::{available, dot_i8_i8, load128, load256};
use crate::kernels::cpu::blocks::*;

/// The AVX2 kernels for a repacked layout (see `repack.rs`), when this CPU has AVX2.
pub fn repacked_kernels(
    kind: crate::kernels::cpu::repack_layout::RepackKind,
) -> Option<crate::kernels::cpu::repack_layout::GroupKernels> {
    if !available() {
        return None;
    }
    use crate::kernels::cpu::repack_layout::{GroupKernels, RepackKind};
    Some(match kind {
        RepackKind::Q4_0x8 => GroupKernels::from_parts(q4_0x8_group::<1>, q4_0x8_group::<4>),
        RepackKind::Iq4NlX8 => GroupKernels::from_parts(iq4_nlx8_group::<1>, iq4_nlx8_group::<4>),
        RepackKind::Q4Kx8 => {
            GroupKernels::from_parts(q4_kx8_group::<1, false>, q4_kx8_group::<4, true>)
        }
    })
}

/// Safe entry of the Q4Kx8 group kernel: checks the slices, then runs the AVX2 code.
fn q4_kx8_group<const C: usize, const PER_SB: bool>(
    nb: usize,
    w: &[u8],
    x: [&[u8]; C],
    meta: [&[u32]; C],
    out: &mut [[f32; crate::kernels::cpu::repack_layout::ROWS]; C],
) {
    use crate::kernels::cpu::repack_layout::Q4KX8_BYTES;
    assert!(
        w.len() >= nb * Q4KX8_BYTES
            && x.iter().all(|x| x.len() >= nb * Q8_K_BYTES)
            && meta.iter().all(|m| m.len() >= 9 * nb),
        "repacked Q4_K group of {nb} blocks: {} bytes",
        w.len()
    );
    // SAFETY: reachable only through `repacked_kernels`, which hands it out when `available()`
    // saw AVX2, FMA and F16C; the kernel reads `nb` blocks of `Q4KX8_BYTES` of `w`, `nb`
    // Q8_K blocks of every `x` row and `9 nb` words of every `meta` row, present as checked
    // above; unaligned loads throughout.
    unsafe {
        q4_kx8_group_avx2::<C, PER_SB>(
            nb,
            w.as_ptr(),
            x.map(<[u8]>::as_ptr),
            meta.map(<[u32]>::as_ptr),
            out,
        )
    }
}

/// One 8-row group of a repacked Q4_K weight times `C` Q8_K activation rows, in upstream's
/// float order (see `repack::q4_kx8_scalar`): per pair of sub-blocks, the 8 rows' exact
/// `Σ scale · dot` (unsigned nibbles × i8 through `maddubs`, 4 pieces summed in i16, `madd`
/// by the sub-block scales) and `Σ min · bsum`; FMAs per pair (`PER_SB`, upstream's gemm) or
/// per super-block (its gemv); `acc - acc_min` at the end. Lanes in `hadd` order until the
/// final permutation.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_kx8_group_avx2<const C: usize, const PER_SB: bool>(
    nb: usize,
    w: *const u8,
    x: [*const u8; C],
    meta: [*const u32; C],
    out: &mut [[f32; 8]; C],
) {
    use crate::kernels::cpu::repack_layout::Q4KX8_BYTES;
    let m4 = _mm256_set1_epi8(0x0F);
    let order = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7);
    let rep = [
        _mm_setr_epi8(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
        _mm_setr_epi8(4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7),
    ];
    let mut acc = [_mm256_setzero_ps(); C];
    let mut accm = [_mm256_setzero_ps(); C];
    for b in 0..nb {
        let blk = w.add(b * Q4KX8_BYTES);
        let dw = _mm256_permutevar8x32_ps(_mm256_cvtph_ps(load128(blk)), order);
        let dm = _mm256_permutevar8x32_ps(_mm256_cvtph_ps(load128(blk.add(16))), order);
        let mut dwx = [_mm256_setzero_ps(); C];
        let mut dmx = [_mm256_setzero_ps(); C];
        for c in 0..C {
            let dx = _mm256_set1_ps(f32::from_bits(meta[c].add(9 * b).read()));
            dwx[c] = _mm256_mul_ps(dw, dx);
            dmx[c] = _mm256_mul_ps(dm, dx);
        }
        let mut isum_b = [_mm256_setzero_si256(); C];
        let mut imin_b = [_mm256_setzero_si256(); C];
        for sb in 0..4 {
            let scales = |sub: usize, h: usize| {
                let v = _mm_loadl_epi64(blk.add(32 + sub * 8).cast());
                _mm256_cvtepu8_epi16(_mm_shuffle_epi8(v, rep[h]))
            };
            let sl = [scales(2 * sb, 0), scales(2 * sb, 1)];
            let sh = [scales(2 * sb + 1, 0), scales(2 * sb + 1, 1)];
            let mins = |sub: usize| {
                let v = _mm_loadl_epi64(blk.add(96 + sub * 8).cast());
                _mm256_permutevar8x32_epi32(_mm256_cvtepu8_epi32(v), order)
            };
            let (ml, mh) = (mins(2 * sb), mins(2 * sb + 1));
            let base = blk.add(160 + sb * 256);
            let mut lo = [[_mm256_setzero_si256(); 2]; 4];
            let mut hi = [[_mm256_setzero_si256(); 2]; 4];
            for p in 0..4 {
                for h in 0..2 {
                    let v = load256(base.add(p * 64 + h * 32));
                    lo[p][h] = _mm256_and_si256(v, m4);
                    hi[p][h] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                }
            }
            for c in 0..C {
                let q = x[c].add(b * Q8_K_BYTES + 4 + 64 * sb);
                let bcast = |o: usize| _mm256_set1_epi64x(q.add(o).cast::<i64>().read_unaligned());
                let al = [bcast(0), bcast(8), bcast(16), bcast(24)];
                let ah = [bcast(32), bcast(40), bcast(48), bcast(56)];
                let mut halves = [_mm256_setzero_si256(); 2];
                for (h, half) in halves.iter_mut().enumerate() {
                    let sum = |w: &[[__m256i; 2]; 4], a: &[__m256i; 4]| {
                        _mm256_add_epi16(
                            _mm256_add_epi16(
                                _mm256_maddubs_epi16(w[0][h], a[0]),
                                _mm256_maddubs_epi16(w[1][h], a[1]),
                            ),
                            _mm256_add_epi16(
                                _mm256_maddubs_epi16(w[2][h], a[2]),
                                _mm256_maddubs_epi16(w[3][h], a[3]),
                            ),
                        )
                    };
                    *half = _mm256_add_epi32(
                        _mm256_madd_epi16(sum(&lo, &al), sl[h]),
                        _mm256_madd_epi16(sum(&hi, &ah), sh[h]),
                    );
                }
                let isum = _mm256_hadd_epi32(halves[0], halves[1]);
                let mt = meta[c].add(9 * b + 1 + 2 * sb);
                let imin = _mm256_add_epi32(
                    _mm256_mullo_epi32(ml, _mm256_set1_epi32(mt.read() as i32)),
                    _mm256_mullo_epi32(mh, _mm256_set1_epi32(mt.add(1).read() as i32)),
                );
                if PER_SB {
                    acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), dwx[c], acc[c]);
                    accm[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(imin), dmx[c], accm[c]);
                } else {
                    isum_b[c] = _mm256_add_epi32(isum_b[c], isum);
                    imin_b[c] = _mm256_add_epi32(imin_b[c], imin);
                }
            }
        }
        if !PER_SB {
            for c in 0..C {
                acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum_b[c]), dwx[c], acc[c]);
                accm[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(imin_b[c]), dmx[c], accm[c]);
            }
        }
    }
    for c in 0..C {
        _mm256_storeu_ps(
            out[c].as_mut_ptr(),
            _mm256_permutevar8x32_ps(_mm256_sub_ps(acc[c], accm[c]), order),
        );
    }
}

/// Safe entries of the 8-row group kernels over Q8_0 activations: check that `w` holds `nb`
/// repacked blocks of 8 rows (`$block_bytes` per row) and every activation row `nb` Q8_0
/// blocks and `2 nb` metadata words, then run the AVX2 code.
macro_rules! group_entry {
    ($name:ident, $kernel:ident, $block_bytes:expr, $type_name:literal) => {
        fn $name<const C: usize>(
            nb: usize,
            w: &[u8],
            x: [&[u8]; C],
            meta: [&[u32]; C],
            out: &mut [[f32; crate::kernels::cpu::repack_layout::ROWS]; C],
        ) {
            assert!(
                w.len() >= nb * 8 * $block_bytes
                    && x.iter().all(|x| x.len() >= nb * Q8_0_BYTES)
                    && meta.iter().all(|m| m.len() >= 2 * nb),
                concat!("repacked ", $type_name, " group of {} blocks: {} bytes"),
                nb,
                w.len()
            );
            // SAFETY: reachable only through `repacked_kernels`, which hands it out when
            // `available()` saw AVX2, FMA and F16C; the kernel reads `nb` blocks of
            // `8 * $block_bytes` bytes of `w`, `nb` Q8_0 blocks of every `x` row and `2 nb`
            // words of every `meta` row, present as checked above; unaligned loads throughout.
            unsafe {
                $kernel::<C>(
                    nb,
                    w.as_ptr(),
                    x.map(<[u8]>::as_ptr),
                    meta.map(<[u32]>::as_ptr),
                    out,
                )
            }
        }
    };
}

group_entry!(iq4_nlx8_group, iq4_nlx8_group_avx2, IQ4_NL_BYTES, "IQ4_NL");
group_entry!(q4_0x8_group, q4_0x8_group_avx2, Q4_0_BYTES, "Q4_0");

/// One 8-row group of a repacked IQ4_NL weight times `C` Q8_0 activation rows: nibbles
/// through the value table, i8 × i8 products by the sign trick, each `maddubs` widened to
/// i32 (values up to 127 in magnitude: i16 sums of several could overflow), then upstream's
/// `acc = fma(isum, d_w · d_x, acc)` per row, as in [`q4_0x8_group_avx2`].
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn iq4_nlx8_group_avx2<const C: usize>(
    nb: usize,
    w: *const u8,
    x: [*const u8; C],
    meta: [*const u32; C],
    out: &mut [[f32; 8]; C],
) {
    let m4 = _mm256_set1_epi8(0x0F);
    let lut = _mm256_broadcastsi128_si256(load128(KVALUES_IQ4NL.as_ptr().cast()));
    let order = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7);
    let mut acc = [_mm256_setzero_ps(); C];
    for b in 0..nb {
        let blk = w.add(b * 8 * IQ4_NL_BYTES);
        let dw = _mm256_permutevar8x32_ps(_mm256_cvtph_ps(load128(blk)), order);
        let r0 = load256(blk.add(16));
        let r1 = load256(blk.add(48));
        let r2 = load256(blk.add(80));
        let r3 = load256(blk.add(112));
        let lo = |v: __m256i| _mm256_shuffle_epi8(lut, _mm256_and_si256(v, m4));
        let hi =
            |v: __m256i| _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
        let (u0, u1, u2, u3) = (lo(r0), lo(r2), hi(r0), hi(r2));
        let (v0, v1, v2, v3) = (lo(r1), lo(r3), hi(r1), hi(r3));
        for c in 0..C {
            let q = x[c].add(b * Q8_0_BYTES + 2);
            let bcast = |o: usize| _mm256_set1_epi64x(q.add(o).cast::<i64>().read_unaligned());
            let (a0, a1, a2, a3) = (bcast(0), bcast(8), bcast(16), bcast(24));
            let s03 = _mm256_add_epi32(
                _mm256_add_epi32(dot_i8_i8(u0, a0), dot_i8_i8(u1, a1)),
                _mm256_add_epi32(dot_i8_i8(u2, a2), dot_i8_i8(u3, a3)),
            );
            let s47 = _mm256_add_epi32(
                _mm256_add_epi32(dot_i8_i8(v0, a0), dot_i8_i8(v1, a1)),
                _mm256_add_epi32(dot_i8_i8(v2, a2), dot_i8_i8(v3, a3)),
            );
            let isum = _mm256_hadd_epi32(s03, s47);
            let dx = _mm256_set1_ps(f32::from_bits(meta[c].add(2 * b).read()));
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw, dx), acc[c]);
        }
    }
    for c in 0..C {
        _mm256_storeu_ps(out[c].as_mut_ptr(), _mm256_permutevar8x32_ps(acc[c], order));
    }
}

/// One 8-row group of a repacked Q4_0 weight times `C` Q8_0 activation rows. Per block and
/// activation row: the 8 exact integer dot products (unsigned nibbles × i8 through `maddubs`,
/// summed in i16 — at most 4 × 2 × 15 × 127 — then `madd` into i32, minus `8 · Σ x`), then
/// `acc = fma(isum, d_w · d_x, acc)` per row: upstream's float order. The lanes hold the rows
/// in `hadd`'s order (0 1 4 5 2 3 6 7) until the final permutation.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_0x8_group_avx2<const C: usize>(
    nb: usize,
    w: *const u8,
    x: [*const u8; C],
    meta: [*const u32; C],
    out: &mut [[f32; 8]; C],
) {
    let m4 = _mm256_set1_epi8(0x0F);
    let ones16 = _mm256_set1_epi16(1);
    // hadd order <-> row order (an involution)
    let order = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7);
    let mut acc = [_mm256_setzero_ps(); C];
    for b in 0..nb {
        let blk = w.add(b * 8 * Q4_0_BYTES);
        let dw = _mm256_permutevar8x32_ps(_mm256_cvtph_ps(load128(blk)), order);
        let r0 = load256(blk.add(16)); // rows 0-3, qs bytes 0-7
        let r1 = load256(blk.add(48)); // rows 4-7, qs bytes 0-7
        let r2 = load256(blk.add(80)); // rows 0-3, qs bytes 8-15
        let r3 = load256(blk.add(112)); // rows 4-7, qs bytes 8-15
        let lo = |v: __m256i| _mm256_and_si256(v, m4);
        let hi = |v: __m256i| _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        // elements 0-7, 8-15, 16-23, 24-31 of rows 0-3 and of rows 4-7
        let (u0, u1, u2, u3) = (lo(r0), lo(r2), hi(r0), hi(r2));
        let (v0, v1, v2, v3) = (lo(r1), lo(r3), hi(r1), hi(r3));
        for c in 0..C {
            let xb = x[c].add(b * Q8_0_BYTES);
            let q = xb.add(2);
            let bcast = |o: usize| _mm256_set1_epi64x(q.add(o).cast::<i64>().read_unaligned());
            let (a0, a1, a2, a3) = (bcast(0), bcast(8), bcast(16), bcast(24));
            let s03 = _mm256_add_epi16(
                _mm256_add_epi16(_mm256_maddubs_epi16(u0, a0), _mm256_maddubs_epi16(u1, a1)),
                _mm256_add_epi16(_mm256_maddubs_epi16(u2, a2), _mm256_maddubs_epi16(u3, a3)),
            );
            let s47 = _mm256_add_epi16(
                _mm256_add_epi16(_mm256_maddubs_epi16(v0, a0), _mm256_maddubs_epi16(v1, a1)),
                _mm256_add_epi16(_mm256_maddubs_epi16(v2, a2), _mm256_maddubs_epi16(v3, a3)),
            );
            let isum = _mm256_hadd_epi32(
                _mm256_madd_epi16(s03, ones16),
                _mm256_madd_epi16(s47, ones16),
            );
            // minus 8 · Σ x of the block; the block's scale (both precomputed)
            let mt = meta[c].add(2 * b);
            let isum = _mm256_sub_epi32(isum, _mm256_set1_epi32(mt.add(1).read() as i32));
            let dx = _mm256_set1_ps(f32::from_bits(mt.read()));
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw, dx), acc[c]);
        }
    }
    for c in 0..C {
        _mm256_storeu_ps(out[c].as_mut_ptr(), _mm256_permutevar8x32_ps(acc[c], order));
    }
}
