//! RMS_NORM and NORM of one row, in ggml's accumulation types.

/// ggml's `RMS_NORM` of one row: `x / sqrt(mean(x²) + eps)`, the sum of squares in f64 and
/// the mean and scale in f32.
pub fn rms_norm_row(x: &[f32], eps: f32, y: &mut [f32]) {
    let sum: f64 = x.iter().map(|&v| (v * v) as f64).sum();
    let mean = (sum / x.len() as f64) as f32;
    let scale = 1.0f32 / (mean + eps).sqrt();
    for (d, &s) in y.iter_mut().zip(x) {
        *d = s * scale;
    }
}

/// ggml's `NORM` of one row: `(x - mean) / sqrt(var + eps)`, in the AVX2 build's order: the
/// sum in f64 rounded to f32 and divided in f32; the squares summed in groups of 8 (lanes
/// added as `((0+4)+(2+6))+((1+5)+(3+7))`, each group's sum added in f64), the rest one by one.
pub fn norm_row(x: &[f32], eps: f32, y: &mut [f32]) {
    let n = x.len();
    let sum = x.iter().map(|&v| f64::from(v)).sum::<f64>() as f32;
    let mean = sum / n as f32;
    let mut var = 0.0f64;
    let n8 = n / 8 * 8;
    for (yg, xg) in y[..n8].chunks_exact_mut(8).zip(x[..n8].chunks_exact(8)) {
        let mut sq = [0.0f32; 8];
        for ((d, q), &s) in yg.iter_mut().zip(sq.iter_mut()).zip(xg) {
            let v = s - mean;
            *d = v;
            *q = v * v;
        }
        let w: [f32; 4] = std::array::from_fn(|i| sq[i + 4] + sq[i]);
        var += f64::from((w[0] + w[2]) + (w[1] + w[3]));
    }
    for (d, &s) in y[n8..n].iter_mut().zip(&x[n8..]) {
        let v = s - mean;
        *d = v;
        var += f64::from(v * v);
    }
    let variance = (var / n as f64) as f32;
    let scale = 1.0f32 / (variance + eps).sqrt();
    for d in y.iter_mut() {
        *d *= scale;
    }
}
