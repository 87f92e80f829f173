//! Hot-swap of individual tensors (placeholder while the engine lands).

use crate::model::Model;

/// The environment variable read at model load.
pub const ENV: &str = "LLAMA_HOTSWAP_ENABLED";

/// Whether `LLAMA_HOTSWAP_ENABLED` turns hot-swap on: set to anything but empty, `0`,
/// `false` or `off` (case-insensitive, surrounding whitespace ignored).
pub fn enabled_by_env() -> bool {
    match std::env::var_os(ENV) {
        None => false,
        Some(v) => is_enabling_value(&v.to_string_lossy()),
    }
}

/// See [`enabled_by_env`].
pub fn is_enabling_value(value: &str) -> bool {
    let v = value.trim().to_ascii_lowercase();
    !(v.is_empty() || v == "0" || v == "false" || v == "off")
}

#[derive(Debug)]
pub struct HotSwap {}

impl HotSwap {
    pub fn register(_model: &Model) -> HotSwap {
        HotSwap {}
    }
}
