//! Compute kernels for the engine's ggml-equivalent ops, one room per backend.
//!
//! `cpu`: dequantization of every weight type the engine supports, activation quantizers
//! bit-exact with the ones upstream's CPU backend runs, per-type dot products (a scalar
//! reference and AVX2/FMA versions chosen at run time), `mul_mat` over a persistent
//! [`cpu::ThreadPool`].
//!
//! `cuda`: CUDA C kernels compiled at run time by NVRTC (PTX cached per source, NVRTC, crate
//! version and architecture), used by the CUDA executor (`graph::exec_cuda`).

pub mod cpu;
pub mod cuda;
pub mod quant;
