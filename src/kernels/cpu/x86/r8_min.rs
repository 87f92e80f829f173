//! AVX2 forms of the r8 pieces for the min types Q4_1 and Q5_1 (`cpu/r8_min.rs`): the
//! packings and the min term. Results equal the scalar references bit for bit.

use std::arch::x86_64::*;

use super::gemm_r8::{store_scales, store_values};
use super::simd::{available, bits_32, nibbles_32};
use crate::kernels::cpu::blocks::{Q4_1_BYTES, Q5_1_BYTES};
use crate::kernels::cpu::r8_layout::{R8_BLOCK_BYTES, R8_ROWS};
use crate::kernels::cpu::r8_min::{R8MinPackFn, R8MinTermFn};

/// The AVX2 packing of 8 Q4_1 rows, when this CPU has AVX2, FMA and F16C.
pub fn r8_pack_q4_1() -> Option<R8MinPackFn> {
    available().then_some(pack_q4_1_avx2 as R8MinPackFn)
}

/// The AVX2 packing of 8 Q5_1 rows, when this CPU has AVX2, FMA and F16C.
pub fn r8_pack_q5_1() -> Option<R8MinPackFn> {
    available().then_some(pack_q5_1_avx2 as R8MinPackFn)
}

/// The AVX2 min term, when this CPU has AVX2, FMA and F16C.
pub fn r8_min_term() -> Option<R8MinTermFn> {
    available().then_some(min_term_avx2 as R8MinTermFn)
}

fn check(rows: &[&[u8]; R8_ROWS], block: usize, nb: usize, out: &[u8], mins: &[f32]) {
    assert!(
        rows.iter().all(|r| r.len() >= nb * block)
            && out.len() >= nb * R8_BLOCK_BYTES
            && mins.len() >= nb * R8_ROWS,
        "rows of {nb} blocks of {block} bytes"
    );
}

fn pack_q4_1_avx2(rows: [&[u8]; R8_ROWS], nb: usize, out: &mut [u8], mins: &mut [f32]) {
    check(&rows, Q4_1_BYTES, nb, out, mins);
    // SAFETY: handed out by `r8_pack_q4_1` only when `available()` saw AVX2, FMA and F16C;
    // reads `nb` Q4_1 blocks of each row, writes `nb` r8 blocks of `out` and `8 · nb` floats
    // of `mins`, present as checked above; unaligned loads and stores.
    unsafe {
        pack_kernel::<false>(
            rows.map(<[u8]>::as_ptr),
            nb,
            out.as_mut_ptr(),
            mins.as_mut_ptr(),
        )
    }
}

fn pack_q5_1_avx2(rows: [&[u8]; R8_ROWS], nb: usize, out: &mut [u8], mins: &mut [f32]) {
    check(&rows, Q5_1_BYTES, nb, out, mins);
    // SAFETY: as in `pack_q4_1_avx2`, with Q5_1 blocks (`r8_pack_q5_1`).
    unsafe {
        pack_kernel::<true>(
            rows.map(<[u8]>::as_ptr),
            nb,
            out.as_mut_ptr(),
            mins.as_mut_ptr(),
        )
    }
}

/// Q4_1 (`Q5 = false`) or Q5_1 blocks: per block the 8 scales `d` and the 8 mins `m` in row
/// order, and each row's 32 values (nibbles in element order, plus 16 where the fifth bit is
/// set for Q5_1) transposed into quads.
///
/// # Safety
/// AVX2, FMA and F16C present; each row readable for `nb` blocks, `dst` writable for `nb`
/// r8 blocks, `mins` for `8 · nb` floats.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn pack_kernel<const Q5: bool>(
    rows: [*const u8; R8_ROWS],
    nb: usize,
    dst: *mut u8,
    mins: *mut f32,
) {
    let block = if Q5 { Q5_1_BYTES } else { Q4_1_BYTES };
    let qs = if Q5 { 8 } else { 4 };
    let bit4 = _mm256_set1_epi8(0x10);
    for b in 0..nb {
        let at = b * block;
        let d = dst.add(b * R8_BLOCK_BYTES);
        store_scales(&rows, at, d);
        let mut m_bits = [0u16; R8_ROWS];
        for (r, p) in rows.iter().enumerate() {
            m_bits[r] = p.add(at + 2).cast::<u16>().read_unaligned();
        }
        let m = _mm256_cvtph_ps(_mm_loadu_si128(m_bits.as_ptr().cast()));
        _mm256_storeu_ps(mins.add(R8_ROWS * b), m);
        let v = rows.map(|p| {
            let q = nibbles_32(p.add(at + qs));
            if Q5 {
                _mm256_or_si256(q, _mm256_and_si256(bits_32(p.add(at + 4)), bit4))
            } else {
                q
            }
        });
        store_values(&v, d);
    }
}

fn min_term_avx2(nb: usize, mins: &[f32], sx: &[f32], m: usize, out: &mut [[f32; R8_ROWS]]) {
    assert!(
        mins.len() >= nb * R8_ROWS && sx.len() >= m * nb && out.len() >= m,
        "min terms of {nb} blocks × {m} columns"
    );
    let (mins, sx) = (mins.as_ptr(), sx.as_ptr());
    for c0 in (0..m).step_by(4) {
        let out = &mut out[c0..m.min(c0 + 4)];
        // SAFETY: handed out by `r8_min_term` only when `available()` saw AVX2 and FMA; reads
        // `8 · nb` floats of `mins` and `nb` of `sx` for each of the (at most 4) columns from
        // `c0`, present as asserted; writes `out`'s entries only.
        unsafe {
            let sx = sx.add(c0 * nb);
            match out.len() {
                4 => min_term_kernel::<4>(nb, mins, sx, out),
                3 => min_term_kernel::<3>(nb, mins, sx, out),
                2 => min_term_kernel::<2>(nb, mins, sx, out),
                _ => min_term_kernel::<1>(nb, mins, sx, out),
            }
        }
    }
}

/// One FMA per block and column: the 8 rows' mins times the column's `s_x`. `C` columns at
/// once: each column's sum is one dependent FMA chain (the scalar reference's order), so one
/// column alone waits on the FMA latency every block; `C` chains fill those cycles.
///
/// # Safety
/// AVX2 and FMA present; `mins` readable for `8 · nb` floats, `sx` for `C · nb`; `out` holds
/// `C` entries.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn min_term_kernel<const C: usize>(
    nb: usize,
    mins: *const f32,
    sx: *const f32,
    out: &mut [[f32; R8_ROWS]],
) {
    let mut acc = [_mm256_setzero_ps(); C];
    for b in 0..nb {
        let m = _mm256_loadu_ps(mins.add(R8_ROWS * b));
        for (c, a) in acc.iter_mut().enumerate() {
            *a = _mm256_fmadd_ps(m, _mm256_set1_ps(*sx.add(c * nb + b)), *a);
        }
    }
    for (o, a) in out.iter_mut().zip(acc) {
        _mm256_storeu_ps(o.as_mut_ptr(), a);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::cpu::r8_min::{min_term, pack_q4_1, pack_q5_1};

    /// The AVX2 packings and min term equal the scalar references bit for bit (random blocks:
    /// any quant and `qh` bits, sane f16 scales and mins).
    #[test]
    fn avx2_min_pieces_equal_the_scalar_references() {
        let (Some(p41), Some(p51), Some(mt)) = (r8_pack_q4_1(), r8_pack_q5_1(), r8_min_term())
        else {
            return;
        };
        let mut next = crate::kernels::cpu::test_rng::xorshift(0x9e37_79b9_7f4a_7c15);
        for nb in [1usize, 3, 18] {
            for (block, simd, scalar) in [
                (Q4_1_BYTES, p41, pack_q4_1 as R8MinPackFn),
                (Q5_1_BYTES, p51, pack_q5_1 as R8MinPackFn),
            ] {
                let mut w: Vec<u8> = (0..8 * nb * block).map(|_| next() as u8).collect();
                for blk in w.chunks_exact_mut(block) {
                    for o in [0, 2] {
                        let v = ((next() % 2000) as f32 - 1000.0) * 1e-5;
                        blk[o..o + 2].copy_from_slice(&half::f16::from_f32(v).to_le_bytes());
                    }
                }
                let rows: [&[u8]; 8] =
                    std::array::from_fn(|r| &w[r * nb * block..(r + 1) * nb * block]);
                let (mut a, mut b) = (
                    vec![0u8; nb * R8_BLOCK_BYTES],
                    vec![1u8; nb * R8_BLOCK_BYTES],
                );
                let (mut ma, mut mb) = (vec![0f32; 8 * nb], vec![1f32; 8 * nb]);
                simd(rows, nb, &mut a, &mut ma);
                scalar(rows, nb, &mut b, &mut mb);
                assert!(a == b, "{block}-byte blocks, {nb}: quants");
                assert_eq!(
                    ma.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    mb.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    "{block}-byte blocks, {nb}: mins"
                );
                for m in [1usize, 2, 3, 4, 5, 9] {
                    let sx: Vec<f32> = (0..m * nb)
                        .map(|_| (next() % 999) as f32 * 0.37 - 180.0)
                        .collect();
                    let (mut ta, mut tb) = (vec![[0f32; 8]; m], vec![[1f32; 8]; m]);
                    mt(nb, &ma, &sx, m, &mut ta);
                    min_term(nb, &ma, &sx, m, &mut tb);
                    let bits = |t: &[[f32; 8]]| -> Vec<u32> {
                        t.iter().flatten().map(|v| v.to_bits()).collect()
                    };
                    assert_eq!(bits(&ta), bits(&tb), "min term, {nb} blocks × {m} columns");
                }
            }
        }
    }
}
