//! Sampling: the sampler interface (`llama_sampler_*`), sampler chains and the built-in
//! samplers (their arithmetic lives in `crate::sampling`). `llama_set_sampler` lives with the
//! context functions, `llama_perf_sampler*` in `perf`.
//!
//! `struct llama_sampler` is public in llama.h (`{iface, ctx}`), so a C caller's sampler and
//! ours are the same kind of object: every call dispatches through `iface`, as upstream, and a
//! caller's sampler runs inside our chain and ours inside theirs. Our Rust samplers share one
//! interface table ([`RUST_IFACE`]) whose `ctx` is a boxed [`RustSampler`]; chains have their
//! own table ([`CHAIN_IFACE`]).
//!
//! Every sampler this library allocates (`llama_sampler_init`, the constructors, chains) is
//! recorded in a registry with its owner (the caller or a chain). `llama_sampler_free` frees
//! only those, once: freeing twice, freeing a sampler a chain owns, or freeing memory the
//! library did not allocate is logged and refused. A `struct llama_sampler` the caller built
//! itself (llama-cpp-python's `CustomSampler` does) is used through its `iface` like any
//! other, and a chain it is added to borrows it: the chain never frees it (upstream would
//! `delete` it; callers remove such samplers before freeing the chain).

use std::collections::HashMap;
use std::ffi::{c_char, CString};
use std::ptr::null_mut;
use std::sync::Mutex;
use std::time::Instant;

use super::handles::{llama_context, llama_vocab};
use super::types::*;
use super::FfiError;
use crate::sampling::{basic, dry, infill, mirostat, penalties};
use crate::sampling::{Candidates, Sampler, TokenData, VocabAccess};

// ---------------------------------------------------------------------------------------------
// Registry of live samplers
// ---------------------------------------------------------------------------------------------

/// Who frees a live sampler.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Owner {
    Caller,
    Chain(usize),
}

static LIVE: Mutex<Option<HashMap<usize, Owner>>> = Mutex::new(None);

fn with_live<R>(f: impl FnOnce(&mut HashMap<usize, Owner>) -> R) -> R {
    let mut guard = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    f(guard.get_or_insert_with(HashMap::new))
}

fn owner_of(smpl: *const llama_sampler) -> Option<Owner> {
    with_live(|live| live.get(&(smpl as usize)).copied())
}

/// Checks that `smpl` is a live sampler this library allocated (chains, frees).
fn live(smpl: *const llama_sampler, what: &'static str) -> Result<(), FfiError> {
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
fn non_null(smpl: *const llama_sampler, what: &'static str) -> Result<(), FfiError> {
    if smpl.is_null() {
        return Err(FfiError::Null(what));
    }
    Ok(())
}

/// Allocates and registers a `struct llama_sampler` (upstream's `llama_sampler_init`).
fn alloc_sampler(iface: *mut llama_sampler_i, ctx: llama_sampler_context_t) -> *mut llama_sampler {
    let ptr = Box::into_raw(Box::new(llama_sampler { iface, ctx }));
    with_live(|live| live.insert(ptr as usize, Owner::Caller));
    ptr
}

// ---------------------------------------------------------------------------------------------
// Rust samplers behind the C interface
// ---------------------------------------------------------------------------------------------

/// The `ctx` of a Rust sampler: the sampler and its name as a C string.
struct RustSampler {
    inner: Box<dyn Sampler>,
    name: CString,
}

fn c_name(name: &str) -> CString {
    CString::new(name.replace('\0', "")).unwrap_or_default()
}

/// Wraps a Rust sampler into a `struct llama_sampler *` owned by the caller (freed with
/// `llama_sampler_free`, or by the chain it is added to). The grammar sampler uses this too.
pub(crate) fn sampler_into_raw(sampler: Box<dyn Sampler>) -> *mut llama_sampler {
    let name = c_name(sampler.name());
    let ctx = Box::into_raw(Box::new(RustSampler {
        inner: sampler,
        name,
    }));
    alloc_sampler(rust_iface(), ctx.cast())
}

/// The Rust sampler behind `smpl`, if it is one of ours.
///
/// # Safety
/// `smpl` must be a live sampler.
unsafe fn rust_sampler<'a>(smpl: *const llama_sampler) -> Option<&'a mut RustSampler> {
    // SAFETY: a live sampler per the contract; our interface implies our ctx type.
    unsafe {
        if (*smpl).iface == rust_iface() && !(*smpl).ctx.is_null() {
            Some(&mut *(*smpl).ctx.cast::<RustSampler>())
        } else {
            None
        }
    }
}

fn rust_iface() -> *mut llama_sampler_i {
    std::ptr::addr_of!(RUST_IFACE) as *mut llama_sampler_i
}

fn chain_iface() -> *mut llama_sampler_i {
    std::ptr::addr_of!(CHAIN_IFACE) as *mut llama_sampler_i
}

/// The interface table of every Rust sampler (never written to).
static RUST_IFACE: llama_sampler_i = llama_sampler_i {
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

unsafe extern "C" fn rust_name(smpl: *const llama_sampler) -> *const c_char {
    boundary!("llama_sampler_name", std::ptr::null(), {
        // SAFETY: called through our table, so `smpl` is one of our live samplers.
        let s = unsafe { rust_sampler(smpl) }.ok_or(FfiError::Null("sampler ctx"))?;
        if s.name.as_bytes() != s.inner.name().as_bytes() {
            s.name = c_name(s.inner.name());
        }
        Ok(s.name.as_ptr())
    })
}

unsafe extern "C" fn rust_accept(smpl: *mut llama_sampler, token: llama_token) {
    boundary!("llama_sampler_accept", (), {
        // SAFETY: as in `rust_name`.
        let s = unsafe { rust_sampler(smpl) }.ok_or(FfiError::Null("sampler ctx"))?;
        s.inner.accept(token);
        Ok(())
    })
}

unsafe extern "C" fn rust_apply(smpl: *mut llama_sampler, cur_p: *mut llama_token_data_array) {
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
unsafe fn apply_to_array(
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

unsafe extern "C" fn rust_reset(smpl: *mut llama_sampler) {
    boundary!("llama_sampler_reset", (), {
        // SAFETY: as in `rust_name`.
        let s = unsafe { rust_sampler(smpl) }.ok_or(FfiError::Null("sampler ctx"))?;
        s.inner.reset();
        Ok(())
    })
}

unsafe extern "C" fn rust_clone(smpl: *const llama_sampler) -> *mut llama_sampler {
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

unsafe extern "C" fn rust_free(smpl: *mut llama_sampler) {
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

// ---------------------------------------------------------------------------------------------
// Chains
// ---------------------------------------------------------------------------------------------

/// The `ctx` of a chain (upstream's `llama_sampler_chain`).
pub(crate) struct Chain {
    params: llama_sampler_chain_params,
    samplers: Vec<*mut llama_sampler>,
    pub(crate) t_sample_us: i64,
    pub(crate) n_sample: i32,
}

/// Adds the time of a chain call to `t_sample_us` unless `no_perf` (upstream's `time_meas`).
struct TimeMeas<'a> {
    start: Option<Instant>,
    acc: &'a mut i64,
}

impl Drop for TimeMeas<'_> {
    fn drop(&mut self) {
        if let Some(start) = self.start {
            *self.acc += start.elapsed().as_micros() as i64;
        }
    }
}

/// The chain behind `smpl`, if it is a chain.
///
/// # Safety
/// `smpl` must be a live sampler.
pub(crate) unsafe fn chain_of<'a>(smpl: *const llama_sampler) -> Option<&'a mut Chain> {
    // SAFETY: a live sampler per the contract; the chain table implies a Chain ctx.
    unsafe {
        if (*smpl).iface == chain_iface() && !(*smpl).ctx.is_null() {
            Some(&mut *(*smpl).ctx.cast::<Chain>())
        } else {
            None
        }
    }
}

/// A live chain, or an error naming why not.
///
/// # Safety
/// `smpl` must be NULL or a pointer the caller believes to be a sampler.
pub(crate) unsafe fn live_chain<'a>(smpl: *const llama_sampler) -> Result<&'a mut Chain, FfiError> {
    live(smpl, "chain")?;
    // SAFETY: live per the check.
    unsafe { chain_of(smpl) }.ok_or_else(|| {
        FfiError::Invalid("the sampler is not a chain (created by llama_sampler_chain_init)".into())
    })
}

static CHAIN_IFACE: llama_sampler_i = llama_sampler_i {
    name: Some(chain_name),
    accept: Some(chain_accept),
    apply: Some(chain_apply),
    reset: Some(chain_reset),
    clone: Some(chain_clone),
    free: Some(chain_free),
    backend_init: None,
    backend_accept: None,
    backend_apply: None,
    backend_set_input: None,
    backend_reset: None,
    copy_state: Some(chain_copy_state),
};

unsafe extern "C" fn chain_name(_smpl: *const llama_sampler) -> *const c_char {
    c"chain".as_ptr()
}

unsafe extern "C" fn chain_accept(smpl: *mut llama_sampler, token: llama_token) {
    // SAFETY: called through the chain table on a live chain.
    let Some(chain) = (unsafe { chain_of(smpl) }) else {
        return;
    };
    let samplers = chain.samplers.clone();
    let mut t = chain.t_sample_us;
    {
        let _tm = TimeMeas {
            start: (!chain.params.no_perf).then(Instant::now),
            acc: &mut t,
        };
        for s in samplers {
            // SAFETY: the chain owns live samplers.
            unsafe { llama_sampler_accept(s, token) };
        }
    }
    chain.t_sample_us = t;
    chain.n_sample += 1;
}

unsafe extern "C" fn chain_apply(smpl: *mut llama_sampler, cur_p: *mut llama_token_data_array) {
    // SAFETY: called through the chain table on a live chain.
    let Some(chain) = (unsafe { chain_of(smpl) }) else {
        return;
    };
    let samplers = chain.samplers.clone();
    let mut t = chain.t_sample_us;
    {
        let _tm = TimeMeas {
            start: (!chain.params.no_perf).then(Instant::now),
            acc: &mut t,
        };
        for s in samplers {
            // SAFETY: the chain owns live samplers; upstream skips those without `apply`.
            unsafe {
                if (*s).iface.is_null() || (*(*s).iface).apply.is_none() {
                    continue;
                }
                llama_sampler_apply(s, cur_p);
            }
        }
    }
    chain.t_sample_us = t;
}

unsafe extern "C" fn chain_reset(smpl: *mut llama_sampler) {
    // SAFETY: called through the chain table on a live chain.
    let Some(chain) = (unsafe { chain_of(smpl) }) else {
        return;
    };
    for s in chain.samplers.clone() {
        // SAFETY: the chain owns live samplers.
        unsafe { llama_sampler_reset(s) };
    }
}

unsafe extern "C" fn chain_clone(smpl: *const llama_sampler) -> *mut llama_sampler {
    // SAFETY: called through the chain table on a live chain.
    let Some(src) = (unsafe { chain_of(smpl) }) else {
        return null_mut();
    };
    let result = llama_sampler_chain_init(src.params);
    for s in src.samplers.clone() {
        // SAFETY: the chain owns live samplers.
        let copy = unsafe { llama_sampler_clone(s) };
        if copy.is_null() {
            crate::log_error!("llama_sampler_clone: a sampler of the chain could not be cloned");
            // SAFETY: `result` is our fresh, caller-owned chain.
            unsafe { llama_sampler_free(result) };
            return null_mut();
        }
        // SAFETY: both ours and live.
        unsafe { llama_sampler_chain_add(result, copy) };
    }
    result
}

unsafe extern "C" fn chain_free(smpl: *mut llama_sampler) {
    // SAFETY: called through the chain table on a live chain; ctx came from Box::into_raw.
    unsafe {
        let ctx = (*smpl).ctx.cast::<Chain>();
        (*smpl).ctx = null_mut();
        if ctx.is_null() {
            return;
        }
        let chain = Box::from_raw(ctx);
        for s in chain.samplers.iter().copied() {
            // borrowed samplers (built by the caller) are not ours to free
            if owner_of(s) == Some(Owner::Chain(smpl as usize)) {
                free_sampler(s);
            }
        }
    }
}

unsafe extern "C" fn chain_copy_state(src: *const llama_sampler, dst: *mut llama_sampler) {
    // SAFETY: called through the chain table on live chains.
    let (Some(s), Some(d)) = (unsafe { chain_of(src) }, unsafe { chain_of(dst) }) else {
        return;
    };
    if s.samplers.len() != d.samplers.len() {
        crate::log_error!(
            "llama_sampler_copy: chains of {} and {} samplers; nothing copied",
            s.samplers.len(),
            d.samplers.len()
        );
        return;
    }
    for (a, b) in s.samplers.clone().into_iter().zip(d.samplers.clone()) {
        // SAFETY: live samplers owned by the chains.
        unsafe { llama_sampler_copy(a, b) };
    }
    d.params = s.params;
    d.t_sample_us = s.t_sample_us;
    d.n_sample = s.n_sample;
}

/// Frees a registered sampler: its interface's `free`, then the struct (no owner check).
///
/// # Safety
/// `smpl` must be a live sampler of the registry.
unsafe fn free_sampler(smpl: *mut llama_sampler) {
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
unsafe fn iface_of<'a>(smpl: *const llama_sampler) -> Result<&'a llama_sampler_i, FfiError> {
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
            if let Some(free) = iface.free {
                free(dst);
            }
            (*dst).ctx = (*tmp).ctx;
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

// ---------------------------------------------------------------------------------------------
// Sampler chains
// ---------------------------------------------------------------------------------------------

/// Creates an empty sampler chain, itself a sampler: `apply` runs its samplers in order,
/// `accept`/`reset` reach all of them; it frees those it owns when freed.
#[no_mangle]
pub extern "C" fn llama_sampler_chain_init(
    params: llama_sampler_chain_params,
) -> *mut llama_sampler {
    boundary!("llama_sampler_chain_init", null_mut(), {
        let ctx = Box::into_raw(Box::new(Chain {
            params,
            samplers: Vec::new(),
            t_sample_us: 0,
            n_sample: 0,
        }));
        Ok(alloc_sampler(chain_iface(), ctx.cast()))
    })
}

/// Appends `smpl` to the chain, which takes ownership of a sampler this library allocated
/// (a `struct llama_sampler` the caller built itself is borrowed: never freed by the chain).
/// Refused with a log line (and `smpl` stays the caller's): NULL or non-chain `chain`, NULL
/// `smpl`, a sampler already in a chain (or twice in this one), the chain itself or one of
/// its ancestors.
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_chain_add(
    chain: *mut llama_sampler,
    smpl: *mut llama_sampler,
) {
    boundary!("llama_sampler_chain_add", (), {
        // SAFETY: checked by `live_chain`.
        let c = unsafe { live_chain(chain) }?;
        non_null(smpl, "smpl")?;
        if c.samplers.contains(&smpl) {
            return Err(FfiError::Invalid(
                "smpl is already in this chain; not added".into(),
            ));
        }
        if owner_of(smpl).is_none() {
            // built by the caller (not by llama_sampler_init): borrowed, never freed here
            c.samplers.push(smpl);
            return Ok(());
        }
        if let Some(Owner::Chain(_)) = owner_of(smpl) {
            return Err(FfiError::Invalid(
                "smpl already belongs to a chain; not added".into(),
            ));
        }
        // A chain must not contain itself, directly or through its ancestors.
        let mut up = Some(chain as usize);
        while let Some(node) = up {
            if node == smpl as usize {
                return Err(FfiError::Invalid(
                    "smpl is the chain itself or contains it; not added".into(),
                ));
            }
            up = match with_live(|live| live.get(&node).copied()) {
                Some(Owner::Chain(parent)) => Some(parent),
                _ => None,
            };
        }
        with_live(|live| live.insert(smpl as usize, Owner::Chain(chain as usize)));
        c.samplers.push(smpl);
        Ok(())
    })
}

/// Sampler `i` of the chain (still owned by it), the chain itself for -1; NULL for NULL,
/// a sampler that is not a chain or `i` out of range (the last two with a log line).
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_chain_get(
    chain: *mut llama_sampler,
    i: i32,
) -> *mut llama_sampler {
    boundary!("llama_sampler_chain_get", null_mut(), {
        if chain.is_null() {
            return Ok(null_mut());
        }
        // SAFETY: checked by `live_chain`.
        let c = unsafe { live_chain(chain) }?;
        if i == -1 {
            return Ok(chain);
        }
        usize::try_from(i)
            .ok()
            .and_then(|i| c.samplers.get(i).copied())
            .ok_or_else(|| {
                FfiError::Invalid(format!(
                    "index {i} out of range (chain of {})",
                    c.samplers.len()
                ))
            })
    })
}

/// The number of samplers in the chain; -1 (and a log line) when `chain` is not a live chain.
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_chain_n(chain: *const llama_sampler) -> i32 {
    boundary!("llama_sampler_chain_n", -1, {
        // SAFETY: checked by `live_chain`.
        let c = unsafe { live_chain(chain) }?;
        Ok(c.samplers.len() as i32)
    })
}

/// Removes sampler `i` from the chain and returns it, now owned by the caller; NULL (and a
/// log line) when `chain` is not a live chain or `i` is out of range.
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_chain_remove(
    chain: *mut llama_sampler,
    i: i32,
) -> *mut llama_sampler {
    boundary!("llama_sampler_chain_remove", null_mut(), {
        // SAFETY: checked by `live_chain`.
        let c = unsafe { live_chain(chain) }?;
        let index = usize::try_from(i)
            .ok()
            .filter(|&i| i < c.samplers.len())
            .ok_or_else(|| {
                FfiError::Invalid(format!(
                    "index {i} out of range (chain of {})",
                    c.samplers.len()
                ))
            })?;
        let smpl = c.samplers.remove(index);
        if owner_of(smpl) == Some(Owner::Chain(chain as usize)) {
            with_live(|live| live.insert(smpl as usize, Owner::Caller));
        }
        Ok(smpl)
    })
}

// ---------------------------------------------------------------------------------------------
// Built-in samplers
// ---------------------------------------------------------------------------------------------

fn boxed(s: impl Sampler + 'static) -> Result<*mut llama_sampler, FfiError> {
    Ok(sampler_into_raw(Box::new(s)))
}

fn empty(name: &'static str) -> Result<*mut llama_sampler, FfiError> {
    boxed(basic::Empty { name })
}

/// A sampler that selects the token with the highest logit (the first of equal ones).
#[no_mangle]
pub extern "C" fn llama_sampler_init_greedy() -> *mut llama_sampler {
    boundary!("llama_sampler_init_greedy", null_mut(), {
        boxed(basic::Greedy)
    })
}

/// A sampler that draws a token from the softmax of the logits. Its random stream is
/// upstream's (`std::mt19937` seeded with `seed`, libstdc++'s distributions), so the same
/// seed draws the same tokens with either library; LLAMA_DEFAULT_SEED picks a random seed.
#[no_mangle]
pub extern "C" fn llama_sampler_init_dist(seed: u32) -> *mut llama_sampler {
    boundary!("llama_sampler_init_dist", null_mut(), {
        boxed(basic::Dist::new(seed))
    })
}

/// Top-k filtering: keeps the `k` highest logits, sorted ("?top-k", a no-op, for k <= 0).
#[no_mangle]
pub extern "C" fn llama_sampler_init_top_k(k: i32) -> *mut llama_sampler {
    boundary!("llama_sampler_init_top_k", null_mut(), {
        if k <= 0 {
            return empty("?top-k");
        }
        boxed(basic::TopK { k })
    })
}

/// Nucleus (top-p) filtering, keeping at least `min_keep` tokens ("?top-p", a no-op, for
/// p >= 1).
#[no_mangle]
pub extern "C" fn llama_sampler_init_top_p(p: f32, min_keep: usize) -> *mut llama_sampler {
    boundary!("llama_sampler_init_top_p", null_mut(), {
        if p >= 1.0 {
            return empty("?top-p");
        }
        boxed(basic::TopP::new(p, min_keep))
    })
}

/// Min-p filtering, keeping at least `min_keep` tokens ("?min-p", a no-op, for p <= 0).
#[no_mangle]
pub extern "C" fn llama_sampler_init_min_p(p: f32, min_keep: usize) -> *mut llama_sampler {
    boundary!("llama_sampler_init_min_p", null_mut(), {
        if p <= 0.0 {
            return empty("?min-p");
        }
        boxed(basic::MinP { p, min_keep })
    })
}

/// Locally typical sampling, keeping at least `min_keep` tokens ("?typical", a no-op, for
/// p >= 1).
#[no_mangle]
pub extern "C" fn llama_sampler_init_typical(p: f32, min_keep: usize) -> *mut llama_sampler {
    boundary!("llama_sampler_init_typical", null_mut(), {
        if p >= 1.0 {
            return empty("?typical");
        }
        boxed(basic::Typical { p, min_keep })
    })
}

/// Temperature: divides the logits by `t`; t <= 0 keeps only the highest ("?temp", a
/// no-op, for t == 1).
#[no_mangle]
pub extern "C" fn llama_sampler_init_temp(t: f32) -> *mut llama_sampler {
    boundary!("llama_sampler_init_temp", null_mut(), {
        if t == 1.0 {
            return empty("?temp");
        }
        boxed(basic::Temp { temp: t })
    })
}

/// Dynamic (entropy-based) temperature in [t - delta, t + delta] ("?temp-ext", a no-op,
/// for t == 1 and delta <= 0).
#[no_mangle]
pub extern "C" fn llama_sampler_init_temp_ext(
    t: f32,
    delta: f32,
    exponent: f32,
) -> *mut llama_sampler {
    boundary!("llama_sampler_init_temp_ext", null_mut(), {
        if t == 1.0 && delta <= 0.0 {
            return empty("?temp-ext");
        }
        boxed(basic::TempExt {
            temp: t,
            delta,
            exponent,
        })
    })
}

/// XTC (exclude top choices) with upstream's random stream for `seed` ("?xtc", a no-op,
/// for p <= 0 or t > 0.5).
#[no_mangle]
pub extern "C" fn llama_sampler_init_xtc(
    p: f32,
    t: f32,
    min_keep: usize,
    seed: u32,
) -> *mut llama_sampler {
    boundary!("llama_sampler_init_xtc", null_mut(), {
        if p <= 0.0 || t > 0.5 {
            return empty("?xtc");
        }
        boxed(mirostat::Xtc::new(p, t, min_keep, seed))
    })
}

/// Top-n-sigma: masks logits more than `n` standard deviations below the highest
/// ("?top-n-sigma", a no-op, for n <= 0).
#[no_mangle]
pub extern "C" fn llama_sampler_init_top_n_sigma(n: f32) -> *mut llama_sampler {
    boundary!("llama_sampler_init_top_n_sigma", null_mut(), {
        if n <= 0.0 {
            return empty("?top-n-sigma");
        }
        boxed(basic::TopNSigma { n })
    })
}

/// Mirostat 1.0, selecting a token with upstream's random stream for `seed`.
#[no_mangle]
pub extern "C" fn llama_sampler_init_mirostat(
    n_vocab: i32,
    seed: u32,
    tau: f32,
    eta: f32,
    m: i32,
) -> *mut llama_sampler {
    boundary!("llama_sampler_init_mirostat", null_mut(), {
        boxed(mirostat::Mirostat::new(n_vocab, seed, tau, eta, m))
    })
}

/// Mirostat 2.0, selecting a token with upstream's random stream for `seed`.
#[no_mangle]
pub extern "C" fn llama_sampler_init_mirostat_v2(
    seed: u32,
    tau: f32,
    eta: f32,
) -> *mut llama_sampler {
    boundary!("llama_sampler_init_mirostat_v2", null_mut(), {
        boxed(mirostat::MirostatV2::new(seed, tau, eta))
    })
}

/// Repetition, frequency and presence penalties over the last `penalty_last_n` accepted
/// tokens ("?penalties", a no-op, when disabled: last_n == 0 or neutral values).
#[no_mangle]
pub extern "C" fn llama_sampler_init_penalties(
    n_vocab: i32,
    penalty_last_n: i32,
    penalty_repeat: f32,
    penalty_freq: f32,
    penalty_present: f32,
) -> *mut llama_sampler {
    let _ = n_vocab; // upstream keeps it for backend sampling only
    boundary!("llama_sampler_init_penalties", null_mut(), {
        let last_n = penalty_last_n.max(0);
        if penalties::Penalties::is_disabled(last_n, penalty_repeat, penalty_freq, penalty_present)
        {
            return empty("?penalties");
        }
        boxed(penalties::Penalties::new(
            last_n,
            penalty_repeat,
            penalty_freq,
            penalty_present,
        ))
    })
}

/// The vocabulary access the DRY and infill samplers use: the model's token table and the
/// tokenizer kept in the `llama_vocab` handle (pieces, detokenization, tokenization).
struct FfiVocab {
    /// The `llama_vocab` handle (checked on every use: upstream's samplers also keep it).
    handle: usize,
    model: std::sync::Arc<crate::model::Model>,
}

impl FfiVocab {
    /// # Safety
    /// `vocab` must be NULL or a live vocab handle.
    unsafe fn new(vocab: *const llama_vocab) -> Result<FfiVocab, FfiError> {
        // SAFETY: per the contract.
        let v = unsafe { super::handles::vocab(vocab) }?;
        Ok(FfiVocab {
            handle: vocab as usize,
            model: v.inner.clone(),
        })
    }

    /// The handle, checked (`None` once it is freed).
    fn handle(&self) -> Option<&llama_vocab> {
        // SAFETY: the address of a vocab handle, checked by `handles::vocab`; the model
        // outlives its samplers per the API contract.
        unsafe { super::handles::vocab(self.handle as *const llama_vocab) }.ok()
    }

    /// Calls a length-returning conversion with a growing buffer (negative: the size needed).
    fn with_buffer(
        f: impl Fn(&mut [u8]) -> Result<i32, crate::tokenizer::TokenizerError>,
    ) -> Option<Vec<u8>> {
        let mut buf = vec![0u8; 256];
        for _ in 0..2 {
            let n = f(&mut buf).ok()?;
            if n >= 0 {
                buf.truncate(n as usize);
                return Some(buf);
            }
            buf.resize(n.unsigned_abs() as usize, 0);
        }
        None
    }
}

impl VocabAccess for FfiVocab {
    fn n_tokens(&self) -> i32 {
        self.model.vocab.tokens.len() as i32
    }
    fn is_eog(&self, id: i32) -> bool {
        self.model.vocab.eog.contains(&id)
    }
    fn eot(&self) -> i32 {
        self.model.vocab.specials.eot
    }
    fn eos(&self) -> i32 {
        self.model.vocab.specials.eos
    }
    fn piece(&self, id: i32) -> Vec<u8> {
        let vocab = &self.model.vocab;
        Self::with_buffer(|buf| crate::tokenizer::token_to_piece(vocab, id, buf, 0, false))
            .unwrap_or_default()
    }
    fn detokenize_one(&self, id: i32) -> Option<Vec<u8>> {
        let vocab = &self.model.vocab;
        Self::with_buffer(|buf| crate::tokenizer::detokenize(vocab, &[id], buf, false, true))
    }
    fn tokenize(&self, text: &[u8]) -> Option<Vec<i32>> {
        let handle = self.handle()?;
        handle
            .tokenizer
            .tokenize(&self.model.vocab, text, false, false)
            .ok()
    }
}

/// The DRY ("don't repeat yourself") sampler ("?dry", a no-op, when disabled: multiplier 0,
/// base < 1 or last_n 0). Sequence breakers are matched as upstream: every token whose
/// detokenized text contains a breaker breaks alone; a token ending with a breaker's prefix
/// heads the tokenization of the rest (a vocab whose tokenizer cannot run: NULL and a log
/// line). NULL or empty breakers are skipped with a warning, as
/// upstream; a NULL `vocab` with breakers is refused (upstream crashes).
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_init_dry(
    vocab: *const llama_vocab,
    dry_multiplier: f32,
    dry_base: f32,
    dry_allowed_length: i32,
    dry_penalty_last_n: i32,
    seq_breakers: *mut *const c_char,
    num_breakers: usize,
) -> *mut llama_sampler {
    boundary!("llama_sampler_init_dry", null_mut(), {
        if !dry::Dry::enabled(dry_multiplier, dry_base, dry_penalty_last_n) {
            return empty("?dry");
        }
        let mut breakers = dry::Breakers::new();
        if !seq_breakers.is_null() && num_breakers > 0 {
            let mut texts = Vec::with_capacity(num_breakers);
            for i in 0..num_breakers {
                // SAFETY: the caller passes `num_breakers` string pointers.
                let p = unsafe { *seq_breakers.add(i) };
                if p.is_null() {
                    texts.push(Vec::new());
                } else {
                    // SAFETY: NUL-terminated per the contract.
                    texts.push(unsafe { std::ffi::CStr::from_ptr(p) }.to_bytes().to_vec());
                }
            }
            if texts.iter().any(|t| !t.is_empty()) {
                // SAFETY: NULL or a live vocab per the contract.
                let v = unsafe { FfiVocab::new(vocab) }?;
                breakers = dry::process_breakers(&v, &texts).map_err(FfiError::Invalid)?;
            } else {
                for i in 0..texts.len() {
                    crate::log_warn!("skipping null or empty DRY sequence breaker at index {i}");
                }
            }
        }
        boxed(dry::Dry::new(
            dry_multiplier,
            dry_base,
            dry_allowed_length,
            dry_penalty_last_n,
            breakers,
        ))
    })
}

/// Adaptive-p: selects tokens near a target probability adapted over time, with upstream's
/// random stream for `seed` (a negative target draws from the distribution unchanged).
#[no_mangle]
pub extern "C" fn llama_sampler_init_adaptive_p(
    target: f32,
    decay: f32,
    seed: u32,
) -> *mut llama_sampler {
    boundary!("llama_sampler_init_adaptive_p", null_mut(), {
        boxed(mirostat::AdaptiveP::new(target, decay, seed))
    })
}

/// Adds fixed biases to the logits of given tokens ("?logit-bias", a no-op, for
/// n_logit_bias <= 0). NULL `logit_bias` with a positive count: NULL and a log line.
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_init_logit_bias(
    n_vocab: i32,
    n_logit_bias: i32,
    logit_bias: *const llama_logit_bias,
) -> *mut llama_sampler {
    let _ = n_vocab;
    boundary!("llama_sampler_init_logit_bias", null_mut(), {
        if n_logit_bias <= 0 {
            return empty("?logit-bias");
        }
        if logit_bias.is_null() {
            return Err(FfiError::Null("logit_bias"));
        }
        // SAFETY: the caller passes `n_logit_bias` entries.
        let biases = unsafe { std::slice::from_raw_parts(logit_bias, n_logit_bias as usize) };
        boxed(basic::LogitBias {
            biases: biases.iter().map(|b| (b.token, b.bias)).collect(),
        })
    })
}

/// The fill-in-the-middle sampler: prefers end-of-generation when text is unlikely, merges
/// tokens whose pieces are prefixes of each other, thresholds. Pieces are the tokenizer's
/// (`llama_token_to_piece` without special tokens). The model must
/// outlive the sampler, as upstream. NULL (and a log line) for a NULL or freed vocab.
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_init_infill(
    vocab: *const llama_vocab,
) -> *mut llama_sampler {
    boundary!("llama_sampler_init_infill", null_mut(), {
        // SAFETY: NULL or a live vocab per the contract.
        let v = unsafe { FfiVocab::new(vocab) }?;
        boxed(infill::Infill::new(std::sync::Arc::new(v)))
    })
}

/// The seed a sampler draws with (dist, mirostat, mirostat-v2; for a chain the last such
/// sampler's), or LLAMA_DEFAULT_SEED if it has none. LLAMA_DEFAULT_SEED (and a log line)
/// for NULL (upstream crashes).
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_get_seed(smpl: *const llama_sampler) -> u32 {
    boundary!("llama_sampler_get_seed", LLAMA_DEFAULT_SEED, {
        non_null(smpl, "smpl")?;
        // SAFETY: live per the check.
        Ok(unsafe { seed_of(smpl) })
    })
}

/// # Safety
/// `smpl` must be a live sampler.
unsafe fn seed_of(smpl: *const llama_sampler) -> u32 {
    // SAFETY: live per the contract; chains own live samplers.
    unsafe {
        if let Some(s) = rust_sampler(smpl) {
            // upstream reports seeds for dist and the mirostats only
            return match s.inner.name() {
                "dist" | "mirostat" | "mirostat-v2" => s.inner.seed().unwrap_or(LLAMA_DEFAULT_SEED),
                _ => LLAMA_DEFAULT_SEED,
            };
        }
        if let Some(chain) = chain_of(smpl) {
            for &s in chain.samplers.iter().rev() {
                let seed = seed_of(s);
                if seed != LLAMA_DEFAULT_SEED {
                    return seed;
                }
            }
        }
    }
    LLAMA_DEFAULT_SEED
}

/// Samples a token from output `idx` of the last evaluation: the candidates are all
/// `n_vocab` logits of `llama_get_logits_ith(ctx, idx)`, `smpl` is applied and the selected
/// token accepted and returned. LLAMA_TOKEN_NULL (-1) and a log line when `smpl` is NULL,
/// `ctx` is not a live context, there are no logits for `idx`, or the sampler selected
/// nothing (upstream aborts). Backend samplers never pre-select a token here: they run on
/// the CPU, in this call.
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_sample(
    smpl: *mut llama_sampler,
    ctx: *mut llama_context,
    idx: i32,
) -> llama_token {
    boundary!("llama_sampler_sample", LLAMA_TOKEN_NULL, {
        non_null(smpl, "smpl")?;
        // SAFETY: NULL or a live context per the contract.
        let c = unsafe { super::handles::context(ctx) }?;
        // SAFETY: a live context keeps its model handle (upstream's rule: model outlives it).
        let model = unsafe { super::handles::model(c.model) }?;
        let n_vocab = model.inner.vocab.tokens.len();
        // SAFETY: a live context.
        let logits = unsafe { super::context::llama_get_logits_ith(ctx, idx) };
        if logits.is_null() {
            return Err(FfiError::Invalid(format!("no logits for output {idx}")));
        }
        // SAFETY: a row of n_vocab logits owned by the context.
        let row = unsafe { std::slice::from_raw_parts(logits, n_vocab) };
        let mut cur: Vec<llama_token_data> = row
            .iter()
            .enumerate()
            .map(|(id, &logit)| llama_token_data {
                id: id as llama_token,
                logit,
                p: 0.0,
            })
            .collect();
        let mut arr = llama_token_data_array {
            data: cur.as_mut_ptr(),
            size: cur.len(),
            selected: -1,
            sorted: false,
        };
        // SAFETY: live sampler, array over `cur`.
        unsafe { llama_sampler_apply(smpl, &mut arr) };
        if arr.selected < 0 || arr.selected as usize >= arr.size || arr.data.is_null() {
            return Err(FfiError::Invalid(format!(
                "the sampler selected no token (selected {} of {} candidates); add a \
                 selecting sampler (greedy, dist, mirostat...) at the end of the chain",
                arr.selected, arr.size
            )));
        }
        // SAFETY: `selected < size` over the (possibly advanced) array.
        let token = unsafe { (*arr.data.add(arr.selected as usize)).id };
        // SAFETY: live sampler.
        unsafe { llama_sampler_accept(smpl, token) };
        Ok(token)
    })
}

/// Backend sampling: llama-hotswap runs no sampler inside the decode, so it answers as upstream
/// does for a sampler that cannot be offloaded: NULL (nothing to clear) returns true; a sampler
/// returns false with upstream's warning ("cannot be offloaded to the backend") and stays the
/// caller's, to run on the CPU (`llama_sampler_sample`, common's fallback: the same tokens).
#[no_mangle]
pub unsafe extern "C" fn llama_set_sampler(
    ctx: *mut llama_context,
    seq_id: llama_seq_id,
    smpl: *mut llama_sampler,
) -> bool {
    boundary!("llama_set_sampler", false, {
        // SAFETY: NULL or a live context per the contract.
        let _ = unsafe { super::handles::context(ctx) }?;
        if smpl.is_null() {
            return Ok(true);
        }
        // SAFETY: a sampler handle per the contract.
        unsafe { not_offloaded(seq_id, smpl) };
        Ok(false)
    })
}

/// Upstream's warning for a sampler that stays on the CPU.
///
/// # Safety
/// `smpl` must be a live sampler.
unsafe fn not_offloaded(seq_id: llama_seq_id, smpl: *mut llama_sampler) {
    // SAFETY: per the caller's contract; the name is a C string that outlives the call.
    let name = unsafe { llama_sampler_name(smpl) };
    let name = if name.is_null() {
        "(null)".into()
    } else {
        // SAFETY: non-NULL, NUL-terminated (llama_sampler_name's contract).
        unsafe { std::ffi::CStr::from_ptr(name) }.to_string_lossy()
    };
    crate::log_warn!(
        "llama_set_sampler: sampler '{name}' for seq_id = {seq_id}, cannot be offloaded to the \
         backend (llama-hotswap samples on the CPU)"
    );
}
