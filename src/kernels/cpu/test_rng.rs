//! The kernels' tests' random numbers: one xorshift64 stream, as bits or as floats.

/// Marsaglia's xorshift64 from `seed` (non-zero): the next 64 bits per call.
pub fn xorshift(seed: u64) -> impl FnMut() -> u64 {
    let mut s = seed;
    move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    }
}

/// The same stream as floats in [-1, 1): its top 24 bits scaled.
pub fn xorshift_f32(seed: u64) -> impl FnMut() -> f32 {
    let mut bits = xorshift(seed);
    move || (bits() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
}
