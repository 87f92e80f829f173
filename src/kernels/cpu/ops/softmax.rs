//! SOFT_MAX of one row.

/// ggml's `SOFT_MAX` of one row in place, with `scale` applied first (no mask, no ALiBi):
/// exp in f32, sum in f64, multiplication by 1/sum.
pub fn soft_max_row(x: &mut [f32], scale: f32) {
    let mut max = f32::NEG_INFINITY;
    for v in x.iter_mut() {
        *v *= scale;
        max = max.max(*v);
    }
    let mut sum = 0.0f64;
    for v in x.iter_mut() {
        let e = if *v == f32::NEG_INFINITY {
            0.0
        } else {
            (*v - max).exp()
        };
        *v = e;
        sum += e as f64;
    }
    let inv = (1.0 / sum) as f32;
    for v in x.iter_mut() {
        *v *= inv;
    }
}
