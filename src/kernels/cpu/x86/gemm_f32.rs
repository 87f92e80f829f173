//! AVX2 kernels of the fast mode's float panel product (`cpu/fast_float.rs`): the panel
//! packing (8 rows × 8 elements converted, F16 by `vcvtph2ps`, BF16 by a shift, then
//! transposed in registers so that each element's 16 rows lie in two vectors) and the 6 × 16
//! register tile (12 accumulators, one broadcast per column and element). Results equal the
//! scalar references bit for bit.

use std::arch::x86_64::*;

use super::float::{load_bf16, load_f16};
use super::simd::available;
use crate::gguf::GgmlType;
use crate::kernels::cpu::panel_layout::{
    pack_panel, PanelKernelFn, PanelOut, PanelPackFn, PANEL_COLS, PANEL_ROWS,
};

/// The AVX2 packing and tile kernel for a `t` weight (F16 or BF16), when this CPU has AVX2,
/// FMA and F16C.
pub fn float_panel_fns(t: GgmlType) -> Option<(PanelPackFn, PanelKernelFn)> {
    if !available() {
        return None;
    }
    let pack: PanelPackFn = match t {
        GgmlType::F16 => pack_f16,
        GgmlType::BF16 => pack_bf16,
        _ => return None,
    };
    Some((pack, panel_tile as PanelKernelFn))
}

fn check_pack(rows: &[&[u8]; PANEL_ROWS], k0: usize, kc: usize, panel: &[f32]) {
    assert!(
        rows.iter().all(|r| r.len() >= 2 * (k0 + kc)) && panel.len() >= kc * PANEL_ROWS,
        "panel of {kc} elements from {k0}"
    );
}

fn pack_f16(rows: [&[u8]; PANEL_ROWS], k0: usize, kc: usize, panel: &mut [f32]) {
    check_pack(&rows, k0, kc, panel);
    // SAFETY: handed out by `float_panel_fns` only when `available()` saw AVX2, FMA and F16C;
    // reads elements k0 .. k0 + kc of each row (present as checked) and writes kc · 16 floats
    // of `panel`; unaligned loads and stores.
    unsafe { pack_kernel::<false>(rows.map(<[u8]>::as_ptr), k0, kc, panel.as_mut_ptr()) };
    let done = kc - kc % 8;
    if done < kc {
        pack_panel(
            GgmlType::F16,
            rows,
            k0 + done,
            kc - done,
            &mut panel[done * PANEL_ROWS..],
        );
    }
}

fn pack_bf16(rows: [&[u8]; PANEL_ROWS], k0: usize, kc: usize, panel: &mut [f32]) {
    check_pack(&rows, k0, kc, panel);
    // SAFETY: as in `pack_f16`.
    unsafe { pack_kernel::<true>(rows.map(<[u8]>::as_ptr), k0, kc, panel.as_mut_ptr()) };
    let done = kc - kc % 8;
    if done < kc {
        pack_panel(
            GgmlType::BF16,
            rows,
            k0 + done,
            kc - done,
            &mut panel[done * PANEL_ROWS..],
        );
    }
}

/// The whole 8-element steps of the packing: per step and half of the panel (rows 0-7, 8-15)
/// 8 loads and conversions, an 8 × 8 transpose, 8 stores.
///
/// # Safety
/// AVX2, FMA and F16C present; each row readable for elements `k0 .. k0 + kc` (2 bytes
/// each), `panel` writable for `kc · 16` floats.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn pack_kernel<const BF16: bool>(
    rows: [*const u8; PANEL_ROWS],
    k0: usize,
    kc: usize,
    panel: *mut f32,
) {
    let load = |p: *const u8, i: usize| {
        if BF16 {
            load_bf16(p, i)
        } else {
            load_f16(p, i)
        }
    };
    let mut kk = 0;
    while kk + 8 <= kc {
        for half in 0..2 {
            let r: [__m256; 8] = std::array::from_fn(|i| load(rows[8 * half + i], k0 + kk));
            let t: [__m256; 8] = std::array::from_fn(|i| {
                let (a, b) = (r[i & !1], r[i | 1]);
                if i % 2 == 0 {
                    _mm256_unpacklo_ps(a, b)
                } else {
                    _mm256_unpackhi_ps(a, b)
                }
            });
            // u[e] holds element e (low half) and e + 4 (high half) of rows 0-3 or 4-7
            let u = [
                _mm256_shuffle_ps::<0x44>(t[0], t[2]),
                _mm256_shuffle_ps::<0xEE>(t[0], t[2]),
                _mm256_shuffle_ps::<0x44>(t[1], t[3]),
                _mm256_shuffle_ps::<0xEE>(t[1], t[3]),
                _mm256_shuffle_ps::<0x44>(t[4], t[6]),
                _mm256_shuffle_ps::<0xEE>(t[4], t[6]),
                _mm256_shuffle_ps::<0x44>(t[5], t[7]),
                _mm256_shuffle_ps::<0xEE>(t[5], t[7]),
            ];
            for e in 0..4 {
                let lo = _mm256_permute2f128_ps::<0x20>(u[e], u[4 + e]);
                let hi = _mm256_permute2f128_ps::<0x31>(u[e], u[4 + e]);
                _mm256_storeu_ps(panel.add((kk + e) * PANEL_ROWS + 8 * half), lo);
                _mm256_storeu_ps(panel.add((kk + e + 4) * PANEL_ROWS + 8 * half), hi);
            }
        }
        kk += 8;
    }
}

fn panel_tile(
    kc: usize,
    panel: &[f32],
    x: &[f32],
    x_stride: usize,
    cols: usize,
    acc: &mut PanelOut,
) {
    assert!((1..=PANEL_COLS).contains(&cols), "{cols} columns");
    assert!(
        panel.len() >= kc * PANEL_ROWS && (kc == 0 || x.len() >= (cols - 1) * x_stride + kc),
        "tile of {kc} elements × {cols} columns"
    );
    let (p, x) = (panel.as_ptr(), x.as_ptr());
    // SAFETY: handed out by `float_panel_fns` only when `available()` saw AVX2 and FMA; reads
    // kc · 16 floats of `panel` and kc of each of the `cols` columns `x_stride` apart, present
    // as asserted; writes `acc` only.
    unsafe {
        match cols {
            1 => tile::<1>(kc, p, x, x_stride, acc),
            2 => tile::<2>(kc, p, x, x_stride, acc),
            3 => tile::<3>(kc, p, x, x_stride, acc),
            4 => tile::<4>(kc, p, x, x_stride, acc),
            5 => tile::<5>(kc, p, x, x_stride, acc),
            _ => tile::<6>(kc, p, x, x_stride, acc),
        }
    }
}

/// `C` columns × 16 rows: per element two panel loads, and per column one broadcast and two
/// FMAs.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile<const C: usize>(
    kc: usize,
    p: *const f32,
    x: *const f32,
    xs: usize,
    acc: &mut PanelOut,
) {
    let mut lo: [__m256; C] = std::array::from_fn(|c| _mm256_loadu_ps(acc[c].as_ptr()));
    let mut hi: [__m256; C] = std::array::from_fn(|c| _mm256_loadu_ps(acc[c].as_ptr().add(8)));
    for kk in 0..kc {
        let w0 = _mm256_loadu_ps(p.add(kk * PANEL_ROWS));
        let w1 = _mm256_loadu_ps(p.add(kk * PANEL_ROWS + 8));
        for c in 0..C {
            let b = _mm256_broadcast_ss(&*x.add(c * xs + kk));
            lo[c] = _mm256_fmadd_ps(w0, b, lo[c]);
            hi[c] = _mm256_fmadd_ps(w1, b, hi[c]);
        }
    }
    for c in 0..C {
        _mm256_storeu_ps(acc[c].as_mut_ptr(), lo[c]);
        _mm256_storeu_ps(acc[c].as_mut_ptr().add(8), hi[c]);
    }
}
