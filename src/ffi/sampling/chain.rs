//! Sampler chains (upstream's `llama_sampler_chain`): the chain's interface table and the
//! `llama_sampler_chain_*` functions.

use std::ffi::c_char;
use std::ptr::null_mut;
use std::time::Instant;

use super::super::types::*;
use super::super::FfiError;
use super::api::*;
use super::registry::*;

// ---------------------------------------------------------------------------------------------
// Chains
// ---------------------------------------------------------------------------------------------

/// The `ctx` of a chain (upstream's `llama_sampler_chain`).
pub(crate) struct Chain {
    params: llama_sampler_chain_params,
    pub(super) samplers: Vec<*mut llama_sampler>,
    /// Per sampler: part of the backend prefix that runs inside the decode (upstream's
    /// `is_backend`), set when the chain is attached to a context.
    pub(super) is_backend: Vec<bool>,
    /// Attached to a context once (upstream's `is_init`): from then on `apply` skips the
    /// backend prefix, which the decode has already applied.
    pub(super) is_init: bool,
    pub(crate) t_sample_us: i64,
    pub(crate) n_sample: i32,
}

/// Adds the time of a chain call to `t_sample_us` unless `no_perf` (upstream's `time_meas`).
pub(super) struct TimeMeas<'a> {
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

pub(super) fn chain_iface() -> *mut llama_sampler_i {
    std::ptr::addr_of!(CHAIN_IFACE) as *mut llama_sampler_i
}

pub(super) static CHAIN_IFACE: llama_sampler_i = llama_sampler_i {
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

pub(super) unsafe extern "C" fn chain_name(_smpl: *const llama_sampler) -> *const c_char {
    c"chain".as_ptr()
}

pub(super) unsafe extern "C" fn chain_accept(smpl: *mut llama_sampler, token: llama_token) {
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

pub(super) unsafe extern "C" fn chain_apply(
    smpl: *mut llama_sampler,
    cur_p: *mut llama_token_data_array,
) {
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
        // the backend prefix already ran inside the decode (upstream's `is_backend` skip)
        let skip = if chain.is_init {
            chain.is_backend.iter().take_while(|&&b| b).count()
        } else {
            0
        };
        for s in samplers.into_iter().skip(skip) {
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

pub(super) unsafe extern "C" fn chain_reset(smpl: *mut llama_sampler) {
    // SAFETY: called through the chain table on a live chain.
    let Some(chain) = (unsafe { chain_of(smpl) }) else {
        return;
    };
    for s in chain.samplers.clone() {
        // SAFETY: the chain owns live samplers.
        unsafe { llama_sampler_reset(s) };
    }
}

pub(super) unsafe extern "C" fn chain_clone(smpl: *const llama_sampler) -> *mut llama_sampler {
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

pub(super) unsafe extern "C" fn chain_free(smpl: *mut llama_sampler) {
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

pub(super) unsafe extern "C" fn chain_copy_state(
    src: *const llama_sampler,
    dst: *mut llama_sampler,
) {
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
            is_backend: Vec::new(),
            is_init: false,
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
            c.is_backend.push(false);
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
        c.is_backend.push(false);
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
        c.is_backend.remove(index);
        if owner_of(smpl) == Some(Owner::Chain(chain as usize)) {
            with_live(|live| live.insert(smpl as usize, Owner::Caller));
        }
        Ok(smpl)
    })
}
