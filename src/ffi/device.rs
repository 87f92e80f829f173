//! ggml device API (`ggml_backend_dev_*`, `ggml_backend_buft_*`) for hosts that enumerate
//! devices and drive placement from C.
//!
//! Devices are those of [`crate::device::Registry::global`]: the virtual GPUs of
//! `LLAMA_VIRTUAL_GPUS` (`VGPU0`, …) first, then the CPU, as upstream registers GPU backends
//! before the CPU backend (CUDA devices, when present, come first). Device and buffer-type handles are
//! created once and live as long as the process, like upstream's.
//!
//! Upstream asserts (aborts) on a NULL handle or an out-of-range index; here such a call logs
//! one line naming the function and returns the failure value documented on the function.
//! A handle that is not one of ours is recognised by its address, without reading through it.

use std::ffi::{c_char, CString};
use std::sync::OnceLock;

use super::types::*;
use super::{c_str, FfiError};
use crate::device::{Device, DeviceType, Registry};

const DEVICE_MAGIC: u64 = 0x6c68_7377_6465_7601; // "lhswdev" + 1
const BUFT_MAGIC: u64 = 0x6c68_7377_6275_6601; // "lhswbuf" + 1

/// A device (`struct ggml_backend_device`); internals private.
pub struct ggml_backend_device {
    magic: u64,
    index: usize,
    name: CString,
    description: CString,
}

/// A buffer type (`struct ggml_backend_buffer_type`); internals private. Each device has one,
/// its default buffer type, named like the device ("CPU", "VGPU0").
pub struct ggml_backend_buffer_type {
    magic: u64,
    device: usize,
}

/// The leaked, process-lifetime handle arrays, parallel to the registry's devices.
struct Handles {
    devices: &'static [ggml_backend_device],
    bufts: &'static [ggml_backend_buffer_type],
}

/// C strings of a Rust string: interior NULs (impossible for our names) become spaces.
fn c_string(text: &str) -> CString {
    CString::new(text.replace('\0', " ")).unwrap_or_default()
}

fn handles() -> &'static Handles {
    static HANDLES: OnceLock<Handles> = OnceLock::new();
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

/// Whether any GPU device (CUDA or virtual) exists: true when `LLAMA_VIRTUAL_GPUS` defined at
/// least one virtual GPU (CUDA devices are not supported yet).
/// The registry index of a device handle from the host (NULL and foreign handles are errors).
pub(crate) fn device_index(ptr: ggml_backend_dev_t) -> Result<usize, FfiError> {
    device_handle(ptr).map(|h| h.index)
}

/// The registry index of the device a buffer-type handle belongs to.
pub(crate) fn buft_device_index(ptr: ggml_backend_buffer_type_t) -> Result<usize, FfiError> {
    buft_handle(ptr).map(|h| h.device)
}

pub(crate) fn any_gpu() -> bool {
    Registry::global().any_gpu()
}

/// Number of devices: the virtual GPUs plus the CPU (always at least 1).
#[no_mangle]
pub extern "C" fn ggml_backend_dev_count() -> usize {
    boundary!("ggml_backend_dev_count", 0, { Ok(handles().devices.len()) })
}

/// Device `index` in registry order (GPUs first, CPU last). The handle is valid for the life
/// of the process. An index `>= ggml_backend_dev_count()` logs an error and returns NULL
/// (upstream asserts).
#[no_mangle]
pub extern "C" fn ggml_backend_dev_get(index: usize) -> ggml_backend_dev_t {
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
    boundary!("ggml_backend_dev_by_type", std::ptr::null_mut(), {
        let wanted = DeviceType::from_raw(r#type.0)
            .ok_or_else(|| FfiError::Invalid(format!("invalid device type {}", r#type.0)))?;
        Ok(Registry::global()
            .by_type(wanted)
            .map_or(std::ptr::null_mut(), |d| dev_ptr(d.index())))
    })
}

/// The device's name ("CPU", "VGPU0", …), a static string. NULL and a log line for a NULL or
/// foreign handle.
#[no_mangle]
pub extern "C" fn ggml_backend_dev_name(device: ggml_backend_dev_t) -> *const c_char {
    boundary!("ggml_backend_dev_name", std::ptr::null(), {
        Ok(device_handle(device)?.name.as_ptr())
    })
}

/// The device's description (the CPU model from /proc/cpuinfo, or "llama-hotswap virtual GPU
/// (24 GiB)"), a static string. NULL and a log line for a NULL or foreign handle.
#[no_mangle]
pub extern "C" fn ggml_backend_dev_description(device: ggml_backend_dev_t) -> *const c_char {
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
    boundary!("ggml_backend_dev_buffer_type", std::ptr::null_mut(), {
        Ok(buft_ptr(device_handle(device)?.index))
    })
}

/// The CPU buffer type ("CPU"), valid for the life of the process.
#[no_mangle]
pub extern "C" fn ggml_backend_cpu_buffer_type() -> ggml_backend_buffer_type_t {
    boundary!("ggml_backend_cpu_buffer_type", std::ptr::null_mut(), {
        Ok(buft_ptr(Registry::global().cpu().index()))
    })
}

/// The buffer type's name ("CPU", "VGPU0", …), a static string. NULL and a log line for a
/// NULL or foreign handle (upstream asserts).
#[no_mangle]
pub extern "C" fn ggml_backend_buft_name(buft: ggml_backend_buffer_type_t) -> *const c_char {
    boundary!("ggml_backend_buft_name", std::ptr::null(), {
        let buft = buft_handle(buft)?;
        Ok(handles().devices[buft.device].name.as_ptr())
    })
}

/// Loads all backends: a no-op, as every device is built in (upstream loads dynamic backend
/// libraries here).
#[no_mangle]
pub extern "C" fn ggml_backend_load_all() {
    boundary!("ggml_backend_load_all", (), {
        handles();
        Ok(())
    })
}
