//! The one OS edge of storage that needs `unsafe`: read-only file mappings, and owned
//! page-aligned arenas cut into disjoint [`HostRange`]s. Every block has its SAFETY note.
#![allow(unsafe_code)]

use std::fs::File;
use std::io;

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

/// The environment variable that puts load arenas on transparent huge pages (`1`).
pub const HUGE_PAGES_ENV: &str = "LLAMA_HOTSWAP_HUGE_PAGES";

/// Page-aligned, owned, writable memory (an anonymous mapping) for an arena, not pre-faulted:
/// the loader's two reading threads fault it in as they fill it, in parallel and overlapping
/// a cold file's disk reads. `MAP_POPULATE` in the loading thread (the default until
/// 2026-11-27) was slower on the project's 2-core VM: 1485 against 971 ms warm, 2725 against
/// 1880 ms cold, for a 1.9 GB model (medians of 9 paired rounds; README, Benchmarks).
///
/// With `LLAMA_HOTSWAP_HUGE_PAGES=1` it asks for transparent huge pages (`MADV_HUGEPAGE`
/// before anything touches it; one fault per 2 MiB, ~4.3 k). On the project's VM that was
/// bimodal: 0.34× and 0.56× upstream's load time in two runs, 1.43× and 2.16× in two others
/// (README, Benchmarks), hence opt-in. Where THP is `never` the advice is refused and the
/// memory is 4 KiB pages, the same bytes; only whole, aligned 2 MiB blocks can be huge, so
/// the start need not be aligned.
pub fn alloc_pages(len: usize) -> io::Result<memmap2::MmapMut> {
    let huge = std::env::var(HUGE_PAGES_ENV).is_ok_and(|v| v.trim() == "1");
    let map = memmap2::MmapOptions::new().len(len.max(1)).map_anon()?;
    if huge {
        // Advice only: without THP the memory stays 4 KiB pages.
        let _ = map.advise(memmap2::Advice::HugePage);
    }
    Ok(map)
}

/// Faults in the whole pages inside `dst` writable before a read fills them
/// (`MADV_POPULATE_WRITE`, Linux 5.14+): the kernel walks them in one call instead of taking
/// one page-fault exception per 4 KiB page inside the read's copy. On the project's VM, two
/// threads filling a 1.9 GB file into fresh memory took a median 720 ms this way against
/// 805 ms letting the reads fault (5 rounds, `ffi-tests/bench_floor.c`). Only for fresh
/// memory: on pages already there it is a walk costing a quarter of a fault per page
/// (64 MiB: ~10 ms, against ~42 ms fresh). Advice only: where the kernel refuses (older
/// kernels, memory short) it returns false, and the read faults the pages as before.
pub fn populate_for_write(dst: &mut [u8]) -> bool {
    let page = crate::device::page_size();
    let addr = dst.as_mut_ptr() as usize;
    let start = addr.div_ceil(page) * page;
    let end = (addr + dst.len()) / page * page;
    if end <= start {
        return true;
    }
    // SAFETY: whole pages inside `dst`, which we borrow exclusively; populating changes no
    // byte of them (zero-filled or not, they keep their contents).
    let rc = unsafe {
        libc::madvise(
            start as *mut libc::c_void,
            end - start,
            libc::MADV_POPULATE_WRITE,
        )
    };
    rc == 0
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

    /// The range's bytes, writable (a reader fills them in place).
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: inside the mapping and disjoint from every other range (as in `bytes`);
        // `&mut self` means no other slice of this range is alive while this one is.
        unsafe {
            std::slice::from_raw_parts_mut(self.arena.raw.as_mut_ptr().add(self.offset), self.len)
        }
    }

    /// Gives the whole pages inside the range back to the OS (its bytes are held elsewhere,
    /// e.g. in a repacked layout); they read as zeros until written again. Returns the bytes
    /// released.
    pub fn release_pages(&mut self) -> usize {
        let page = crate::device::page_size();
        let start = self.offset.div_ceil(page) * page;
        let end = (self.offset + self.len) / page * page;
        if end <= start {
            return 0;
        }
        // SAFETY: whole pages of our anonymous mapping inside this range, which no other
        // range overlaps; `&mut self` means no slice of it is alive. Afterwards the pages
        // are zero-filled on the next touch, still valid memory.
        unsafe {
            libc::madvise(
                self.arena.raw.as_mut_ptr().add(start).cast(),
                end - start,
                libc::MADV_DONTNEED,
            );
        }
        end - start
    }

    /// Bytes of the range's pages resident in memory now (`mincore`; the pages at the ends
    /// may be shared with neighbouring ranges), or None when the OS does not say.
    pub fn resident_bytes(&self) -> Option<usize> {
        let page = crate::device::page_size();
        let start = self.offset / page * page;
        let end = (self.offset + self.len).div_ceil(page) * page;
        let pages = (end - start) / page;
        let mut vec = vec![0u8; pages];
        // SAFETY: the pages lie inside our live mapping (the range is inside it and the
        // mapping starts page-aligned), and `vec` holds one byte per page, as mincore wants.
        let rc = unsafe {
            libc::mincore(
                self.arena.raw.as_ptr().add(start) as *mut libc::c_void,
                end - start,
                vec.as_mut_ptr(),
            )
        };
        (rc == 0).then(|| vec.iter().filter(|&&v| v & 1 != 0).count() * page)
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
        super::copy_parallel(self.bytes_mut(), src);
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
    let page = crate::device::page_size();
    for &(offset, len) in release {
        let start = offset.div_ceil(page) * page;
        let end = (offset + len) / page * page;
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
