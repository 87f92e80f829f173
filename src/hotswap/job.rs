//! A reload job: one tensor, its new type and where its new bytes come from.

use std::fs::File;

use crate::gguf::GgmlType;

/// Where a job's bytes come from.
pub(super) enum Bytes<'a> {
    File { file: &'a File, offset: u64 },
    Memory(&'a [u8]),
}

pub(super) struct Job<'a> {
    pub(super) tensor: usize,
    pub(super) new_type: GgmlType,
    pub(super) source: Bytes<'a>,
}
