//! Finding and starting the driver: `dlopen` of `libcuda.so.1`, the check that every driver
//! function used is exported, `cuInit` under `catch_unwind`, and the probe of the devices.

use std::ffi::{c_int, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, OnceLock};

use cudarc::driver::sys;

use super::common::{CudaCode, CudaError, NO_CUDA_ENV};
use super::context::CudaDevice;

/// The driver library's names, tried in this order.
pub(super) const DRIVER_LIBRARIES: [&CStr; 2] = [c"libcuda.so.1", c"libcuda.so"];

/// Every driver function this module calls (cudarc resolves each on first use and panics when
/// one is missing, so all are checked up front).
pub(super) const DRIVER_FUNCTIONS: [&CStr; 28] = [
    c"cuInit",
    c"cuGetErrorName",
    c"cuGetErrorString",
    c"cuDeviceGetCount",
    c"cuDeviceGet",
    c"cuDeviceGetName",
    c"cuDeviceGetAttribute",
    c"cuDeviceTotalMem_v2",
    c"cuDevicePrimaryCtxRetain",
    c"cuDevicePrimaryCtxRelease_v2",
    c"cuCtxPushCurrent_v2",
    c"cuCtxPopCurrent_v2",
    c"cuMemGetInfo_v2",
    c"cuMemAlloc_v2",
    c"cuMemFree_v2",
    c"cuMemcpyHtoD_v2",
    c"cuMemcpyDtoH_v2",
    c"cuMemcpyHtoDAsync_v2",
    c"cuMemcpyDtoHAsync_v2",
    c"cuMemHostAlloc",
    c"cuMemFreeHost",
    c"cuStreamCreate",
    c"cuStreamSynchronize",
    c"cuStreamDestroy_v2",
    c"cuEventCreate",
    c"cuEventRecord",
    c"cuEventSynchronize",
    c"cuEventDestroy_v2",
];

pub(super) use crate::log::panic_message;

/// Runs `f`, turning a panic (cudarc panics on a missing library or symbol) into an error.
pub(super) fn guarded<T>(
    what: &str,
    f: impl FnOnce() -> Result<T, CudaError>,
) -> Result<T, CudaError> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|payload| {
        Err(CudaError {
            op: what.to_string(),
            code: CudaCode::Panicked(panic_message(&*payload)),
        })
    })
}

/// Why CUDA is not used, and whether that deserves a warning (a driver that fails) rather
/// than an info line (no driver, no device: an ordinary machine without a GPU).
#[derive(Debug, Clone)]
pub(super) struct Unavailable {
    pub(super) reason: String,
    pub(super) warn: bool,
}

impl Unavailable {
    pub(super) fn info(reason: impl Into<String>) -> Unavailable {
        Unavailable {
            reason: reason.into(),
            warn: false,
        }
    }

    pub(super) fn warn(reason: impl Into<String>) -> Unavailable {
        Unavailable {
            reason: reason.into(),
            warn: true,
        }
    }
}

pub(super) fn disabled_by_env() -> Option<String> {
    let value = std::env::var_os(NO_CUDA_ENV)?;
    if value.is_empty() || value == "0" {
        return None;
    }
    Some(format!(
        "CUDA disabled by {NO_CUDA_ENV}={}",
        value.to_string_lossy()
    ))
}

/// Opens the driver library and keeps it loaded for the life of the process (cudarc's own
/// `dlopen` of the same library then finds it loaded).
pub(super) fn open_driver_library() -> Result<(), Unavailable> {
    let mut handle: *mut c_void = std::ptr::null_mut();
    'search: for flags in [libc::RTLD_LAZY | libc::RTLD_NOLOAD, libc::RTLD_LAZY] {
        for name in DRIVER_LIBRARIES {
            // SAFETY: `name` is a NUL-terminated string; dlopen has no other preconditions
            // (loading libcuda runs only its initializers, as linking against it would).
            handle = unsafe { libc::dlopen(name.as_ptr(), flags) };
            if !handle.is_null() {
                break 'search;
            }
        }
    }
    if handle.is_null() {
        return Err(Unavailable::info(
            "no CUDA driver library (libcuda.so.1) found",
        ));
    }
    for symbol in DRIVER_FUNCTIONS {
        // SAFETY: `handle` is a live handle from dlopen (never closed); `symbol` is
        // NUL-terminated. The address is only compared with null.
        let address = unsafe { libc::dlsym(handle, symbol.as_ptr()) };
        if address.is_null() {
            return Err(Unavailable::warn(format!(
                "the CUDA driver library lacks {} (driver too old?)",
                symbol.to_string_lossy()
            )));
        }
    }
    Ok(())
}

/// Loads and initializes the driver and opens every device, once per process.
pub(super) fn devices() -> &'static Result<Vec<Arc<CudaDevice>>, Unavailable> {
    static DEVICES: OnceLock<Result<Vec<Arc<CudaDevice>>, Unavailable>> = OnceLock::new();
    DEVICES.get_or_init(|| {
        open_driver_library()?;
        guarded("cuInit", || {
            // SAFETY: the library is loaded and exports cuInit (checked above); cuInit(0) has
            // no other preconditions.
            unsafe { sys::cuInit(0) }
                .result()
                .map_err(|e| CudaError::driver("cuInit failed", e))
        })
        .map_err(|e| Unavailable::warn(e.to_string()))?;
        let mut count: c_int = 0;
        guarded("cuDeviceGetCount", || {
            // SAFETY: `count` is a valid out pointer; the driver is initialized.
            unsafe { sys::cuDeviceGetCount(&mut count) }
                .result()
                .map_err(|e| CudaError::driver("cuDeviceGetCount failed", e))
        })
        .map_err(|e| Unavailable::warn(e.to_string()))?;
        if count <= 0 {
            return Err(Unavailable::info("no CUDA devices"));
        }
        let mut devices = Vec::new();
        for ordinal in 0..count {
            match guarded("CUDA device setup", || CudaDevice::open(ordinal)) {
                Ok(device) => devices.push(Arc::new(device)),
                Err(error) => crate::log_warn!("{error}; this device is skipped"),
            }
        }
        if devices.is_empty() {
            return Err(Unavailable::warn(format!(
                "no usable CUDA devices ({count} found, none could be opened)"
            )));
        }
        Ok(devices)
    })
}

/// Why CUDA cannot be used here (no driver library, no device), or Ok when it can.
pub fn availability() -> Result<(), String> {
    if let Some(reason) = disabled_by_env() {
        return Err(reason);
    }
    match devices() {
        Ok(_) => Ok(()),
        Err(unavailable) => Err(unavailable.reason.clone()),
    }
}

/// The CUDA devices of this machine (none when the driver is missing; never panics). When
/// there are none, logs one line saying why.
pub fn probe() -> Vec<Arc<CudaDevice>> {
    if let Some(reason) = disabled_by_env() {
        crate::log_info!("{reason}: no CUDA devices are used");
        return Vec::new();
    }
    match devices() {
        Ok(devices) => devices.clone(),
        Err(Unavailable { reason, warn: true }) => {
            crate::log_warn!("CUDA not used: {reason}");
            Vec::new()
        }
        Err(Unavailable {
            reason,
            warn: false,
        }) => {
            crate::log_info!("CUDA not used: {reason}");
            Vec::new()
        }
    }
}
