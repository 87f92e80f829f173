//! Copies through the staging ring. Uploads: each ring thread fills its own page-locked buffer
//! with its next chunk (read from a file, or copied from host memory) and copies it to the
//! device asynchronously. Downloads: each thread copies its next chunk into its buffer and
//! from there into the caller's memory. Synchronous pageable copies when nothing is pinned.

use std::ffi::c_void;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use cudarc::driver::sys;

use super::buffer::CudaBuffer;
use super::common::{CudaCode, CudaError, STAGING_BYTES};
use super::context::CudaDevice;
use super::driver::panic_message;
use super::ring::{Ring, Slot, Stream};

/// Where an upload's bytes come from.
#[derive(Clone, Copy)]
pub(super) enum Source<'a> {
    /// `file` from byte `offset` on (page cache or disk).
    File { file: &'a File, offset: u64 },
    /// Bytes already in host memory (a mapping, an arena, a vector).
    Memory(&'a [u8]),
}

impl Source<'_> {
    /// Fills `dst` with the source's bytes from `at` on (the caller keeps `at + dst.len()`
    /// within the upload, whose file range was checked for overflow).
    fn read(&self, at: usize, dst: &mut [u8]) -> io::Result<()> {
        match *self {
            Source::File { file, offset } => file.read_exact_at(dst, offset + at as u64),
            Source::Memory(bytes) => {
                dst.copy_from_slice(&bytes[at..at + dst.len()]);
                Ok(())
            }
        }
    }

    /// What failed, for the error message of a failed [`Source::read`].
    fn what(&self, at: usize, n: usize) -> String {
        match *self {
            Source::File { offset, .. } => {
                format!("reading {n} bytes at file offset {}", offset + at as u64)
            }
            Source::Memory(_) => format!("staging {n} bytes at source offset {at}"),
        }
    }
}

/// Why an upload failed: reading its source, or the device.
#[derive(Debug)]
pub(super) enum UploadError {
    Read(io::Error),
    Cuda(CudaError),
}

impl From<UploadError> for io::Error {
    fn from(error: UploadError) -> io::Error {
        match error {
            UploadError::Read(error) => error,
            UploadError::Cuda(error) => io::Error::other(error),
        }
    }
}

impl UploadError {
    /// As a [`CudaError`], for callers whose source cannot fail to read (host memory).
    fn into_cuda(self, op: &str) -> CudaError {
        match self {
            UploadError::Cuda(error) => error,
            UploadError::Read(error) => CudaError {
                op: op.to_string(),
                code: CudaCode::Panicked(error.to_string()),
            },
        }
    }
}

/// One upload, shared by the ring threads taking part.
struct Upload<'a> {
    label: &'a str,
    source: Source<'a>,
    /// Device address of the first byte.
    dst: sys::CUdeviceptr,
    len: usize,
    stream: Stream,
}

impl Upload<'_> {
    /// Uploads the chunk at `start` through `slot`: waits for the slot's last copy, fills it
    /// from the source and enqueues its copy, with the slot's event after it. The context
    /// must be bound on this thread.
    fn chunk(&self, slot: &mut Slot, start: usize) -> Result<(), UploadError> {
        let n = STAGING_BYTES.min(self.len - start);
        slot.wait(self.label).map_err(UploadError::Cuda)?;
        let bytes = slot.bytes(n);
        self.source.read(start, bytes).map_err(|e| {
            let what = self.source.what(start, n);
            UploadError::Read(io::Error::new(
                e.kind(),
                format!("{}: {what}: {e}", self.label),
            ))
        })?;
        // SAFETY: `dst + start .. + n` lies inside the destination allocation (checked by the
        // caller of `upload`); the source is this slot's page-locked buffer, which is not
        // touched again until its event (recorded next) has completed; the stream belongs to
        // the bound context.
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
            UploadError::Cuda(CudaError::driver(
                format!("{}: cuMemcpyHtoDAsync of {n} bytes", self.label),
                e,
            ))
        })?;
        record(self.label, slot, self.stream)
    }
}

impl CudaBuffer {
    /// Reads `len` bytes of `file` at `file_offset` into the buffer at `dst_offset`, through
    /// the staging ring (see the module documentation of `device::cuda`). A short read is an
    /// error (`UnexpectedEof`); the buffer's other bytes are untouched.
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
        let source = Source::File {
            file,
            offset: file_offset,
        };
        self.upload(dst_offset, source, len)
            .map_err(io::Error::from)
    }

    /// Copies `src` to `offset` through the staging ring (a large pageable slice).
    pub(super) fn write_staged(&mut self, offset: usize, src: &[u8]) -> Result<(), CudaError> {
        self.upload(offset, Source::Memory(src), src.len())
            .map_err(|e| e.into_cuda(&format!("staging a write of {} bytes", src.len())))
    }

    /// Uploads `len` bytes of `source` to `dst_offset`; the range is checked by the caller.
    fn upload(
        &mut self,
        dst_offset: usize,
        source: Source<'_>,
        len: usize,
    ) -> Result<(), UploadError> {
        if len == 0 {
            return Ok(());
        }
        let label = self.device.label();
        let _bound = self.device.bind().map_err(UploadError::Cuda)?;
        let device = Arc::clone(&self.device);
        let dst = self.ptr + dst_offset as u64;
        device.with_ring(|ring| {
            let Some(ring) = ring else {
                return self.upload_synchronously(&label, source, dst_offset, len);
            };
            let upload = Upload {
                label: &label,
                source,
                dst,
                len,
                stream: ring.stream,
            };
            let parts = deal((0..len).step_by(STAGING_BYTES), ring.slots.len());
            on_ring(&device, &label, ring, parts, |slot, start| {
                upload.chunk(slot, start)
            })
        })
    }

    /// Copies `dst.len()` bytes from `offset` into `dst` through the staging ring (range
    /// checked by the caller): each chunk is copied into a thread's page-locked buffer and,
    /// once there, into `dst`.
    pub(super) fn read_staged(&self, offset: usize, dst: &mut [u8]) -> Result<(), CudaError> {
        let label = self.device.label();
        let op = format!(
            "{label}: staged copy of {} bytes from device offset {offset}",
            dst.len()
        );
        let _bound = self.device.bind()?;
        let src = self.ptr + offset as u64;
        self.device.with_ring(|ring| {
            let Some(ring) = ring else {
                return self.read_direct(offset, dst);
            };
            let parts = deal(dst.chunks_mut(STAGING_BYTES).enumerate(), ring.slots.len());
            let stream = ring.stream;
            on_ring(&self.device, &label, ring, parts, |slot, (k, chunk)| {
                let at = src + (k * STAGING_BYTES) as u64;
                download_chunk(&label, slot, at, chunk, stream)
            })
            .map_err(|e| e.into_cuda(&op))
        })
    }

    /// The fallback without page-locked memory: synchronous pageable copies (from the source
    /// itself, or from a vector the file is read into chunk by chunk).
    fn upload_synchronously(
        &mut self,
        label: &str,
        source: Source<'_>,
        dst_offset: usize,
        len: usize,
    ) -> Result<(), UploadError> {
        let (file, offset) = match source {
            Source::Memory(bytes) => {
                return self
                    .write_direct(dst_offset, &bytes[..len])
                    .map_err(UploadError::Cuda)
            }
            Source::File { file, offset } => (file, offset),
        };
        let mut chunk = vec![0u8; (16 * STAGING_BYTES).min(len)];
        let mut done = 0;
        while done < len {
            let n = chunk.len().min(len - done);
            let piece = &mut chunk[..n];
            file.read_exact_at(piece, offset + done as u64)
                .map_err(|e| {
                    let what = source.what(done, n);
                    UploadError::Read(io::Error::new(e.kind(), format!("{label}: {what}: {e}")))
                })?;
            self.write_direct(dst_offset + done, piece)
                .map_err(UploadError::Cuda)?;
            done += n;
        }
        Ok(())
    }
}

/// Deals `items` (chunks, in order) to at most `threads` threads: thread `i` gets items i,
/// i + threads, …, so that the threads advance through the transfer side by side.
fn deal<T>(items: impl Iterator<Item = T>, threads: usize) -> Vec<Vec<T>> {
    let mut parts: Vec<Vec<T>> = Vec::new();
    for (k, item) in items.enumerate() {
        match parts.get_mut(k % threads.max(1)) {
            Some(part) => part.push(item),
            None => parts.push(vec![item]),
        }
    }
    parts
}

/// Runs `work(slot, item)` on each part's items in turn, one part per slot and thread (the
/// calling thread itself for a single part) with the device's context bound. The first error
/// wins and stops the other threads before their next item. Then waits for the stream
/// whatever happened, so that no copy still uses a staging buffer or the device buffer once
/// this returns.
fn on_ring<T: Send>(
    device: &CudaDevice,
    label: &str,
    ring: &mut Ring,
    parts: Vec<Vec<T>>,
    work: impl Fn(&mut Slot, T) -> Result<(), UploadError> + Sync,
) -> Result<(), UploadError> {
    debug_assert!(parts.len() <= ring.slots.len());
    let abort = AtomicBool::new(false);
    let run = |slot: &mut Slot, items: Vec<T>| {
        for item in items {
            if abort.load(Ordering::Relaxed) {
                break;
            }
            if let Err(error) = work(slot, item) {
                abort.store(true, Ordering::Relaxed);
                return Err(error);
            }
        }
        Ok(())
    };
    let result = if parts.len() <= 1 {
        let slot = &mut ring.slots[0];
        parts.into_iter().try_for_each(|items| run(slot, items))
    } else {
        let run = &run;
        std::thread::scope(|scope| {
            let workers: Vec<_> = ring
                .slots
                .iter_mut()
                .zip(parts)
                .map(|(slot, items)| {
                    scope.spawn(move || {
                        let _bound = device.bind().map_err(UploadError::Cuda)?;
                        run(slot, items)
                    })
                })
                .collect();
            let mut result = Ok(());
            for worker in workers {
                let outcome = worker.join().unwrap_or_else(|payload| {
                    Err(UploadError::Cuda(CudaError {
                        op: format!("{label}: staging thread"),
                        code: CudaCode::Panicked(panic_message(&*payload)),
                    }))
                });
                if result.is_ok() {
                    result = outcome;
                }
            }
            result
        })
    };
    let synchronized = ring.synchronize(label).map_err(UploadError::Cuda);
    result.and(synchronized)
}

/// Records the slot's event after its copy on `stream` and marks the slot busy until then.
fn record(label: &str, slot: &mut Slot, stream: Stream) -> Result<(), UploadError> {
    // SAFETY: the event and stream are live and belong to the bound context.
    unsafe { sys::cuEventRecord(slot.event, stream.0) }
        .result()
        .map_err(|e| UploadError::Cuda(CudaError::driver(format!("{label}: cuEventRecord"), e)))?;
    slot.pending = true;
    Ok(())
}

/// Copies `chunk.len()` bytes at device address `src` into `chunk` through `slot`; the
/// context must be bound.
fn download_chunk(
    label: &str,
    slot: &mut Slot,
    src: sys::CUdeviceptr,
    chunk: &mut [u8],
    stream: Stream,
) -> Result<(), UploadError> {
    let n = chunk.len();
    slot.wait(label).map_err(UploadError::Cuda)?;
    let host = slot.bytes(n);
    // SAFETY: `src .. + n` lies inside the source allocation (checked by the caller of
    // `read_staged`); the destination is this slot's page-locked buffer, which nothing else
    // touches until the event recorded next has completed (waited for below); the stream
    // belongs to the bound context.
    unsafe { sys::cuMemcpyDtoHAsync_v2(host.as_mut_ptr().cast::<c_void>(), src, n, stream.0) }
        .result()
        .map_err(|e| {
            UploadError::Cuda(CudaError::driver(
                format!("{label}: cuMemcpyDtoHAsync of {n} bytes"),
                e,
            ))
        })?;
    record(label, slot, stream)?;
    slot.wait(label).map_err(UploadError::Cuda)?;
    chunk.copy_from_slice(slot.bytes(n));
    Ok(())
}
