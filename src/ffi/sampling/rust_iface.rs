//! Rust samplers behind the C interface: one interface table whose `ctx` is a boxed
//! [`RustSampler`].

use std::ffi::{c_char, CString};
use std::ptr::null_mut;

use super::super::types::*;
use super::super::FfiError;
use super::registry::*;
use crate::sampling::{Candidates, Sampler, TokenData};

// ---------------------------------------------------------------------------------------------
// Rust samplers behind the C interface
// ---------------------------------------------------------------------------------------------

/// The `ctx` of a Rust sampler: the sampler and its name as a C string.
pub(super) struct RustSampler {
    pub(super) inner: Box<dyn Sampler>,
    pub(super) name: CString,
    /// Upstream's backend mark once a chain holding the sampler is attached to a context:
    /// `Some(true)` runs inside the decode ("+name"), `Some(false)` cannot ("-name").
    pub(super) backend: Option<bool>,
}

impl RustSampler {
    /// The name `llama_sampler_name` shows: the sampler's, with upstream's backend mark.
    fn shown_name(&self) -> String {
        match self.backend {
            Some(ok) if self.inner.backend_marks_name() => {
                format!("{}{}", if ok { '+' } else { '-' }, self.inner.name())
            }
            _ => self.inner.name().to_string(),
        }
    }
}

pub(super) fn c_name(name: &str) -> CString {
    CString::new(name.replace('\0', "")).unwrap_or_default()
}

/// Wraps a Rust sampler into a `struct llama_sampler *` owned by the caller (freed with
/// `llama_sampler_free`, or by the chain it is added to). The grammar sampler uses this too.
pub(crate) fn sampler_into_raw(sampler: Box<dyn Sampler>) -> *mut llama_sampler {
    let name = c_name(sampler.name());
    let ctx = Box::into_raw(Box::new(RustSampler {
        inner: sampler,
        name,
        backend: None,
    }));
    alloc_sampler(rust_iface(), ctx.cast())
}

/// The Rust sampler behind `smpl`, if it is one of ours.
///
/// # Safety
/// `smpl` must be a live sampler.
pub(super) unsafe fn rust_sampler<'a>(smpl: *const llama_sampler) -> Option<&'a mut RustSampler> {
    // SAFETY: a live sampler per the contract; our interface implies our ctx type.
    unsafe {
        if (*smpl).iface == rust_iface() && !(*smpl).ctx.is_null() {
            Some(&mut *(*smpl).ctx.cast::<RustSampler>())
        } else {
            None
        }
    }
}

pub(super) fn rust_iface() -> *mut llama_sampler_i {
    std::ptr::addr_of!(RUST_IFACE) as *mut llama_sampler_i
}

/// The interface table of every Rust sampler (never written to).
pub(super) static RUST_IFACE: llama_sampler_i = llama_sampler_i {
    name: Some(rust_name),
    accept: Some(rust_accept),
    apply: Some(rust_apply),
    reset: Some(rust_reset),
    clone: Some(rust_clone),
    free: Some(rust_free),
    backend_init: None,
    backend_accept: None,
    backend_apply: None,
    backend_set_input: None,
    backend_reset: None,
    copy_state: None,
};

pub(super) unsafe extern "C" fn rust_name(smpl: *const llama_sampler) -> *const c_char {
    boundary!("llama_sampler_name", std::ptr::null(), {
        // SAFETY: called through our table, so `smpl` is one of our live samplers.
        let s = unsafe { rust_sampler(smpl) }.ok_or(FfiError::Null("sampler ctx"))?;
        let shown = s.shown_name();
        if s.name.as_bytes() != shown.as_bytes() {
            s.name = c_name(&shown);
        }
        Ok(s.name.as_ptr())
    })
}

pub(super) unsafe extern "C" fn rust_accept(smpl: *mut llama_sampler, token: llama_token) {
    boundary!("llama_sampler_accept", (), {
        // SAFETY: as in `rust_name`.
        let s = unsafe { rust_sampler(smpl) }.ok_or(FfiError::Null("sampler ctx"))?;
        s.inner.accept(token);
        Ok(())
    })
}

pub(super) unsafe extern "C" fn rust_apply(
    smpl: *mut llama_sampler,
    cur_p: *mut llama_token_data_array,
) {
    boundary!("llama_sampler_apply", (), {
        // SAFETY: as in `rust_name`.
        let s = unsafe { rust_sampler(smpl) }.ok_or(FfiError::Null("sampler ctx"))?;
        // SAFETY: `cur_p` checked by `llama_sampler_apply` or by the caller's chain.
        unsafe { apply_to_array(s.inner.as_mut(), cur_p) }
    })
}

/// Runs a Rust sampler over a caller's array: a view of `data[..size]`, then `size`,
/// `selected` and `sorted` written back.
///
/// # Safety
/// `cur_p` must be NULL or point to an array whose `data` is valid for `size` elements.
pub(super) unsafe fn apply_to_array(
    sampler: &mut dyn Sampler,
    cur_p: *mut llama_token_data_array,
) -> Result<(), FfiError> {
    if cur_p.is_null() {
        return Err(FfiError::Null("cur_p"));
    }
    // SAFETY: non-NULL per the check, valid per the contract.
    let arr = unsafe { &mut *cur_p };
    if arr.data.is_null() && arr.size != 0 {
        return Err(FfiError::Invalid(format!(
            "cur_p->data is NULL with size {}",
            arr.size
        )));
    }
    let buf: &mut [TokenData] = if arr.size == 0 {
        &mut []
    } else {
        // SAFETY: `llama_token_data` and `TokenData` are both #[repr(C)] {i32, f32, f32};
        // `data` is valid for `size` elements per the contract.
        unsafe { std::slice::from_raw_parts_mut(arr.data.cast::<TokenData>(), arr.size) }
    };
    let mut cur = Candidates::new(buf, arr.selected, arr.sorted);
    sampler.apply(&mut cur);
    if cur.offset() > 0 {
        // SAFETY: `offset <= size`: still inside the caller's array (XTC moves the start).
        arr.data = unsafe { arr.data.add(cur.offset()) };
    }
    arr.size = cur.len();
    arr.selected = cur.selected;
    arr.sorted = cur.sorted;
    Ok(())
}

pub(super) unsafe extern "C" fn rust_reset(smpl: *mut llama_sampler) {
    boundary!("llama_sampler_reset", (), {
        // SAFETY: as in `rust_name`.
        let s = unsafe { rust_sampler(smpl) }.ok_or(FfiError::Null("sampler ctx"))?;
        s.inner.reset();
        Ok(())
    })
}

pub(super) unsafe extern "C" fn rust_clone(smpl: *const llama_sampler) -> *mut llama_sampler {
    boundary!("llama_sampler_clone", null_mut(), {
        // SAFETY: as in `rust_name`.
        let s = unsafe { rust_sampler(smpl) }.ok_or(FfiError::Null("sampler ctx"))?;
        let copy = s.inner.clone_sampler().ok_or_else(|| {
            FfiError::Invalid(format!(
                "the sampler '{}' does not support cloning",
                s.inner.name()
            ))
        })?;
        Ok(sampler_into_raw(copy))
    })
}

pub(super) unsafe extern "C" fn rust_free(smpl: *mut llama_sampler) {
    boundary!("llama_sampler_free", (), {
        // SAFETY: called through our table on a live sampler; ctx came from Box::into_raw.
        unsafe {
            let ctx = (*smpl).ctx.cast::<RustSampler>();
            (*smpl).ctx = null_mut();
            if !ctx.is_null() {
                drop(Box::from_raw(ctx));
            }
        }
        Ok(())
    })
}
