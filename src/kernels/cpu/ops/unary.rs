//! SiLU and SWIGLU over rows (ggml's vector silu).

use crate::kernels::cpu::vec::silu;
#[cfg(target_arch = "x86_64")]
use crate::kernels::cpu::x86;

/// `dst[i] = silu(gate[i]) * up[i]` (SWIGLU), or `silu(gate[i])` without `up`, over rows of
/// `row_len` values: ggml's vector silu per row (`x86::silu_row`: its own exp on 8
/// lanes, libm's `expf` for a row's last `row_len % 8`), as upstream's `ggml_vec_swiglu_f32`
/// and `ggml_vec_silu_f32`; the scalar [`silu`] everywhere without AVX2/FMA.
pub fn silu_rows(dst: &mut [f32], gate: &[f32], up: Option<&[f32]>, row_len: usize) {
    #[cfg(target_arch = "x86_64")]
    if x86::available() && row_len > 0 {
        for (r, d) in dst.chunks_mut(row_len).enumerate() {
            let at = r * row_len;
            let g = &gate[at..at + d.len()];
            x86::silu_row(d, g, up.map(|u| &u[at..at + d.len()]));
        }
        return;
    }
    match up {
        Some(up) => {
            for ((d, &x), &y) in dst.iter_mut().zip(gate).zip(up) {
                *d = silu(x) * y;
            }
        }
        None => {
            for (d, &x) in dst.iter_mut().zip(gate) {
                *d = silu(x);
            }
        }
    }
}
