//! Reading just the header of a GGUF file on disk with bounded positional reads (no mmap).
//!
//! The header is read into an owned buffer that grows from 1 MiB by doubling (or straight to
//! the size the parser says it needs) until [`Gguf::parse_header`] succeeds, never past the
//! end of the file. A 100 GB shard therefore costs a read of about its header: at most the
//! larger of 1 MiB and twice the header, and never the tensor data.
//!
//! Design: [`GgufHeader`] owns the bytes; [`GgufHeader::gguf`] parses them into a borrowed
//! [`Gguf`] view. A struct cannot hold both a buffer and a view borrowing it without
//! self-reference (and this module has no `unsafe`), so the view is built on request:
//! callers parse once and keep the `Gguf<'_>` for as long as they need it, while the
//! header's summary numbers (version, counts, data offset and size) are cached and free.

use std::fs::File;
use std::io;

use super::error::GgufError;
use super::reader::Gguf;

/// First read size: enough for the header of most models in one read.
pub const INITIAL_HEADER_READ: u64 = 1 << 20;
/// The default refusal point for headers; real headers (vocabularies included) are tens of
/// MB, while a corrupt one could claim gigabytes of arrays.
pub const DEFAULT_MAX_HEADER_BYTES: u64 = 4 << 30;

/// Positional reads, so a file (or a test double counting bytes) can be read without a
/// shared cursor.
pub trait ReadAt {
    /// Reads up to `buf.len()` bytes at `offset`, returning how many were read (0 at EOF).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
}

impl ReadAt for File {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        std::os::unix::fs::FileExt::read_at(self, buf, offset)
    }
}

/// The header bytes of a GGUF file (magic through tensor infos) and the file's size.
#[derive(Clone, Debug)]
pub struct GgufHeader {
    bytes: Vec<u8>,
    file_size: u64,
    version: u32,
    alignment: u32,
    n_kv: usize,
    n_tensors: usize,
    data_offset: u64,
    data_size: u64,
}

impl GgufHeader {
    /// Parses the owned header into a view. The bytes were validated when read, so this
    /// only fails if they were; keep the result rather than calling this repeatedly.
    pub fn gguf(&self) -> Result<Gguf<'_>, GgufError> {
        Gguf::parse_header(&self.bytes, self.file_size)
    }

    /// The header bytes, from the magic to the end of the tensor infos.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }

    pub fn file_size(&self) -> u64 {
        self.file_size
    }

    pub fn version(&self) -> u32 {
        self.version
    }

    pub fn alignment(&self) -> u32 {
        self.alignment
    }

    pub fn n_kv(&self) -> usize {
        self.n_kv
    }

    pub fn n_tensors(&self) -> usize {
        self.n_tensors
    }

    /// Absolute file offset of the data section.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// Bytes of the data section (padded tensor sizes).
    pub fn data_size(&self) -> u64 {
        self.data_size
    }
}

/// Reads and validates the header of `file`, reading only the header.
pub fn read_header(file: &File) -> Result<GgufHeader, GgufError> {
    let file_size = file
        .metadata()
        .map_err(|source| GgufError::Io { offset: 0, source })?
        .len();
    read_header_from(file, file_size, DEFAULT_MAX_HEADER_BYTES)
}

/// Reads and validates the header of a `file_size`-byte source, refusing headers that need
/// more than `max_header_bytes`.
pub fn read_header_from(
    source: &impl ReadAt,
    file_size: u64,
    max_header_bytes: u64,
) -> Result<GgufHeader, GgufError> {
    let mut bytes = Vec::new();
    let mut want = INITIAL_HEADER_READ.min(file_size).min(max_header_bytes);
    loop {
        fill_to(source, &mut bytes, want)?;
        match Gguf::parse_header(&bytes, file_size) {
            Ok(gguf) => {
                let header = GgufHeader {
                    bytes: Vec::new(),
                    file_size,
                    version: gguf.version(),
                    alignment: gguf.alignment(),
                    n_kv: gguf.kvs().len(),
                    n_tensors: gguf.tensors().len(),
                    data_offset: gguf.data_offset(),
                    data_size: gguf.data_size(),
                };
                // Keep only the header; anything read past it is data we don't hold on to.
                let metadata_end = gguf.metadata_end() as usize;
                bytes.truncate(metadata_end);
                bytes.shrink_to_fit();
                return Ok(GgufHeader { bytes, ..header });
            }
            Err(GgufError::NeedMoreBytes {
                needed_at_least, ..
            }) => {
                if needed_at_least > max_header_bytes {
                    return Err(GgufError::HeaderTooLarge {
                        offset: bytes.len() as u64,
                        needed: needed_at_least,
                        limit: max_header_bytes,
                    });
                }
                // parse_header only asks for bytes inside the file, so this stays <= file_size.
                want = needed_at_least
                    .max(want.saturating_mul(2))
                    .min(file_size)
                    .min(max_header_bytes);
            }
            Err(other) => return Err(other),
        }
    }
}

/// Extends `bytes` with the file's bytes up to `len`, tolerating short reads.
fn fill_to(source: &impl ReadAt, bytes: &mut Vec<u8>, len: u64) -> Result<(), GgufError> {
    let len = usize::try_from(len).map_err(|_| GgufError::Io {
        offset: bytes.len() as u64,
        source: io::Error::new(
            io::ErrorKind::OutOfMemory,
            "header larger than address space",
        ),
    })?;
    let mut filled = bytes.len();
    bytes.resize(len.max(filled), 0);
    while filled < len {
        let offset = filled as u64;
        match source.read_at(&mut bytes[filled..len], offset) {
            Ok(0) => {
                return Err(GgufError::Io {
                    offset,
                    source: io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "file shorter than its reported size",
                    ),
                })
            }
            Ok(n) => filled += n,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(source) => return Err(GgufError::Io { offset, source }),
        }
    }
    Ok(())
}
