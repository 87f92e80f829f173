//! Where each tensor of a model goes: storage's placement ([`crate::storage::place`]),
//! re-exported here for the loader's callers.

pub use crate::storage::place::*;
