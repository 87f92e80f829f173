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
/// It is only ever used through [`split_arena`], which cuts it into disjoint [`HostRange`]s.
#[derive(Debug)]
pub struct HostArena {
    raw: memmap2::MmapRaw,
}

impl HostArena {
    pub fn new(map: memmap2::MmapMut) -> HostArena {
        HostArena { raw: map.into() }
    }
}

/// One tensor's bytes inside an arena. Ranges of one arena never overlap ([`split_arena`]
/// checks it) and a range is not `Clone`, so `&self` / `&mut self` on the range is exactly
/// shared / exclusive access to its bytes.
#[derive(Debug)]
pub struct HostRange {
    arena: std::sync::Arc<HostArena>,
    offset: usize,
    len: usize,
}

impl HostRange {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the range lies inside the live mapping (checked by `split_arena`, and the
        // Arc keeps the mapping alive); no other range overlaps it, and writes need
        // `&mut self`, which cannot coexist with this shared borrow.
        unsafe { std::slice::from_raw_parts(self.arena.raw.as_ptr().add(self.offset), self.len) }
    }

    /// Overwrites the range with `src` (which must have the range's length).
    pub fn write(&mut self, src: &[u8]) -> io::Result<()> {
        if src.len() != self.len {
            return Err(io::Error::other(format!(
                "write of {} bytes into a {}-byte range",
                src.len(),
                self.len
            )));
        }
        // SAFETY: inside the mapping and disjoint from every other range (as in `bytes`);
        // `&mut self` means no slice from `bytes` is alive.
        unsafe {
            std::ptr::copy_nonoverlapping(
                src.as_ptr(),
                self.arena.raw.as_mut_ptr().add(self.offset),
                self.len,
            )
        };
        Ok(())
    }
}

/// Cuts an arena into the ranges `keep` (returned in order) and gives the whole pages of the
/// ranges `release` back to the OS (their tensors went to a device and are never read from
/// here). Fails when a range leaves the arena or two ranges overlap.
pub fn split_arena(
    arena: HostArena,
    keep: &[(usize, usize)],
    release: &[(usize, usize)],
) -> io::Result<Vec<HostRange>> {
    let size = arena.raw.len();
    let mut all: Vec<(usize, usize)> = keep.iter().chain(release).copied().collect();
    all.sort_unstable();
    let mut end_so_far = 0usize;
    for &(offset, len) in &all {
        let end = offset
            .checked_add(len)
            .filter(|&e| e <= size)
            .ok_or_else(|| io::Error::other(format!("range {offset}+{len} outside the arena")))?;
        if len > 0 && offset < end_so_far {
            return Err(io::Error::other(format!(
                "range at {offset} overlaps another"
            )));
        }
        end_so_far = end_so_far.max(end);
    }
    const PAGE: usize = 4096;
    for &(offset, len) in release {
        let start = offset.div_ceil(PAGE) * PAGE;
        let end = (offset + len) / PAGE * PAGE;
        if end > start {
            // SAFETY: whole pages inside our anonymous mapping and inside a released range,
            // which overlaps no kept range (checked above): nothing reads them again.
            unsafe {
                libc::madvise(
                    arena.raw.as_mut_ptr().add(start).cast(),
                    end - start,
                    libc::MADV_DONTNEED,
                );
            }
        }
    }
    let arena = std::sync::Arc::new(arena);
    Ok(keep
        .iter()
        .map(|&(offset, len)| HostRange {
            arena: std::sync::Arc::clone(&arena),
            offset,
            len,
        })
        .collect())
}
