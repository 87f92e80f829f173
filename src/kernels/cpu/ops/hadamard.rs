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
/// (`n` a multiple of 8). `one_row`: in the order of ggml's `ggml_vec_dot_f32` instead, which
/// upstream uses when the product has one activation row per batch: four 8-lane FMA
/// accumulators over each 32 values, reduced `(0+2)+(1+3)`, then the lanes
/// `((0+4)+(1+5))+((2+6)+(3+7))`, the rest FMA'd one by one in float.
pub fn hadamard_rows_dense(x: &[f32], out: &mut [f32], n: usize, one_row: bool) {
    let v = (1.0f64 / f64::from((n as f32).sqrt())) as f32;
    let lanes = if one_row { 32 } else { 8 };
    let full = n / lanes * lanes;
    for (xs, ys) in x.chunks_exact(n).zip(out.chunks_exact_mut(n)) {
        for (i, y) in ys.iter_mut().enumerate() {
            let h = |k: usize| if (i & k).count_ones() % 2 == 0 { v } else { -v };
            let mut acc = [0f32; 32];
            for (k, &xk) in xs[..full].iter().enumerate() {
                acc[k % lanes] = fmadd(h(k), xk, acc[k % lanes]);
            }
            if !one_row {
                let w: [f32; 4] = std::array::from_fn(|l| acc[l + 4] + acc[l]);
                *y = (w[0] + w[2]) + (w[1] + w[3]);
                continue;
            }
            let s: [f32; 8] =
                std::array::from_fn(|l| (acc[l] + acc[16 + l]) + (acc[8 + l] + acc[24 + l]));
            let t: [f32; 4] = std::array::from_fn(|l| s[l] + s[l + 4]);
            let mut sum = (t[0] + t[1]) + (t[2] + t[3]);
            for (k, &xk) in xs.iter().enumerate().skip(full) {
                sum = fmadd(h(k), xk, sum);
            }
            *y = sum;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both float orders of the dense product compute the transform the butterflies compute
    /// (rows of 16, all tail for `one_row`; and of 64 and 128, whole 32-value runs), and the
    /// `one_row` order is the vec_dot one: its 32 accumulators summed as ggml reduces them.
    #[test]
    fn dense_products_are_the_transform_in_their_float_orders() {
        let mut next = crate::kernels::cpu::test_rng::xorshift_f32(0x9e37_79b9_7f4a_7c15);
        for n in [16usize, 64, 128] {
            let x: Vec<f32> = (0..3 * n).map(|_| next()).collect();
            let mut want = x.clone();
            hadamard_rows(&mut want, n);
            for one_row in [false, true] {
                let mut got = vec![0f32; x.len()];
                hadamard_rows_dense(&x, &mut got, n, one_row);
                for (g, w) in got.iter().zip(&want) {
                    assert!((g - w).abs() <= 1e-5, "n {n} one_row {one_row}: {g} vs {w}");
                }
            }
            // the vec_dot order by hand for the first output of the first row
            let v = (1.0f64 / f64::from((n as f32).sqrt())) as f32;
            let full = n / 32 * 32;
            let mut acc = [0f32; 32];
            for (k, &xk) in x[..full].iter().enumerate() {
                acc[k % 32] = fmadd(v, xk, acc[k % 32]);
            }
            let l8: [f32; 8] =
                std::array::from_fn(|l| (acc[l] + acc[16 + l]) + (acc[8 + l] + acc[24 + l]));
            let l4: [f32; 4] = std::array::from_fn(|l| l8[l] + l8[l + 4]);
            let mut sum = (l4[0] + l4[1]) + (l4[2] + l4[3]);
            for &xk in &x[full..n] {
                sum = fmadd(v, xk, sum);
            }
            let mut got = vec![0f32; x.len()];
            hadamard_rows_dense(&x, &mut got, n, true);
            assert_eq!(got[0].to_bits(), sum.to_bits(), "n {n}");
        }
    }
}
