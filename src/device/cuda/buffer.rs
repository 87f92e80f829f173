//! Device memory ([`CudaBuffer`]) and page-locked host memory ([`PinnedBuffer`]): synchronous
//! reads and writes, freeing on drop.

use std::ffi::c_void;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use cudarc::driver::sys;

use super::common::{describe, CudaCode, CudaError, STAGED_MIN};
use super::context::CudaDevice;
use super::ring::alloc_pinned_bytes;

/// Page-locked host memory (`cuMemHostAlloc`), freed on drop.
#[derive(Debug)]
pub struct PinnedBuffer {
    pub(super) device: Arc<CudaDevice>,
    pub(super) ptr: *mut u8,
    pub(super) len: usize,
}

// SAFETY: the buffer exclusively owns its host memory (like a Box<[u8]>), which any thread may
// read or write; freeing binds the device's context on the dropping thread.
unsafe impl Send for PinnedBuffer {}
// SAFETY: shared references only read the bytes (through Deref), as with &[u8].
unsafe impl Sync for PinnedBuffer {}

impl Deref for PinnedBuffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr` holds `len` initialized (zeroed at allocation) bytes owned by `self`,
        // or is dangling with `len == 0`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl DerefMut for PinnedBuffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`; `&mut self` makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        if self.len == 0 {
            return;
        }
        let _bound = match self.device.bind() {
            Ok(bound) => bound,
            Err(error) => {
                crate::log_warn!("{error}; {} bytes of page-locked memory leaked", self.len);
                return;
            }
        };
        // SAFETY: `ptr` came from cuMemHostAlloc and is freed once; copies from it are
        // synchronous, so none is in flight.
        if let Err(error) = unsafe { sys::cuMemFreeHost(self.ptr.cast::<c_void>()) }.result() {
            crate::log_warn!(
                "{}: cuMemFreeHost failed: {}",
                self.device.label(),
                describe(error)
            );
        }
    }
}

/// Device memory owned by one allocation; freed on drop.
#[derive(Debug)]
pub struct CudaBuffer {
    pub(super) device: Arc<CudaDevice>,
    pub(super) ptr: sys::CUdeviceptr,
    pub(super) len: usize,
}

impl CudaBuffer {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(super) fn check_range(
        &self,
        what: &str,
        offset: usize,
        len: usize,
    ) -> Result<(), CudaError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(CudaError {
                op: format!(
                    "{}: {what} of {len} bytes at offset {offset}",
                    self.device.label()
                ),
                code: CudaCode::OutOfRange { len: self.len },
            }),
        }
    }

    /// Copies `src` to `offset`; done when the call returns. Slices of 1 MiB or more go
    /// through the staging ring (a pageable `cuMemcpyHtoD` runs at a fraction of the link).
    pub fn write(&mut self, offset: usize, src: &[u8]) -> Result<(), CudaError> {
        self.check_range("write", offset, src.len())?;
        if src.len() >= STAGED_MIN {
            self.write_staged(offset, src)
        } else {
            self.write_direct(offset, src)
        }
    }

    /// One synchronous `cuMemcpyHtoD` of `src` to `offset` (range checked by the caller).
    pub(super) fn write_direct(&mut self, offset: usize, src: &[u8]) -> Result<(), CudaError> {
        if src.is_empty() {
            return Ok(());
        }
        let _bound = self.device.bind()?;
        // SAFETY: the destination range lies inside this allocation (checked by the caller);
        // `src` is a live slice of `src.len()` bytes; the copy is synchronous with respect to
        // `src`.
        unsafe {
            sys::cuMemcpyHtoD_v2(
                self.ptr + offset as u64,
                src.as_ptr().cast::<c_void>(),
                src.len(),
            )
        }
        .result()
        .map_err(|e| {
            let op = format!(
                "{}: copying {} bytes to device offset {offset}",
                self.device.label(),
                src.len()
            );
            CudaError::driver(op, e)
        })
    }

    /// Copies all of `src` to `offset` (synchronous: page-locked memory is copied directly by
    /// DMA). The raw copy that [`CudaBuffer::fill_from_file`] is measured against.
    pub fn write_pinned(&mut self, offset: usize, src: &PinnedBuffer) -> Result<(), CudaError> {
        self.check_range("write", offset, src.len())?;
        self.write_direct(offset, src)
    }

    /// Copies `dst.len()` bytes from `offset` into `dst`; done when the call returns. Copies
    /// of 1 MiB or more go through the staging ring.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), CudaError> {
        self.check_range("read", offset, dst.len())?;
        if dst.len() >= STAGED_MIN {
            self.read_staged(offset, dst)
        } else {
            self.read_direct(offset, dst)
        }
    }

    /// One synchronous `cuMemcpyDtoH` into `dst` (range checked by the caller).
    pub(super) fn read_direct(&self, offset: usize, dst: &mut [u8]) -> Result<(), CudaError> {
        if dst.is_empty() {
            return Ok(());
        }
        let _bound = self.device.bind()?;
        // SAFETY: the source range lies inside this allocation (checked by the caller); `dst`
        // is a live exclusive slice of `dst.len()` bytes; the copy has finished when the call
        // returns.
        unsafe {
            sys::cuMemcpyDtoH_v2(
                dst.as_mut_ptr().cast::<c_void>(),
                self.ptr + offset as u64,
                dst.len(),
            )
        }
        .result()
        .map_err(|e| {
            let op = format!(
                "{}: copying {} bytes from device offset {offset}",
                self.device.label(),
                dst.len()
            );
            CudaError::driver(op, e)
        })
    }
}

impl Drop for CudaBuffer {
    fn drop(&mut self) {
        if self.len == 0 {
            return;
        }
        let _bound = match self.device.bind() {
            Ok(bound) => bound,
            Err(error) => {
                crate::log_warn!("{error}; {} bytes of device memory leaked", self.len);
                return;
            }
        };
        // SAFETY: `ptr` came from cuMemAlloc in this context and is freed once; every copy
        // into or out of it has completed (all operations synchronize before returning).
        if let Err(error) = unsafe { sys::cuMemFree_v2(self.ptr) }.result() {
            crate::log_warn!(
                "{}: cuMemFree failed: {}",
                self.device.label(),
                describe(error)
            );
        }
    }
}

impl CudaDevice {
    /// Allocates `bytes` bytes of device memory (contents unspecified).
    pub fn alloc(self: &Arc<Self>, bytes: usize) -> Result<CudaBuffer, CudaError> {
        let mut ptr: sys::CUdeviceptr = 0;
        if bytes > 0 {
            let _bound = self.bind()?;
            // SAFETY: `ptr` is a valid out pointer; the device's context is bound.
            unsafe { sys::cuMemAlloc_v2(&mut ptr, bytes) }
                .result()
                .map_err(|e| {
                    CudaError::driver(
                        format!("{}: cuMemAlloc of {bytes} bytes failed", self.label()),
                        e,
                    )
                })?;
        }
        Ok(CudaBuffer {
            device: Arc::clone(self),
            ptr,
            len: bytes,
        })
    }

    /// Allocates `bytes` bytes of zeroed page-locked host memory (for measuring raw
    /// host-to-device copies, see [`CudaBuffer::write_pinned`]).
    pub fn alloc_pinned(self: &Arc<Self>, bytes: usize) -> Result<PinnedBuffer, CudaError> {
        let ptr = if bytes == 0 {
            std::ptr::NonNull::<u8>::dangling().as_ptr()
        } else {
            let _bound = self.bind()?;
            alloc_pinned_bytes(bytes).map_err(|e| e.on(&self.label()))?
        };
        Ok(PinnedBuffer {
            device: Arc::clone(self),
            ptr,
            len: bytes,
        })
    }
}
