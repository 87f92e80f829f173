//! AVX2 kernels of the fast mode's batched products over r8 groups (see `cpu/r8_layout.rs`):
//! per block, each of the 8 weight registers (4 bytes of each of the 8 rows) is loaded once
//! for up to 8 activation columns, each column's 4 matching bytes broadcast to all lanes
//! (`maddubs`: nibbles straight against the i8 activations, summed in i16 over 4 registers;
//! i8 weights with the sign trick, summed in i32), so the 8 lanes end with the 8 rows' exact
//! integer sums; then one conversion, one multiply (`d_w · d_x`) and one FMA for all 8
//! outputs. Results equal `r8_layout::r8_scalar` bit for bit.

use std::arch::x86_64::*;

use super::simd::{available, bits_32, load128, load256, nibbles_32};
use crate::kernels::cpu::blocks::{KVALUES_IQ4NL, Q4_0_BYTES, Q5_0_BYTES, Q8_0_BYTES};
use crate::kernels::cpu::r8_layout::*;

/// The AVX2 r8 kernel, when this CPU has AVX2, FMA and F16C.
pub fn r8_kernel() -> Option<R8Fn> {
    available().then_some(r8_avx2 as R8Fn)
}

/// The AVX2 packing of 8 Q8_0 rows into r8 blocks, when this CPU has AVX2.
pub fn r8_pack_q8_0() -> Option<fn([&[u8]; R8_ROWS], usize, &mut [u8])> {
    available().then_some(pack_q8_0_avx2 as fn([&[u8]; R8_ROWS], usize, &mut [u8]))
}

fn pack_q8_0_avx2(rows: [&[u8]; R8_ROWS], nb: usize, out: &mut [u8]) {
    assert!(
        rows.iter().all(|r| r.len() >= nb * Q8_0_BYTES) && out.len() >= nb * R8_BLOCK_BYTES,
        "Q8_0 rows of {nb} blocks"
    );
    // SAFETY: handed out by `r8_pack_q8_0` only when `available()` saw AVX2, FMA and F16C;
    // reads `nb` Q8_0 blocks of each row and writes `nb` r8 blocks of `out`, present as
    // asserted above; unaligned loads and stores.
    unsafe { pack_q8_0_kernel(rows.map(<[u8]>::as_ptr), nb, out.as_mut_ptr()) }
}

/// The 8 rows' f16 block scales (the first two bytes of each row's block at byte `at`),
/// converted and stored as f32 at `d` in row order: the start of every packing below.
///
/// # Safety
/// AVX2, FMA and F16C present; each row readable at `at..at + 2`, `d` writable for 32 bytes.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn store_scales(rows: &[*const u8; R8_ROWS], at: usize, d: *mut u8) {
    let mut bits = [0u16; R8_ROWS];
    for (r, p) in rows.iter().enumerate() {
        bits[r] = p.add(at).cast::<u16>().read_unaligned();
    }
    let scales = _mm256_cvtph_ps(_mm_loadu_si128(bits.as_ptr().cast()));
    _mm256_storeu_ps(d.cast::<f32>(), scales);
}

/// Stores the 8 rows' 32 values of one block (`v[r]`, element order) as the r8 block's 8
/// quads at `d + 32`: an 8 × 8 transpose of 32-bit lanes (quad `k` of row `r` to lane `r`
/// of register `k`).
///
/// # Safety
/// AVX2 present; `d` writable for `R8_BLOCK_BYTES` bytes.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn store_values(v: &[__m256i; R8_ROWS], d: *mut u8) {
    // per 128-bit lane: t = rows (2i, 2i + 1) interleaved by quad: quads 0,1 | 4,5 (lo), 2,3 | 6,7 (hi)
    let t: [__m256i; 8] = std::array::from_fn(|i| {
        if i % 2 == 0 {
            _mm256_unpacklo_epi32(v[i], v[i + 1])
        } else {
            _mm256_unpackhi_epi32(v[i - 1], v[i])
        }
    });
    // u[4h + j]: rows 4h..4h + 4 of quad j (low 128 bits) and of quad 4 + j (high)
    let mut u = [_mm256_setzero_si256(); 8];
    for h in 0..2 {
        let (lo, hi) = (4 * h, 4 * h + 1);
        u[4 * h] = _mm256_unpacklo_epi64(t[lo], t[lo + 2]);
        u[4 * h + 1] = _mm256_unpackhi_epi64(t[lo], t[lo + 2]);
        u[4 * h + 2] = _mm256_unpacklo_epi64(t[hi], t[hi + 2]);
        u[4 * h + 3] = _mm256_unpackhi_epi64(t[hi], t[hi + 2]);
    }
    for j in 0..4 {
        let quad_j = _mm256_permute2x128_si256::<0x20>(u[j], u[4 + j]);
        let quad_4j = _mm256_permute2x128_si256::<0x31>(u[j], u[4 + j]);
        _mm256_storeu_si256(d.add(32 + 32 * j).cast(), quad_j);
        _mm256_storeu_si256(d.add(32 + 32 * (4 + j)).cast(), quad_4j);
    }
}

/// The SIMD form of `r8_layout::pack_q8_0`: per block, the 8 scales gathered and converted,
/// the 8 rows' 32 quant bytes transposed into quads.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn pack_q8_0_kernel(rows: [*const u8; R8_ROWS], nb: usize, dst: *mut u8) {
    for b in 0..nb {
        let at = b * Q8_0_BYTES;
        let d = dst.add(b * R8_BLOCK_BYTES);
        store_scales(&rows, at, d);
        store_values(&rows.map(|r| load256(r.add(at + 2))), d);
    }
}

/// The AVX2 form of `r8_layout::iq4_nl_values`, when this CPU has AVX2.
pub fn r8_iq4_nl_values() -> Option<fn(usize, &mut [u8])> {
    available().then_some(iq4_nl_values_avx2 as fn(usize, &mut [u8]))
}

fn iq4_nl_values_avx2(nb: usize, out: &mut [u8]) {
    assert!(out.len() >= nb * R8_BLOCK_BYTES, "{nb} r8 blocks");
    // SAFETY: handed out by `r8_iq4_nl_values` only when `available()` saw AVX2; rewrites the
    // 256 quant bytes after the 32 scale bytes of each of `nb` r8 blocks, present as asserted;
    // unaligned loads and stores.
    unsafe { iq4_nl_values_kernel(nb, out.as_mut_ptr()) }
}

/// One `pshufb` per 32 quant bytes: the nibbles index the 16-entry code book.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn iq4_nl_values_kernel(nb: usize, dst: *mut u8) {
    let book = _mm256_broadcastsi128_si256(_mm_loadu_si128(KVALUES_IQ4NL.as_ptr().cast()));
    for b in 0..nb {
        let d = dst.add(b * R8_BLOCK_BYTES + 32);
        for i in 0..8 {
            let q = _mm256_loadu_si256(d.add(32 * i).cast());
            _mm256_storeu_si256(d.add(32 * i).cast(), _mm256_shuffle_epi8(book, q));
        }
    }
}

/// The AVX2 packing of 8 plain Q5_0 rows into r8 blocks, when this CPU has AVX2.
pub fn r8_pack_q5_0() -> Option<fn([&[u8]; R8_ROWS], usize, &mut [u8])> {
    available().then_some(pack_q5_0_avx2 as fn([&[u8]; R8_ROWS], usize, &mut [u8]))
}

fn pack_q5_0_avx2(rows: [&[u8]; R8_ROWS], nb: usize, out: &mut [u8]) {
    assert!(
        rows.iter().all(|r| r.len() >= nb * Q5_0_BYTES) && out.len() >= nb * R8_BLOCK_BYTES,
        "Q5_0 rows of {nb} blocks"
    );
    // SAFETY: handed out by `r8_pack_q5_0` only when `available()` saw AVX2, FMA and F16C;
    // reads `nb` Q5_0 blocks of each row and writes `nb` r8 blocks of `out`, present as
    // asserted above; unaligned loads and stores.
    unsafe { pack_q5_0_kernel(rows.map(<[u8]>::as_ptr), nb, out.as_mut_ptr()) }
}

/// The SIMD form of `r8_layout::pack_q5_0`: per block, the 8 scales gathered and converted;
/// each row's 32 values (the nibbles in element order, 0x10 where the fifth bit is set),
/// then transposed.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn pack_q5_0_kernel(rows: [*const u8; R8_ROWS], nb: usize, dst: *mut u8) {
    let bit4 = _mm256_set1_epi8(0x10);
    for b in 0..nb {
        let at = b * Q5_0_BYTES;
        let d = dst.add(b * R8_BLOCK_BYTES);
        store_scales(&rows, at, d);
        let v = rows.map(|p| {
            let hi = _mm256_and_si256(bits_32(p.add(at + 2)), bit4);
            _mm256_or_si256(nibbles_32(p.add(at + 6)), hi)
        });
        store_values(&v, d);
    }
}

/// The AVX2 packing of 8 plain Q4_0 rows into r8 blocks, when this CPU has AVX2.
pub fn r8_pack_q4_0() -> Option<fn([&[u8]; R8_ROWS], usize, &mut [u8])> {
    available().then_some(pack_q4_0_avx2 as fn([&[u8]; R8_ROWS], usize, &mut [u8]))
}

fn pack_q4_0_avx2(rows: [&[u8]; R8_ROWS], nb: usize, out: &mut [u8]) {
    assert!(
        rows.iter().all(|r| r.len() >= nb * Q4_0_BYTES) && out.len() >= nb * R8_BLOCK_BYTES,
        "Q4_0 rows of {nb} blocks"
    );
    // SAFETY: handed out by `r8_pack_q4_0` only when `available()` saw AVX2, FMA and F16C;
    // reads `nb` Q4_0 blocks of each row and writes `nb` r8 blocks of `out`, present as
    // asserted above; unaligned loads and stores.
    unsafe { pack_q4_0_kernel(rows.map(<[u8]>::as_ptr), nb, out.as_mut_ptr()) }
}

/// The SIMD form of `r8_layout::pack_q4_0`: per block, the 8 scales gathered and converted;
/// each row's 16 quant bytes split into its 32 nibbles in element order, then transposed.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn pack_q4_0_kernel(rows: [*const u8; R8_ROWS], nb: usize, dst: *mut u8) {
    for b in 0..nb {
        let at = b * Q4_0_BYTES;
        let d = dst.add(b * R8_BLOCK_BYTES);
        store_scales(&rows, at, d);
        store_values(&rows.map(|p| nibbles_32(p.add(at + 2))), d);
    }
}

/// The AVX2 packing of a `q4_0x8` group into r8 blocks, when this CPU has AVX2.
pub fn r8_pack_q4_0x8() -> Option<fn(&[u8], usize, &mut [u8])> {
    available().then_some(pack_q4_0x8_avx2 as fn(&[u8], usize, &mut [u8]))
}

#[allow(clippy::too_many_arguments)]
fn r8_avx2(
    values: R8Values,
    nb: usize,
    w: &[u8],
    x: &[u8],
    x_stride: usize,
    cols: usize,
    dx: &[f32],
    sx: &[i32],
    meta_stride: usize,
    out: &mut R8Out,
) {
    assert!((1..=R8_MAX_COLS).contains(&cols), "{cols} columns");
    if nb == 0 {
        *out = [[0.0; R8_ROWS]; R8_MAX_COLS];
        return;
    }
    let last = cols - 1;
    assert!(
        w.len() >= nb * R8_BLOCK_BYTES
            && x.len() >= last * x_stride + nb * Q8_0_BYTES
            && dx.len() >= last * meta_stride + nb
            && (values == R8Values::Signed8 || sx.len() >= last * meta_stride + nb),
        "r8 kernel of {nb} blocks × {cols} columns: {} / {} / {} / {}",
        w.len(),
        x.len(),
        dx.len(),
        sx.len()
    );
    let (w, x, dx, sx) = (w.as_ptr(), x.as_ptr(), dx.as_ptr(), sx.as_ptr());
    let nib = values == R8Values::Nibble4;
    // SAFETY: this function is handed out by `r8_kernel` only when `available()` saw AVX2, FMA
    // and F16C; the kernels read `nb` r8 blocks of `w`, `nb` Q8_0 blocks of each of the
    // `cols` activation rows `x_stride` bytes apart and `nb` entries of `dx` (and `sx` for
    // nibbles) per column `meta_stride` apart, all present as asserted above; unaligned
    // loads throughout; they write only `out`.
    unsafe {
        let mut c0 = 0;
        while c0 < cols {
            let (x, dx, sx) = (
                x.add(c0 * x_stride),
                dx.add(c0 * meta_stride),
                sx.add(c0 * meta_stride),
            );
            let out = &mut out[c0..];
            let args = (nb, w, x, x_stride, dx, sx, meta_stride, out);
            // the widest pass that fits: each weight register is loaded once per pass (nibbles
            // at most 4: their i16 and i32 sums of 8 columns spilled every block)
            c0 += match (nib, cols - c0) {
                (true, 4..) => r8_cols::<4, true>(args),
                (true, 2..) => r8_cols::<2, true>(args),
                (true, _) => r8_cols::<1, true>(args),
                (false, 8..) => r8_cols::<8, false>(args),
                (false, 4..) => r8_cols::<4, false>(args),
                (false, 2..) => r8_cols::<2, false>(args),
                (false, _) => r8_cols::<1, false>(args),
            };
        }
    }
}

/// The pointers an r8 pass reads (see [`r8_avx2`] for what they must cover): `nb`, the
/// weight group, the first column's activations, their stride, its `dx` and `sx`, their
/// stride, and the outputs from the first column on.
type R8Args<'a> = (
    usize,
    *const u8,
    *const u8,
    usize,
    *const f32,
    *const i32,
    usize,
    &'a mut [[f32; R8_ROWS]],
);

/// Ends one weight register's step: the column sums pass through an empty `asm!` that may
/// touch memory, so LLVM neither regroups the unrolled sums by column nor hoists the next
/// register's loads above it (it did both: each column's 8 weight registers and their
/// absolute values held at once, 16 registers spilled every block, slower than 2 columns).
///
/// # Safety
/// AVX present (the register class).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn keep_order<const C: usize>(sums: &mut [__m256i; C]) {
    for s in sums.iter_mut() {
        // SAFETY: an empty template: it reads and writes nothing; the operand only pins the
        // value in a register at this point of the program.
        std::arch::asm!(
            "/* {0} */",
            inout(ymm_reg) * s,
            options(nostack, preserves_flags)
        );
    }
}

/// `C` columns × one r8 group; returns `C`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn r8_cols<const C: usize, const NIB: bool>(
    (nb, w, x, xs, dx, sx, ms, out): R8Args,
) -> usize {
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_ps(); C];
    for b in 0..nb {
        let blk = w.add(b * R8_BLOCK_BYTES);
        let xb = x.add(b * Q8_0_BYTES + 2);
        let mut sum = [_mm256_setzero_si256(); C];
        for half in 0..2 {
            // nibbles (0..31) × i8: each i16 at most 2 · 31 · 127 per quad, four quads 31496
            let mut s16 = [_mm256_setzero_si256(); C];
            for k in 4 * half..4 * half + 4 {
                let wk = load256(blk.add(32 + 32 * k));
                // i8 × i8 by the sign trick: |w| × (x with w's sign), pairs into i32
                let abs = if NIB { wk } else { _mm256_sign_epi8(wk, wk) };
                for c in 0..C {
                    let xv =
                        _mm256_set1_epi32(xb.add(c * xs + 4 * k).cast::<i32>().read_unaligned());
                    if NIB {
                        s16[c] = _mm256_add_epi16(s16[c], _mm256_maddubs_epi16(wk, xv));
                    } else {
                        let p = _mm256_maddubs_epi16(abs, _mm256_sign_epi8(xv, wk));
                        sum[c] = _mm256_add_epi32(sum[c], _mm256_madd_epi16(p, ones));
                    }
                }
                keep_order(if NIB { &mut s16 } else { &mut sum });
            }
            if NIB {
                for c in 0..C {
                    sum[c] = _mm256_add_epi32(sum[c], _mm256_madd_epi16(s16[c], ones));
                }
            }
        }
        let dw = _mm256_loadu_ps(blk.cast::<f32>());
        for c in 0..C {
            let mut i = sum[c];
            if NIB {
                i = _mm256_sub_epi32(i, _mm256_set1_epi32(*sx.add(c * ms + b)));
            }
            let d = _mm256_mul_ps(dw, _mm256_set1_ps(*dx.add(c * ms + b)));
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i), d, acc[c]);
        }
    }
    for (c, a) in acc.iter().enumerate() {
        _mm256_storeu_ps(out[c].as_mut_ptr(), *a);
    }
    C
}

fn pack_q4_0x8_avx2(group: &[u8], nb: usize, out: &mut [u8]) {
    const GB: usize = R8_ROWS * Q4_0_BYTES;
    assert!(
        group.len() >= nb * GB && out.len() >= nb * R8_BLOCK_BYTES,
        "q4_0x8 group of {nb} blocks: {} / {} bytes",
        group.len(),
        out.len()
    );
    // SAFETY: handed out by `r8_pack_q4_0x8` only when `available()` saw AVX2, FMA and F16C;
    // reads `nb` 144-byte blocks of `group` and writes `nb` r8 blocks of `out`, present as
    // asserted above; unaligned loads and stores.
    unsafe { pack_q4_0x8_kernel(group.as_ptr(), nb, out.as_mut_ptr()) }
}

/// The SIMD form of `r8_layout::pack_q4_0x8`: the scales converted; each row's 16 quant bytes
/// (8 in each half of the block) gathered, split into their 32 nibbles in element order, then
/// transposed.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn pack_q4_0x8_kernel(src: *const u8, nb: usize, dst: *mut u8) {
    const GB: usize = R8_ROWS * Q4_0_BYTES;
    let m4 = _mm_set1_epi8(0x0F);
    for b in 0..nb {
        let s = src.add(b * GB);
        let d = dst.add(b * R8_BLOCK_BYTES);
        _mm256_storeu_ps(d.cast::<f32>(), _mm256_cvtph_ps(load128(s)));
        let v: [__m256i; R8_ROWS] = std::array::from_fn(|r| {
            let q = _mm_set_epi64x(
                s.add(16 + 64 + 8 * r).cast::<i64>().read_unaligned(),
                s.add(16 + 8 * r).cast::<i64>().read_unaligned(),
            );
            let lo = _mm_and_si128(q, m4);
            let hi = _mm_and_si128(_mm_srli_epi16(q, 4), m4);
            _mm256_set_m128i(hi, lo)
        });
        store_values(&v, d);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::kernels::cpu::test_rng::xorshift;

    /// Random blocks with sane f16 scales (exponent in range) and any quants.
    fn blocks(next: &mut impl FnMut() -> u64, n: usize, size: usize) -> Vec<u8> {
        let mut v: Vec<u8> = (0..n * size).map(|_| next() as u8).collect();
        for b in 0..n {
            let d = half::f16::from_f32(((next() % 1000) as f32 + 1.0) * 1e-4);
            v[b * size..b * size + 2].copy_from_slice(&d.to_le_bytes());
        }
        v
    }

    #[test]
    fn avx2_kernels_equal_the_scalar_reference_bit_for_bit() {
        let (Some(kernel), Some(pack)) = (r8_kernel(), r8_pack_q4_0x8()) else {
            return;
        };
        let mut next = xorshift(0x2545_f491_4f6c_dd1d);
        for nb in [1usize, 3, 18] {
            // activations: 8 columns of Q8_0 (quants in -127..=127, as the quantizer makes)
            let mut x = blocks(&mut next, R8_MAX_COLS * nb, Q8_0_BYTES);
            for (i, q) in x.iter_mut().enumerate() {
                if i % Q8_0_BYTES >= 2 && *q == 0x80 {
                    *q = 0x81;
                }
            }
            let xs = nb * Q8_0_BYTES;
            // the block sums times Q4_0's offset (8) and Q5_0's (16)
            let mut dx = vec![0f32; R8_MAX_COLS * nb];
            let (mut sx, mut sx16) = (vec![0i32; R8_MAX_COLS * nb], vec![0i32; R8_MAX_COLS * nb]);
            for c in 0..R8_MAX_COLS {
                let at = c * nb;
                activation_meta(&x[c * xs..], nb, &mut dx[at..], &mut sx[at..], 8);
                activation_meta(&x[c * xs..], nb, &mut dx[at..], &mut sx16[at..], 16);
            }
            // Q8_0 weights (any i8, -128 included) and a q4_0x8 group
            let q8 = blocks(&mut next, 8 * nb, Q8_0_BYTES);
            let rows8: [&[u8]; 8] = std::array::from_fn(|r| &q8[r * xs..(r + 1) * xs]);
            let mut w8 = vec![0u8; nb * R8_BLOCK_BYTES];
            pack_q8_0(rows8, nb, &mut w8);
            let mut w8_simd = vec![0u8; nb * R8_BLOCK_BYTES];
            r8_pack_q8_0().unwrap()(rows8, nb, &mut w8_simd);
            assert!(w8 == w8_simd, "Q8_0 packing, {nb} blocks");
            let q4 = blocks(&mut next, 8 * nb, Q4_0_BYTES);
            let rows4: [&[u8]; 8] =
                std::array::from_fn(|r| &q4[r * nb * Q4_0_BYTES..(r + 1) * nb * Q4_0_BYTES]);
            let (mut p4, mut p4_simd) = (
                vec![0u8; nb * R8_BLOCK_BYTES],
                vec![1u8; nb * R8_BLOCK_BYTES],
            );
            pack_q4_0(rows4, nb, &mut p4);
            r8_pack_q4_0().unwrap()(rows4, nb, &mut p4_simd);
            assert!(p4 == p4_simd, "Q4_0 packing, {nb} blocks");
            iq4_nl_values(nb, &mut p4);
            r8_iq4_nl_values().unwrap()(nb, &mut p4_simd);
            assert!(p4 == p4_simd, "IQ4_NL code book, {nb} blocks");
            let q5 = blocks(&mut next, 8 * nb, Q5_0_BYTES);
            let rows5: [&[u8]; 8] =
                std::array::from_fn(|r| &q5[r * nb * Q5_0_BYTES..(r + 1) * nb * Q5_0_BYTES]);
            let (mut p5, mut p5_simd) = (
                vec![0u8; nb * R8_BLOCK_BYTES],
                vec![1u8; nb * R8_BLOCK_BYTES],
            );
            pack_q5_0(rows5, nb, &mut p5);
            r8_pack_q5_0().unwrap()(rows5, nb, &mut p5_simd);
            assert!(p5 == p5_simd, "Q5_0 packing, {nb} blocks");
            let g4 = blocks(&mut next, 8 * nb, Q4_0_BYTES);
            let mut w4 = vec![0u8; nb * R8_BLOCK_BYTES];
            let mut w4_scalar = vec![0u8; nb * R8_BLOCK_BYTES];
            // a q4_0x8 block keeps 8 scales first: make them sane too
            let mut g4 = g4;
            for b in 0..nb {
                for r in 0..8 {
                    let d = half::f16::from_f32(((next() % 1000) as f32 + 1.0) * 1e-4);
                    g4[b * 144 + 2 * r..b * 144 + 2 * r + 2].copy_from_slice(&d.to_le_bytes());
                }
            }
            pack(&g4, nb, &mut w4);
            pack_q4_0x8(&g4, nb, &mut w4_scalar);
            assert!(w4 == w4_scalar, "q4_0x8 packing, {nb} blocks");
            // Q5_0's values (up to 31) test the nibble kernel's i16 sums at their bound
            for (values, w, sx) in [
                (R8Values::Signed8, &w8, &sx),
                (R8Values::Nibble4, &w4, &sx),
                (R8Values::Nibble4, &p5, &sx16),
            ] {
                for cols in 1..=R8_MAX_COLS {
                    let mut a = [[0f32; 8]; R8_MAX_COLS];
                    let mut b = [[1f32; 8]; R8_MAX_COLS];
                    kernel(values, nb, w, &x, xs, cols, &dx, sx, nb, &mut a);
                    r8_scalar(values, nb, w, &x, xs, cols, &dx, sx, nb, &mut b);
                    for c in 0..cols {
                        assert_eq!(
                            a[c].map(f32::to_bits),
                            b[c].map(f32::to_bits),
                            "{values:?} nb {nb} cols {cols} col {c}"
                        );
                    }
                }
            }
        }
    }
}
