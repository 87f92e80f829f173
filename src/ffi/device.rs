//! ggml device API (`ggml_backend_dev_*`, `ggml_backend_buft_*`) for hosts that enumerate
//! devices and drive placement from C.
//!
//! Devices are those of [`crate::device::Registry::global`]: the virtual GPUs of
//! `LLAMA_VIRTUAL_GPUS` (`VGPU0`, …) first, then the CPU, as upstream registers GPU backends
//! before the CPU backend (CUDA devices, when present, come first). Device and buffer-type handles are
//! created once and live as long as the process, like upstream's.
//!
//! **Beside upstream's libggml** (a program built against llama.cpp: libllama-common and the
//! tools link libggml too, see docs/dropin.md) these exports must not interpose libggml's
//! with another meaning: the dynamic linker binds every `ggml_backend_dev_*` call in the
//! process, libggml's own included, to whichever library comes first. So each export first
//! looks for libggml's definition of the same name (`dlsym`, [`libggml`]) and, when there is
//! one, forwards to it: the program and libggml only ever see libggml's handles. Only a handle
//! of ours (address check, never read through) is still answered here. Where llama.h takes a
//! handle (`devices`, `tensor_buft_overrides`), a libggml handle is mapped to our device of
//! the same name ([`device_index`]); handles we give out are libggml's for the device of that
//! name when libggml is loaded ([`program_device`], [`program_buft`]).
//!
//! Upstream asserts (aborts) on a NULL handle or an out-of-range index; here such a call logs
//! one line naming the function and returns the failure value documented on the function.
//! A handle that is not one of ours is recognised by its address, without reading through it.

use std::ffi::{c_char, c_void, CStr, CString};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::OnceLock;

use super::handles::{ggml_backend_buffer_type, ggml_backend_device};
use super::types::*;
use super::{c_str, FfiError};
use crate::device::{Device, DeviceType, Registry};

const DEVICE_MAGIC: u64 = 0x6c68_7377_6465_7601; // "lhswdev" + 1
const BUFT_MAGIC: u64 = 0x6c68_7377_6275_6601; // "lhswbuf" + 1

/// The leaked, process-lifetime handle arrays, parallel to the registry's devices.
struct Handles {
    devices: &'static [ggml_backend_device],
    bufts: &'static [ggml_backend_buffer_type],
}

/// C strings of a Rust string: interior NULs (impossible for our names) become spaces.
fn c_string(text: &str) -> CString {
    CString::new(text.replace('\0', " ")).unwrap_or_default()
}

static HANDLES: OnceLock<Handles> = OnceLock::new();

fn handles() -> &'static Handles {
    HANDLES.get_or_init(|| {
        let registry = Registry::global();
        let devices: Vec<ggml_backend_device> = registry
            .devices()
            .iter()
            .map(|d| ggml_backend_device {
                magic: DEVICE_MAGIC,
                index: d.index(),
                name: c_string(d.name()),
                description: c_string(d.description()),
            })
            .collect();
        let bufts: Vec<ggml_backend_buffer_type> = registry
            .devices()
            .iter()
            .map(|d| ggml_backend_buffer_type {
                magic: BUFT_MAGIC,
                device: d.index(),
            })
            .collect();
        Handles {
            devices: Box::leak(devices.into_boxed_slice()),
            bufts: Box::leak(bufts.into_boxed_slice()),
        }
    })
}

/// The element of `slice` that `ptr` points to, decided from the address alone (a foreign
/// pointer is never dereferenced).
fn element_of<T>(slice: &'static [T], ptr: *const T) -> Option<&'static T> {
    let size = std::mem::size_of::<T>();
    let base = slice.as_ptr() as usize;
    let offset = (ptr as usize).checked_sub(base)?;
    if size == 0 || offset % size != 0 {
        return None;
    }
    slice.get(offset / size)
}

/// Whether `ptr` is one of our device handles, without creating them (a program that only
/// talks to libggml never makes this library probe its devices).
fn is_our_device(ptr: ggml_backend_dev_t) -> bool {
    HANDLES.get().is_some() && device_handle(ptr).is_ok()
}

/// As [`is_our_device`], for buffer types.
fn is_our_buft(ptr: ggml_backend_buffer_type_t) -> bool {
    HANDLES.get().is_some() && buft_handle(ptr).is_ok()
}

fn device_handle(ptr: ggml_backend_dev_t) -> Result<&'static ggml_backend_device, FfiError> {
    if ptr.is_null() {
        return Err(FfiError::Null("device"));
    }
    element_of(handles().devices, ptr.cast_const())
        .filter(|h| h.magic == DEVICE_MAGIC)
        .ok_or(FfiError::BadHandle("device"))
}

fn buft_handle(
    ptr: ggml_backend_buffer_type_t,
) -> Result<&'static ggml_backend_buffer_type, FfiError> {
    if ptr.is_null() {
        return Err(FfiError::Null("buft"));
    }
    element_of(handles().bufts, ptr.cast_const())
        .filter(|h| h.magic == BUFT_MAGIC)
        .ok_or(FfiError::BadHandle("buft"))
}

fn registry_device(handle: &ggml_backend_device) -> Result<&'static Device, FfiError> {
    Registry::global()
        .get(handle.index)
        .ok_or(FfiError::BadHandle("device"))
}

fn dev_ptr(index: usize) -> ggml_backend_dev_t {
    let handle: *const ggml_backend_device = &handles().devices[index];
    handle.cast_mut()
}

fn buft_ptr(index: usize) -> ggml_backend_buffer_type_t {
    let handle: *const ggml_backend_buffer_type = &handles().bufts[index];
    handle.cast_mut()
}

// ---------------------------------------------------------------------------------------------
// libggml in the same process
// ---------------------------------------------------------------------------------------------

/// Whether `address` lies in this library (the object that holds this function).
fn in_this_library(address: *mut c_void) -> bool {
    static OWN_BASE: OnceLock<usize> = OnceLock::new();
    let base_of = |a: *const c_void| {
        // SAFETY: dladdr only inspects the loader's tables; `info` is a plain out-struct.
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::dladdr(a, &mut info) } == 0 {
            0
        } else {
            info.dli_fbase as usize
        }
    };
    let own = *OWN_BASE.get_or_init(|| base_of(in_this_library as *const c_void));
    own != 0 && base_of(address) == own
}

/// libggml's definition of `name` when a libggml is loaded in this process besides us: the
/// global lookup's answer unless it is our own export, else the next definition after ours.
fn ggml_symbol(name: &CStr) -> Option<*mut c_void> {
    // SAFETY: dlsym with a pseudo-handle and a C string only reads the loader's tables.
    let global = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    if !global.is_null() && !in_this_library(global) {
        return Some(global);
    }
    // SAFETY: as above; RTLD_NEXT searches the objects loaded after this library.
    let next = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
    (!next.is_null() && !in_this_library(next)).then_some(next)
}

/// One libggml function, resolved on first use and remembered once found (libggml is never
/// unloaded behind a running program; while it is absent every call looks again, so a
/// libggml `dlopen`ed later is picked up).
struct GgmlFn {
    name: &'static CStr,
    found: AtomicPtr<c_void>,
}

impl GgmlFn {
    const fn new(name: &'static CStr) -> GgmlFn {
        GgmlFn {
            name,
            found: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    fn get(&self) -> Option<*mut c_void> {
        let known = self.found.load(Ordering::Acquire);
        if !known.is_null() {
            return Some(known);
        }
        let address = ggml_symbol(self.name)?;
        self.found.store(address, Ordering::Release);
        Some(address)
    }
}

/// Declares the libggml functions this module calls, each as `name() -> Option<fn type>`.
macro_rules! ggml_fns {
    ($($name:ident: $ty:ty;)*) => {
        mod libggml_fns {
            #![allow(non_upper_case_globals)]
            $(pub static $name: super::GgmlFn = super::GgmlFn::new(
                match ::std::ffi::CStr::from_bytes_with_nul(concat!(stringify!($name), "\0").as_bytes()) {
                    Ok(name) => name,
                    Err(_) => panic!("symbol name"),
                });)*
        }
        /// libggml's functions, when libggml is loaded in the process.
        pub(super) mod libggml {
            #![allow(non_snake_case)]
            #[allow(unused_imports)]
            use super::*;
            $(pub fn $name() -> Option<$ty> {
                let address = super::libggml_fns::$name.get()?;
                // SAFETY: libggml's symbol of this name has this C type (ggml-backend.h).
                Some(unsafe { std::mem::transmute::<*mut std::ffi::c_void, $ty>(address) })
            })*
        }
    };
}

ggml_fns! {
    ggml_threadpool_get_n_threads: unsafe extern "C" fn(ggml_threadpool_t) -> std::ffi::c_int;
    ggml_threadpool_pause: unsafe extern "C" fn(ggml_threadpool_t);
    ggml_backend_dev_count: unsafe extern "C" fn() -> usize;
    ggml_backend_dev_get: unsafe extern "C" fn(usize) -> ggml_backend_dev_t;
    ggml_backend_dev_by_name: unsafe extern "C" fn(*const c_char) -> ggml_backend_dev_t;
    ggml_backend_dev_by_type: unsafe extern "C" fn(GgmlBackendDevType) -> ggml_backend_dev_t;
    ggml_backend_dev_name: unsafe extern "C" fn(ggml_backend_dev_t) -> *const c_char;
    ggml_backend_dev_description: unsafe extern "C" fn(ggml_backend_dev_t) -> *const c_char;
    ggml_backend_dev_memory: unsafe extern "C" fn(ggml_backend_dev_t, *mut usize, *mut usize);
    ggml_backend_dev_type: unsafe extern "C" fn(ggml_backend_dev_t) -> GgmlBackendDevType;
    ggml_backend_dev_get_props: unsafe extern "C" fn(ggml_backend_dev_t, *mut ggml_backend_dev_props);
    ggml_backend_dev_buffer_type: unsafe extern "C" fn(ggml_backend_dev_t) -> ggml_backend_buffer_type_t;
    ggml_backend_dev_host_buffer_type: unsafe extern "C" fn(ggml_backend_dev_t) -> ggml_backend_buffer_type_t;
    ggml_backend_dev_backend_reg: unsafe extern "C" fn(ggml_backend_dev_t) -> *mut c_void;
    ggml_backend_reg_get_proc_address: unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;
    ggml_backend_reg_name: unsafe extern "C" fn(*mut c_void) -> *const c_char;
    ggml_backend_cpu_buffer_type: unsafe extern "C" fn() -> ggml_backend_buffer_type_t;
    ggml_backend_buft_name: unsafe extern "C" fn(ggml_backend_buffer_type_t) -> *const c_char;
    ggml_backend_load_all: unsafe extern "C" fn();
    gguf_get_meta_size: unsafe extern "C" fn(*const gguf_context) -> usize;
    gguf_get_meta_data: unsafe extern "C" fn(*const gguf_context, *mut c_void);
    ggml_backend_cpu_buffer_from_ptr: unsafe extern "C" fn(*mut c_void, usize) -> *mut c_void;
    ggml_backend_buffer_free: unsafe extern "C" fn(*mut c_void);
}

/// The GGUF image of a libggml `gguf_context` without tensor data (header, key/value
/// pairs, tensor infos: libggml's `gguf_get_meta_data`); None when libggml is not loaded in
/// the process.
///
/// # Safety
/// `ctx` must be a live `gguf_context` made by that libggml.
pub(crate) unsafe fn gguf_meta_bytes(ctx: *const gguf_context) -> Option<Vec<u8>> {
    let size = libggml::gguf_get_meta_size()?;
    let data = libggml::gguf_get_meta_data()?;
    // SAFETY: libggml's own function on its context, per the caller's contract.
    let n = unsafe { size(ctx) };
    let mut bytes = vec![0u8; n];
    // SAFETY: `bytes` holds the `gguf_get_meta_size` bytes `gguf_get_meta_data` writes.
    unsafe { data(ctx, bytes.as_mut_ptr().cast()) };
    Some(bytes)
}

/// A libggml CPU buffer over `len` bytes at `ptr` (libggml's
/// `ggml_backend_cpu_buffer_from_ptr`, which neither owns nor frees them), so that a host's
/// `ggml_backend_tensor_set` on a tensor in it writes there; None without libggml. Free it
/// with [`free_buffer`].
///
/// # Safety
/// `ptr` must be 32-byte aligned and valid for `len` bytes while the buffer is used.
pub(crate) unsafe fn cpu_buffer_from_ptr(ptr: *mut c_void, len: usize) -> Option<*mut c_void> {
    let f = libggml::ggml_backend_cpu_buffer_from_ptr()?;
    libggml::ggml_backend_buffer_free()?;
    // SAFETY: per the caller's contract (libggml asserts the alignment).
    let buffer = unsafe { f(ptr, len) };
    (!buffer.is_null()).then_some(buffer)
}

/// Frees a buffer made by [`cpu_buffer_from_ptr`].
///
/// # Safety
/// `buffer` came from [`cpu_buffer_from_ptr`] and is not used afterwards.
pub(crate) unsafe fn free_buffer(buffer: *mut c_void) {
    if let Some(f) = libggml::ggml_backend_buffer_free() {
        // SAFETY: libggml's buffer, freed once, per the caller's contract.
        unsafe { f(buffer) };
    }
}

/// The thread count of a ggml threadpool (libggml-cpu's `ggml_threadpool_get_n_threads`),
/// when libggml-cpu is loaded in the process; None otherwise.
///
/// # Safety
/// `pool` must be a live threadpool made by that libggml-cpu (`ggml_threadpool_new`).
pub(crate) unsafe fn threadpool_n_threads(pool: ggml_threadpool_t) -> Option<i32> {
    let f = libggml::ggml_threadpool_get_n_threads()?;
    // SAFETY: libggml-cpu's own function on a pool it made, per the caller's contract.
    Some(unsafe { f(pool) })
}

/// Pauses a ggml threadpool (libggml-cpu's `ggml_threadpool_pause`: its threads sleep on its
/// condition variable instead of polling for a graph; libggml-cpu resumes it by itself when a
/// graph is computed on it). Whether libggml-cpu was there to do it.
///
/// # Safety
/// `pool` must be a live threadpool made by that libggml-cpu (`ggml_threadpool_new`).
pub(crate) unsafe fn threadpool_pause(pool: ggml_threadpool_t) -> bool {
    let Some(f) = libggml::ggml_threadpool_pause() else {
        return false;
    };
    // SAFETY: libggml-cpu's own function on a pool it made, per the caller's contract.
    unsafe { f(pool) };
    true
}

/// Whether upstream's libggml is loaded in this process (then the program's device handles
/// are libggml's).
pub(crate) fn libggml_loaded() -> bool {
    libggml::ggml_backend_dev_get().is_some() && libggml::ggml_backend_dev_count().is_some()
}

/// libggml's devices, in its registry order (empty without libggml).
pub(super) fn libggml_devices() -> Vec<ggml_backend_dev_t> {
    let (Some(count), Some(get)) = (
        libggml::ggml_backend_dev_count(),
        libggml::ggml_backend_dev_get(),
    ) else {
        return Vec::new();
    };
    // SAFETY: libggml's own functions, called as ggml-backend.h declares them.
    let n = unsafe { count() };
    // SAFETY: as above, with an index below the count.
    (0..n).map(|i| unsafe { get(i) }).collect()
}

/// A C string from libggml as text ("" for NULL).
pub(super) fn ggml_text(text: *const c_char) -> String {
    if text.is_null() {
        return String::new();
    }
    // SAFETY: libggml returns NUL-terminated strings that live as long as the device.
    unsafe { CStr::from_ptr(text) }
        .to_string_lossy()
        .into_owned()
}

/// Our registry device for one of libggml's device handles: the one of the same name
/// (case-insensitive, as `ggml_backend_dev_by_name`), else the CPU for a libggml CPU device.
/// The handle is first checked to be one libggml enumerates (so a stray pointer is never
/// read through).
fn map_libggml_device(ptr: ggml_backend_dev_t) -> Result<usize, FfiError> {
    if !libggml_devices().contains(&ptr) {
        return Err(FfiError::BadHandle("device"));
    }
    let (Some(name), Some(kind)) = (
        libggml::ggml_backend_dev_name(),
        libggml::ggml_backend_dev_type(),
    ) else {
        return Err(FfiError::BadHandle("device"));
    };
    // SAFETY: `ptr` is one of libggml's live devices (checked above).
    let name = ggml_text(unsafe { name(ptr) });
    let registry = Registry::global();
    if let Some(device) = registry.by_name(&name) {
        return Ok(device.index());
    }
    // SAFETY: as above.
    let kind = unsafe { kind(ptr) };
    if kind.0 == ggml_backend_dev_type::GGML_BACKEND_DEVICE_TYPE_CPU as i32 {
        return Ok(registry.cpu().index());
    }
    Err(FfiError::Invalid(format!(
        "libggml device '{name}' has no counterpart among this library's devices ({})",
        registry
            .devices()
            .iter()
            .map(|d| d.name())
            .collect::<Vec<_>>()
            .join(", ")
    )))
}

/// Our registry device for one of libggml's buffer types: the device whose default or host
/// buffer type it is, or the CPU for the CPU device's extra buffer types (`CPU_REPACK`, …).
fn map_libggml_buft(ptr: ggml_backend_buffer_type_t) -> Result<usize, FfiError> {
    let devices = libggml_devices();
    let default_buft = libggml::ggml_backend_dev_buffer_type();
    let host_buft = libggml::ggml_backend_dev_host_buffer_type();
    let cpu = Registry::global().cpu().index();
    for &dev in &devices {
        // SAFETY: libggml's own device handles, passed to libggml's functions.
        if default_buft.is_some_and(|f| unsafe { f(dev) } == ptr) {
            return map_libggml_device(dev);
        }
        // SAFETY: as above (the host buffer type may be NULL, which never equals `ptr`).
        if host_buft.is_some_and(|f| unsafe { f(dev) } == ptr) {
            return Ok(cpu);
        }
        if cpu_extra_bufts(dev).contains(&ptr) {
            return Ok(cpu);
        }
    }
    Err(FfiError::BadHandle("buft"))
}

/// A libggml device's extra buffer types (its registry's `ggml_backend_dev_get_extra_bufts`;
/// the CPU backend's repacking types), empty when it has none.
fn cpu_extra_bufts(dev: ggml_backend_dev_t) -> Vec<ggml_backend_buffer_type_t> {
    let (Some(reg_of), Some(proc_address)) = (
        libggml::ggml_backend_dev_backend_reg(),
        libggml::ggml_backend_reg_get_proc_address(),
    ) else {
        return Vec::new();
    };
    // SAFETY: libggml's device handle and functions.
    let reg = unsafe { reg_of(dev) };
    if reg.is_null() {
        return Vec::new();
    }
    // SAFETY: as above; the name is a C string.
    let f = unsafe { proc_address(reg, c"ggml_backend_dev_get_extra_bufts".as_ptr()) };
    if f.is_null() {
        return Vec::new();
    }
    // SAFETY: ggml-backend.h: `ggml_backend_buffer_type_t * (*)(ggml_backend_dev_t)`, a
    // NULL-terminated array owned by the backend.
    let get: unsafe extern "C" fn(ggml_backend_dev_t) -> *mut ggml_backend_buffer_type_t =
        unsafe { std::mem::transmute::<*mut c_void, _>(f) };
    // SAFETY: as above.
    let mut p = unsafe { get(dev) };
    let mut out = Vec::new();
    while !p.is_null() {
        // SAFETY: a NULL-terminated array; we stop at the terminator.
        let buft = unsafe { *p };
        if buft.is_null() {
            break;
        }
        out.push(buft);
        // SAFETY: still inside the array (the terminator is further on).
        p = unsafe { p.add(1) };
    }
    out
}

/// The registry index of a device handle from the host: one of ours, or (with libggml in the
/// process) one of libggml's, mapped by name. NULL and unknown handles are errors.
pub(crate) fn device_index(ptr: ggml_backend_dev_t) -> Result<usize, FfiError> {
    match device_handle(ptr) {
        Ok(h) => Ok(h.index),
        Err(FfiError::BadHandle(_)) if libggml_loaded() => map_libggml_device(ptr),
        Err(e) => Err(e),
    }
}

/// The registry index of the device a buffer-type handle belongs to (ours, or libggml's
/// mapped as [`device_index`]).
pub(crate) fn buft_device_index(ptr: ggml_backend_buffer_type_t) -> Result<usize, FfiError> {
    match buft_handle(ptr) {
        Ok(h) => Ok(h.device),
        Err(FfiError::BadHandle(_)) if libggml_loaded() => map_libggml_buft(ptr),
        Err(e) => Err(e),
    }
}

/// The handle a program should get for registry device `index`: libggml's device of the same
/// name when libggml is loaded and has one (the CPU: libggml's CPU device), else ours.
pub(crate) fn program_device(index: usize) -> ggml_backend_dev_t {
    let ours = dev_ptr(index);
    let Some(device) = Registry::global().get(index) else {
        return std::ptr::null_mut();
    };
    if !libggml_loaded() {
        return ours;
    }
    let wanted_cpu = device.device_type() == DeviceType::Cpu;
    let (name_of, type_of) = (
        libggml::ggml_backend_dev_name(),
        libggml::ggml_backend_dev_type(),
    );
    for dev in libggml_devices() {
        // SAFETY: libggml's own device handles, passed to libggml's functions.
        let same_name = name_of
            .is_some_and(|f| ggml_text(unsafe { f(dev) }).eq_ignore_ascii_case(device.name()));
        // SAFETY: as above.
        let both_cpu = wanted_cpu
            && type_of.is_some_and(|f| {
                unsafe { f(dev) }.0 == ggml_backend_dev_type::GGML_BACKEND_DEVICE_TYPE_CPU as i32
            });
        if same_name || both_cpu {
            return dev;
        }
    }
    ours
}

/// The buffer-type handle a program should get for registry device `index`'s memory: the
/// default buffer type of [`program_device`] (libggml's when that device is libggml's).
pub(crate) fn program_buft(index: usize) -> ggml_backend_buffer_type_t {
    let dev = program_device(index);
    if dev.is_null() {
        return std::ptr::null_mut();
    }
    if device_handle(dev).is_ok() {
        return buft_ptr(index);
    }
    match libggml::ggml_backend_dev_buffer_type() {
        // SAFETY: libggml's device, passed to libggml's function.
        Some(f) => unsafe { f(dev) },
        None => buft_ptr(index),
    }
}

/// Number of devices: the virtual GPUs plus the CPU (always at least 1). With upstream's
/// libggml in the process: libggml's answer, as for every `ggml_*` function of this library
/// (see docs/dropin.md).
#[no_mangle]
pub extern "C" fn ggml_backend_dev_count() -> usize {
    if let Some(f) = libggml::ggml_backend_dev_count() {
        // SAFETY: libggml's function of the same name and type.
        return unsafe { f() };
    }
    boundary!("ggml_backend_dev_count", 0, { Ok(handles().devices.len()) })
}

/// Device `index` in registry order (GPUs first, CPU last). The handle is valid for the life
/// of the process. An index `>= ggml_backend_dev_count()` logs an error and returns NULL
/// (upstream asserts).
#[no_mangle]
pub extern "C" fn ggml_backend_dev_get(index: usize) -> ggml_backend_dev_t {
    if let Some(f) = libggml::ggml_backend_dev_get() {
        // SAFETY: libggml's function of the same name and type.
        return unsafe { f(index) };
    }
    boundary!("ggml_backend_dev_get", std::ptr::null_mut(), {
        let count = handles().devices.len();
        if index >= count {
            return Err(FfiError::Invalid(format!(
                "device index {index} out of range (device count {count})"
            )));
        }
        Ok(dev_ptr(index))
    })
}

/// The device with this name, compared case-insensitively as upstream ("cpu", "vgpu0"); NULL
/// when there is none. A NULL name logs an error and returns NULL.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_dev_by_name(name: *const c_char) -> ggml_backend_dev_t {
    if let Some(f) = libggml::ggml_backend_dev_by_name() {
        // SAFETY: libggml's function of the same name and type; the caller's contract.
        return unsafe { f(name) };
    }
    boundary!("ggml_backend_dev_by_name", std::ptr::null_mut(), {
        // SAFETY: NULL or a C string per the API contract.
        let name = unsafe { c_str(name, "name") }?;
        Ok(Registry::global()
            .by_name(&name)
            .map_or(std::ptr::null_mut(), |d| dev_ptr(d.index())))
    })
}

/// The first device of this type (GPU: `VGPU0`; CPU: the CPU), or NULL when there is none. A
/// value outside `enum ggml_backend_dev_type` logs an error and returns NULL.
#[no_mangle]
pub extern "C" fn ggml_backend_dev_by_type(r#type: GgmlBackendDevType) -> ggml_backend_dev_t {
    if let Some(f) = libggml::ggml_backend_dev_by_type() {
        // SAFETY: libggml's function of the same name and type.
        return unsafe { f(r#type) };
    }
    boundary!("ggml_backend_dev_by_type", std::ptr::null_mut(), {
        let wanted = DeviceType::from_raw(r#type.0)
            .ok_or_else(|| FfiError::Invalid(format!("invalid device type {}", r#type.0)))?;
        Ok(Registry::global()
            .by_type(wanted)
            .map_or(std::ptr::null_mut(), |d| dev_ptr(d.index())))
    })
}

/// Forwards a call that takes a device (or buffer-type) handle to libggml, unless the handle
/// is one of ours (then the body below it answers) or libggml is not loaded.
macro_rules! forward_unless_ours {
    ($ours:expr, $fn:ident, ($($arg:expr),*)) => {
        if !$ours {
            if let Some(f) = libggml::$fn() {
                // SAFETY: libggml's function of the same name and type, with the caller's
                // arguments (the handle is not ours, so it is libggml's or invalid for both).
                return unsafe { f($($arg),*) };
            }
        }
    };
}

/// The device's name ("CPU", "VGPU0", …), a static string. NULL and a log line for a NULL or
/// foreign handle.
#[no_mangle]
pub extern "C" fn ggml_backend_dev_name(device: ggml_backend_dev_t) -> *const c_char {
    forward_unless_ours!(is_our_device(device), ggml_backend_dev_name, (device));
    boundary!("ggml_backend_dev_name", std::ptr::null(), {
        Ok(device_handle(device)?.name.as_ptr())
    })
}

/// The device's description (the CPU model from /proc/cpuinfo, or "llama-hotswap virtual GPU
/// (24 GiB)"), a static string. NULL and a log line for a NULL or foreign handle.
#[no_mangle]
pub extern "C" fn ggml_backend_dev_description(device: ggml_backend_dev_t) -> *const c_char {
    forward_unless_ours!(
        is_our_device(device),
        ggml_backend_dev_description,
        (device)
    );
    boundary!("ggml_backend_dev_description", std::ptr::null(), {
        Ok(device_handle(device)?.description.as_ptr())
    })
}

/// Writes the device's free and total memory in bytes. A virtual GPU reports
/// `capacity - used` and its capacity; the CPU reports its physical memory for both, as
/// upstream. For a NULL or foreign handle, logs an error and writes 0 to both; a NULL
/// out-pointer logs an error and is skipped.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_dev_memory(
    device: ggml_backend_dev_t,
    free: *mut usize,
    total: *mut usize,
) {
    forward_unless_ours!(
        is_our_device(device),
        ggml_backend_dev_memory,
        (device, free, total)
    );
    let write = |f: usize, t: usize| {
        if !free.is_null() {
            // SAFETY: non-NULL out-pointer provided by the caller.
            unsafe { *free = f };
        }
        if !total.is_null() {
            // SAFETY: as above.
            unsafe { *total = t };
        }
    };
    boundary!("ggml_backend_dev_memory", (), {
        let device = match device_handle(device).and_then(registry_device) {
            Ok(device) => device,
            Err(e) => {
                write(0, 0);
                return Err(e);
            }
        };
        let memory = device.memory();
        let to_usize = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
        write(to_usize(memory.free), to_usize(memory.total));
        if free.is_null() {
            return Err(FfiError::Null("free"));
        }
        if total.is_null() {
            return Err(FfiError::Null("total"));
        }
        Ok(())
    })
}

/// The device's type: GGML_BACKEND_DEVICE_TYPE_GPU for a virtual GPU, _CPU for the CPU. For a
/// NULL or foreign handle, logs an error and returns GGML_BACKEND_DEVICE_TYPE_CPU (the answer
/// that never offloads).
#[no_mangle]
pub extern "C" fn ggml_backend_dev_type(device: ggml_backend_dev_t) -> GgmlBackendDevType {
    forward_unless_ours!(is_our_device(device), ggml_backend_dev_type, (device));
    let cpu = GgmlBackendDevType(ggml_backend_dev_type::GGML_BACKEND_DEVICE_TYPE_CPU as i32);
    boundary!("ggml_backend_dev_type", cpu, {
        let device = registry_device(device_handle(device)?)?;
        Ok(GgmlBackendDevType(device.device_type() as i32))
    })
}

/// Fills `props` (zeroed first, as upstream): name, description, memory and type as the
/// functions above; `device_id` NULL (no PCI id); capabilities: the CPU as upstream's CPU
/// device (buffer_from_host_ptr, mmap_support), a virtual GPU as a discrete GPU that loads
/// from mapped files (mmap_support only). A NULL `props` logs an error; a NULL or foreign
/// handle logs an error and leaves `props` zeroed.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_dev_get_props(
    device: ggml_backend_dev_t,
    props: *mut ggml_backend_dev_props,
) {
    forward_unless_ours!(
        is_our_device(device),
        ggml_backend_dev_get_props,
        (device, props)
    );
    boundary!("ggml_backend_dev_get_props", (), {
        if props.is_null() {
            return Err(FfiError::Null("props"));
        }
        let zeroed = ggml_backend_dev_props {
            name: std::ptr::null(),
            description: std::ptr::null(),
            memory_free: 0,
            memory_total: 0,
            r#type: GgmlBackendDevType(0),
            device_id: std::ptr::null(),
            caps: ggml_backend_dev_caps::default(),
        };
        // SAFETY: non-NULL and pointing to a props struct per the API contract.
        unsafe { props.write(zeroed) };
        let handle = device_handle(device)?;
        let device = registry_device(handle)?;
        let memory = device.memory();
        let to_usize = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
        let is_cpu = device.device_type() == DeviceType::Cpu;
        let filled = ggml_backend_dev_props {
            name: handle.name.as_ptr(),
            description: handle.description.as_ptr(),
            memory_free: to_usize(memory.free),
            memory_total: to_usize(memory.total),
            r#type: GgmlBackendDevType(device.device_type() as i32),
            device_id: std::ptr::null(),
            caps: ggml_backend_dev_caps {
                r#async: false,
                host_buffer: false,
                buffer_from_host_ptr: is_cpu,
                events: false,
                mmap_support: true,
            },
        };
        // SAFETY: as above.
        unsafe { props.write(filled) };
        Ok(())
    })
}

/// The device's default buffer type (named like the device), valid for the life of the
/// process; for the CPU the same handle as `ggml_backend_cpu_buffer_type()`. NULL and a log
/// line for a NULL or foreign handle.
#[no_mangle]
pub extern "C" fn ggml_backend_dev_buffer_type(
    device: ggml_backend_dev_t,
) -> ggml_backend_buffer_type_t {
    forward_unless_ours!(
        is_our_device(device),
        ggml_backend_dev_buffer_type,
        (device)
    );
    boundary!("ggml_backend_dev_buffer_type", std::ptr::null_mut(), {
        Ok(buft_ptr(device_handle(device)?.index))
    })
}

/// The CPU buffer type ("CPU"), valid for the life of the process.
#[no_mangle]
pub extern "C" fn ggml_backend_cpu_buffer_type() -> ggml_backend_buffer_type_t {
    forward_unless_ours!(false, ggml_backend_cpu_buffer_type, ());
    boundary!("ggml_backend_cpu_buffer_type", std::ptr::null_mut(), {
        Ok(buft_ptr(Registry::global().cpu().index()))
    })
}

/// The buffer type's name ("CPU", "VGPU0", …), a static string. NULL and a log line for a
/// NULL or foreign handle (upstream asserts).
#[no_mangle]
pub extern "C" fn ggml_backend_buft_name(buft: ggml_backend_buffer_type_t) -> *const c_char {
    forward_unless_ours!(is_our_buft(buft), ggml_backend_buft_name, (buft));
    boundary!("ggml_backend_buft_name", std::ptr::null(), {
        let buft = buft_handle(buft)?;
        Ok(handles().devices[buft.device].name.as_ptr())
    })
}

/// Loads all backends: a no-op, as every device is built in (upstream loads dynamic backend
/// libraries here).
#[no_mangle]
pub extern "C" fn ggml_backend_load_all() {
    forward_unless_ours!(false, ggml_backend_load_all, ());
    boundary!("ggml_backend_load_all", (), {
        handles();
        Ok(())
    })
}
