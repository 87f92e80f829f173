//! Random test data for the kernel tests (no `rand` dependency: a SplitMix64 generator).
#![allow(dead_code)]

use llama::gguf::GgmlType;
use llama::kernels::cpu;

pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// Roughly normal (sum of four uniforms), mean 0, deviation ~1.
    pub fn normal(&mut self) -> f32 {
        (self.uniform() + self.uniform() + self.uniform() + self.uniform() - 2.0) * 1.7
    }
}

/// Offsets of the f16 scale fields inside one block of `t`.
pub fn f16_fields(t: GgmlType) -> &'static [usize] {
    match t {
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 | GgmlType::IQ4_NL | GgmlType::IQ4_XS => {
            &[0]
        }
        GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
        GgmlType::Q2_K => &[80, 82],
        GgmlType::Q3_K => &[108],
        GgmlType::Q6_K => &[208],
        GgmlType::IQ2_XXS
        | GgmlType::IQ2_XS
        | GgmlType::IQ2_S
        | GgmlType::IQ3_XXS
        | GgmlType::IQ3_S
        | GgmlType::IQ1_S => &[0],
        _ => &[],
    }
}

/// `n_rows` rows of `k` elements of `t`: random bytes for quantized types (every bit pattern
/// of the quants and packed scales), with finite random f16 scales (|d| in [2⁻¹², 2⁻⁴], random
/// sign); normal values for F32/F16/BF16.
pub fn random_weights(rng: &mut Rng, t: GgmlType, n_rows: usize, k: usize) -> Vec<u8> {
    let n = n_rows * cpu::row_bytes(t, k);
    let mut out = vec![0u8; n];
    match t {
        GgmlType::F32 => {
            for c in out.chunks_exact_mut(4) {
                c.copy_from_slice(&rng.normal().to_le_bytes());
            }
        }
        GgmlType::F16 => {
            for c in out.chunks_exact_mut(2) {
                c.copy_from_slice(&half::f16::from_f32(rng.normal()).to_bits().to_le_bytes());
            }
        }
        GgmlType::BF16 => {
            for c in out.chunks_exact_mut(2) {
                c.copy_from_slice(&half::bf16::from_f32(rng.normal()).to_bits().to_le_bytes());
            }
        }
        _ => {
            for b in out.iter_mut() {
                *b = rng.next_u64() as u8;
            }
            for block in out.chunks_exact_mut(t.type_size() as usize) {
                for &off in f16_fields(t) {
                    let mag = 2f32.powf(-12.0 + 8.0 * rng.uniform());
                    let v = if rng.next_u64() & 1 == 0 { mag } else { -mag };
                    block[off..off + 2]
                        .copy_from_slice(&half::f16::from_f32(v).to_bits().to_le_bytes());
                }
                if t == GgmlType::IQ1_M {
                    // the f16 scale lives in the top nibbles of the four sub-scale words
                    let mag = 2f32.powf(-12.0 + 8.0 * rng.uniform());
                    let h = half::f16::from_f32(mag).to_bits();
                    for i in 0..4 {
                        let at = 48 + 2 * i;
                        let word = u16::from_le_bytes([block[at], block[at + 1]]) & 0x0fff;
                        let word = word | (((h >> (4 * i)) & 0xf) << 12);
                        block[at..at + 2].copy_from_slice(&word.to_le_bytes());
                    }
                }
            }
        }
    }
    out
}

/// `k` activations: normal values with a few outliers (as real hidden states have).
pub fn random_activations(rng: &mut Rng, k: usize) -> Vec<f32> {
    (0..k)
        .map(|_| {
            let v = rng.normal();
            if rng.next_u64() % 97 == 0 {
                v * 20.0
            } else {
                v
            }
        })
        .collect()
}

/// For Q4_1/Q5_1 the Q8_1 activation block carries `s = f16(d·Σq)`, which the kernel uses in
/// place of the exact sum: allow its rounding (2⁻¹¹ relative) times |m| per block.
pub fn q8_1_sum_slack(t: GgmlType, w_row: &[u8], xq: &[u8]) -> f64 {
    if cpu::vec_dot_type(t) != GgmlType::Q8_1 {
        return 0.0;
    }
    let wb = t.type_size() as usize;
    w_row
        .chunks_exact(wb)
        .zip(xq.chunks_exact(36))
        .map(|(b, x)| {
            let m = half::f16::from_bits(u16::from_le_bytes([b[2], b[3]])).to_f64();
            let s = half::f16::from_bits(u16::from_le_bytes([x[2], x[3]])).to_f64();
            (m * s).abs() * 2f64.powi(-10)
        })
        .sum()
}

/// `(Σ wᵢ·xᵢ, Σ |wᵢ·xᵢ|)` in f64: the exact dot product a kernel's f32 result is checked
/// against, and the magnitude its tolerance scales with.
pub fn exact_dot(w: &[f32], x: &[f32]) -> (f64, f64) {
    w.iter().zip(x).fold((0.0, 0.0), |(sum, abs), (a, b)| {
        let p = f64::from(*a) * f64::from(*b);
        (sum + p, abs + p.abs())
    })
}

/// This process's resource usage so far (`getrusage(RUSAGE_SELF)`): CPU times, page faults.
pub fn rusage_self() -> libc::rusage {
    // SAFETY: rusage is plain integers, for which all zeros is a valid value; getrusage writes
    // into the struct we own, and RUSAGE_SELF is always valid.
    unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        assert_eq!(libc::getrusage(libc::RUSAGE_SELF, &mut usage), 0);
        usage
    }
}
