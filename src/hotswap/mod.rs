//! Hot-swap of individual tensors from GGUF files on disk into a loaded model.
//!
//! # The flow
//! * **Gate.** [`ENV`] is read when a model loads ([`enabled_by_env`]); off → nothing is
//!   registered and every reload entry point reports [`HotSwapError::Disabled`].
//! * **Registration** (at load): every shard's path and identity (device, inode, size,
//!   mtime and ctime with nanoseconds), and for every tensor its shard and data offset.
//! * **Snapshot** (at load): the loaded storage *is* the original, so no copy is made; when a
//!   tensor is first detached its original storage, layout and row partition are moved aside
//!   ([`crate::model::tensors::Original`]) and kept until it returns.
//! * **Detection** (each call): one `stat` per file; a file changed when any identity field
//!   differs. A changed file is opened once; its header and its data are read through that
//!   one descriptor, so a rename in between cannot pair one file's header with another's bytes.
//!   Shape changes and missing tensors are refused; a file whose data ends early (truncated or
//!   still being written) fails as a whole (its header does not validate). Only regular files
//!   are opened (type checked first, then a non-blocking open re-checked with `fstat`): a
//!   FIFO at the path fails "not a regular file" instead of blocking. The file's new identity
//!   is recorded when the outcome is about its content (refused, reloaded, bad header, not a
//!   regular file, gone), so a refused tensor is looked at again only when its file changes;
//!   a transient failure (open, read, allocation) keeps the old identity, so the next call
//!   retries. Watched paths were made absolute at load (a host `chdir` changes nothing).
//! * **check_tensors.** A model loaded with it validates staged bytes (NaN/Inf as at load)
//!   before anything is committed; invalid bytes are refused with the reason.
//! * **Jobs** run tensors returning to their original type first (their private buffers are
//!   released before new ones are allocated).
//! * **Transactional per tensor.** Bytes are read into a staging buffer and every new buffer is
//!   allocated and filled before the live tensor is touched; the commit swaps storage under
//!   the tensor's write lock (readers hold its read lock, so none sees a torn tensor). Any
//!   failure leaves the tensor exactly as it was and is reported.
//! * **Direct reads** (`direct.rs`): for a tensor on the CPU or a virtual GPU, a type change
//!   reads straight into its new private buffer and a return reads straight into the
//!   original storage (not live while detached); nothing is staged or copied. A same-type
//!   reload of a tensor in an owned arena (1 MiB or more) reads into a page stage laid out at
//!   the tensor's in-page offset, and the commit moves the stage's whole pages into the
//!   tensor and the tensor's old ones into the stage (`mremap`; page tables only), so the
//!   new bytes are read once and never copied. The stage is made the second time in a row a
//!   tensor of its geometry comes; a kernel that refuses the move makes every later in-place
//!   reload copy.
//! * **Buffer pool.** Private CPU buffers a tensor stops using are kept in the model's
//!   [`crate::storage::BufferPool`] (at most the largest tensor's bytes, four buffers) and
//!   reused by the next relocation of the same size, whose pages are then already resident.
//! * **MoE families** (`ffn_{gate,up,down}_exps` of one layer, split mode ROW) keep one row
//!   partition, computed for the least common multiple of the members' block sizes; a member
//!   whose partition no longer matches is re-laid out (or reattached to its original when that
//!   matches again); a failed device allocation moves the whole family to the CPU.
//! * **Invalidation.** Any relocation or retype bumps the model's generation, which every
//!   context compares with the generation its cached graph was built for. A tensor written in
//!   place (same type, size and placement) keeps its storage and bumps nothing.
//! * **Mappings.** Tensors are never written through a file mapping. A mapped tensor whose
//!   bytes changed moves to owned memory. The others move only when the bytes under the
//!   mapping can change: when the *loaded inode itself* was written in place (new size, new
//!   header, or changed tensors), every tensor still reading through it moves to owned memory
//!   at that call (read through the descriptor opened at load, which reads safely even if the
//!   file shrank). A rename-into-place leaves the loaded inode intact (its descriptor is held),
//!   and a metadata-only change (chmod, touch) writes nothing: mapped tensors stay mapped.
//!   (An in-place rewrite that changes only mapped tensors' bytes, at the same offsets, shows
//!   through the mapping and cannot be told from a touch; replace files by renaming.)
//!
//! # Where each step lives
//! `watch.rs`: detection (identity, one `stat` per file) · `plan.rs`: header checks, jobs and
//! refusals · `stage.rs`: staging bytes and new buffers · `commit.rs`: swapping storage under the
//! write locks · `direct.rs`: relocations and returns read in place · `mapping.rs`: moving
//! tensors off a changed file's mapping · `job.rs`, `outcomes.rs`, `staged.rs`: what the steps
//! share (a job; the outcomes, report and log lines; the model's pools and the staged actions),
//! leaves that import no step back. The registration and
//! the report are the model's ([`crate::model::swap`]); storage operations are
//! [`crate::storage`]'s.
#![forbid(unsafe_code)]

mod commit;
mod direct;
mod job;
mod mapping;
mod outcomes;
mod plan;
mod stage;
mod staged;
mod watch;

use crate::model::Model;

pub use crate::model::swap::report::{Outcome, Report, ReportEntry};
pub use crate::model::swap::{enabled_by_env, is_enabling_value, HotSwap, ENV};

pub use outcomes::HotSwapError;

pub use plan::{reload_from_file, tensor_set, tensors_set};
pub use watch::{auto_reload, reload_changed};

/// The bytes of a tensor as it is now (for tests and tools).
pub fn current_bytes(model: &Model, name: &str) -> Option<Vec<u8>> {
    let t = model.tensors.get(name)?;
    let s = t.read();
    let mut b = vec![0u8; s.layout.nbytes as usize];
    s.read_into(&mut b).ok()?;
    Some(b)
}
