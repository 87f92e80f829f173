//! Block geometry of the quantized types: elements per block (`QK`, `QK_K`) and bytes per
//! block, shared by every quantizer file and the dispatcher in `mod.rs` (a leaf, so the
//! quantizer files need nothing back from `mod.rs`).

pub(crate) const QK: usize = 32;
pub(crate) const QK_K: usize = 256;
pub(crate) const Q4_0_BYTES: usize = 18;
pub(crate) const Q4_1_BYTES: usize = 20;
pub(crate) const Q5_0_BYTES: usize = 22;
pub(crate) const Q5_1_BYTES: usize = 24;
pub(crate) const Q8_0_BYTES: usize = 34;
pub(crate) const Q2_K_BYTES: usize = 84;
pub(crate) const Q3_K_BYTES: usize = 110;
pub(crate) const Q4_K_BYTES: usize = 144;
pub(crate) const Q5_K_BYTES: usize = 176;
pub(crate) const Q6_K_BYTES: usize = 210;
pub(crate) const IQ4_NL_BYTES: usize = 18;
pub(crate) const IQ4_XS_BYTES: usize = 136;
pub(crate) const TQ1_0_BYTES: usize = 54;
pub(crate) const TQ2_0_BYTES: usize = 66;
