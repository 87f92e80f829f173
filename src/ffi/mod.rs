//! The C boundary: the only module with `extern "C"`, `#[no_mangle]` and raw pointers.
//!
//! Every export that takes a handle or caller data runs its body through [`boundary!`]:
//! pointer checks return [`FfiError`]s with `?`, panics are caught (nothing unwinds into C),
//! and any failure is logged as `"<function>: <reason>"` and turned into the function's
//! documented failure value. The exports that do not (constants such as `llama_max_devices`,
//! the `*_default_params` constructors, and deprecated aliases that forward to an export that
//! does) cannot fail; should one panic anyway, the panic aborts the process at the `extern
//! "C"` edge (Rust ≥ 1.81, the crate's `rust-version`) instead of unwinding into C.
//! Functions outside the current scope use [`unsupported!`]: one log line per function,
//! then the failure value.
//!
//! Files follow llama.h's areas. cbindgen reads them in the order of the `mod` lines below,
//! which is the order of the generated header; `ext` (our `llama_ext_*` extensions) is last.

use std::ffi::{c_char, CStr};
use std::fmt;

/// Why an export failed. Displayed after the function name in the log line.
#[derive(Debug)]
pub enum FfiError {
    /// A required pointer argument was NULL.
    Null(&'static str),
    /// A pointer that is not a live handle of this kind: freed, foreign or wild.
    BadHandle(&'static str),
    /// An argument outside its documented range.
    Invalid(String),
    /// The core refused the operation; the text names file, tensor and reason.
    Core(String),
}

impl fmt::Display for FfiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FfiError::Null(what) => write!(f, "{what} is NULL"),
            FfiError::BadHandle(what) => {
                write!(
                    f,
                    "{what} is not a live handle of this library (freed or foreign pointer?)"
                )
            }
            FfiError::Invalid(msg) | FfiError::Core(msg) => f.write_str(msg),
        }
    }
}

pub(crate) use crate::log::panic_message;

/// Runs an export's body (an expression of type `Result<T, FfiError>`), returning `T`, or
/// `$fail` after logging when the body fails or panics.
macro_rules! boundary {
    ($name:literal, $fail:expr, $body:block) => {{
        #[allow(clippy::redundant_closure_call)]
        let outcome = ::std::panic::catch_unwind(::std::panic::AssertUnwindSafe(
            || -> ::std::result::Result<_, $crate::ffi::FfiError> { $body },
        ));
        match outcome {
            Ok(Ok(value)) => value,
            Ok(Err(error)) => {
                $crate::log_error!("{}: {}", $name, error);
                $fail
            }
            Err(payload) => {
                $crate::log_error!(
                    "{}: internal error ({}); returning the failure value",
                    $name,
                    $crate::ffi::panic_message(&*payload)
                );
                $fail
            }
        }
    }};
}

/// Body of a getter: `$value` computed from the live object behind `$handle`, reached through
/// `$with` (`with_model`, `with_vocab`: check the handle, then run the closure), inside
/// [`boundary!`]. `getter!(with_model, "llama_model_n_embd", model, -1, |m| m.hparams.n_embd)`.
/// The export's contract is that `$handle` is NULL or a live handle of that kind.
macro_rules! getter {
    ($with:ident, $name:literal, $handle:ident, $fail:expr, |$obj:ident| $value:expr) => {
        boundary!($name, $fail, {
            // SAFETY: `$with` looks `$handle` up in the registry of live handles before
            // dereferencing it; the export's contract is that it is not freed meanwhile.
            unsafe { $with($handle, |$obj| $value) }
        })
    };
}

/// Body of a function llama-hotswap does not implement yet: logs once per function, returns
/// the documented failure value.
macro_rules! unsupported {
    ($name:literal, $fail:expr) => {{
        static ONCE: ::std::sync::Once = ::std::sync::Once::new();
        ONCE.call_once(|| $crate::log_warn!("{}: not supported by llama-hotswap yet", $name));
        $fail
    }};
    ($name:literal) => {
        unsupported!($name, ())
    };
}

/// Borrows a C string argument as UTF-8 (lossy for invalid bytes, which file names and keys
/// from C may contain).
///
/// # Safety
/// `ptr` must be NULL or point to a NUL-terminated string that outlives the borrow.
pub(crate) unsafe fn c_str<'a>(
    ptr: *const c_char,
    what: &'static str,
) -> Result<std::borrow::Cow<'a, str>, FfiError> {
    if ptr.is_null() {
        return Err(FfiError::Null(what));
    }
    // SAFETY: non-NULL and NUL-terminated per the caller's contract.
    Ok(unsafe { CStr::from_ptr(ptr) }.to_string_lossy())
}

/// Writes `text` like `snprintf(buf, buf_size, "%s", text)`: at most `buf_size - 1` bytes and
/// a NUL when `buf_size > 0`; returns the full length (saturated to `i32::MAX`).
///
/// # Safety
/// `buf` must be NULL or valid for `buf_size` bytes of writes.
pub(crate) unsafe fn write_snprintf(buf: *mut c_char, buf_size: usize, text: &[u8]) -> i32 {
    if !buf.is_null() && buf_size > 0 {
        let n = text.len().min(buf_size - 1);
        // SAFETY: `buf` is valid for `buf_size` bytes and `n < buf_size`.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), n);
            *buf.add(n) = 0;
        }
    }
    i32::try_from(text.len()).unwrap_or(i32::MAX)
}

pub mod types;

pub mod adapter;
pub mod backend;
pub mod batch;
pub(crate) mod clock;
pub mod context;
pub mod device;
mod eval_callback;
pub mod ext;
pub mod handles;
mod libggml_rpc;
pub mod memory;
pub mod model;
pub mod model_user;
pub mod opt;
pub mod perf;
pub(crate) mod perf_counters;
pub mod quantize;
pub(crate) mod sampled;
pub mod sampling;
pub mod state;
pub mod threadpool;
pub mod tokenize;
// Chat templates right after tokenization in the header, as in upstream's llama.h.
pub mod chat;
pub mod vocab;
