//! The one OS edge of storage that needs `unsafe`: read-only file mappings, and owned
//! page-aligned arenas cut into disjoint [`HostRange`]s. Every block has its SAFETY note.
#![allow(unsafe_code)]

use std::fs::File;
use std::io;

/// A read-only shared mapping of a whole file; `random`: advised `MADV_RANDOM` (no
/// read-ahead, as upstream's mappings on NUMA machines) instead of sequential.
pub fn map_file(file: &File, populate: bool, random: bool) -> io::Result<memmap2::Mmap> {
    let mut options = memmap2::MmapOptions::new();
    if populate {
        options.populate();
    }
    // SAFETY: the mapping is read-only and shared. Another process may still truncate or
    // rewrite the file underneath it; llama-hotswap never writes through mappings, and the
    // hot-swap path moves tensors off a file's mapping as soon as it sees the file changed.
    // The remaining hazard (a host reading weights after truncating a mapped file and before
    // calling reload) is documented in docs/hotswap.md.
    let map = unsafe { options.map(file) }?;
    let _ = map.advise(if random {
        memmap2::Advice::Random
    } else {
        memmap2::Advice::Sequential
    });
    if populate {
        let _ = map.advise(memmap2::Advice::WillNeed);
    }
    Ok(map)
}

/// The environment variable that puts load arenas on transparent huge pages (`1`).
pub const HUGE_PAGES_ENV: &str = "LLAMA_HOTSWAP_HUGE_PAGES";

/// Whether the environment variable `name` is set to `1` (this module's switches).
fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| v.trim() == "1")
}

/// Whether load arenas are to be on transparent huge pages ([`HUGE_PAGES_ENV`]).
pub fn huge_pages_requested() -> bool {
    env_flag(HUGE_PAGES_ENV)
}

/// Page-aligned, owned, writable memory (an anonymous mapping) for an arena, not pre-faulted:
/// the loader's two reading threads fault it in as they fill it, in parallel and overlapping
/// a cold file's disk reads. `MAP_POPULATE` in the loading thread (the default until
/// 2026-11-27) was slower on the project's 2-core VM: 1485 against 971 ms warm, 2725 against
/// 1880 ms cold, for a 1.9 GB model (medians of 9 paired rounds; docs/benchmarks/history.md).
///
/// With `LLAMA_HOTSWAP_HUGE_PAGES=1` it asks for transparent huge pages (`MADV_HUGEPAGE`
/// before anything touches it; one fault per 2 MiB, ~4.3 k). On the project's VM that was
/// bimodal: 0.34× and 0.56× upstream's load time in two runs, 1.43× and 2.16× in two others
/// (docs/benchmarks.md, "Load"), hence opt-in. Where THP is `never` the advice is refused and the
/// memory is 4 KiB pages, the same bytes; only whole, aligned 2 MiB blocks can be huge, so
/// the start need not be aligned.
pub fn alloc_pages(len: usize) -> io::Result<memmap2::MmapMut> {
    let map = memmap2::MmapOptions::new().len(len.max(1)).map_anon()?;
    if huge_pages_requested() {
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

/// The environment variable that turns [`PageCopier`] off (`1`): owned loads then fault their
/// arena in and read into it, as before 2026-11-27 (for measuring what it gains).
pub const NO_PAGE_COPY_ENV: &str = "LLAMA_HOTSWAP_NO_PAGE_COPY";

/// How much one [`PageCopier`] thread copies before it unmaps the source pages it read.
const COPY_CHUNK: usize = 16 << 20;

// userfaultfd's ABI (linux/userfaultfd.h), which the libc crate does not carry.
const UFFD_API: u64 = 0xAA;
const UFFD_USER_MODE_ONLY: libc::c_int = 1;
const UFFD_FEATURE_SIGBUS: u64 = 1 << 7;
const UFFDIO_REGISTER_MODE_MISSING: u64 = 1;
const UFFDIO_API: libc::c_ulong = 0xC018_AA3F;
const UFFDIO_REGISTER: libc::c_ulong = 0xC020_AA00;
const UFFDIO_UNREGISTER: libc::c_ulong = 0x8010_AA01;
const UFFDIO_COPY: libc::c_ulong = 0xC028_AA03;

#[repr(C)]
struct UffdioApi {
    api: u64,
    features: u64,
    ioctls: u64,
}

#[repr(C)]
struct UffdioRange {
    start: u64,
    len: u64,
}

#[repr(C)]
struct UffdioRegister {
    range: UffdioRange,
    mode: u64,
    ioctls: u64,
}

#[repr(C)]
struct UffdioCopy {
    dst: u64,
    src: u64,
    len: u64,
    mode: u64,
    copy: i64,
}

/// Fills fresh anonymous memory (an owned load's arena) with a file's bytes without the
/// kernel zeroing each page first: userfaultfd's `UFFDIO_COPY` allocates every page and
/// copies into it from the file's page cache (through a read-only shared mapping) in one
/// step, where a read into fresh memory zeroes each page at its fault and then copies over
/// it. On the project's VM two threads filled a cached 1.9 GB file in ~460 ms this way
/// against ~785 ms for `MADV_POPULATE_WRITE` + `pread`. Only for files (almost) wholly in the
/// page cache (`cached_fraction`, 90% or more): cold, reading through the copies' page
/// faults was slower than `pread`.
///
/// The arena is registered for missing-page events in user mode only (no privilege needed,
/// Linux 5.11+; a seccomp filter or an older kernel refuses, and loads read as before), with
/// `UFFD_FEATURE_SIGBUS`: nothing may touch a page of it that was not copied until the
/// copier is dropped (which unregisters it), and a bug that did would be a SIGBUS, never a
/// hang. The loader copies pages before reading them and drops the copier before anything
/// else sees the arena.
#[derive(Debug)]
pub struct PageCopier {
    uffd: std::os::fd::OwnedFd,
    src: memmap2::Mmap,
    dst: usize,
    len: usize,
}

impl PageCopier {
    /// Registers `arena` (page-aligned, fresh, untouched; it mirrors `file` from offset 0)
    /// for copying from `file`. Err when the kernel or the process's sandbox refuses.
    pub fn new(file: &File, arena: &mut memmap2::MmapMut) -> io::Result<PageCopier> {
        if env_flag(NO_PAGE_COPY_ENV) {
            return Err(io::Error::other(format!("{NO_PAGE_COPY_ENV}=1")));
        }
        // SAFETY: read-only shared mapping of the file; it is only read by the kernel's
        // copies (a file that shrinks under it makes a copy fail with EFAULT, never a fault
        // in this process). Mapping it does not read it.
        let src = unsafe { memmap2::MmapOptions::new().map(file) }?;
        let cached = cached_fraction(&src);
        if cached < 0.9 {
            return Err(io::Error::other(format!(
                "about {:.0}% of the file is in the page cache",
                cached * 100.0
            )));
        }
        use std::os::fd::FromRawFd;
        // SAFETY: the userfaultfd syscall takes flags only and returns a new descriptor.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_userfaultfd,
                libc::O_CLOEXEC | libc::O_NONBLOCK | UFFD_USER_MODE_ONLY,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a descriptor the kernel just gave us, owned by nothing else.
        let uffd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as libc::c_int) };
        let raw = std::os::fd::AsRawFd::as_raw_fd(&uffd);
        let mut api = UffdioApi {
            api: UFFD_API,
            features: UFFD_FEATURE_SIGBUS,
            ioctls: 0,
        };
        // SAFETY: UFFDIO_API reads and writes one uffdio_api, which `api` is (repr(C)).
        if unsafe { libc::ioctl(raw, UFFDIO_API, &mut api) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let (dst, len) = (arena.as_mut_ptr() as usize, arena.len());
        let mut reg = UffdioRegister {
            range: UffdioRange {
                start: dst as u64,
                len: len as u64,
            },
            mode: UFFDIO_REGISTER_MODE_MISSING,
            ioctls: 0,
        };
        // SAFETY: UFFDIO_REGISTER reads and writes one uffdio_register; the range is our
        // private anonymous arena (the caller's, borrowed exclusively).
        if unsafe { libc::ioctl(raw, UFFDIO_REGISTER, &mut reg) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(PageCopier {
            uffd,
            src,
            dst,
            len,
        })
    }

    /// Copies the file's bytes `[from, to)` into the same offsets of the arena, whole pages
    /// (`from` page-aligned, `to` rounded up to a page, at most the arena's length); two
    /// threads for large ranges. Each page may be copied once.
    pub fn copy(&self, from: usize, to: usize) -> io::Result<()> {
        let page = crate::device::page_size();
        let to = to.next_multiple_of(page).min(self.len);
        if from % page != 0 || from > to {
            return Err(io::Error::other(format!(
                "copy of {from}..{to}: not whole pages"
            )));
        }
        match super::parallel::split_point(to - from) {
            None => self.copy_serial(from, to),
            Some(half) => {
                let (a, b) = super::parallel::both(
                    || self.copy_serial(from, from + half),
                    || self.copy_serial(from + half, to),
                );
                a.and(b)
            }
        }
    }

    fn copy_serial(&self, mut from: usize, to: usize) -> io::Result<()> {
        // The source ends at the file's last byte; the arena's last page may reach past it
        // into the mapping's last page, which reads as zeros there.
        let page = crate::device::page_size();
        let src_len = self.src.len().next_multiple_of(page);
        if to > src_len {
            return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
        }
        let fd = std::os::fd::AsRawFd::as_raw_fd(&self.uffd);
        while from < to {
            let end = (from + COPY_CHUNK).min(to);
            let mut at = from;
            while at < end {
                let mut c = UffdioCopy {
                    dst: (self.dst + at) as u64,
                    src: self.src.as_ptr() as u64 + at as u64,
                    len: (end - at) as u64,
                    mode: 0,
                    copy: 0,
                };
                // SAFETY: UFFDIO_COPY reads and writes one uffdio_copy; `dst` is inside our
                // registered arena, `src` inside the live mapping, both whole pages. The
                // kernel writes only pages that are still missing (a present one: EEXIST).
                let rc = unsafe { libc::ioctl(fd, UFFDIO_COPY, &mut c) };
                if c.copy > 0 {
                    at += c.copy as usize;
                }
                if rc != 0 {
                    let e = io::Error::last_os_error();
                    // EAGAIN: the address space changed under the copy; go on from where
                    // it stopped.
                    if e.raw_os_error() != Some(libc::EAGAIN) {
                        return Err(e);
                    }
                }
            }
            // The copy mapped the file's pages into this process (counted in its RSS,
            // though they are the page cache's); unmap them as soon as they are copied, so
            // the peak RSS of a load stays the arena's.
            // SAFETY: whole pages of our read-only shared file mapping, which nothing
            // borrows; on a shared mapping MADV_DONTNEED only drops the page-table entries
            // (a later read maps the same file pages again).
            unsafe {
                libc::madvise(
                    (self.src.as_ptr() as usize + from) as *mut libc::c_void,
                    end - from,
                    libc::MADV_DONTNEED,
                )
            };
            from = end;
        }
        Ok(())
    }
}

/// About how much of a mapped file is in the page cache: `mincore` on 64 windows of 16 pages
/// spread over it (a whole-file `mincore` costs ~50 ms for 1.9 GB on the project's VM, the
/// sample well under 1 ms). The page copier is for cached files: reading an uncached one
/// through the copies' page faults was slower than `pread` (cold, 1.9 GB: medians 3015
/// against 2524 ms over 5 paired rounds; with `MADV_WILLNEED` first, 2568).
fn cached_fraction(map: &memmap2::Mmap) -> f64 {
    let page = crate::device::page_size();
    let pages = map.len().div_ceil(page);
    if pages == 0 {
        return 0.0;
    }
    const WINDOWS: usize = 64;
    const WINDOW: usize = 16;
    let (mut seen, mut resident) = (0usize, 0usize);
    let mut vec = [0u8; WINDOW];
    for w in 0..WINDOWS {
        let first = pages.saturating_sub(WINDOW) * w / (WINDOWS - 1);
        let n = WINDOW.min(pages - first);
        // SAFETY: `n` whole pages inside our live mapping (its length rounded up to a page
        // is mapped), and `vec` holds one byte per page.
        let rc = unsafe {
            libc::mincore(
                (map.as_ptr() as usize + first * page) as *mut libc::c_void,
                n * page,
                vec.as_mut_ptr(),
            )
        };
        if rc == 0 {
            seen += n;
            resident += vec[..n].iter().filter(|&&v| v & 1 != 0).count();
        }
    }
    if seen == 0 {
        0.0
    } else {
        resident as f64 / seen as f64
    }
}

impl Drop for PageCopier {
    fn drop(&mut self) {
        let mut range = UffdioRange {
            start: self.dst as u64,
            len: self.len as u64,
        };
        // SAFETY: UFFDIO_UNREGISTER reads one uffdio_range, the range registered in `new`.
        // Closing the descriptor (right after) unregisters it only when no other process
        // holds it: a child forked during the load keeps it open, so unregister here.
        unsafe {
            libc::ioctl(
                std::os::fd::AsRawFd::as_raw_fd(&self.uffd),
                UFFDIO_UNREGISTER,
                &mut range,
            )
        };
    }
}

/// Owned, page-aligned host memory holding the tensors of one file in the owned load modes.
/// It is only ever used through [`split_arena`], which cuts it into disjoint [`HostRange`]s.
#[derive(Debug)]
pub struct HostArena {
    raw: memmap2::MmapRaw,
    /// Locked in memory (`mlock`): its pages are never moved ([`HostRange::replace_from_stage`]
    /// copies), since moving pages out of a locked mapping unlocks it.
    locked: bool,
}

impl HostArena {
    pub fn new(map: memmap2::MmapMut, locked: bool) -> HostArena {
        HostArena {
            raw: map.into(),
            locked,
        }
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

    /// Where the range starts inside its first page (a [`PageStage`] for it starts there too).
    pub fn in_page_offset(&self) -> usize {
        (self.arena.raw.as_ptr() as usize + self.offset) % crate::device::page_size()
    }

    /// Replaces the range's bytes by `stage`'s, which must have been made for it
    /// ([`PageStage::fits`]): the whole pages inside the range are exchanged with the stage's
    /// (three `mremap` calls, page tables only: a 64 MiB tensor in ~1 ms against ~9 ms of
    /// copying), and the partial pages at its ends, shared with the neighbouring ranges, are
    /// copied. Afterwards the stage holds the range's old pages (resident, so the next read
    /// into it takes no page faults) and the range holds the new bytes.
    ///
    /// Falls back to copying (the same result) for a locked arena, fewer than
    /// [`MOVE_MIN`] bytes of whole pages, or when the kernel refuses a move (older than Linux
    /// 5.7, no `MREMAP_DONTUNMAP`; `vm.max_map_count` reached: each moved span is a mapping of
    /// its own); the reason is returned then, so that the caller can stop trying.
    pub fn replace_from_stage(&mut self, stage: &mut PageStage) -> io::Result<Replaced> {
        if !stage.fits(self) {
            return Err(io::Error::other(format!(
                "a stage of {} bytes at page offset {} for a {}-byte range at {}",
                stage.len,
                stage.head,
                self.len,
                self.in_page_offset()
            )));
        }
        let page = crate::device::page_size();
        let addr = self.arena.raw.as_ptr() as usize + self.offset;
        let first = addr.div_ceil(page) * page;
        let end = (addr + self.len) / page * page;
        if self.arena.locked || end <= first || end - first < MOVE_MIN {
            super::parallel::copy_parallel(self.bytes_mut(), stage.bytes());
            return Ok(Replaced::Copied(None));
        }
        let (lead, span) = (first - addr, end - first);
        // SAFETY: `dst` is the whole pages inside this range (no other range has bytes in
        // them, and `&mut self` means no slice of the range is alive); `src` is the same
        // pages of the stage, laid out at the same in-page offset (`fits`), behind
        // `&mut stage`. Every address range the arena and the stage own stays mapped
        // throughout (see `exchange_pages`), so their mappings stay valid and are unmapped
        // whole when dropped.
        let moved = unsafe {
            let src = stage.map.as_mut_ptr().add(stage.head + lead);
            exchange_pages(first as *mut u8, src, span)
        };
        match moved {
            Ok(()) => {
                // The partial pages at the ends: the neighbours' bytes stay where they are.
                let tail = lead + span;
                let (new, dst) = (stage.bytes(), self.bytes_mut());
                dst[..lead].copy_from_slice(&new[..lead]);
                dst[tail..].copy_from_slice(&new[tail..]);
                Ok(Replaced::Moved(span))
            }
            Err(e) => {
                // Nothing moved, or the range's pages were put back or left empty: a full
                // copy gives the new bytes either way.
                super::parallel::copy_parallel(self.bytes_mut(), stage.bytes());
                Ok(Replaced::Copied(Some(e)))
            }
        }
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
        super::parallel::copy_parallel(self.bytes_mut(), src);
        Ok(())
    }
}

/// Below this many bytes of whole pages a range's new bytes are copied, not moved.
pub const MOVE_MIN: usize = 1 << 20;

/// How [`HostRange::replace_from_stage`] put the new bytes in.
#[derive(Debug)]
pub enum Replaced {
    /// This many bytes of whole pages moved; the ends were copied.
    Moved(usize),
    /// Copied; with the kernel's reason when a move was refused.
    Copied(Option<io::Error>),
}

/// Page-aligned staging memory for the new bytes of one [`HostRange`], starting at the
/// range's in-page offset, so that whole pages can move into the range instead of being
/// copied ([`HostRange::replace_from_stage`]).
#[derive(Debug)]
pub struct PageStage {
    map: memmap2::MmapMut,
    head: usize,
    len: usize,
}

impl PageStage {
    /// A stage for `len` bytes starting `head` bytes into a page (fresh memory; the first
    /// read into it faults its pages in, later ones reuse them).
    pub fn new(head: usize, len: usize) -> io::Result<PageStage> {
        let page = crate::device::page_size();
        if head >= page {
            return Err(io::Error::other(format!(
                "page offset {head} is not inside a page"
            )));
        }
        let size = head
            .checked_add(len)
            .and_then(|n| n.checked_next_multiple_of(page))
            .ok_or_else(|| io::Error::other("stage size overflows"))?;
        let map = memmap2::MmapOptions::new().len(size.max(page)).map_anon()?;
        Ok(PageStage { map, head, len })
    }

    /// Whether the stage was made for `range` (same length, same in-page offset).
    pub fn fits(&self, range: &HostRange) -> bool {
        self.len == range.len && self.head == range.in_page_offset()
    }

    /// The (page offset, length) the stage was made for.
    pub fn geometry(&self) -> (usize, usize) {
        (self.head, self.len)
    }

    pub fn bytes(&self) -> &[u8] {
        &self.map[self.head..self.head + self.len]
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.map[self.head..self.head + self.len]
    }
}

#[cfg(test)]
thread_local! {
    /// Tests: the `mremap` calls of [`exchange_pages`] that fail as if refused, one bit per
    /// call (bit 1, 2, 3: the three moves; bit 4: putting the pages back after a failed 2).
    pub static FAIL_MOVE: std::cell::Cell<u8> = const { std::cell::Cell::new(0) };
}

/// One `mremap` move of `len` bytes from `from` to `to` (page-aligned), replacing what is
/// mapped at `to`; `keep`: the source stays mapped, empty (`MREMAP_DONTUNMAP`).
///
/// # Safety
/// Both ranges are whole pages of private anonymous mappings the caller owns, and no
/// reference into either is alive.
unsafe fn move_pages(
    step: u8,
    from: *mut u8,
    to: *mut u8,
    len: usize,
    keep: bool,
) -> io::Result<()> {
    #[cfg(test)]
    if FAIL_MOVE.with(|f| f.get()) & (1 << step) != 0 {
        return Err(io::Error::from_raw_os_error(libc::ENOMEM));
    }
    let _ = step;
    let mut flags = libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED;
    if keep {
        flags |= libc::MREMAP_DONTUNMAP;
    }
    // SAFETY: as the caller promises; with MREMAP_FIXED the kernel replaces the mapping at
    // `to` in one step (no moment where `to` is unmapped and another thread's mmap could take
    // it).
    let r = unsafe { libc::mremap(from.cast(), len, len, flags, to.cast::<libc::c_void>()) };
    if r == libc::MAP_FAILED {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Exchanges the `len` bytes of whole pages at `dst` and `src`: `dst`'s pages go to a spare
/// mapping, `src`'s into `dst`, the spare's into `src`. `dst` and `src` stay mapped all the
/// while (the first two moves leave their source mapped, empty; the third replaces `src`'s
/// empty pages in one step). On error `src` still holds its bytes, and `dst` holds its old
/// bytes or zero pages.
///
/// # Safety
/// `dst` and `src` are whole pages of private anonymous mappings the caller owns, `len`
/// bytes each, not overlapping, and no reference into either is alive.
unsafe fn exchange_pages(dst: *mut u8, src: *mut u8, len: usize) -> io::Result<()> {
    // SAFETY: a fresh private anonymous mapping of our own (no address asked for).
    let spare = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if spare == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let spare = spare.cast::<u8>();
    // SAFETY: `dst` and the spare are whole pages of private anonymous mappings, ours and
    // the caller's, `len` bytes each; the spare is new, `dst` has no live references.
    if let Err(e) = unsafe { move_pages(1, dst, spare, len, true) } {
        // SAFETY: our spare, which nothing else refers to.
        unsafe { libc::munmap(spare.cast(), len) };
        return Err(e);
    }
    // SAFETY: `src` is the caller's (no live references), `dst` as above.
    if let Err(e) = unsafe { move_pages(2, src, dst, len, true) } {
        // Put the old pages back (if that fails too, `dst` reads as zeros; the caller copies).
        // SAFETY: the spare holds `dst`'s old pages; `dst` as above.
        if unsafe { move_pages(4, spare, dst, len, false) }.is_err() {
            // SAFETY: our spare, which nothing else refers to.
            unsafe { libc::munmap(spare.cast(), len) };
        }
        return Err(e);
    }
    // SAFETY: the spare holds `dst`'s old pages; `src` (the caller's) is empty now.
    if unsafe { move_pages(3, spare, src, len, false) }.is_err() {
        // The exchange is done; the stage keeps empty pages (faulted in by its next read).
        // SAFETY: our spare, which nothing else refers to.
        unsafe { libc::munmap(spare.cast(), len) };
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(seed: u8, len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u32 * 31 + seed as u32 * 97) as u8 ^ (i >> 12) as u8)
            .collect()
    }

    /// Three ranges: a small one, one with `MOVE_MIN` and more of whole pages that starts and
    /// ends mid-page, and a small one sharing its last page.
    fn arena(locked: bool) -> (Vec<HostRange>, Vec<Vec<u8>>) {
        let page = crate::device::page_size();
        let big = 3 * MOVE_MIN + 5000;
        let spans = [(0, 100), (100, big), (100 + big, 3000)];
        let end = 100 + big + 3000;
        let map = alloc_pages(end.next_multiple_of(page)).unwrap();
        let mut ranges = split_arena(HostArena::new(map, locked), &spans, &[]).unwrap();
        let mut contents = Vec::new();
        for (i, r) in ranges.iter_mut().enumerate() {
            let b = pattern(i as u8, r.len());
            r.write(&b).unwrap();
            contents.push(b);
        }
        (ranges, contents)
    }

    fn stage_with(range: &HostRange, bytes: &[u8]) -> PageStage {
        let mut stage = PageStage::new(range.in_page_offset(), range.len()).unwrap();
        assert!(stage.fits(range));
        stage.bytes_mut().copy_from_slice(bytes);
        stage
    }

    /// The whole pages inside `range`, as offsets into it.
    fn whole(range: &HostRange) -> std::ops::Range<usize> {
        let page = crate::device::page_size();
        let lead = (page - range.in_page_offset()) % page;
        let end = (range.in_page_offset() + range.len()) / page * page - range.in_page_offset();
        lead..end
    }

    #[test]
    fn replace_from_stage_moves_whole_pages_and_leaves_the_neighbours() {
        let (mut ranges, contents) = arena(false);
        let mut old = contents[1].clone();
        let mut stage = stage_with(&ranges[1], &pattern(9, ranges[1].len()));
        for round in 0..3u8 {
            let new = pattern(10 + round, ranges[1].len());
            stage.bytes_mut().copy_from_slice(&new);
            let w = whole(&ranges[1]);
            match ranges[1].replace_from_stage(&mut stage).unwrap() {
                Replaced::Moved(n) => assert_eq!(n, w.len()),
                // A kernel without MREMAP_DONTUNMAP (older than 5.7): copied, which must
                // still give the new bytes.
                Replaced::Copied(Some(e)) if e.raw_os_error() == Some(libc::EINVAL) => {
                    eprintln!("this kernel refuses to move pages ({e}); copied");
                    assert!(ranges[1].bytes() == new.as_slice());
                    return;
                }
                other => panic!("round {round}: {other:?}"),
            }
            assert!(ranges[1].bytes() == new.as_slice(), "round {round}");
            // Moved, not copied: the stage now holds the range's old whole pages.
            assert!(stage.bytes()[w.clone()] == old[w.clone()], "round {round}");
            for i in [0, 2] {
                assert!(ranges[i].bytes() == contents[i].as_slice(), "neighbour {i}");
            }
            old = new;
        }
    }

    #[test]
    fn a_refused_move_copies_and_loses_nothing() {
        // bits: step 1; step 2 (pages put back); steps 2 and 4 (not put back); step 3 (the
        // exchange is done, the stage's pages are lost)
        for mask in [1u8 << 1, 1 << 2, (1 << 2) | (1 << 4), 1 << 3] {
            let (mut ranges, contents) = arena(false);
            let new = pattern(20, ranges[1].len());
            let mut stage = stage_with(&ranges[1], &new);
            FAIL_MOVE.with(|f| f.set(mask));
            let result = ranges[1].replace_from_stage(&mut stage);
            FAIL_MOVE.with(|f| f.set(0));
            match result.unwrap() {
                Replaced::Copied(Some(_)) => assert_ne!(mask, 1 << 3),
                Replaced::Moved(_) => assert_eq!(mask, 1 << 3),
                other => panic!("mask {mask:#b}: {other:?}"),
            }
            assert!(ranges[1].bytes() == new.as_slice(), "mask {mask:#b}");
            for i in [0, 2] {
                assert!(
                    ranges[i].bytes() == contents[i].as_slice(),
                    "mask {mask:#b}"
                );
            }
            // The stage is still usable for the next reload.
            let again = pattern(21, ranges[1].len());
            stage.bytes_mut().copy_from_slice(&again);
            ranges[1].replace_from_stage(&mut stage).unwrap();
            assert!(ranges[1].bytes() == again.as_slice(), "mask {mask:#b}");
        }
    }

    #[test]
    fn page_copier_fills_whole_pages_from_the_file_and_leaves_the_rest() {
        let page = crate::device::page_size();
        let size = 40 * page + 123; // the last page is partly past the end of the file
        let bytes = pattern(50, size);
        let path =
            std::env::temp_dir().join(format!("llama-hotswap-copier-{}", std::process::id()));
        std::fs::write(&path, &bytes).unwrap();
        let file = File::open(&path).unwrap();
        let mut arena = alloc_pages(size.next_multiple_of(page)).unwrap();
        let copier = match PageCopier::new(&file, &mut arena) {
            Ok(c) => c,
            Err(e) => {
                // A kernel older than 5.11 or a sandbox without userfaultfd: loads read.
                eprintln!("no userfaultfd here ({e}); loads read instead");
                std::fs::remove_file(&path).unwrap();
                return;
            }
        };
        // Pages 0..10 (an end inside page 9 rounds up), then 20.. to the end; 10..20 skipped.
        copier.copy(0, 9 * page + 1).unwrap();
        copier.copy(20 * page, size).unwrap();
        // Not whole pages, and a page copied twice: refused.
        assert!(copier.copy(page / 2, 2 * page).is_err());
        assert!(copier.copy(20 * page, 21 * page).is_err());
        drop(copier);
        assert!(arena[..10 * page] == bytes[..10 * page]);
        assert!(
            arena[10 * page..20 * page].iter().all(|&b| b == 0),
            "skipped pages"
        );
        assert!(arena[20 * page..size] == bytes[20 * page..]);
        assert!(
            arena[size..].iter().all(|&b| b == 0),
            "past the end of the file"
        );
        // Unregistered: the arena is plain memory again.
        arena[15 * page] = 7;

        // A file cut short after the copier mapped it: the copy fails, nothing faults.
        let mut arena = alloc_pages(size.next_multiple_of(page)).unwrap();
        let copier = PageCopier::new(&file, &mut arena).unwrap();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(8 * page as u64)
            .unwrap();
        copier.copy(0, 4 * page).unwrap();
        assert!(
            copier.copy(4 * page, 30 * page).is_err(),
            "copied past the end"
        );
        drop(copier);
        assert!(arena[..4 * page] == bytes[..4 * page]);
        assert!(arena[10 * page..].iter().all(|&b| b == 0));
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn locked_small_and_foreign_stages_copy_or_refuse() {
        // Copied, with no reason to give: a locked arena, and too few whole pages.
        let copies = |range: &mut HostRange, seed: u8| {
            let new = pattern(seed, range.len());
            let mut stage = stage_with(range, &new);
            assert!(matches!(
                range.replace_from_stage(&mut stage).unwrap(),
                Replaced::Copied(None)
            ));
            assert!(range.bytes() == new.as_slice());
        };
        copies(&mut arena(true).0[1], 30);
        let (mut ranges, contents) = arena(false);
        copies(&mut ranges[2], 31);
        let small = pattern(31, ranges[2].len());
        // A stage made for another range: an error, and nothing written.
        let mut wrong = stage_with(&ranges[2], &small);
        assert!(ranges[1].replace_from_stage(&mut wrong).is_err());
        assert!(ranges[1].bytes() == contents[1].as_slice());
    }

    #[test]
    fn populate_for_write_keeps_bytes_and_makes_whole_pages_resident() {
        let page = crate::device::page_size();
        // A range that starts and ends mid-page: only its whole pages are populated, and no
        // byte of it (or of the pages it shares with its neighbours) changes.
        let (offset, len) = (page / 2, 6 * page);
        let arena = HostArena::new(alloc_pages(8 * page).unwrap(), false);
        let mut ranges = split_arena(arena, &[(offset, len)], &[]).unwrap();
        let range = &mut ranges[0];
        assert_eq!(range.resident_bytes(), Some(0), "fresh anonymous memory");
        let populated = populate_for_write(range.bytes_mut());
        if populated {
            // The five whole pages inside it; the two partial ones stay untouched.
            assert_eq!(range.resident_bytes(), Some(5 * page));
        } else {
            eprintln!("MADV_POPULATE_WRITE refused here (kernel older than 5.14?)");
        }
        assert!(range.bytes().iter().all(|&b| b == 0));
        let pattern: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        range.write(&pattern).unwrap();
        assert!(populate_for_write(range.bytes_mut()) || !populated);
        assert!(
            range.bytes() == pattern.as_slice(),
            "populating changed written bytes"
        );
    }
}

/// A new anonymous in-memory file (`memfd_create`, close-on-exec): the GGUF image of a
/// model built from a caller's metadata (`llama_model_init_from_user`) is written here and
/// loaded like any file. `name` shows in `/proc/<pid>/fd` only.
pub fn anonymous_file(name: &std::ffi::CStr) -> io::Result<File> {
    // SAFETY: memfd_create reads a NUL-terminated name and returns a new descriptor or -1.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor that nothing else owns.
    Ok(unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) })
}
