//! Uploads from files: chunks read (split among threads) into the ring's buffers and copied
//! asynchronously, or synchronously through pageable memory when nothing is pinned.

use std::ffi::c_void;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{OnceLock, PoisonError};

use cudarc::driver::sys;

use super::{
    driver::panic_message,
    ring::{Slot, Stream},
    CudaBuffer, CudaError, STAGING_BUFFERS, STAGING_BYTES,
};

/// Smallest piece of a chunk that gets a reader thread of its own.
pub(super) const MIN_READ_PART: usize = 2 << 20;

/// Reader threads per chunk: the cores shared among the staging buffers' threads (1 to 4).
pub(super) fn read_parts() -> usize {
    static PARTS: OnceLock<usize> = OnceLock::new();
    *PARTS.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        (cores / STAGING_BUFFERS).clamp(1, 4)
    })
}

/// `read_exact_at`, split among [`read_parts`] threads for large reads: one thread copying
/// from the page cache reaches a fraction of a PCIe 5 link's speed.
pub(super) fn read_split(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    let part = buf
        .len()
        .div_ceil(read_parts())
        .next_multiple_of(crate::device::page_size())
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
pub(super) struct Upload<'a> {
    pub(super) label: &'a str,
    pub(super) file: &'a File,
    pub(super) file_offset: u64,
    /// Device address of the first byte.
    pub(super) dst: sys::CUdeviceptr,
    pub(super) len: usize,
    pub(super) stream: Stream,
    /// Threads (and staging buffers) taking part; thread `i` does chunks i, i + threads, …
    pub(super) threads: usize,
    /// Set by the first thread that fails, so the others stop.
    pub(super) abort: &'a AtomicBool,
}

impl Upload<'_> {
    /// Uploads every `threads`-th chunk from `first` through `slot`; the context must be
    /// bound on this thread.
    pub(super) fn run(&self, slot: &mut Slot, first: usize) -> io::Result<()> {
        let result = self.run_chunks(slot, first);
        if result.is_err() {
            self.abort.store(true, Ordering::Relaxed);
        }
        result
    }

    pub(super) fn run_chunks(&self, slot: &mut Slot, first: usize) -> io::Result<()> {
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
                io::Error::other(CudaError::driver(
                    format!("{}: cuMemcpyHtoDAsync of {n} bytes", self.label),
                    e,
                ))
            })?;
            // SAFETY: the event and stream are live and belong to the bound context.
            unsafe { sys::cuEventRecord(slot.event, self.stream.0) }
                .result()
                .map_err(|e| {
                    io::Error::other(CudaError::driver(
                        format!("{}: cuEventRecord", self.label),
                        e,
                    ))
                })?;
            slot.pending = true;
            start += self.threads * STAGING_BYTES;
        }
        Ok(())
    }
}

impl CudaBuffer {
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
    pub(super) fn fill_synchronously(
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
