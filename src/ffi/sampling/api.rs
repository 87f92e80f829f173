//! The sampler interface every sampler is used through (`llama_sampler_init`, `_name`,
//! `_accept`, `_apply`, `_reset`, `_clone`, `_copy`, `_free`).

use std::ffi::c_char;
use std::ptr::null_mut;

use super::super::types::*;
use super::super::FfiError;
use super::registry::*;
use super::rust_iface::*;

// ---------------------------------------------------------------------------------------------
// The sampler interface
// ---------------------------------------------------------------------------------------------

/// Wraps a caller-implemented interface and its state `ctx` into a new sampler, freed with
/// `llama_sampler_free` (which calls `iface->free`). The sampler works everywhere one of ours
/// does, inside our chains included; `iface` must outlive it.
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_init(
    iface: *mut llama_sampler_i,
    ctx: llama_sampler_context_t,
) -> *mut llama_sampler {
    boundary!("llama_sampler_init", null_mut(), {
        Ok(alloc_sampler(iface, ctx))
    })
}

/// The interface table of a live sampler, or an error.
///
/// # Safety
/// `smpl` must have passed [`live`].
pub(super) unsafe fn iface_of<'a>(
    smpl: *const llama_sampler,
) -> Result<&'a llama_sampler_i, FfiError> {
    // SAFETY: live per the contract; a non-NULL iface outlives its sampler (upstream rule).
    unsafe { (*smpl).iface.as_ref() }.ok_or(FfiError::Null("smpl->iface"))
}

/// The sampler's name (from `iface->name`), owned by the sampler; "(null)" for a sampler
/// without an interface or without `name` (upstream crashes on the latter). NULL (and a log
/// line) for NULL (upstream crashes).
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_name(smpl: *const llama_sampler) -> *const c_char {
    boundary!("llama_sampler_name", std::ptr::null(), {
        non_null(smpl, "smpl")?;
        // SAFETY: live per the check.
        let Ok(iface) = (unsafe { iface_of(smpl) }) else {
            return Ok(c"(null)".as_ptr());
        };
        // no `name` (llama-cpp-python's CustomSampler): "(null)" (upstream crashes)
        let Some(name) = iface.name else {
            return Ok(c"(null)".as_ptr());
        };
        // SAFETY: the sampler's own interface.
        Ok(unsafe { name(smpl) })
    })
}

/// Tells the sampler that `token` was chosen, updating its state (`iface->accept`, if any).
/// NULL is a no-op.
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_accept(smpl: *mut llama_sampler, token: llama_token) {
    boundary!("llama_sampler_accept", (), {
        if smpl.is_null() {
            return Ok(());
        }
        non_null(smpl, "smpl")?;
        // SAFETY: live per the check.
        if let Some(accept) = unsafe { iface_of(smpl) }?.accept {
            // SAFETY: the sampler's own interface.
            unsafe { accept(smpl, token) };
        }
        Ok(())
    })
}

/// Applies the sampler to the candidates in `cur_p` (`iface->apply`): it may reorder and
/// filter `cur_p->data[0..size]` in place, shrink `size`, set `selected` and `sorted`.
/// NULL `smpl` is a no-op; NULL `cur_p`, a NULL `data` with a non-zero size or a sampler
/// without `apply` are logged and `cur_p` is left untouched (upstream aborts or crashes).
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_apply(
    smpl: *mut llama_sampler,
    cur_p: *mut llama_token_data_array,
) {
    boundary!("llama_sampler_apply", (), {
        if smpl.is_null() {
            return Ok(());
        }
        non_null(smpl, "smpl")?;
        if cur_p.is_null() {
            return Err(FfiError::Null("cur_p"));
        }
        // SAFETY: non-NULL; the caller's array.
        let arr = unsafe { &*cur_p };
        if arr.data.is_null() && arr.size != 0 {
            return Err(FfiError::Invalid(format!(
                "cur_p->data is NULL with size {}",
                arr.size
            )));
        }
        // SAFETY: live per the check.
        let apply = unsafe { iface_of(smpl) }?
            .apply
            .ok_or(FfiError::Null("smpl->iface->apply"))?;
        // SAFETY: the sampler's own interface.
        unsafe { apply(smpl, cur_p) };
        Ok(())
    })
}

/// Resets the sampler's state (`iface->reset`, if any). NULL is a no-op.
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_reset(smpl: *mut llama_sampler) {
    boundary!("llama_sampler_reset", (), {
        if smpl.is_null() {
            return Ok(());
        }
        non_null(smpl, "smpl")?;
        // SAFETY: live per the check.
        if let Some(reset) = unsafe { iface_of(smpl) }?.reset {
            // SAFETY: the sampler's own interface.
            unsafe { reset(smpl) };
        }
        Ok(())
    })
}

/// A copy of the sampler with its state (`iface->clone`; a sampler without `clone` and
/// without `ctx` is copied as `{iface, NULL}`), freed with `llama_sampler_free`. NULL for
/// NULL, and (with a log line) for a sampler that cannot be cloned (upstream aborts).
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_clone(smpl: *const llama_sampler) -> *mut llama_sampler {
    boundary!("llama_sampler_clone", null_mut(), {
        if smpl.is_null() {
            return Ok(null_mut());
        }
        non_null(smpl, "smpl")?;
        // SAFETY: live per the check.
        let iface = unsafe { iface_of(smpl) }?;
        if let Some(clone) = iface.clone {
            // SAFETY: the sampler's own interface.
            return Ok(unsafe { clone(smpl) });
        }
        // SAFETY: live per the check.
        if unsafe { (*smpl).ctx }.is_null() {
            // SAFETY: as above.
            return Ok(alloc_sampler(unsafe { (*smpl).iface }, null_mut()));
        }
        Err(FfiError::Invalid(
            "the sampler does not support cloning".into(),
        ))
    })
}

/// Copies the mutable state of `src` into `dst`, samplers of the same type and
/// configuration (`iface->copy_state`, or a clone of `src` transplanted into `dst`). NULL or
/// equal pointers are a no-op; different types are logged and `dst` is left untouched
/// (upstream aborts).
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_copy(src: *const llama_sampler, dst: *mut llama_sampler) {
    boundary!("llama_sampler_copy", (), {
        if src.is_null() || dst.is_null() || std::ptr::eq(src, dst) {
            return Ok(());
        }
        non_null(src, "src")?;
        non_null(dst, "dst")?;
        // SAFETY: live per the checks.
        let (src_iface, dst_iface) = unsafe { ((*src).iface, (*dst).iface) };
        if src_iface != dst_iface {
            return Err(FfiError::Invalid(
                "cannot copy between different sampler types".into(),
            ));
        }
        // SAFETY: live per the checks.
        let iface = unsafe { iface_of(dst) }?;
        if let Some(copy_state) = iface.copy_state {
            // SAFETY: the samplers' own interface.
            unsafe { copy_state(src, dst) };
            return Ok(());
        }
        // SAFETY: live; our Rust samplers share a table, so compare their kinds by name.
        if let (Some(a), Some(b)) = unsafe { (rust_sampler(src), rust_sampler(dst)) } {
            if a.inner.name() != b.inner.name() {
                return Err(FfiError::Invalid(format!(
                    "cannot copy between different sampler types ('{}' into '{}')",
                    a.inner.name(),
                    b.inner.name()
                )));
            }
        }
        // SAFETY: live per the checks.
        let tmp = unsafe { llama_sampler_clone(src) };
        if tmp.is_null() {
            return Err(FfiError::Invalid(
                "the source sampler could not be cloned".into(),
            ));
        }
        // SAFETY: `dst` is live; `tmp` is our fresh sampler, whose ctx moves into `dst`.
        unsafe {
            // the backend mark belongs to dst's place in an attached chain, not to the state
            let mark = rust_sampler(dst).and_then(|s| s.backend);
            if let Some(free) = iface.free {
                free(dst);
            }
            (*dst).ctx = (*tmp).ctx;
            if let Some(s) = rust_sampler(dst) {
                s.backend = mark;
            }
            (*tmp).ctx = null_mut();
            with_live(|live| live.remove(&(tmp as usize)));
            drop(Box::from_raw(tmp));
        }
        Ok(())
    })
}

/// Frees a sampler (`iface->free`, then the struct); a chain frees the samplers it owns.
/// NULL is a no-op. A sampler a chain owns, a sampler already freed and a struct this
/// library did not allocate are logged and left alone (upstream frees twice or crashes).
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_free(smpl: *mut llama_sampler) {
    boundary!("llama_sampler_free", (), {
        if smpl.is_null() {
            return Ok(());
        }
        match owner_of(smpl) {
            None => Err(FfiError::Invalid(
                "smpl is not a live sampler of this library (freed twice, or not created by \
                 llama_sampler_init?); not freed"
                    .into(),
            )),
            Some(Owner::Chain(_)) => Err(FfiError::Invalid(
                "smpl belongs to a chain, which frees it (llama_sampler_chain_remove it first); \
                 not freed"
                    .into(),
            )),
            Some(Owner::Caller) => {
                // SAFETY: live and caller-owned.
                unsafe { free_sampler(smpl) };
                Ok(())
            }
        }
    })
}
