//! CPU kernels.

pub mod ops;
