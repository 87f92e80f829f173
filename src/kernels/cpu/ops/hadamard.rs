//! The Walsh-Hadamard transform of rows (ggml's `fwht`, for the rotated KV cache).

use crate::kernels::cpu::vec::fmadd;

/// The orthonormal Walsh-Hadamard transform of every `n` (a power of two) consecutive values
/// in place, as ggml's CPU `fwht`: scale by 1/sqrt(n), then the butterflies `(u + v, u - v)`
/// with strides 1, 2, 4, ... (bit-identical to its SIMD passes, whose FMA by -1 is exact).
pub fn hadamard_rows(x: &mut [f32], n: usize) {
    let scale = 1.0 / (n as f32).sqrt();
    for d in x.chunks_exact_mut(n) {
        for v in d.iter_mut() {
            *v *= scale;
        }
        let mut len = 1;
        while len < n {
            for i in (0..n).step_by(2 * len) {
                for j in i..i + len {
                    let (u, v) = (d[j], d[j + len]);
                    d[j] = u + v;
                    d[j + len] = u - v;
                }
            }
            len <<= 1;
        }
    }
}

/// The same rotation as a MUL_MAT by upstream's matrix (`ggml_gen_hadamard`: `1/sqrt(n)`
/// signed by the parity of `i & j`) of every `n` values of `x` into `out`, in tinyBLAS's
/// float order: per output one 8-lane FMA accumulator over the row, then its horizontal sum
/// (`n` a multiple of 8).
pub fn hadamard_rows_dense(x: &[f32], out: &mut [f32], n: usize) {
    let v = (1.0f64 / f64::from((n as f32).sqrt())) as f32;
    for (xs, ys) in x.chunks_exact(n).zip(out.chunks_exact_mut(n)) {
        for (i, y) in ys.iter_mut().enumerate() {
            let mut acc = [0f32; 8];
            for (k, &xk) in xs.iter().enumerate() {
                let h = if (i & k).count_ones() % 2 == 0 { v } else { -v };
                acc[k % 8] = fmadd(h, xk, acc[k % 8]);
            }
            let w: [f32; 4] = std::array::from_fn(|l| acc[l + 4] + acc[l]);
            *y = (w[0] + w[2]) + (w[1] + w[3]);
        }
    }
}
