//! CUDA devices, through the CUDA driver API loaded at run time ([`cudarc`] with dynamic
//! loading): the library builds without a CUDA toolkit and runs without a driver.
//!
//! The registry registers the devices of [`probe`] as GPU devices named `CUDA0`, `CUDA1`, …
//! *before* the virtual GPUs and the CPU, as upstream registers the CUDA backend first, and
//! their `device_id` becomes the PCI bus id that upstream uses to skip duplicate GPUs.
//!
//! # Finding the driver
//!
//! cudarc panics when the driver library is missing, so this module first opens
//! `libcuda.so.1` (then `libcuda.so`) itself with `dlopen`, checks that every driver function
//! used here is exported, and only then calls `cuInit` — inside `catch_unwind`, as is every
//! later step of device setup. Any failure means "no CUDA devices": [`probe`] logs one line
//! and returns nothing, and [`availability`] says why.
//!
//! # `LLAMA_HOTSWAP_NO_CUDA`
//!
//! When set to anything but an empty string or `0`, the driver is not even looked for:
//! [`probe`] finds no devices and [`availability`] reports the variable. It is read on every
//! call, but the process-wide registry probes only once.
//!
//! # Contexts
//!
//! Each device uses its primary context (the one the CUDA runtime uses), retained by
//! [`probe`] and released when the device is dropped. Every operation pushes that context on
//! the calling thread and pops it afterwards, leaving the caller's current context as it was.
//!
//! # Uploads from files
//!
//! [`CudaBuffer::fill_from_file`] stages file bytes through a ring of [`STAGING_BUFFERS`]
//! page-locked host buffers of [`STAGING_BYTES`] each (allocated once per device, on first
//! use, and reused under a mutex), as upstream's loader does with its 4 pinned buffers. Each
//! chunk is read with `pread` into a free buffer and copied with `cuMemcpyHtoDAsync` on the
//! device's upload stream, and an event recorded after the copy marks when that buffer may be
//! refilled. One thread per buffer does this for its share of the chunks (chunks k, k + 4, …),
//! so the reads of the next chunks overlap the copy of the current one; each chunk's read is
//! itself split among up to 4 threads (a quarter of the cores each), since one thread copying
//! from the page cache reaches only a fraction of a PCIe 5 link's speed. The call returns once
//! the stream is idle, also after an error. When page-locked memory cannot be had, uploads
//! fall back to a pageable buffer and synchronous copies.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::fs::File;
use std::io;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::os::unix::fs::FileExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use cudarc::driver::result::DriverError;
use cudarc::driver::sys;

/// Set to disable CUDA (anything but empty or `0`).
pub const NO_CUDA_ENV: &str = "LLAMA_HOTSWAP_NO_CUDA";

/// Number of page-locked staging buffers per device.
pub const STAGING_BUFFERS: usize = 4;

/// Size of one staging buffer (the chunk size of uploads from files).
pub const STAGING_BYTES: usize = 16 << 20;

/// The driver library's names, tried in this order.
const DRIVER_LIBRARIES: [&CStr; 2] = [c"libcuda.so.1", c"libcuda.so"];

/// Every driver function this module calls (cudarc resolves each on first use and panics when
/// one is missing, so all are checked up front).
const DRIVER_FUNCTIONS: [&CStr; 27] = [
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

/// What the registry needs to know about one CUDA device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaDeviceInfo {
    /// The CUDA device ordinal.
    pub ordinal: u32,
    /// The device's name, e.g. "NVIDIA H100 80GB HBM3".
    pub description: String,
    /// Lower-case PCI bus id ("0000:c1:00.0"), when known.
    pub pci_bus_id: Option<String>,
    /// Total device memory in bytes.
    pub total_memory: u64,
}

/// "CUDA_ERROR_OUT_OF_MEMORY (out of memory)".
fn describe(error: DriverError) -> String {
    let name = match error.error_name() {
        Ok(name) => name.to_string_lossy().into_owned(),
        Err(_) => format!("{:?}", error.0),
    };
    match error.error_string() {
        Ok(text) => format!("{name} ({})", text.to_string_lossy()),
        Err(_) => name,
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_string()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "unknown panic".to_string()
    }
}

/// Runs `f`, turning a panic (cudarc panics on a missing library or symbol) into an error.
fn guarded<T>(what: &str, f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    catch_unwind(AssertUnwindSafe(f))
        .unwrap_or_else(|payload| Err(format!("{what} panicked: {}", panic_message(&*payload))))
}

/// A primary context handle.
#[derive(Debug)]
struct Context(sys::CUcontext);

// SAFETY: a CUDA context handle is an opaque driver handle that the driver API accepts from any
// thread (cuCtxPushCurrent binds it to the calling thread); the handle itself is never
// dereferenced on the Rust side.
unsafe impl Send for Context {}
// SAFETY: as above; sharing the handle only lets threads bind the same context, which the
// driver supports.
unsafe impl Sync for Context {}

/// The device's context bound to this thread until dropped (pushed, then popped, so the
/// caller's own current context is restored). Not `Send`: it must be popped where pushed.
struct Bound(PhantomData<*const ()>);

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

/// A CUDA stream handle.
#[derive(Debug, Clone, Copy)]
struct Stream(sys::CUstream);

// SAFETY: stream handles are opaque driver handles usable from any thread that has the
// stream's context bound (the upload threads bind it); never dereferenced in Rust.
unsafe impl Send for Stream {}
// SAFETY: enqueueing work on one stream from several threads is allowed by the driver API.
unsafe impl Sync for Stream {}

/// One page-locked staging buffer and the event recorded after its last copy.
#[derive(Debug)]
struct Slot {
    host: *mut u8,
    event: sys::CUevent,
    /// A copy from `host` was enqueued and `event` recorded after it, not yet waited for.
    pending: bool,
}

// SAFETY: `host` is page-locked memory owned by this slot (freed only by `Ring::destroy`) and
// `event` an event owned by it; both may be used from any thread with the context bound, and
// `&mut Slot` gives one thread at a time the right to touch them.
unsafe impl Send for Slot {}

impl Slot {
    /// Waits until the last copy from this buffer has finished.
    fn wait(&mut self, label: &str) -> Result<(), String> {
        if self.pending {
            // SAFETY: `event` is a live event created in this device's context, which the
            // calling thread has bound.
            unsafe { sys::cuEventSynchronize(self.event) }
                .result()
                .map_err(|e| format!("{label}: waiting for a staging copy: {}", describe(e)))?;
            self.pending = false;
        }
        Ok(())
    }

    /// The first `len` bytes of the buffer; call [`Slot::wait`] first.
    fn bytes(&mut self, len: usize) -> &mut [u8] {
        assert!(len <= STAGING_BYTES);
        // SAFETY: `host` points to STAGING_BYTES bytes of page-locked memory owned by this
        // slot, initialized (zeroed) when allocated; `len` is within it; `&mut self` makes this
        // the only reference, and the caller has waited for the copy that last read it.
        unsafe { std::slice::from_raw_parts_mut(self.host, len) }
    }
}

/// The upload stream and staging buffers of one device.
#[derive(Debug)]
struct Ring {
    stream: Stream,
    slots: Vec<Slot>,
}

impl Ring {
    /// Creates the stream, events and page-locked buffers; the device's context must be bound.
    fn new() -> Result<Ring, String> {
        let mut stream: sys::CUstream = std::ptr::null_mut();
        // SAFETY: `stream` is a valid out pointer; the context is bound by the caller. A
        // blocking stream (CU_STREAM_DEFAULT) orders its copies after earlier synchronous copies
        // on the legacy stream (whose DMA may still be running when they return).
        unsafe { sys::cuStreamCreate(&mut stream, sys::CUstream_flags::CU_STREAM_DEFAULT as u32) }
            .result()
            .map_err(|e| format!("cuStreamCreate: {}", describe(e)))?;
        let mut ring = Ring {
            stream: Stream(stream),
            slots: Vec::with_capacity(STAGING_BUFFERS),
        };
        for _ in 0..STAGING_BUFFERS {
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

    fn new_slot() -> Result<Slot, String> {
        let mut event: sys::CUevent = std::ptr::null_mut();
        // Blocking sync: a thread waiting for its buffer sleeps instead of spinning on a core
        // that the readers need.
        let flags = sys::CUevent_flags::CU_EVENT_BLOCKING_SYNC as u32
            | sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
        // SAFETY: `event` is a valid out pointer; the context is bound by the caller.
        unsafe { sys::cuEventCreate(&mut event, flags) }
            .result()
            .map_err(|e| format!("cuEventCreate: {}", describe(e)))?;
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
    fn synchronize(&mut self, label: &str) -> Result<(), String> {
        // SAFETY: the stream is live and belongs to the bound context.
        unsafe { sys::cuStreamSynchronize(self.stream.0) }
            .result()
            .map_err(|e| format!("{label}: waiting for the upload stream: {}", describe(e)))?;
        for slot in &mut self.slots {
            slot.pending = false;
        }
        Ok(())
    }

    /// Frees everything; the device's context must be bound.
    fn destroy(&mut self) {
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
fn alloc_pinned_bytes(bytes: usize) -> Result<*mut u8, String> {
    let mut host: *mut c_void = std::ptr::null_mut();
    // SAFETY: `host` is a valid out pointer; the context is bound by the caller. PORTABLE makes
    // the memory count as page-locked for every context.
    unsafe { sys::cuMemHostAlloc(&mut host, bytes, sys::CU_MEMHOSTALLOC_PORTABLE) }
        .result()
        .map_err(|e| format!("cuMemHostAlloc of {bytes} bytes: {}", describe(e)))?;
    let host = host.cast::<u8>();
    // SAFETY: the driver returned `bytes` writable bytes at `host`; zeroing them once makes
    // them initialized for the slices handed out later.
    unsafe { std::ptr::write_bytes(host, 0, bytes) };
    Ok(host)
}

/// The staging state of a device.
#[derive(Debug)]
enum Staging {
    /// Not needed yet.
    Untried,
    Ready(Ring),
    /// Page-locked memory could not be had; uploads use synchronous copies.
    Unavailable,
}

/// One usable CUDA device (its context is created by [`probe`]).
#[derive(Debug)]
pub struct CudaDevice {
    info: CudaDeviceInfo,
    device: sys::CUdevice,
    context: Context,
    staging: Mutex<Staging>,
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

    /// Allocates `bytes` bytes of device memory (contents unspecified).
    pub fn alloc(self: &Arc<Self>, bytes: usize) -> Result<CudaBuffer, String> {
        let mut ptr: sys::CUdeviceptr = 0;
        if bytes > 0 {
            let _bound = self.bind()?;
            // SAFETY: `ptr` is a valid out pointer; the device's context is bound.
            unsafe { sys::cuMemAlloc_v2(&mut ptr, bytes) }
                .result()
                .map_err(|e| {
                    format!(
                        "{}: cuMemAlloc of {bytes} bytes failed: {}",
                        self.label(),
                        describe(e)
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
    pub fn alloc_pinned(self: &Arc<Self>, bytes: usize) -> Result<PinnedBuffer, String> {
        let ptr = if bytes == 0 {
            std::ptr::NonNull::<u8>::dangling().as_ptr()
        } else {
            let _bound = self.bind()?;
            alloc_pinned_bytes(bytes).map_err(|e| format!("{}: {e}", self.label()))?
        };
        Ok(PinnedBuffer {
            device: Arc::clone(self),
            ptr,
            len: bytes,
        })
    }

    /// "CUDA0", as the registry names it.
    fn label(&self) -> String {
        format!("CUDA{}", self.info.ordinal)
    }

    /// Binds the device's context to this thread until the guard drops.
    fn bind(&self) -> Result<Bound, String> {
        // SAFETY: the context was retained by `open` and stays alive as long as `self`.
        unsafe { sys::cuCtxPushCurrent_v2(self.context.0) }
            .result()
            .map_err(|e| format!("{}: cuCtxPushCurrent failed: {}", self.label(), describe(e)))?;
        Ok(Bound(PhantomData))
    }

    /// Queries device `ordinal` and retains its primary context (the driver is initialized).
    fn open(ordinal: c_int) -> Result<CudaDevice, String> {
        let label = format!("CUDA{ordinal}");
        let fail = |what: &str, e: DriverError| format!("{label}: {what} failed: {}", describe(e));
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

    /// The staging ring, created on first use; None when page-locked memory cannot be had.
    /// The device's context must be bound.
    fn ring<'a>(&self, staging: &'a mut Staging) -> Option<&'a mut Ring> {
        if let Staging::Untried = staging {
            *staging = match Ring::new() {
                Ok(ring) => Staging::Ready(ring),
                Err(error) => {
                    crate::log_warn!(
                        "{}: no page-locked staging buffers ({error}); uploads from files use synchronous copies",
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

/// Page-locked host memory (`cuMemHostAlloc`), freed on drop.
#[derive(Debug)]
pub struct PinnedBuffer {
    device: Arc<CudaDevice>,
    ptr: *mut u8,
    len: usize,
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
    device: Arc<CudaDevice>,
    ptr: sys::CUdeviceptr,
    len: usize,
}

/// Smallest piece of a chunk that gets a reader thread of its own.
const MIN_READ_PART: usize = 2 << 20;

/// Reader threads per chunk: the cores shared among the staging buffers' threads (1 to 4).
fn read_parts() -> usize {
    static PARTS: OnceLock<usize> = OnceLock::new();
    *PARTS.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        (cores / STAGING_BUFFERS).clamp(1, 4)
    })
}

/// `read_exact_at`, split among [`read_parts`] threads for large reads: one thread copying
/// from the page cache reaches a fraction of a PCIe 5 link's speed.
fn read_split(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    let part = buf
        .len()
        .div_ceil(read_parts())
        .next_multiple_of(4096)
        .max(MIN_READ_PART);
    if part >= buf.len() {
        return file.read_exact_at(buf, offset);
    }
    std::thread::scope(|scope| {
        let mut pieces = buf.chunks_mut(part);
        let first = pieces.next().unwrap_or_default();
        let helpers: Vec<_> = pieces
            .enumerate()
            .map(|(i, piece)| {
                let at = offset + ((i + 1) * part) as u64;
                scope.spawn(move || file.read_exact_at(piece, at))
            })
            .collect();
        let mut result = file.read_exact_at(first, offset);
        for helper in helpers {
            let outcome = helper
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("reader thread panicked")));
            if result.is_ok() {
                result = outcome;
            }
        }
        result
    })
}

/// One upload from a file, shared by the upload threads.
struct Upload<'a> {
    label: &'a str,
    file: &'a File,
    file_offset: u64,
    /// Device address of the first byte.
    dst: sys::CUdeviceptr,
    len: usize,
    stream: Stream,
    /// Threads (and staging buffers) taking part; thread `i` does chunks i, i + threads, …
    threads: usize,
    /// Set by the first thread that fails, so the others stop.
    abort: &'a AtomicBool,
}

impl Upload<'_> {
    /// Uploads every `threads`-th chunk from `first` through `slot`; the context must be
    /// bound on this thread.
    fn run(&self, slot: &mut Slot, first: usize) -> io::Result<()> {
        let result = self.run_chunks(slot, first);
        if result.is_err() {
            self.abort.store(true, Ordering::Relaxed);
        }
        result
    }

    fn run_chunks(&self, slot: &mut Slot, first: usize) -> io::Result<()> {
        let mut start = first * STAGING_BYTES;
        while start < self.len {
            if self.abort.load(Ordering::Relaxed) {
                return Ok(());
            }
            let n = STAGING_BYTES.min(self.len - start);
            slot.wait(self.label).map_err(io::Error::other)?;
            let offset = self.file_offset + start as u64;
            let bytes = slot.bytes(n);
            read_split(self.file, bytes, offset).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "{}: reading {n} bytes at file offset {offset}: {e}",
                        self.label
                    ),
                )
            })?;
            // SAFETY: `dst + start .. + n` lies inside the destination allocation (checked by
            // `fill_from_file`); the source is this slot's page-locked buffer, which is not
            // touched again until its event (recorded next) has completed; the stream belongs
            // to the bound context.
            unsafe {
                sys::cuMemcpyHtoDAsync_v2(
                    self.dst + start as u64,
                    bytes.as_ptr().cast::<c_void>(),
                    n,
                    self.stream.0,
                )
            }
            .result()
            .map_err(|e| {
                io::Error::other(format!(
                    "{}: cuMemcpyHtoDAsync of {n} bytes: {}",
                    self.label,
                    describe(e)
                ))
            })?;
            // SAFETY: the event and stream are live and belong to the bound context.
            unsafe { sys::cuEventRecord(slot.event, self.stream.0) }
                .result()
                .map_err(|e| {
                    io::Error::other(format!("{}: cuEventRecord: {}", self.label, describe(e)))
                })?;
            slot.pending = true;
            start += self.threads * STAGING_BYTES;
        }
        Ok(())
    }
}

impl CudaBuffer {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn check_range(&self, what: &str, offset: usize, len: usize) -> Result<(), String> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(format!(
                "{}: {what} of {len} bytes at offset {offset} is outside an allocation of {} bytes",
                self.device.label(),
                self.len
            )),
        }
    }

    /// Copies `src` to `offset` (synchronous host-to-device copy).
    pub fn write(&mut self, offset: usize, src: &[u8]) -> Result<(), String> {
        self.check_range("write", offset, src.len())?;
        if src.is_empty() {
            return Ok(());
        }
        let _bound = self.device.bind()?;
        // SAFETY: the destination range lies inside this allocation (checked above); `src` is
        // a live slice of `src.len()` bytes; the copy is synchronous with respect to `src`.
        unsafe {
            sys::cuMemcpyHtoD_v2(
                self.ptr + offset as u64,
                src.as_ptr().cast::<c_void>(),
                src.len(),
            )
        }
        .result()
        .map_err(|e| {
            format!(
                "{}: copying {} bytes to device offset {offset}: {}",
                self.device.label(),
                src.len(),
                describe(e)
            )
        })
    }

    /// Copies all of `src` to `offset` (synchronous: page-locked memory is copied directly by
    /// DMA). The raw copy that [`CudaBuffer::fill_from_file`] is measured against.
    pub fn write_pinned(&mut self, offset: usize, src: &PinnedBuffer) -> Result<(), String> {
        self.write(offset, src)
    }

    /// Copies `dst.len()` bytes from `offset` into `dst` (synchronous device-to-host copy).
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), String> {
        self.check_range("read", offset, dst.len())?;
        if dst.is_empty() {
            return Ok(());
        }
        let _bound = self.device.bind()?;
        // SAFETY: the source range lies inside this allocation (checked above); `dst` is a live
        // exclusive slice of `dst.len()` bytes; the copy has finished when the call returns.
        unsafe {
            sys::cuMemcpyDtoH_v2(
                dst.as_mut_ptr().cast::<c_void>(),
                self.ptr + offset as u64,
                dst.len(),
            )
        }
        .result()
        .map_err(|e| {
            format!(
                "{}: copying {} bytes from device offset {offset}: {}",
                self.device.label(),
                dst.len(),
                describe(e)
            )
        })
    }

    /// Reads `len` bytes of `file` at `file_offset` into the buffer at `dst_offset`, through a
    /// ring of pinned staging buffers whose asynchronous copies overlap the next read.
    pub fn fill_from_file(
        &mut self,
        file: &File,
        file_offset: u64,
        dst_offset: usize,
        len: usize,
    ) -> io::Result<()> {
        self.check_range("file read", dst_offset, len)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        if file_offset.checked_add(len as u64).is_none() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("file range of {len} bytes at offset {file_offset} overflows"),
            ));
        }
        if len == 0 {
            return Ok(());
        }
        let label = self.device.label();
        let _bound = self.device.bind().map_err(io::Error::other)?;
        let mut staging = self
            .device
            .staging
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let Some(ring) = self.device.ring(&mut staging) else {
            drop(staging);
            return self.fill_synchronously(&label, file, file_offset, dst_offset, len);
        };

        let abort = AtomicBool::new(false);
        let upload = Upload {
            label: &label,
            file,
            file_offset,
            dst: self.ptr + dst_offset as u64,
            len,
            stream: ring.stream,
            threads: len.div_ceil(STAGING_BYTES).min(ring.slots.len()),
            abort: &abort,
        };
        let result = if upload.threads == 1 {
            upload.run(&mut ring.slots[0], 0)
        } else {
            let device = &self.device;
            let upload = &upload;
            std::thread::scope(|scope| {
                let workers: Vec<_> = ring.slots[..upload.threads]
                    .iter_mut()
                    .enumerate()
                    .map(|(first, slot)| {
                        scope.spawn(move || {
                            let _bound = device.bind().map_err(io::Error::other)?;
                            upload.run(slot, first)
                        })
                    })
                    .collect();
                let mut result = Ok(());
                for worker in workers {
                    let outcome = worker.join().unwrap_or_else(|payload| {
                        Err(io::Error::other(format!(
                            "{label}: upload thread panicked: {}",
                            panic_message(&*payload)
                        )))
                    });
                    if result.is_ok() {
                        result = outcome;
                    }
                }
                result
            })
        };
        // Whatever happened, no copy may still read a staging buffer or write this buffer
        // once the call returns.
        let synchronized = ring.synchronize(&label).map_err(io::Error::other);
        result.and(synchronized)
    }

    /// The fallback without page-locked memory: pageable chunks and synchronous copies.
    fn fill_synchronously(
        &mut self,
        label: &str,
        file: &File,
        file_offset: u64,
        dst_offset: usize,
        len: usize,
    ) -> io::Result<()> {
        let mut chunk = vec![0u8; STAGING_BYTES.min(len)];
        let mut done = 0;
        while done < len {
            let n = chunk.len().min(len - done);
            let offset = file_offset + done as u64;
            read_split(file, &mut chunk[..n], offset).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("{label}: reading {n} bytes at file offset {offset}: {e}"),
                )
            })?;
            self.write(dst_offset + done, &chunk[..n])
                .map_err(io::Error::other)?;
            done += n;
        }
        Ok(())
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

/// Why CUDA is not used, and whether that deserves a warning (a driver that fails) rather
/// than an info line (no driver, no device: an ordinary machine without a GPU).
#[derive(Debug, Clone)]
struct Unavailable {
    reason: String,
    warn: bool,
}

impl Unavailable {
    fn info(reason: impl Into<String>) -> Unavailable {
        Unavailable {
            reason: reason.into(),
            warn: false,
        }
    }

    fn warn(reason: impl Into<String>) -> Unavailable {
        Unavailable {
            reason: reason.into(),
            warn: true,
        }
    }
}

fn disabled_by_env() -> Option<String> {
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
fn open_driver_library() -> Result<(), Unavailable> {
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
fn devices() -> &'static Result<Vec<Arc<CudaDevice>>, Unavailable> {
    static DEVICES: OnceLock<Result<Vec<Arc<CudaDevice>>, Unavailable>> = OnceLock::new();
    DEVICES.get_or_init(|| {
        open_driver_library()?;
        guarded("cuInit", || {
            // SAFETY: the library is loaded and exports cuInit (checked above); cuInit(0) has
            // no other preconditions.
            unsafe { sys::cuInit(0) }
                .result()
                .map_err(|e| format!("cuInit failed: {}", describe(e)))
        })
        .map_err(Unavailable::warn)?;
        let mut count: c_int = 0;
        guarded("cuDeviceGetCount", || {
            // SAFETY: `count` is a valid out pointer; the driver is initialized.
            unsafe { sys::cuDeviceGetCount(&mut count) }
                .result()
                .map_err(|e| format!("cuDeviceGetCount failed: {}", describe(e)))
        })
        .map_err(Unavailable::warn)?;
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
