//! llama-hotswap: a drop-in `libllama.so` that mirrors llama.cpp's model API and adds
//! hot-swap of individual tensors from GGUF files on disk.
//!
//! # Rooms
//! One top-level module per concern:
//! * `ffi` — the C boundary: the only module with `extern "C"`, `#[no_mangle]` and raw
//!   pointers; one file per llama.h area.
//! * `loader` — loading a model from GGUF files (splits, metadata, tensor data, load modes).
//! * `quantize` — model quantization (`llama_model_quantize`): upstream's type-choice rules
//!   and the GGUF rewrite; the row quantizers it calls are kernels (`kernels::quant`).
//! * `hotswap` — replacing individual tensors of a loaded model from files on disk.
//! * `model` — the loaded model as data: metadata, hparams, vocabulary, tensor registry, and
//!   the state hot-swap keeps on it (`model::swap`).
//! * `storage` — where tensor bytes live and how they move: files, mappings, host arenas,
//!   device buffers, row splits, the placement of each tensor.
//! * `context` — a context over a model: parameters, decode driver (batch validation, ubatch
//!   splitting, outputs), logits and embeddings.
//! * `kv_cache` — the unified KV cache: cells, sequences, slot search, shifts, SWA masks.
//! * `graph` — ggml-equivalent op graphs, one builder per architecture (`graph/arch/<arch>.rs`
//!   as upstream's `src/models/`), and the CPU executor.
//! * `kernels` — compute kernels (`cpu/`: per-type dequantize, activation quantization,
//!   `vec_dot` scalar + AVX2, `mul_mat`, ops, the persistent thread pool; later `cuda/`).
//! * `tokenizer` — tokenization, pieces and detokenization (one file per algorithm; the
//!   vocabulary data stays in `model::vocab`).
//! * `sampling` — the samplers behind `llama_sampler_*` (one file per sampler family) and
//!   GBNF grammars (`sampling::grammar`).
//! * `chat` — upstream's built-in chat templates (detection from a template string and
//!   formatting); uses nothing but std.
//! * `device` — the device registry (CUDA, virtual GPUs, CPU), allocations, layer placement.
//! * `gguf` — the GGUF format: parsing and writing bytes; never sees a mapping.
//! * `cpp` — the C++ standard library replayed bit for bit where upstream's results depend on
//!   it (`std::mt19937`, libstdc++'s distributions, `std::sort`/`std::partial_sort` tie
//!   orders); used by `sampling` and `model::vocab`; uses nothing.
//! * `log` — the log sink shared by all.
//!
//! # The dependency rule
//! Dependencies point one way, down:
//!
//! ```text
//! ffi → context / sampling / tokenizer / hotswap → graph → kernels → storage → device
//! model → gguf
//! ```
//!
//! `quantize` sits beside `loader` and uses it (metadata decoding), `model` (hyperparameters),
//! `kernels` (row quantizers, dequantization) and `gguf`; nothing uses `quantize` but `ffi`.
//! `loader` and `hotswap` sit beside each other above `model` and `storage`; `model` uses
//! `storage` (its tensors' bytes) and `gguf`; `storage` uses `device` and `gguf`; `device` and
//! `gguf` use nothing but `log`. Nothing points back up, at any depth: `tests/layering.rs`
//! fails on any cycle between files (a folder's `mod.rs` included: what its children share
//! lives in a leaf file of the folder, such as `graph::arch::def`, never in the `mod.rs` that
//! lists them) and between the child modules of every module, up to the top-level rooms; its
//! `KNOWN_KNOTS` (folders waiting for that move) is empty and may only stay so.
//!
//! # Safety
//! The core is safe Rust with typed `thiserror` errors: `gguf`, `model`, `hotswap`,
//! `loader` and `sampling` forbid `unsafe`; `storage` denies it except in `storage::host`
//! (file mappings and owned arenas, the one OS edge). `unsafe` is otherwise only in `ffi`, at
//! the device edge (`device::cuda`, and `device::host`/`device::numa`: sysconf and CPU affinity) and in `kernels` (SIMD intrinsics, the thread pool's
//! borrowed jobs, disjoint writes from pool threads), and every block carries a `// SAFETY:`
//! comment (clippy's `undocumented_unsafe_blocks` is denied).

#![deny(clippy::undocumented_unsafe_blocks)]

/// cbindgen:ignore
pub mod chat;
/// cbindgen:ignore
pub mod context;
/// cbindgen:ignore
pub mod cpp;
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
/// cbindgen:ignore
pub mod quantize;
/// cbindgen:ignore
pub mod sampling;
/// cbindgen:ignore
pub mod storage;
/// cbindgen:ignore
pub mod tokenizer;

#[allow(non_camel_case_types, clippy::missing_safety_doc)]
pub mod ffi;
