//! The registry of the samplers this library allocated, with their owners: what lets
//! `llama_sampler_free` and the chains refuse double frees and foreign pointers.

use std::collections::HashMap;
use std::sync::Mutex;

use super::super::types::*;
use super::super::FfiError;

// ---------------------------------------------------------------------------------------------
// Registry of live samplers
// ---------------------------------------------------------------------------------------------

/// Who frees a live sampler.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Owner {
    Caller,
    Chain(usize),
}

pub(super) static LIVE: Mutex<Option<HashMap<usize, Owner>>> = Mutex::new(None);

pub(super) fn with_live<R>(f: impl FnOnce(&mut HashMap<usize, Owner>) -> R) -> R {
    let mut guard = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    f(guard.get_or_insert_with(HashMap::new))
}

pub(super) fn owner_of(smpl: *const llama_sampler) -> Option<Owner> {
    with_live(|live| live.get(&(smpl as usize)).copied())
}

/// Checks that `smpl` is a live sampler this library allocated (chains, frees).
pub(super) fn live(smpl: *const llama_sampler, what: &'static str) -> Result<(), FfiError> {
    if smpl.is_null() {
        return Err(FfiError::Null(what));
    }
    if owner_of(smpl).is_none() {
        return Err(FfiError::Invalid(format!(
            "{what} is not a live sampler of this library (freed, or not created by \
             llama_sampler_init / llama_sampler_init_* / llama_sampler_chain_init?)"
        )));
    }
    Ok(())
}

/// Checks that `smpl` is not NULL: a sampler of ours or one the caller built (used through
/// its `iface`, as upstream does; a freed pointer is the caller's error, as upstream).
pub(super) fn non_null(smpl: *const llama_sampler, what: &'static str) -> Result<(), FfiError> {
    if smpl.is_null() {
        return Err(FfiError::Null(what));
    }
    Ok(())
}

/// Allocates and registers a `struct llama_sampler` (upstream's `llama_sampler_init`).
pub(super) fn alloc_sampler(
    iface: *mut llama_sampler_i,
    ctx: llama_sampler_context_t,
) -> *mut llama_sampler {
    let ptr = Box::into_raw(Box::new(llama_sampler { iface, ctx }));
    with_live(|live| live.insert(ptr as usize, Owner::Caller));
    ptr
}

/// Frees a registered sampler: its interface's `free`, then the struct (no owner check).
///
/// # Safety
/// `smpl` must be a live sampler of the registry.
pub(super) unsafe fn free_sampler(smpl: *mut llama_sampler) {
    with_live(|live| live.remove(&(smpl as usize)));
    // SAFETY: live per the contract, allocated by `alloc_sampler`.
    unsafe {
        if !(*smpl).iface.is_null() {
            if let Some(free) = (*(*smpl).iface).free {
                free(smpl);
            }
        }
        drop(Box::from_raw(smpl));
    }
}
