//! A device and its primary context: binding it to the calling thread, allocations, the
//! device's staging state.

use std::ffi::{c_char, c_int, CStr};
use std::marker::PhantomData;
use std::sync::{Mutex, PoisonError};

use cudarc::driver::result::DriverError;
use cudarc::driver::sys;

use super::common::{describe, CudaDeviceInfo, CudaError};
use super::ring::{Ring, Staging};

/// A primary context handle.
#[derive(Debug)]
pub(super) struct Context(pub(super) sys::CUcontext);

// SAFETY: a CUDA context handle is an opaque driver handle that the driver API accepts from any
// thread (cuCtxPushCurrent binds it to the calling thread); the handle itself is never
// dereferenced on the Rust side.
unsafe impl Send for Context {}
// SAFETY: as above; sharing the handle only lets threads bind the same context, which the
// driver supports.
unsafe impl Sync for Context {}

/// The device's context bound to this thread until dropped (pushed, then popped, so the
/// caller's own current context is restored). Not `Send`: it must be popped where pushed.
pub(super) struct Bound(pub(super) PhantomData<*const ()>);

impl Drop for Bound {
    fn drop(&mut self) {
        let mut popped: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: this thread pushed a context when the `Bound` was made, and `Bound` is not
        // Send, so the pop happens on the same thread; `popped` is a valid out pointer.
        let result = unsafe { sys::cuCtxPopCurrent_v2(&mut popped) }.result();
        if let Err(error) = result {
            crate::log_warn!("CUDA: cuCtxPopCurrent failed: {}", describe(error));
        }
    }
}

/// One usable CUDA device (its context is created by [`probe`](super::driver::probe)).
#[derive(Debug)]
pub struct CudaDevice {
    pub(super) info: CudaDeviceInfo,
    pub(super) device: sys::CUdevice,
    pub(super) context: Context,
    pub(super) staging: Mutex<Staging>,
}

impl CudaDevice {
    pub fn info(&self) -> &CudaDeviceInfo {
        &self.info
    }

    /// `(free, total)` bytes now, or None when the driver cannot tell.
    pub fn memory(&self) -> Option<(u64, u64)> {
        let _bound = self.bind().ok()?;
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: both out pointers are valid; the device's context is bound.
        let result = unsafe { sys::cuMemGetInfo_v2(&mut free, &mut total) }.result();
        match result {
            Ok(()) => Some((free as u64, total as u64)),
            Err(error) => {
                crate::log_warn!("{}: cuMemGetInfo failed: {}", self.label(), describe(error));
                None
            }
        }
    }

    /// "CUDA0", as the registry names it.
    pub(super) fn label(&self) -> String {
        format!("CUDA{}", self.info.ordinal)
    }

    /// Binds the device's context to this thread until the guard drops.
    pub(super) fn bind(&self) -> Result<Bound, CudaError> {
        // SAFETY: the context was retained by `open` and stays alive as long as `self`.
        unsafe { sys::cuCtxPushCurrent_v2(self.context.0) }
            .result()
            .map_err(|e| {
                CudaError::driver(format!("{}: cuCtxPushCurrent failed", self.label()), e)
            })?;
        Ok(Bound(PhantomData))
    }

    /// Queries device `ordinal` and retains its primary context (the driver is initialized).
    pub(super) fn open(ordinal: c_int) -> Result<CudaDevice, CudaError> {
        let label = format!("CUDA{ordinal}");
        let fail =
            |what: &str, e: DriverError| CudaError::driver(format!("{label}: {what} failed"), e);
        let mut device: sys::CUdevice = 0;
        // SAFETY: `device` is a valid out pointer; cuInit succeeded.
        unsafe { sys::cuDeviceGet(&mut device, ordinal) }
            .result()
            .map_err(|e| fail("cuDeviceGet", e))?;

        let mut name = [0 as c_char; 256];
        // SAFETY: the buffer holds `name.len()` bytes and the driver writes a NUL-terminated
        // string of at most that length.
        unsafe { sys::cuDeviceGetName(name.as_mut_ptr(), name.len() as c_int, device) }
            .result()
            .map_err(|e| fail("cuDeviceGetName", e))?;
        name[name.len() - 1] = 0;
        // SAFETY: the buffer is NUL-terminated (its last byte was just set to 0).
        let description = unsafe { CStr::from_ptr(name.as_ptr()) }
            .to_string_lossy()
            .trim()
            .to_string();

        let mut total: usize = 0;
        // SAFETY: `total` is a valid out pointer; `device` came from cuDeviceGet.
        unsafe { sys::cuDeviceTotalMem_v2(&mut total, device) }
            .result()
            .map_err(|e| fail("cuDeviceTotalMem", e))?;

        let attribute = |attribute: sys::CUdevice_attribute| -> Option<u32> {
            let mut value: c_int = 0;
            // SAFETY: `value` is a valid out pointer; `device` came from cuDeviceGet.
            let result = unsafe { sys::cuDeviceGetAttribute(&mut value, attribute, device) };
            result
                .result()
                .ok()
                .and_then(|()| u32::try_from(value).ok())
        };
        use sys::CUdevice_attribute as A;
        // Upstream's device id: "%04x:%02x:%02x.0" of the PCI domain, bus and device.
        let pci_bus_id = match (
            attribute(A::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID),
            attribute(A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID),
            attribute(A::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID),
        ) {
            (Some(domain), Some(bus), Some(dev)) => {
                Some(format!("{domain:04x}:{bus:02x}:{dev:02x}.0"))
            }
            _ => None,
        };

        let mut context: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: `context` is a valid out pointer; `device` came from cuDeviceGet. The
        // reference taken here is released in `Drop`.
        unsafe { sys::cuDevicePrimaryCtxRetain(&mut context, device) }
            .result()
            .map_err(|e| fail("cuDevicePrimaryCtxRetain", e))?;

        Ok(CudaDevice {
            info: CudaDeviceInfo {
                ordinal: ordinal as u32,
                description,
                pci_bus_id,
                total_memory: total as u64,
            },
            device,
            context: Context(context),
            staging: Mutex::new(Staging::Untried),
        })
    }

    /// Runs `f` with the staging ring (created on first use), or with None when page-locked
    /// memory cannot be had, under the ring's lock. The context must be bound.
    pub(super) fn with_ring<R>(&self, f: impl FnOnce(Option<&mut Ring>) -> R) -> R {
        let mut staging = self.staging.lock().unwrap_or_else(PoisonError::into_inner);
        f(self.ring(&mut staging))
    }

    /// The staging ring, created on first use; None when page-locked memory cannot be had.
    /// The device's context must be bound.
    pub(super) fn ring<'a>(&self, staging: &'a mut Staging) -> Option<&'a mut Ring> {
        if let Staging::Untried = staging {
            *staging = match Ring::new() {
                Ok(ring) => Staging::Ready(ring),
                Err(error) => {
                    crate::log_warn!(
                        "{}: no page-locked staging buffers ({error}); large copies are synchronous and pageable",
                        self.label()
                    );
                    Staging::Unavailable
                }
            };
        }
        match staging {
            Staging::Ready(ring) => Some(ring),
            _ => None,
        }
    }
}

impl Drop for CudaDevice {
    fn drop(&mut self) {
        let staging = self
            .staging
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        if let Staging::Ready(mut ring) = std::mem::replace(staging, Staging::Untried) {
            match self.bind() {
                Ok(_bound) => ring.destroy(),
                Err(error) => crate::log_warn!("{error}; staging buffers leaked"),
            }
        }
        // SAFETY: `open` retained this device's primary context once; this releases it once.
        let _ = unsafe { sys::cuDevicePrimaryCtxRelease_v2(self.device) };
    }
}
