//! llama-hotswap: a drop-in `libllama.so` that mirrors llama.cpp's model API and adds
//! hot-swap of individual tensors from GGUF files on disk.
//!
//! Layers: `ffi` is the only module with `extern "C"` and raw pointers; everything else is
//! safe Rust with `thiserror` errors. `gguf` parses bytes and never sees a mapping.

/// cbindgen:ignore
pub mod context;
/// cbindgen:ignore
pub mod device;
/// cbindgen:ignore
pub mod gguf;
/// cbindgen:ignore
pub mod graph;
/// cbindgen:ignore
pub mod hotswap;
/// cbindgen:ignore
pub mod kernels;
/// cbindgen:ignore
pub mod kv_cache;
/// cbindgen:ignore
pub mod loader;
/// cbindgen:ignore
pub mod log;
/// cbindgen:ignore
pub mod model;

#[allow(non_camel_case_types, clippy::missing_safety_doc)]
pub mod ffi;
