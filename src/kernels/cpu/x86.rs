//! AVX2/FMA/F16C dot products, chosen at run time (`is_x86_feature_detected!`, checked once).

use std::sync::OnceLock;

use super::DotFn;
use crate::gguf::GgmlType;

/// Whether this CPU has AVX2, FMA and F16C (checked once).
pub fn available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c")
    })
}

/// The AVX2 dot product for `t`, when this CPU has AVX2 and one is written for `t`.
pub fn dot_fn(t: GgmlType) -> Option<DotFn> {
    if !available() {
        return None;
    }
    let _ = t;
    None
}
