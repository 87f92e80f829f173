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

/// ggml's `NORM` of one row: `(x - mean) / sqrt(var + eps)`.
pub fn norm_row(x: &[f32], eps: f32, y: &mut [f32]) {
    let sum: f64 = x.iter().map(|&v| v as f64).sum();
    let mean = (sum / x.len() as f64) as f32;
    let mut var = 0.0f64;
    for (d, &s) in y.iter_mut().zip(x) {
        let v = s - mean;
        *d = v;
        var += (v * v) as f64;
    }
    let variance = (var / x.len() as f64) as f32;
    let scale = 1.0f32 / (variance + eps).sqrt();
    for d in y.iter_mut() {
        *d *= scale;
    }
}
