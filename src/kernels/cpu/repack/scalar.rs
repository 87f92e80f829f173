//! The scalar reference kernels of the repacked layouts, in the SIMD kernels' float order.

use crate::kernels::cpu::blocks::*;
use crate::kernels::cpu::repack_layout::*;

/// The scalar reference kernels (the float order of the SIMD ones, with `f32::mul_add`).
pub fn scalar_kernels(kind: RepackKind) -> GroupKernels {
    match kind {
        RepackKind::Q4_0x8 => GroupKernels {
            one: group_scalar::<1, false>,
            four: group_scalar::<4, false>,
        },
        RepackKind::Iq4NlX8 => GroupKernels {
            one: group_scalar::<1, true>,
            four: group_scalar::<4, true>,
        },
        RepackKind::Q4Kx8 => GroupKernels {
            one: q4_kx8_scalar::<1, false>,
            four: q4_kx8_scalar::<4, true>,
        },
    }
}

/// The scalar Q4Kx8 kernel in upstream's float order: its gemv (`PER_SB` false) sums a
/// whole super-block's integers, `acc = fma(Σ scale·dot, d·dx, acc)` and
/// `acc_min = fma(Σ min·bsum, dmin·dx, acc_min)` once per super-block; its gemm (`PER_SB`)
/// makes those two FMAs per pair of sub-blocks. The result is `acc - acc_min`.
fn q4_kx8_scalar<const C: usize, const PER_SB: bool>(
    nb: usize,
    w: &[u8],
    x: [&[u8]; C],
    _meta: [&[u32]; C],
    out: &mut [[f32; ROWS]; C],
) {
    assert!(w.len() >= nb * Q4KX8_BYTES && x.iter().all(|x| x.len() >= nb * Q8_K_BYTES));
    let mut acc = [[0f32; ROWS]; C];
    let mut accm = [[0f32; ROWS]; C];
    for b in 0..nb {
        let blk = &w[b * Q4KX8_BYTES..(b + 1) * Q4KX8_BYTES];
        for c in 0..C {
            let xb = &x[c][b * Q8_K_BYTES..(b + 1) * Q8_K_BYTES];
            let dx = f32_at(xb, 0);
            let q = |e: usize| i32::from(xb[4 + e] as i8);
            let bsum = |sub: usize| (32 * sub..32 * sub + 32).map(q).sum::<i32>();
            for r in 0..ROWS {
                let (dw, dm) = (f16_at(blk, 2 * r), f16_at(blk, 16 + 2 * r));
                let (mut isum_b, mut imin_b) = (0i32, 0i32);
                for sb in 0..4 {
                    let (mut isum, mut imin) = (0i32, 0i32);
                    for hi in 0..2 {
                        let sub = 2 * sb + hi;
                        let mut dot = 0i32;
                        for p in 0..4 {
                            let at = 160 + ((4 * sb + p) * ROWS + r) * 8;
                            for j in 0..8 {
                                let nib = if hi == 0 {
                                    blk[at + j] & 0xF
                                } else {
                                    blk[at + j] >> 4
                                };
                                dot += i32::from(nib) * q(64 * sb + 32 * hi + 8 * p + j);
                            }
                        }
                        isum += i32::from(blk[32 + sub * ROWS + r]) * dot;
                        imin += i32::from(blk[96 + sub * ROWS + r]) * bsum(sub);
                    }
                    if PER_SB {
                        acc[c][r] = (isum as f32).mul_add(dw * dx, acc[c][r]);
                        accm[c][r] = (imin as f32).mul_add(dm * dx, accm[c][r]);
                    } else {
                        isum_b += isum;
                        imin_b += imin;
                    }
                }
                if !PER_SB {
                    acc[c][r] = (isum_b as f32).mul_add(dw * dx, acc[c][r]);
                    accm[c][r] = (imin_b as f32).mul_add(dm * dx, accm[c][r]);
                }
            }
        }
    }
    for c in 0..C {
        for r in 0..ROWS {
            out[c][r] = acc[c][r] - accm[c][r];
        }
    }
}

/// The scalar group kernel: nibbles are `n - 8` (Q4_0) or `KVALUES_IQ4NL[n]` (`IQ4`).
fn group_scalar<const C: usize, const IQ4: bool>(
    nb: usize,
    w: &[u8],
    x: [&[u8]; C],
    _meta: [&[u32]; C],
    out: &mut [[f32; ROWS]; C],
) {
    let blk_bytes = ROWS * Q4_0_BYTES;
    assert!(w.len() >= nb * blk_bytes && x.iter().all(|x| x.len() >= nb * Q8_0_BYTES));
    let mut acc = [[0f32; ROWS]; C];
    for b in 0..nb {
        let blk = &w[b * blk_bytes..(b + 1) * blk_bytes];
        for c in 0..C {
            let xb = &x[c][b * Q8_0_BYTES..(b + 1) * Q8_0_BYTES];
            let dx = f16_at(xb, 0);
            let q = |e: usize| i32::from(xb[2 + e] as i8);
            for r in 0..ROWS {
                let mut isum = 0i32;
                for half in 0..2 {
                    let bytes = &blk[2 * ROWS + 8 * (half * ROWS + r)..][..8];
                    for (j, &byte) in bytes.iter().enumerate() {
                        let e = 8 * half + j;
                        let v = |n: u8| {
                            if IQ4 {
                                i32::from(KVALUES_IQ4NL[usize::from(n)])
                            } else {
                                i32::from(n) - 8
                            }
                        };
                        isum += v(byte & 0xF) * q(e);
                        isum += v(byte >> 4) * q(e + 16);
                    }
                }
                let dw = f16_at(blk, 2 * r);
                acc[c][r] = (isum as f32).mul_add(dw * dx, acc[c][r]);
            }
        }
    }
    *out = acc;
}
