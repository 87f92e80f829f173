//! Files on disk: opening (buffered or O_DIRECT), identity for change detection, bounded
//! header reads, positional reads, mappings and page-aligned owned memory. This is the OS
//! edge of the loader; the only `unsafe` here is the mapping of a file, with its SAFETY note.

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::gguf::file::DEFAULT_MAX_HEADER_BYTES;
use crate::gguf::{read_header_from, GgufError, GgufHeader, ReadAt};

/// What identifies a file's content for change detection: a rename-into-place changes the
/// inode, a `cp -p` keeps mtime but changes ctime.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileIdentity {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime_ns: i128,
    pub ctime_ns: i128,
}

impl FileIdentity {
    pub fn of(meta: &std::fs::Metadata) -> FileIdentity {
        FileIdentity {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
            ctime_ns: i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec()),
        }
    }
}

/// An open model file.
#[derive(Debug)]
pub struct SourceFile {
    /// The path it was opened by (None for a `FILE *` handed in by the host).
    pub path: Option<PathBuf>,
    pub file: File,
    /// Where the GGUF starts inside the file (non-zero only for `FILE *` sources).
    pub base: u64,
    pub identity: FileIdentity,
}

impl SourceFile {
    pub fn open(path: &Path) -> io::Result<SourceFile> {
        let file = File::open(path)?;
        let identity = FileIdentity::of(&file.metadata()?);
        Ok(SourceFile {
            path: Some(path.to_path_buf()),
            file,
            base: 0,
            identity,
        })
    }

    pub fn from_file(file: File, base: u64) -> io::Result<SourceFile> {
        let identity = FileIdentity::of(&file.metadata()?);
        Ok(SourceFile {
            path: None,
            file,
            base,
            identity,
        })
    }

    /// A name for log lines.
    pub fn display_name(&self) -> String {
        self.path
            .as_ref()
            .map_or_else(|| "<FILE *>".to_string(), |p| p.display().to_string())
    }

    /// Bytes of GGUF available after `base`.
    pub fn gguf_size(&self) -> u64 {
        self.identity.size.saturating_sub(self.base)
    }

    /// Reads exactly `buf.len()` bytes at GGUF offset `offset`; a short file is an error.
    pub fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.file.read_exact_at(buf, self.base + offset)
    }
}

/// Header reads go through the GGUF module's bounded reader, offset by `base`.
impl ReadAt for SourceFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        FileExt::read_at(&self.file, buf, self.base + offset)
    }
}

/// Reads only the header of the GGUF (bounded reads: a huge shard's data is never touched).
pub fn read_header(source: &SourceFile) -> Result<GgufHeader, GgufError> {
    read_header_from(source, source.gguf_size(), DEFAULT_MAX_HEADER_BYTES)
}

/// Opens a second handle on the same file with O_DIRECT when the filesystem allows it.
pub fn reopen_direct(path: &Path) -> Option<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .ok()
}

/// A read-only shared mapping of a whole file.
pub fn map_file(file: &File, populate: bool) -> io::Result<memmap2::Mmap> {
    let mut options = memmap2::MmapOptions::new();
    if populate {
        options.populate();
    }
    // SAFETY: the mapping is read-only and shared. Another process may still truncate or
    // rewrite the file underneath it; llama-hotswap never writes through mappings, and the
    // hot-swap path moves tensors off a file's mapping as soon as it sees the file changed.
    // The remaining hazard (a host reading weights after truncating a mapped file and before
    // calling reload) is documented in the README.
    let map = unsafe { options.map(file) }?;
    let _ = map.advise(memmap2::Advice::Sequential);
    if populate {
        let _ = map.advise(memmap2::Advice::WillNeed);
    }
    Ok(map)
}

/// Page-aligned, owned, writable memory (an anonymous mapping), optionally pre-faulted so
/// that reads into it do not pay page faults one page at a time.
pub fn alloc_pages(len: usize, populate: bool) -> io::Result<memmap2::MmapMut> {
    let mut options = memmap2::MmapOptions::new();
    options.len(len.max(1));
    if populate {
        options.populate();
    }
    options.map_anon()
}

/// Owned, page-aligned host memory holding the tensors of one file in the owned load modes.
/// Each tensor owns a disjoint range, and every access to a range happens under that tensor's
/// lock (readers under its read lock, hot-swap's writes under its write lock), so the arena
/// hands out raw ranges rather than one slice over everything.
#[derive(Debug)]
pub struct HostArena {
    raw: memmap2::MmapRaw,
}

impl HostArena {
    pub fn new(map: memmap2::MmapMut) -> HostArena {
        HostArena { raw: map.into() }
    }

    pub fn len(&self) -> usize {
        self.raw.len()
    }

    pub fn is_empty(&self) -> bool {
        self.raw.len() == 0
    }

    /// The bytes `offset .. offset + len`, or None when out of range. The caller holds the
    /// owning tensor's lock (read or write) for as long as it uses the slice.
    pub fn range(&self, offset: usize, len: usize) -> Option<&[u8]> {
        let end = offset.checked_add(len)?;
        if end > self.raw.len() {
            return None;
        }
        // SAFETY: the range is inside the live mapping (checked above); writes to it happen
        // only through `write_range` under the owning tensor's write lock, which excludes
        // every holder of this slice (they hold the read lock).
        Some(unsafe { std::slice::from_raw_parts(self.raw.as_ptr().add(offset), len) })
    }

    /// Gives the whole pages inside `offset .. offset + len` back to the OS (the range will
    /// never be read: its tensor lives on a device). Best effort; errors are ignored.
    pub fn release_range(&self, offset: usize, len: usize) {
        const PAGE: usize = 4096;
        let start = offset.div_ceil(PAGE) * PAGE;
        let end = (offset.saturating_add(len) / PAGE * PAGE).min(self.raw.len());
        if end > start {
            // SAFETY: the pages are inside our anonymous mapping, and no slice over them is
            // alive or will be made (the tensor that owned them lives on a device); after
            // MADV_DONTNEED they would read back as zeros, which nobody does.
            unsafe {
                libc::madvise(
                    self.raw.as_mut_ptr().add(start).cast(),
                    end - start,
                    libc::MADV_DONTNEED,
                );
            }
        }
    }

    /// Overwrites `offset .. offset + src.len()`.
    ///
    /// # Safety
    /// The caller must hold the write lock of the tensor that owns this range, so that no
    /// slice from [`HostArena::range`] over it is alive.
    pub unsafe fn write_range(&self, offset: usize, src: &[u8]) -> io::Result<()> {
        match offset.checked_add(src.len()) {
            Some(end) if end <= self.raw.len() => {
                // SAFETY: in range (checked); exclusive per this function's contract.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        src.as_ptr(),
                        self.raw.as_mut_ptr().add(offset),
                        src.len(),
                    )
                };
                Ok(())
            }
            _ => Err(io::Error::other(format!(
                "write of {} bytes at {offset} is outside an arena of {} bytes",
                src.len(),
                self.raw.len()
            ))),
        }
    }
}
