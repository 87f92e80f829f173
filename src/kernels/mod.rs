//! Compute kernels (CPU now).

pub mod cpu;
