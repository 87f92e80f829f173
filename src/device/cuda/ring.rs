//! The upload stream and its ring of page-locked staging buffers with their events.

use std::ffi::c_void;

use cudarc::driver::sys;

use super::common::{staging_buffers, CudaError, STAGING_BYTES};

/// A CUDA stream handle.
#[derive(Debug, Clone, Copy)]
pub(super) struct Stream(pub(super) sys::CUstream);

// SAFETY: stream handles are opaque driver handles usable from any thread that has the
// stream's context bound (the upload threads bind it); never dereferenced in Rust.
unsafe impl Send for Stream {}
// SAFETY: enqueueing work on one stream from several threads is allowed by the driver API.
unsafe impl Sync for Stream {}

/// One page-locked staging buffer and the event recorded after its last copy.
#[derive(Debug)]
pub(super) struct Slot {
    pub(super) host: *mut u8,
    pub(super) event: sys::CUevent,
    /// A copy from `host` was enqueued and `event` recorded after it, not yet waited for.
    pub(super) pending: bool,
}

// SAFETY: `host` is page-locked memory owned by this slot (freed only by `Ring::destroy`) and
// `event` an event owned by it; both may be used from any thread with the context bound, and
// `&mut Slot` gives one thread at a time the right to touch them.
unsafe impl Send for Slot {}

impl Slot {
    /// Waits until the last copy from this buffer has finished.
    pub(super) fn wait(&mut self, label: &str) -> Result<(), CudaError> {
        if self.pending {
            // SAFETY: `event` is a live event created in this device's context, which the
            // calling thread has bound.
            unsafe { sys::cuEventSynchronize(self.event) }
                .result()
                .map_err(|e| {
                    CudaError::driver(format!("{label}: waiting for a staging copy"), e)
                })?;
            self.pending = false;
        }
        Ok(())
    }

    /// The first `len` bytes of the buffer; call [`Slot::wait`] first.
    pub(super) fn bytes(&mut self, len: usize) -> &mut [u8] {
        assert!(len <= STAGING_BYTES);
        // SAFETY: `host` points to STAGING_BYTES bytes of page-locked memory owned by this
        // slot, initialized (zeroed) when allocated; `len` is within it; `&mut self` makes this
        // the only reference, and the caller has waited for the copy that last read it.
        unsafe { std::slice::from_raw_parts_mut(self.host, len) }
    }
}

/// The upload stream and staging buffers of one device.
#[derive(Debug)]
pub(super) struct Ring {
    pub(super) stream: Stream,
    pub(super) slots: Vec<Slot>,
}

impl Ring {
    /// Creates the stream, events and page-locked buffers; the device's context must be bound.
    pub(super) fn new() -> Result<Ring, CudaError> {
        let mut stream: sys::CUstream = std::ptr::null_mut();
        // SAFETY: `stream` is a valid out pointer; the context is bound by the caller. A
        // blocking stream (CU_STREAM_DEFAULT) orders its copies after earlier synchronous copies
        // on the legacy stream (whose DMA may still be running when they return).
        unsafe { sys::cuStreamCreate(&mut stream, sys::CUstream_flags::CU_STREAM_DEFAULT as u32) }
            .result()
            .map_err(|e| CudaError::driver("cuStreamCreate", e))?;
        let mut ring = Ring {
            stream: Stream(stream),
            slots: Vec::with_capacity(staging_buffers()),
        };
        for _ in 0..staging_buffers() {
            match Ring::new_slot() {
                Ok(slot) => ring.slots.push(slot),
                Err(error) => {
                    ring.destroy();
                    return Err(error);
                }
            }
        }
        Ok(ring)
    }

    pub(super) fn new_slot() -> Result<Slot, CudaError> {
        let mut event: sys::CUevent = std::ptr::null_mut();
        // Blocking sync: a thread waiting for its buffer sleeps instead of spinning on a core
        // that the readers need.
        let flags = sys::CUevent_flags::CU_EVENT_BLOCKING_SYNC as u32
            | sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
        // SAFETY: `event` is a valid out pointer; the context is bound by the caller.
        unsafe { sys::cuEventCreate(&mut event, flags) }
            .result()
            .map_err(|e| CudaError::driver("cuEventCreate", e))?;
        match alloc_pinned_bytes(STAGING_BYTES) {
            Ok(host) => Ok(Slot {
                host,
                event,
                pending: false,
            }),
            Err(error) => {
                // SAFETY: `event` was just created and is used nowhere else.
                let _ = unsafe { sys::cuEventDestroy_v2(event) };
                Err(error)
            }
        }
    }

    /// Waits for every copy on the stream; on success no staging buffer is in use.
    pub(super) fn synchronize(&mut self, label: &str) -> Result<(), CudaError> {
        // SAFETY: the stream is live and belongs to the bound context.
        unsafe { sys::cuStreamSynchronize(self.stream.0) }
            .result()
            .map_err(|e| CudaError::driver(format!("{label}: waiting for the upload stream"), e))?;
        for slot in &mut self.slots {
            slot.pending = false;
        }
        Ok(())
    }

    /// Frees everything; the device's context must be bound.
    pub(super) fn destroy(&mut self) {
        if !self.stream.0.is_null() {
            // SAFETY: the stream is live and belongs to the bound context.
            let _ = unsafe { sys::cuStreamSynchronize(self.stream.0) };
        }
        for slot in self.slots.drain(..) {
            // SAFETY: the stream is idle, so no copy reads the buffer; the event and buffer are
            // owned by the slot, which is drained, so each is freed once.
            unsafe {
                let _ = sys::cuEventDestroy_v2(slot.event);
                let _ = sys::cuMemFreeHost(slot.host.cast::<c_void>());
            }
        }
        if !self.stream.0.is_null() {
            // SAFETY: the stream is live and idle; it is nulled below, so destroyed once.
            let _ = unsafe { sys::cuStreamDestroy_v2(self.stream.0) };
            self.stream.0 = std::ptr::null_mut();
        }
    }
}

/// Allocates `bytes` (> 0) bytes of zeroed page-locked host memory; the context must be bound.
pub(super) fn alloc_pinned_bytes(bytes: usize) -> Result<*mut u8, CudaError> {
    let mut host: *mut c_void = std::ptr::null_mut();
    // SAFETY: `host` is a valid out pointer; the context is bound by the caller. PORTABLE makes
    // the memory count as page-locked for every context.
    unsafe { sys::cuMemHostAlloc(&mut host, bytes, sys::CU_MEMHOSTALLOC_PORTABLE) }
        .result()
        .map_err(|e| CudaError::driver(format!("cuMemHostAlloc of {bytes} bytes"), e))?;
    let host = host.cast::<u8>();
    // SAFETY: the driver returned `bytes` writable bytes at `host`; zeroing them once makes
    // them initialized for the slices handed out later.
    unsafe { std::ptr::write_bytes(host, 0, bytes) };
    Ok(host)
}

/// The staging state of a device.
#[derive(Debug)]
pub(super) enum Staging {
    /// Not needed yet.
    Untried,
    Ready(Ring),
    /// Page-locked memory could not be had; uploads use synchronous copies.
    Unavailable,
}
