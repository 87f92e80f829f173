//! Running code on a device: PTX modules (`cuModuleLoadData`), their functions, launches on
//! the device's legacy default stream (so launches and the synchronous copies of
//! [`CudaBuffer`] run in issue order), and the device's compute capability.
//!
//! The driver functions used here are checked separately from the loader's
//! ([`compute_available`]): a driver (or the mock driver of the tests) without them still
//! loads models onto the device.

use std::ffi::{c_void, CStr, CString};
use std::sync::Arc;

use cudarc::driver::sys;

use super::buffer::CudaBuffer;
use super::common::CudaError;
use super::context::CudaDevice;
use super::driver::{guarded, DRIVER_LIBRARIES};

/// The driver functions compute needs beyond the loader's.
const COMPUTE_FUNCTIONS: [&CStr; 5] = [
    c"cuModuleLoadData",
    c"cuModuleGetFunction",
    c"cuModuleUnload",
    c"cuLaunchKernel",
    c"cuCtxSynchronize",
];

/// Whether the loaded driver exports every function compute needs (Ok), or which it lacks.
pub fn compute_available() -> Result<(), String> {
    super::driver::availability()?;
    for name in DRIVER_LIBRARIES {
        // SAFETY: NUL-terminated name; RTLD_NOLOAD only returns a library already loaded.
        let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
        if handle.is_null() {
            continue;
        }
        for f in COMPUTE_FUNCTIONS {
            // SAFETY: live handle, NUL-terminated symbol; the address is only tested.
            if unsafe { libc::dlsym(handle, f.as_ptr()) }.is_null() {
                return Err(format!(
                    "the CUDA driver lacks {} (needed to compute)",
                    f.to_string_lossy()
                ));
            }
        }
        return Ok(());
    }
    Err("the CUDA driver library is not loaded".into())
}

/// A loaded PTX module, unloaded on drop.
#[derive(Debug)]
pub struct CudaModule {
    device: Arc<CudaDevice>,
    module: sys::CUmodule,
}

// SAFETY: a module handle is an opaque driver handle usable from any thread with its context
// bound (every use binds it).
unsafe impl Send for CudaModule {}
// SAFETY: as above; the driver allows concurrent launches of a module's functions.
unsafe impl Sync for CudaModule {}

/// A kernel of a [`CudaModule`] (valid while the module lives).
#[derive(Clone, Copy, Debug)]
pub struct CudaFunction(sys::CUfunction);

// SAFETY: an opaque driver handle, as the module's.
unsafe impl Send for CudaFunction {}
// SAFETY: as above.
unsafe impl Sync for CudaFunction {}

/// One kernel argument, passed by value.
#[derive(Clone, Copy, Debug)]
pub enum KernelArg {
    /// A device address (from [`CudaBuffer::device_ptr`]).
    Ptr(u64),
    I32(i32),
    U32(u32),
    F32(f32),
}

impl CudaDevice {
    /// The device's compute capability (major, minor).
    pub fn compute_capability(&self) -> Result<(u32, u32), CudaError> {
        let get = |attribute: sys::CUdevice_attribute| -> Result<u32, CudaError> {
            let mut value = 0;
            // SAFETY: valid out pointer; `self.device` came from cuDeviceGet.
            unsafe { sys::cuDeviceGetAttribute(&mut value, attribute, self.device) }
                .result()
                .map_err(|e| {
                    CudaError::driver(format!("{}: cuDeviceGetAttribute", self.label()), e)
                })?;
            Ok(value.max(0) as u32)
        };
        use sys::CUdevice_attribute as A;
        Ok((
            get(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            get(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        ))
    }

    /// Loads PTX text as a module of this device's context.
    pub fn load_module(self: &Arc<Self>, ptx: &str) -> Result<CudaModule, CudaError> {
        let image = CString::new(ptx).map_err(|_| CudaError {
            op: format!("{}: PTX with a NUL byte", self.label()),
            code: super::common::CudaCode::OutOfRange { len: ptx.len() },
        })?;
        guarded("cuModuleLoadData", || {
            let _bound = self.bind()?;
            let mut module: sys::CUmodule = std::ptr::null_mut();
            // SAFETY: valid out pointer; `image` is NUL-terminated PTX text that outlives
            // the call; the device's context is bound.
            unsafe { sys::cuModuleLoadData(&mut module, image.as_ptr().cast::<c_void>()) }
                .result()
                .map_err(|e| CudaError::driver(format!("{}: cuModuleLoadData", self.label()), e))?;
            Ok(CudaModule {
                device: Arc::clone(self),
                module,
            })
        })
    }

    /// Waits until every launch and copy issued on the device's context has finished; a
    /// kernel's failure (e.g. an illegal address) shows here.
    pub fn synchronize(&self) -> Result<(), CudaError> {
        let _bound = self.bind()?;
        // SAFETY: the context is bound; no arguments.
        unsafe { sys::cuCtxSynchronize() }
            .result()
            .map_err(|e| CudaError::driver(format!("{}: cuCtxSynchronize", self.label()), e))
    }
}

impl CudaModule {
    /// The kernel `name` (an `extern "C" __global__` function of the module).
    pub fn function(&self, name: &str) -> Result<CudaFunction, CudaError> {
        let cname = CString::new(name).expect("kernel names hold no NUL");
        let _bound = self.device.bind()?;
        let mut f: sys::CUfunction = std::ptr::null_mut();
        // SAFETY: valid out pointer, live module, NUL-terminated name; context bound.
        unsafe { sys::cuModuleGetFunction(&mut f, self.module, cname.as_ptr()) }
            .result()
            .map_err(|e| {
                CudaError::driver(
                    format!("{}: kernel {name} not in the module", self.device.label()),
                    e,
                )
            })?;
        Ok(CudaFunction(f))
    }

    /// Launches `f` on `grid` blocks of `block` threads with `shared` bytes of dynamic shared
    /// memory, on the legacy default stream (ordered with the device's synchronous copies).
    /// The kernel reads and writes device memory only: pointers passed in `args` must be
    /// addresses of live allocations of this device, with the kernel's bounds (the caller's
    /// contract; a violation faults on the device and shows at the next synchronization).
    pub fn launch(
        &self,
        f: CudaFunction,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        shared: u32,
        args: &[KernelArg],
    ) -> Result<(), CudaError> {
        // one 8-byte slot per argument; each kernel parameter points at its slot
        let mut slots: Vec<u64> = args
            .iter()
            .map(|a| match *a {
                KernelArg::Ptr(p) => p,
                KernelArg::I32(v) => v as u32 as u64,
                KernelArg::U32(v) => v as u64,
                KernelArg::F32(v) => v.to_bits() as u64,
            })
            .collect();
        let mut params: Vec<*mut c_void> = slots
            .iter_mut()
            .map(|s| (s as *mut u64).cast::<c_void>())
            .collect();
        let _bound = self.device.bind()?;
        // SAFETY: `f` belongs to this live module; `params` points at one slot per kernel
        // parameter, each holding the value in its first bytes (little endian, as the kernel
        // reads 4-byte parameters); the slots outlive the call, which copies them; the
        // context is bound; stream 0 is the context's legacy default stream.
        unsafe {
            sys::cuLaunchKernel(
                f.0,
                grid.0,
                grid.1,
                grid.2,
                block.0,
                block.1,
                block.2,
                shared,
                std::ptr::null_mut(),
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        }
        .result()
        .map_err(|e| CudaError::driver(format!("{}: cuLaunchKernel", self.device.label()), e))
    }
}

impl Drop for CudaModule {
    fn drop(&mut self) {
        if let Ok(_bound) = self.device.bind() {
            // SAFETY: the module was loaded once and is unloaded once; the context is bound.
            let _ = unsafe { sys::cuModuleUnload(self.module) };
        }
    }
}

impl CudaBuffer {
    /// The allocation's device address (for kernel arguments).
    pub fn device_ptr(&self) -> u64 {
        self.ptr
    }

    /// The device it lives on.
    pub fn device(&self) -> &Arc<CudaDevice> {
        &self.device
    }
}
