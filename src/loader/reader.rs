//! Owned-memory loading (load modes NONE, MLOCK, DIRECT_IO): each file is read into one
//! page-aligned arena ([`crate::storage::host::alloc_pages`], not pre-faulted) that mirrors
//! the file's offsets, in large positional reads split across two threads; the buffered
//! reads fault their chunk in first ([`crate::storage::host::populate_for_write`]), O_DIRECT
//! reads fault it themselves. Where the kernel allows it, buffered loads instead copy whole
//! pages from the file's page cache into the arena without zeroing them first
//! ([`crate::storage::host::PageCopier`]).
//! Mirroring keeps O_DIRECT's alignment rules trivially satisfied (aligned file offset ⇔
//! aligned arena address) and lets reads stay disjoint.

use std::fs::File;
use std::os::unix::fs::FileExt;

use super::error::{file_error, LoadError};
use super::file::{self, SourceFile};

/// O_DIRECT needs offsets, lengths and addresses aligned to the logical block size; 4096
/// covers every common device.
const ALIGN: u64 = 4096;
/// Largest single pread.
const CHUNK: usize = 64 << 20;
/// Smaller files are read, not copied by the page copier: setting one up and taking it down
/// costs ~130 µs a file here (1,002 one-tensor shards of 88 KB loaded in 186 against 52 ms),
/// and it saves under 1 µs a page.
const COPIER_MIN: usize = 8 << 20;

/// The page copier of one file ([`crate::storage::host::PageCopier`]): made at the first
/// read (a model of a thousand shards holds one descriptor for it at a time, not a thousand)
/// and dropped once every page is copied.
enum Copier {
    /// Not tried yet.
    Untried,
    On(crate::storage::host::PageCopier),
    /// Done, refused by the kernel, failed, or not wanted (O_DIRECT, huge pages, a small
    /// file): reads fill the arena.
    Off,
}

pub struct ArenaReader {
    arena: memmap2::MmapMut,
    /// File offset up to which the arena is filled.
    cursor: u64,
    direct: Option<File>,
    /// Buffered loads: fills whole pages without zeroing them first.
    copier: Copier,
    /// The end of the pages the copier filled (page-aligned; at or past `cursor` after a
    /// read, behind it after a skip).
    copied: usize,
}

fn align_up(x: u64) -> u64 {
    x.div_ceil(ALIGN) * ALIGN
}

impl ArenaReader {
    pub fn new(source: &SourceFile, direct_io: bool) -> Result<ArenaReader, LoadError> {
        let size = source.identity.size;
        let len =
            usize::try_from(align_up(size)).map_err(|_| file_error(source, "file too large"))?;
        let arena = file::alloc_pages(len)
            .map_err(|e| file_error(source, format!("failed to allocate {len} bytes: {e}")))?;
        let direct = if direct_io {
            match source.path.as_deref().and_then(file::reopen_direct) {
                Some(f) => Some(f),
                None => {
                    crate::log_warn!(
                        "{}: direct I/O is not available, using buffered reads",
                        source.display_name()
                    );
                    None
                }
            }
        } else {
            None
        };
        Ok(ArenaReader {
            arena,
            cursor: 0,
            direct,
            copier: Copier::Untried,
            copied: 0,
        })
    }

    /// Makes the copier at the first read of a buffered load (see [`Copier`]).
    fn start_copier(&mut self, source: &SourceFile) {
        if !matches!(self.copier, Copier::Untried) {
            return;
        }
        self.copier = Copier::Off;
        // Copied pages are 4 KiB pages: an arena asked to be on huge pages is read into.
        if self.direct.is_some()
            || crate::storage::host::huge_pages_requested()
            || self.arena.len() < COPIER_MIN
        {
            return;
        }
        match crate::storage::host::PageCopier::new(&source.file, &mut self.arena) {
            Ok(c) => self.copier = Copier::On(c),
            Err(e) => crate::log_debug!(
                "{}: reading into faulted-in pages (no userfaultfd page copy: {e})",
                source.display_name()
            ),
        }
    }

    /// The copier's part of [`Self::read_through`]: the whole pages from the cursor's page
    /// (or the end of those already copied) through `end`. False, with the copier gone, when a
    /// copy failed (the file shrank, or the kernel refused): the caller then reads the same
    /// range, which gives the usual errors.
    fn copy_through(&mut self, source: &SourceFile, end: u64) -> bool {
        let Copier::On(copier) = &self.copier else {
            return false;
        };
        let page = crate::device::page_size();
        let from = (self.cursor as usize / page * page).max(self.copied);
        let to = (end as usize).min(self.arena.len());
        let result = if to > from {
            copier.copy(from, to)
        } else {
            Ok(())
        };
        match result {
            Ok(()) => {
                self.copied = self
                    .copied
                    .max(to.next_multiple_of(page).min(self.arena.len()));
                self.cursor = self.cursor.max(end);
                if self.copied >= self.arena.len() {
                    // Every page is there: unregister now, and free the descriptor.
                    self.copier = Copier::Off;
                }
                true
            }
            Err(e) => {
                crate::log_debug!(
                    "{}: page copy stopped at {from}..{to} ({e}); reading instead",
                    source.display_name()
                );
                // Unregistered from here on: every page is plain memory again.
                self.copier = Copier::Off;
                false
            }
        }
    }

    /// Makes sure the arena holds the file up to `end` (exclusive).
    pub fn read_through(&mut self, source: &SourceFile, end: u64) -> Result<(), LoadError> {
        if end <= self.cursor {
            return Ok(());
        }
        self.start_copier(source);
        if end <= source.identity.size && self.copy_through(source, end) {
            return Ok(());
        }
        let file_size = source.identity.size;
        let target = if self.direct.is_some() {
            align_up(end).min(self.arena.len() as u64)
        } else {
            end
        };
        let from = self.cursor as usize;
        let to = target as usize;
        let want_until = end.min(file_size) as usize;
        // Buffered reads populate their chunks first; O_DIRECT reads fault them themselves.
        let (file, populate) = match &self.direct {
            Some(direct) => (direct, false),
            None => (&source.file, true),
        };
        let result = read_range(file, &mut self.arena[from..to], self.cursor, populate);
        let got = match result {
            Err(e) if self.direct.is_some() && e.raw_os_error() == Some(libc::EINVAL) => {
                crate::log_warn!(
                    "{}: direct I/O read refused ({e}), falling back to buffered reads",
                    source.display_name()
                );
                self.direct = None;
                return self.read_through(source, end);
            }
            Err(e) => {
                return Err(file_error(
                    source,
                    format!("read error at offset {}: {e}", self.cursor),
                ))
            }
            Ok(n) => n,
        };
        if from + got < want_until {
            return Err(file_error(
                source,
                format!(
                    "unexpected end of file at offset {} (wanted data up to {end})",
                    from + got
                ),
            ));
        }
        self.cursor = target.min((from + got) as u64).max(end);
        Ok(())
    }

    /// Whether reads bypass the page cache (O_DIRECT).
    pub fn is_direct(&self) -> bool {
        self.direct.is_some()
    }

    /// Moves the cursor past `end` without reading: bytes that a device took from the file
    /// itself. That part of the arena is never touched (no page of it is faulted in); only
    /// for buffered reads, whose offsets need no alignment.
    pub fn skip_through(&mut self, end: u64) {
        debug_assert!(self.direct.is_none());
        self.cursor = self.cursor.max(end);
    }

    pub fn bytes(&self, offset: usize, len: usize) -> &[u8] {
        &self.arena[offset..offset + len]
    }

    /// The filled arena, locked in memory when asked (failure to lock is a warning).
    pub fn finish(mut self, mlock: bool, source: &SourceFile) -> memmap2::MmapMut {
        // Unregistered before anything else touches the arena (pages never copied, skipped
        // for a device, read as zeros from now on).
        self.copier = Copier::Off;
        if mlock {
            if let Err(e) = self.arena.lock() {
                crate::log_warn!(
                    "{}: failed to mlock {} bytes: {e}",
                    source.display_name(),
                    self.arena.len()
                );
            }
        }
        self.arena
    }
}

/// Fills `dst` from `file` at `offset`, stopping early only at end of file; large ranges are
/// split between two threads. Returns the bytes read. `populate`: fault each chunk in first
/// (buffered reads; an O_DIRECT read faults its pages in batches while the device works, and
/// populating first made DIO loads 6% slower: 2451 against 2309 ms, 5 paired rounds).
fn read_range(file: &File, dst: &mut [u8], offset: u64, populate: bool) -> std::io::Result<usize> {
    // The split is page-aligned, so O_DIRECT's halves stay aligned (a page is a multiple
    // of ALIGN).
    let Some(half) = crate::storage::split_point(dst.len()) else {
        return read_serial(file, dst, offset, populate);
    };
    let (a, b) = dst.split_at_mut(half);
    let (ra, rb) = crate::storage::both(
        || read_serial(file, a, offset, populate),
        || read_serial(file, b, offset + half as u64, populate),
    );
    let na = ra?;
    let nb = rb?;
    Ok(if na < half { na } else { half + nb })
}

/// Reads into fresh arena memory, with `populate` faulting each chunk in just before its read
/// (see [`crate::storage::host::populate_for_write`]); each page is populated once, since
/// walking pages that are already there costs a quarter of a fault again.
fn read_serial(file: &File, dst: &mut [u8], offset: u64, populate: bool) -> std::io::Result<usize> {
    let mut done = 0;
    let mut populated = 0;
    while done < dst.len() {
        let end = (done + CHUNK).min(dst.len());
        if populate && end > populated {
            // `populated` >= `done`: after a short read only the chunk's new tail is fresh.
            crate::storage::host::populate_for_write(&mut dst[populated..end]);
            populated = end;
        }
        match file.read_at(&mut dst[done..end], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}
