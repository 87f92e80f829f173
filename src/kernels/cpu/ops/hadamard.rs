//! The Walsh-Hadamard transform of rows (ggml's `fwht`, for the rotated KV cache).

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
