//! The files a load reads: they are storage's ([`crate::storage::file`],
//! [`crate::storage::host`]); re-exported here for the loader's callers.

pub use crate::storage::file::{read_header, reopen_direct, FileIdentity, SourceFile};
pub use crate::storage::host::{alloc_pages, map_file, split_arena, HostArena, HostRange};
