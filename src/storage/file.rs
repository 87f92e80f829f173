//! Model files on disk: opening (buffered or O_DIRECT), identity for change detection,
//! bounded header reads and positional reads (split across two threads when large).

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

/// Opens a model file for reading, refusing anything but a regular file without blocking:
/// the type is checked first (a FIFO at the path would block `open(2)` until a writer
/// comes), the open is non-blocking (the path may have become a FIFO since), and the opened
/// descriptor is checked again. O_NONBLOCK has no effect on reads of a regular file.
pub fn open_regular(path: &Path, extra_flags: i32) -> io::Result<File> {
    let not_regular = || io::Error::new(io::ErrorKind::InvalidInput, "not a regular file");
    if !std::fs::metadata(path)?.is_file() {
        return Err(not_regular());
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | extra_flags)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(not_regular());
    }
    Ok(file)
}

/// `path` made absolute against the current directory now, so that a later `chdir` of the
/// host does not change which file a watched path names.
pub fn resolve(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

impl SourceFile {
    pub fn open(path: &Path) -> io::Result<SourceFile> {
        let file = open_regular(path, 0)?;
        let identity = FileIdentity::of(&file.metadata()?);
        Ok(SourceFile {
            path: Some(resolve(path)),
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
    open_regular(path, libc::O_DIRECT).ok()
}

/// `read_exact_at`, split across two threads for large reads (page-cache copies are bound by
/// one core's memcpy speed).
pub fn read_exact_at_parallel(
    file: &std::fs::File,
    dst: &mut [u8],
    offset: u64,
) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let Some(half) = super::parallel::split_point(dst.len()) else {
        return file.read_exact_at(dst, offset);
    };
    let (a, b) = dst.split_at_mut(half);
    let (first, second) = super::parallel::both(
        || file.read_exact_at(a, offset),
        || file.read_exact_at(b, offset + half as u64),
    );
    first.and(second)
}
