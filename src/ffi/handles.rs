//! Opaque handles handed to C, and the registry of live ones.
//!
//! Every handle this library returns is recorded in [`LIVE`] (its address and kind) when it is
//! created and removed when it is freed. A handle coming back from C is looked up there
//! *before* it is dereferenced, so a freed, foreign or wild pointer (`(void *)0x1234`) is
//! reported (log line, failure value) instead of read. The lookup is a read lock and one hash
//! probe: a few tens of nanoseconds on a getter (see docs/benchmarks.md, "Handle checks").
//!
//! What the registry cannot catch: a handle freed by another thread *while* a call that has
//! already checked it is running (using and freeing one handle concurrently is undefined, as
//! upstream), and an address reused by a new handle of the same kind after a free.

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{OnceLock, RwLock};

use super::FfiError;

/// The kinds of handle the registry tells apart (a model pointer passed as a vocab is
/// refused).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    Model,
    Vocab,
    Context,
    Adapter,
}

/// A type handed to C as an opaque handle.
pub(crate) trait Handle {
    const KIND: Kind;
    /// The parameter name used in log lines ("model is not a live handle ...").
    const WHAT: &'static str;
}

/// A multiplicative hash for addresses: the keys are not attacker-chosen, and SipHash would
/// be most of a getter's cost.
#[derive(Default)]
struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
    fn write_isize(&mut self, v: isize) {
        self.write_u64(v as u64);
    }
}

type LiveSet = HashSet<(usize, Kind), BuildHasherDefault<AddrHasher>>;

/// Live handles: address and kind.
static LIVE: OnceLock<RwLock<LiveSet>> = OnceLock::new();

fn live() -> &'static RwLock<LiveSet> {
    LIVE.get_or_init(|| RwLock::new(LiveSet::default()))
}

fn register<T: Handle>(ptr: *const T) {
    live()
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .insert((ptr as usize, T::KIND));
}

/// Removes a handle; false when it was not live (double free, foreign pointer).
fn unregister<T: Handle>(ptr: *const T) -> bool {
    live()
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&(ptr as usize, T::KIND))
}

fn is_live<T: Handle>(ptr: *const T) -> bool {
    live()
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .contains(&(ptr as usize, T::KIND))
}

/// Borrows a handle after finding it in the registry of live handles.
///
/// # Safety
/// If `ptr` is a live handle, no other thread frees it while the returned borrow is used.
pub(crate) unsafe fn check<'a, T: Handle>(ptr: *const T) -> Result<&'a T, FfiError> {
    if ptr.is_null() {
        return Err(FfiError::Null(T::WHAT));
    }
    if !is_live(ptr) {
        return Err(FfiError::BadHandle(T::WHAT));
    }
    // SAFETY: registered means created by `Box::into_raw` below and not freed since; the
    // caller guarantees it is not freed while borrowed.
    Ok(unsafe { &*ptr })
}

/// Frees a boxed handle (and unregisters it). NULL is a no-op; a pointer that is not live is
/// refused (double free, foreign pointer).
///
/// # Safety
/// As [`check`]; the pointer must not be used afterwards.
unsafe fn free<T: Handle>(ptr: *mut T, also: impl FnOnce(&T)) -> Result<(), FfiError> {
    if ptr.is_null() {
        return Ok(());
    }
    if !unregister(ptr.cast_const()) {
        return Err(FfiError::BadHandle(T::WHAT));
    }
    // SAFETY: it was live, so it came from `Box::into_raw` and is freed once (the unregister
    // above succeeds for one caller only).
    let boxed = unsafe { Box::from_raw(ptr) };
    also(&boxed);
    drop(boxed);
    Ok(())
}

/// A loaded model (`struct llama_model`). Created by the load functions, freed by
/// `llama_model_free`. The vocab is a separate allocation, so a model pointer passed as a
/// vocab (or the other way round) is never a live handle of that kind.
pub struct llama_model {
    pub(crate) vocab: Box<llama_vocab>,
    pub(crate) inner: std::sync::Arc<crate::model::Model>,
    /// When the load began and how long it took (`llama_time_us`), upstream's
    /// `model->t_start_us` and `t_load_us`, the start of a context's performance counters.
    pub(crate) t_start_us: i64,
    pub(crate) t_load_us: i64,
    /// The model's live LoRA adapter handles (addresses): freed with the model, as upstream.
    pub(crate) loras: std::sync::Mutex<Vec<usize>>,
}

/// A model's vocabulary (`struct llama_vocab`), owned by its model.
pub struct llama_vocab {
    pub(crate) inner: std::sync::Arc<crate::model::Model>,
    /// The vocabulary's tokenizer, built when the model was loaded.
    pub(crate) tokenizer: crate::tokenizer::Tokenizer,
}

/// An inference context (`struct llama_context`).
pub struct llama_context {
    pub(crate) model: *const llama_model,
    pub(crate) inner: crate::context::Context,
    /// `llama_context_params.ctx_other`, as given (upstream's `llama_get_ctx_other`).
    pub(crate) ctx_other: *mut llama_context,
    /// Performance counters (`llama_perf_context`).
    pub(crate) perf: std::sync::Mutex<super::perf_counters::PerfCounters>,
    /// The token ids 0..n_vocab, upstream's `token_ids_full_vocab`: what
    /// `llama_get_sampled_candidates_ith` returns when no backend sampler produced candidates.
    pub(crate) full_vocab_ids: Vec<i32>,
    /// Backend sampling: the chains attached to sequences and their last results. Lock it
    /// before the engine when both are needed.
    pub(crate) sampling: std::sync::Mutex<super::sampled::BackendSampling>,
}

impl Handle for llama_model {
    const KIND: Kind = Kind::Model;
    const WHAT: &'static str = "model";
}

impl Handle for llama_vocab {
    const KIND: Kind = Kind::Vocab;
    const WHAT: &'static str = "vocab";
}

/// A LoRA adapter (`struct llama_adapter_lora`), owned by its model: freed by
/// `llama_adapter_lora_free` or with the model. Contexts that compute with it hold their own
/// reference to its tensors, so freeing it never pulls them from under a decode.
pub struct llama_adapter_lora {
    pub(crate) model: *const llama_model,
    pub(crate) inner: std::sync::Arc<crate::model::adapter::LoraAdapter>,
}

impl Handle for llama_adapter_lora {
    const KIND: Kind = Kind::Adapter;
    const WHAT: &'static str = "adapter";
}

impl llama_adapter_lora {
    /// Boxes and registers an adapter of live model `model`, recording it on the model.
    pub(crate) fn new_boxed(
        model: &llama_model,
        inner: crate::model::adapter::LoraAdapter,
    ) -> *mut llama_adapter_lora {
        let ptr = Box::into_raw(Box::new(llama_adapter_lora {
            model,
            inner: std::sync::Arc::new(inner),
        }));
        register(ptr.cast_const());
        model
            .loras
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(ptr as usize);
        ptr
    }
}

/// Borrows an adapter handle after checking it is live.
///
/// # Safety
/// As [`check`].
pub(crate) unsafe fn adapter<'a>(
    ptr: *const llama_adapter_lora,
) -> Result<&'a llama_adapter_lora, FfiError> {
    // SAFETY: the caller's contract is `check`'s.
    unsafe { check(ptr) }
}

/// Frees an adapter handle (and forgets it on its model). NULL is a no-op.
///
/// # Safety
/// As [`check`]; the pointer must not be used afterwards.
pub(crate) unsafe fn free_adapter(ptr: *mut llama_adapter_lora) -> Result<(), FfiError> {
    // SAFETY: the caller's contract; a live adapter's model is live (freeing a model frees
    // its adapters first).
    unsafe {
        free(ptr, |a| {
            if is_live(a.model) {
                (*a.model)
                    .loras
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .retain(|&p| p != ptr as usize);
            }
        })
    }
}

impl Handle for llama_context {
    const KIND: Kind = Kind::Context;
    const WHAT: &'static str = "ctx";
}

impl llama_model {
    pub(crate) fn new_boxed(
        model: crate::model::Model,
        tokenizer: crate::tokenizer::Tokenizer,
        t_start_us: i64,
        t_load_us: i64,
    ) -> *mut llama_model {
        let inner = std::sync::Arc::new(model);
        let ptr = Box::into_raw(Box::new(llama_model {
            vocab: Box::new(llama_vocab {
                inner: inner.clone(),
                tokenizer,
            }),
            inner,
            t_start_us,
            t_load_us,
            loras: std::sync::Mutex::new(Vec::new()),
        }));
        // SAFETY: just created by `Box::into_raw`: valid and not shared yet.
        let vocab: *const llama_vocab = unsafe { &*(*ptr).vocab };
        register(vocab);
        register(ptr.cast_const());
        ptr
    }
}

impl llama_context {
    pub(crate) fn new_boxed(
        model: *const llama_model,
        inner: crate::context::Context,
        ctx_other: *mut llama_context,
        sampling: super::sampled::BackendSampling,
    ) -> *mut llama_context {
        let perf = std::sync::Mutex::new(super::perf_counters::PerfCounters::default());
        let n_vocab = i32::try_from(inner.n_vocab()).unwrap_or(i32::MAX);
        let full_vocab_ids = (0..n_vocab).collect();
        let ptr = Box::into_raw(Box::new(llama_context {
            model,
            inner,
            ctx_other,
            perf,
            full_vocab_ids,
            sampling: std::sync::Mutex::new(sampling),
        }));
        register(ptr.cast_const());
        ptr
    }
}

/// Borrows a model handle after checking it is live.
///
/// # Safety
/// As [`check`].
pub(crate) unsafe fn model<'a>(ptr: *const llama_model) -> Result<&'a llama_model, FfiError> {
    // SAFETY: the caller's contract is `check`'s.
    unsafe { check(ptr) }
}

/// Borrows a vocab handle after checking it is live.
///
/// # Safety
/// As [`check`].
pub(crate) unsafe fn vocab<'a>(ptr: *const llama_vocab) -> Result<&'a llama_vocab, FfiError> {
    // SAFETY: the caller's contract is `check`'s.
    unsafe { check(ptr) }
}

/// Borrows a context handle after checking it is live.
///
/// # Safety
/// As [`check`].
pub(crate) unsafe fn context<'a>(ptr: *const llama_context) -> Result<&'a llama_context, FfiError> {
    // SAFETY: the caller's contract is `check`'s.
    unsafe { check(ptr) }
}

/// Frees a model handle (its vocab handle dies with it). NULL is a no-op.
///
/// # Safety
/// As [`check`]; the pointer must not be used afterwards.
pub(crate) unsafe fn free_model(ptr: *mut llama_model) -> Result<(), FfiError> {
    // SAFETY: the caller's contract.
    unsafe {
        free(ptr, |m| {
            unregister(&*m.vocab as *const llama_vocab);
            let loras = std::mem::take(&mut *m.loras.lock().unwrap_or_else(|e| e.into_inner()));
            for a in loras {
                let a = a as *mut llama_adapter_lora;
                if unregister(a.cast_const()) {
                    // SAFETY: it was live, so it came from `Box::into_raw` and is freed once.
                    drop(Box::from_raw(a));
                }
            }
        })
    }
}

/// Frees a context handle. NULL is a no-op.
///
/// # Safety
/// As [`check`]; the pointer must not be used afterwards.
pub(crate) unsafe fn free_context(ptr: *mut llama_context) -> Result<(), FfiError> {
    // SAFETY: the caller's contract.
    unsafe { free(ptr, |_| {}) }
}

// The ggml device handles (`ffi/device.rs` makes and checks them); here, beside the other
// handle types, so that `ffi/types.rs` can name them without importing the device API.

/// A device (`struct ggml_backend_device`); internals private.
pub struct ggml_backend_device {
    pub(super) magic: u64,
    pub(super) index: usize,
    pub(super) name: std::ffi::CString,
    pub(super) description: std::ffi::CString,
}

/// A buffer type (`struct ggml_backend_buffer_type`); internals private. Each device has one,
/// its default buffer type, named like the device ("CPU", "VGPU0").
pub struct ggml_backend_buffer_type {
    pub(super) magic: u64,
    pub(super) device: usize,
}
