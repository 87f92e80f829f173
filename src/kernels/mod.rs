//! Compute kernels for the engine's ggml-equivalent ops, one room per backend.
//!
//! `cpu`: dequantization of every weight type the engine supports, activation quantizers
//! bit-exact with the ones upstream's CPU backend runs, per-type dot products (a scalar
//! reference and AVX2/FMA versions chosen at run time), `mul_mat` over a persistent
//! [`cpu::ThreadPool`].

pub mod cpu;
pub mod quant;
