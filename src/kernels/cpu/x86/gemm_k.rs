//! AVX2 kernels of the fast mode's batched K-quant products (see `cpu/r8_layout.rs`,
//! [`KGroupFn`]): 8 weight rows times every activation column of the product, one
//! super-block at a time. Per super-block the 8 rows are made ready once (quants as bytes in
//! pieces of 8 bytes × 4 rows, the sub-block scales spread for `madd`, the min coefficients in
//! pairs; work shared by all the columns); per column and sub-block, 2 `maddubs` a piece (8
//! bytes of rows 0-3 and 4-7 against 8 broadcast activations) summed in i16, one `madd` by the
//! rows' scales each half; the min term from the activations' `bsums` in 8 `madd`s; one `hadd`
//! puts the 8 rows in the 8 lanes, and the float work is two FMAs per super-block for all 8
//! outputs. Results equal `r8_layout::k_group_scalar` bit for bit.

use std::arch::x86_64::*;

use super::simd::{available, load128, load256};
use crate::kernels::cpu::blocks::{
    iq4_xs_scale, scale_min_k4, IQ4_XS_BYTES, KVALUES_IQ4NL, Q4_K_BYTES, Q5_K_BYTES, Q6_K_BYTES,
    Q8_K_BYTES, QK_K,
};
use crate::kernels::cpu::r8_layout::{KGroupFn, KLayout, Q4_KX8_BLOCK_BYTES, R8_ROWS};

/// The AVX2 fast K-quant kernel for `layout`, when this CPU has AVX2, FMA and F16C.
pub fn k_kernel(layout: KLayout) -> Option<KGroupFn> {
    if !available() {
        return None;
    }
    Some(match layout {
        KLayout::Q4Kx8 => k_group::<0>,
        KLayout::Q4K => k_group::<1>,
        KLayout::Q5K => k_group::<2>,
        KLayout::Q6K => k_group::<3>,
        KLayout::IQ4XS => k_group::<4>,
    })
}

/// The layout of a `k_group::<L>` (a const parameter: one monomorphized kernel per layout).
const fn layout_of(l: u8) -> KLayout {
    match l {
        0 => KLayout::Q4Kx8,
        1 => KLayout::Q4K,
        2 => KLayout::Q5K,
        3 => KLayout::Q6K,
        _ => KLayout::IQ4XS,
    }
}

fn k_group<const L: u8>(
    nbk: usize,
    w: &[u8],
    row_stride: usize,
    x: &[u8],
    x_stride: usize,
    m: usize,
    out: &mut [[f32; R8_ROWS]],
) {
    if m == 0 {
        return;
    }
    let layout = layout_of(L);
    let w_need = match layout {
        KLayout::Q4Kx8 => nbk * Q4_KX8_BLOCK_BYTES,
        KLayout::Q4K => 7 * row_stride + nbk * Q4_K_BYTES,
        KLayout::Q5K => 7 * row_stride + nbk * Q5_K_BYTES,
        KLayout::Q6K => 7 * row_stride + nbk * Q6_K_BYTES,
        KLayout::IQ4XS => 7 * row_stride + nbk * IQ4_XS_BYTES,
    };
    assert!(
        w.len() >= w_need && x.len() >= (m - 1) * x_stride + nbk * Q8_K_BYTES && out.len() >= m,
        "{layout:?} group of {nbk} super-blocks × {m} columns: {} / {} / {}",
        w.len(),
        x.len(),
        out.len()
    );
    // SAFETY: handed out by `k_kernel` only when `available()` saw AVX2, FMA and F16C; reads
    // `nbk` super-blocks of the group or of each of the 8 rows of `w` (`row_stride` apart),
    // `nbk` Q8_K blocks of each of the `m` rows of `x` (`x_stride` apart), writes `m` entries
    // of `out`, all present as asserted above; unaligned loads throughout.
    unsafe { k_group_kernel::<L>(nbk, w.as_ptr(), row_stride, x.as_ptr(), x_stride, m, out) }
}

/// One super-block of 8 rows, made ready for every column: the quants as bytes (`q[u]`:
/// elements `8u .. 8u + 8`, rows 0-3 then 4-7, 8 bytes a row), the scales as i16 for `madd`
/// against the rows' `maddubs` sums (`sc[s]`: 4 copies per row, rows 0-3 then 4-7), the min
/// coefficients as i16 pairs (`bsums` `2k`, `2k + 1`) per row in lane order, and `d`, `dmin`
/// in lane order.
#[repr(C)]
struct Prepared {
    q: [[__m256i; 2]; 32],
    sc: [[__m256i; 2]; 16],
    mins: [__m256i; 8],
    d: __m256,
    dmin: __m256,
}

/// The lanes' rows after `hadd` of the rows 0-3 and 4-7 sums.
const LANE_ORDER: [i32; 8] = [0, 1, 4, 5, 2, 3, 6, 7];

/// Stores the 32 quant bytes `v` of row `r` (elements `8u .. 8u + 32`) into their places.
///
/// # Safety
/// AVX2 present; `u + 4 <= 32`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn scatter32(p: &mut Prepared, u: usize, r: usize, v: __m256i) {
    let q = p.q.as_mut_ptr().cast::<u8>();
    let at = |i: usize| q.add(64 * (u + i) + 8 * r);
    let (lo, hi) = (_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    _mm_storel_epi64(at(0).cast(), lo);
    _mm_storeh_pd(at(1).cast(), _mm_castsi128_pd(lo));
    _mm_storel_epi64(at(2).cast(), hi);
    _mm_storeh_pd(at(3).cast(), _mm_castsi128_pd(hi));
}

/// The scales (`sc[s][r]`, row order), min coefficients (`minc[j][r]`, per 16 elements) and
/// `d`, `dmin` of the 8 rows, spread into `p`.
///
/// # Safety
/// AVX2, FMA and F16C present.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn spread(
    p: &mut Prepared,
    nsub: usize,
    sc: &[[i16; 8]; 16],
    minc: &[[i16; 8]; 16],
    d: &[f32; 8],
    dmin: &[f32; 8],
) {
    let order = _mm256_loadu_si256(LANE_ORDER.as_ptr().cast());
    p.d = _mm256_permutevar8x32_ps(_mm256_loadu_ps(d.as_ptr()), order);
    p.dmin = _mm256_permutevar8x32_ps(_mm256_loadu_ps(dmin.as_ptr()), order);
    // i16 j of half h: row 4h + j / 4 (+ 2 in the upper 128 bits), both bytes
    let pick = |h: i8| {
        let (a, b) = (8 * h, 8 * h + 2);
        let (c, e) = (8 * h + 4, 8 * h + 6);
        _mm256_setr_epi8(
            a,
            a + 1,
            a,
            a + 1,
            a,
            a + 1,
            a,
            a + 1,
            b,
            b + 1,
            b,
            b + 1,
            b,
            b + 1,
            b,
            b + 1,
            c,
            c + 1,
            c,
            c + 1,
            c,
            c + 1,
            c,
            c + 1,
            e,
            e + 1,
            e,
            e + 1,
            e,
            e + 1,
            e,
            e + 1,
        )
    };
    let (pick_a, pick_b) = (pick(0), pick(1));
    for s in 0..nsub {
        let v = _mm256_broadcastsi128_si256(load128(sc[s].as_ptr().cast()));
        p.sc[s] = [
            _mm256_shuffle_epi8(v, pick_a),
            _mm256_shuffle_epi8(v, pick_b),
        ];
    }
    for k in 0..8 {
        let pair: [i32; 8] = std::array::from_fn(|lane| {
            let r = LANE_ORDER[lane] as usize;
            i32::from(minc[2 * k][r] as u16) | (i32::from(minc[2 * k + 1][r]) << 16)
        });
        p.mins[k] = _mm256_loadu_si256(pair.as_ptr().cast());
    }
}

/// Makes super-block `sb` of the 8 rows ready (see [`Prepared`]).
///
/// # Safety
/// AVX2, FMA and F16C present; `w` readable for super-block `sb` of the group or of 8 rows
/// `rs` bytes apart, as `L` says.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn prepare<const L: u8>(w: *const u8, rs: usize, sb: usize, p: &mut Prepared) {
    let m4 = _mm256_set1_epi8(0x0F);
    let mut sc = [[0i16; 8]; 16];
    let mut minc = [[0i16; 8]; 16];
    let mut d = [0f32; 8];
    let mut dmin = [0f32; 8];
    let f16 = |at: *const u8| half::f16::from_bits(at.cast::<u16>().read_unaligned()).to_f32();
    match layout_of(L) {
        KLayout::Q4Kx8 => {
            let blk = w.add(sb * Q4_KX8_BLOCK_BYTES);
            for r in 0..R8_ROWS {
                d[r] = f16(blk.add(2 * r));
                dmin[r] = f16(blk.add(16 + 2 * r));
                for s in 0..8 {
                    sc[s][r] = i16::from(*blk.add(32 + s * R8_ROWS + r));
                    let mn = i16::from(*blk.add(96 + s * R8_ROWS + r));
                    minc[2 * s][r] = mn;
                    minc[2 * s + 1][r] = mn;
                }
            }
            // already 8 bytes × 4 rows a vector: split the nibbles
            for c in 0..4 {
                for piece in 0..4 {
                    for h in 0..2 {
                        let v = load256(blk.add(160 + ((4 * c + piece) * R8_ROWS + 4 * h) * 8));
                        p.q[8 * c + piece][h] = _mm256_and_si256(v, m4);
                        p.q[8 * c + 4 + piece][h] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                    }
                }
            }
        }
        KLayout::Q4K | KLayout::Q5K => {
            let five = layout_of(L) == KLayout::Q5K;
            let (size, qs) = if five {
                (Q5_K_BYTES, 48)
            } else {
                (Q4_K_BYTES, 16)
            };
            for r in 0..R8_ROWS {
                let blk = w.add(r * rs + sb * size);
                d[r] = f16(blk);
                dmin[r] = f16(blk.add(2));
                let scales: [u8; 12] = blk.add(4).cast::<[u8; 12]>().read_unaligned();
                for s in 0..8 {
                    let (a, mn) = scale_min_k4(s, &scales);
                    sc[s][r] = i16::from(a);
                    minc[2 * s][r] = i16::from(mn);
                    minc[2 * s + 1][r] = i16::from(mn);
                }
                let qh = if five {
                    load256(blk.add(16))
                } else {
                    _mm256_setzero_si256()
                };
                let sixteen = _mm256_set1_epi8(16);
                for c in 0..4 {
                    let v = load256(blk.add(qs + 32 * c));
                    let mut lo = _mm256_and_si256(v, m4);
                    let mut hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                    if five {
                        let bit = |b: i32| {
                            let mask = _mm256_set1_epi8((1u8 << b) as i8);
                            let set = _mm256_cmpeq_epi8(_mm256_and_si256(qh, mask), mask);
                            _mm256_and_si256(set, sixteen)
                        };
                        lo = _mm256_or_si256(lo, bit(2 * c as i32));
                        hi = _mm256_or_si256(hi, bit(2 * c as i32 + 1));
                    }
                    scatter32(p, 8 * c, r, lo);
                    scatter32(p, 8 * c + 4, r, hi);
                }
            }
        }
        KLayout::IQ4XS => {
            let book = _mm256_broadcastsi128_si256(load128(KVALUES_IQ4NL.as_ptr().cast()));
            for r in 0..R8_ROWS {
                let blk = w.add(r * rs + sb * IQ4_XS_BYTES);
                d[r] = f16(blk);
                let head: [u8; 8] = blk.cast::<[u8; 8]>().read_unaligned();
                for (ib, scale) in sc.iter_mut().enumerate().take(8) {
                    scale[r] = iq4_xs_scale(&head, ib) as i16;
                }
                for ib in 0..8 {
                    // elements 0-15 the low nibbles, 16-31 the high ones, through the book
                    let q = load128(blk.add(8 + 16 * ib));
                    let lo = _mm_and_si128(q, _mm256_castsi256_si128(m4));
                    let hi = _mm_and_si128(_mm_srli_epi16(q, 4), _mm256_castsi256_si128(m4));
                    let v = _mm256_set_m128i(hi, lo);
                    scatter32(p, 4 * ib, r, _mm256_shuffle_epi8(book, v));
                }
            }
        }
        KLayout::Q6K => {
            let m30 = _mm256_set1_epi8(0x30);
            for r in 0..R8_ROWS {
                let blk = w.add(r * rs + sb * Q6_K_BYTES);
                d[r] = f16(blk.add(208));
                dmin[r] = d[r];
                for s in 0..16 {
                    sc[s][r] = i16::from(*blk.add(192 + s) as i8);
                    minc[s][r] = 32 * sc[s][r];
                }
                for n in 0..2 {
                    let ql_a = load256(blk.add(64 * n));
                    let ql_b = load256(blk.add(64 * n + 32));
                    let qh = load256(blk.add(128 + 32 * n));
                    let hi_bits = [
                        _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30),
                        _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30),
                        _mm256_and_si256(qh, m30),
                        _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30),
                    ];
                    let low = [
                        _mm256_and_si256(ql_a, m4),
                        _mm256_and_si256(ql_b, m4),
                        _mm256_and_si256(_mm256_srli_epi16(ql_a, 4), m4),
                        _mm256_and_si256(_mm256_srli_epi16(ql_b, 4), m4),
                    ];
                    for j in 0..4 {
                        let v = _mm256_or_si256(low[j], hi_bits[j]);
                        scatter32(p, 16 * n + 4 * j, r, v);
                    }
                }
            }
        }
    }
    let nsub = QK_K / layout_of(L).sub_elems();
    spread(p, nsub, &sc, &minc, &d, &dmin);
}

/// `C` columns × one prepared super-block with sub-blocks of `8 · PIECES` elements:
/// `acc[c]` (lane order) += the super-block's terms. `x[c]` points at column c's Q8_K block.
///
/// # Safety
/// AVX2, FMA and F16C present; each `x[c]` readable for one Q8_K block, `acc[c]` writable
/// for 8 f32.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn columns<const C: usize, const PIECES: usize, const SIGNED: bool>(
    p: &Prepared,
    x: [*const u8; C],
    acc: [*mut f32; C],
) {
    let mut ia = [_mm256_setzero_si256(); C];
    let mut ib = [_mm256_setzero_si256(); C];
    if SIGNED {
        // i8 × i8 by the sign trick (|w| × x with w's sign: at most 2 · 127 · 127 an i16, so
        // each piece goes to i32 by the scales at once); no min term
        for s in 0..32 / PIECES {
            for piece in 0..PIECES {
                let [wa, wb] = p.q[PIECES * s + piece];
                let (aa, ab) = (_mm256_sign_epi8(wa, wa), _mm256_sign_epi8(wb, wb));
                for c in 0..C {
                    let at = x[c].add(4 + 8 * (PIECES * s + piece));
                    let xv = _mm256_set1_epi64x(at.cast::<i64>().read_unaligned());
                    let pa = _mm256_maddubs_epi16(aa, _mm256_sign_epi8(xv, wa));
                    let pb = _mm256_maddubs_epi16(ab, _mm256_sign_epi8(xv, wb));
                    ia[c] = _mm256_add_epi32(ia[c], _mm256_madd_epi16(pa, p.sc[s][0]));
                    ib[c] = _mm256_add_epi32(ib[c], _mm256_madd_epi16(pb, p.sc[s][1]));
                }
            }
        }
        for c in 0..C {
            let isum = _mm256_hadd_epi32(ia[c], ib[c]);
            let dx = _mm256_set1_ps(x[c].cast::<f32>().read_unaligned());
            let a = _mm256_loadu_ps(acc[c]);
            let a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(p.d, dx), a);
            _mm256_storeu_ps(acc[c], a);
        }
        return;
    }
    for s in 0..32 / PIECES {
        let mut sa = [_mm256_setzero_si256(); C];
        let mut sb = [_mm256_setzero_si256(); C];
        for piece in 0..PIECES {
            let u = PIECES * s + piece;
            let [wa, wb] = p.q[u];
            for c in 0..C {
                let at = x[c].add(4 + 8 * u);
                let xv = _mm256_set1_epi64x(at.cast::<i64>().read_unaligned());
                // quants (≤ 63) × i8: each i16 at most 32004 over one sub-block (Q4_K: 4
                // pieces of ≤ 2 · 15 · 127; Q5_K: 4 of ≤ 2 · 31 · 127; Q6_K: 2 of ≤ 2 · 63 · 127)
                sa[c] = _mm256_add_epi16(sa[c], _mm256_maddubs_epi16(wa, xv));
                sb[c] = _mm256_add_epi16(sb[c], _mm256_maddubs_epi16(wb, xv));
            }
        }
        for c in 0..C {
            ia[c] = _mm256_add_epi32(ia[c], _mm256_madd_epi16(sa[c], p.sc[s][0]));
            ib[c] = _mm256_add_epi32(ib[c], _mm256_madd_epi16(sb[c], p.sc[s][1]));
        }
    }
    for c in 0..C {
        let isum = _mm256_hadd_epi32(ia[c], ib[c]);
        let bs = x[c].add(4 + QK_K).cast::<i32>();
        let mut imin = _mm256_madd_epi16(p.mins[0], _mm256_set1_epi32(bs.read_unaligned()));
        for k in 1..8 {
            let b = _mm256_set1_epi32(bs.add(k).read_unaligned());
            imin = _mm256_add_epi32(imin, _mm256_madd_epi16(p.mins[k], b));
        }
        let dx = _mm256_set1_ps(x[c].cast::<f32>().read_unaligned());
        let a = _mm256_loadu_ps(acc[c]);
        let a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(p.d, dx), a);
        let a = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(imin), _mm256_mul_ps(p.dmin, dx), a);
        _mm256_storeu_ps(acc[c], a);
    }
}

/// Every column over one prepared super-block, `C` columns per pass.
///
/// # Safety
/// As [`columns`], for the `m` columns `x + c · xs` and `acc + 8c`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn all_columns<const PIECES: usize, const SIGNED: bool>(
    p: &Prepared,
    x: *const u8,
    xs: usize,
    m: usize,
    acc: *mut f32,
) {
    const C: usize = 3;
    let mut c = 0;
    while c + C <= m {
        let xc = std::array::from_fn(|i| x.add((c + i) * xs));
        let ac = std::array::from_fn(|i| acc.add((c + i) * R8_ROWS));
        columns::<C, PIECES, SIGNED>(p, xc, ac);
        c += C;
    }
    while c < m {
        columns::<1, PIECES, SIGNED>(p, [x.add(c * xs)], [acc.add(c * R8_ROWS)]);
        c += 1;
    }
}

/// See [`k_group`] for what the pointers must cover.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn k_group_kernel<const L: u8>(
    nbk: usize,
    w: *const u8,
    rs: usize,
    x: *const u8,
    xs: usize,
    m: usize,
    out: &mut [[f32; R8_ROWS]],
) {
    for o in out.iter_mut().take(m) {
        *o = [0.0; R8_ROWS];
    }
    let mut p = Prepared {
        q: [[_mm256_setzero_si256(); 2]; 32],
        sc: [[_mm256_setzero_si256(); 2]; 16],
        mins: [_mm256_setzero_si256(); 8],
        d: _mm256_setzero_ps(),
        dmin: _mm256_setzero_ps(),
    };
    let acc = out.as_mut_ptr().cast::<f32>();
    for sb in 0..nbk {
        prepare::<L>(w, rs, sb, &mut p);
        let xb = x.add(sb * Q8_K_BYTES);
        match layout_of(L) {
            KLayout::Q6K => all_columns::<2, false>(&p, xb, xs, m, acc),
            KLayout::IQ4XS => all_columns::<4, true>(&p, xb, xs, m, acc),
            _ => all_columns::<4, false>(&p, xb, xs, m, acc),
        }
    }
    // LANE_ORDER is its own inverse: row r to lane r
    let order = _mm256_loadu_si256(LANE_ORDER.as_ptr().cast());
    for o in out.iter_mut().take(m) {
        let v = _mm256_loadu_ps(o.as_ptr());
        _mm256_storeu_ps(o.as_mut_ptr(), _mm256_permutevar8x32_ps(v, order));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::cpu::r8_layout::k_group_scalar;

    use crate::kernels::cpu::test_rng::xorshift;

    /// Each AVX2 kernel equals the scalar reference bit for bit on random weights (every byte
    /// pattern of a K-quant block is valid given sane f16 scales; the repacked group's 6-bit
    /// fields kept to 6 bits) and Q8_K columns (quants in -127..=127 as the quantizer makes
    /// them, `bsums` their sums), for column counts that leave every tail.
    #[test]
    fn avx2_k_kernels_equal_the_scalar_reference_bit_for_bit() {
        let mut next = xorshift(0x2545_f491_4f6c_dd1d);
        let f16 = |next: &mut dyn FnMut() -> u64| {
            half::f16::from_f32(((next() % 1000) as f32 + 1.0) * 1e-4).to_le_bytes()
        };
        for layout in [
            KLayout::Q4Kx8,
            KLayout::Q4K,
            KLayout::Q5K,
            KLayout::Q6K,
            KLayout::IQ4XS,
        ] {
            let Some(kernel) = k_kernel(layout) else {
                return;
            };
            for nbk in [1usize, 3] {
                let (block, halves): (usize, &[usize]) = match layout {
                    KLayout::Q4Kx8 => (Q4_KX8_BLOCK_BYTES, &[]),
                    KLayout::Q4K => (Q4_K_BYTES, &[0, 2]),
                    KLayout::Q5K => (Q5_K_BYTES, &[0, 2]),
                    KLayout::Q6K => (Q6_K_BYTES, &[208]),
                    KLayout::IQ4XS => (IQ4_XS_BYTES, &[0]),
                };
                let rs = nbk * block + 40;
                let mut w: Vec<u8> = (0..8 * rs).map(|_| next() as u8).collect();
                for r in 0..8 {
                    for sb in 0..nbk {
                        let at = r * rs + sb * block;
                        for &o in halves {
                            w[at + o..at + o + 2].copy_from_slice(&f16(&mut next));
                        }
                        if layout == KLayout::Q4Kx8 && r == 0 {
                            let at = sb * block;
                            for i in 0..16 {
                                w[at + 2 * i..at + 2 * i + 2].copy_from_slice(&f16(&mut next));
                            }
                            for b in &mut w[at + 32..at + 160] {
                                *b &= 63;
                            }
                        }
                    }
                }
                let m = 8;
                let xs = nbk * Q8_K_BYTES + 12;
                let mut x = vec![0u8; m * xs];
                for c in 0..m {
                    for sb in 0..nbk {
                        let blk = &mut x[c * xs + sb * Q8_K_BYTES..][..Q8_K_BYTES];
                        let d = ((next() % 1000) as f32 + 1.0) * 1e-3;
                        blk[..4].copy_from_slice(&d.to_le_bytes());
                        let mut bs = [0i16; 16];
                        for i in 0..QK_K {
                            let q = ((next() % 255) as i32 - 127) as i8;
                            blk[4 + i] = q as u8;
                            bs[i / 16] += i16::from(q);
                        }
                        for (i, b) in bs.iter().enumerate() {
                            blk[260 + 2 * i..262 + 2 * i].copy_from_slice(&b.to_le_bytes());
                        }
                    }
                }
                for cols in 1..=m {
                    let mut a = vec![[0f32; 8]; cols];
                    let mut b = vec![[1f32; 8]; cols];
                    kernel(nbk, &w, rs, &x, xs, cols, &mut a);
                    k_group_scalar(layout, nbk, &w, rs, &x, xs, cols, &mut b);
                    for c in 0..cols {
                        assert_eq!(
                            a[c].map(f32::to_bits),
                            b[c].map(f32::to_bits),
                            "{layout:?} nbk {nbk} cols {cols} col {c}: {:?} vs {:?}",
                            a[c],
                            b[c]
                        );
                    }
                }
            }
        }
    }
}
