//! Large reads and copies of storage split across two threads ([`both`], [`copy_parallel`]),
//! shared by the storage files.

/// Below this many bytes a read or a copy of storage stays on one thread.
pub const PARALLEL_MIN: usize = 8 << 20;

/// Where a read or copy of `len` bytes splits into two halves for [`both`]: the middle rounded
/// down to a page (so the halves of an O_DIRECT read stay aligned), or None below
/// [`PARALLEL_MIN`].
pub fn split_point(len: usize) -> Option<usize> {
    (len >= PARALLEL_MIN).then(|| (len / 2) & !(crate::device::page_size() - 1))
}

/// `dst.copy_from_slice(src)`, split across two threads for large copies (the 64 MiB write of
/// an in-place reload: 9.7 ms on one thread, ~8 ms on two, on the project's machine).
pub fn copy_parallel(dst: &mut [u8], src: &[u8]) {
    let Some(half) = split_point(dst.len()) else {
        return dst.copy_from_slice(src);
    };
    let (d1, d2) = dst.split_at_mut(half);
    let (s1, s2) = src.split_at(half);
    // Under a tensor's write lock: `both` never fails for want of a thread.
    both(|| d1.copy_from_slice(s1), || d2.copy_from_slice(s2));
}

/// Runs `first` on this thread and `second` on a helper thread at the same time, and returns
/// both results (the large reads and copies of storage, split in two halves). The helper
/// runs `second` only if it starts before this thread is done with `first`; otherwise, or
/// when no thread can be started at all (a host at its thread limit), this thread runs it
/// after `first`: nothing fails for want of a thread. A panic in either is re-raised here.
pub fn both<A, B: Send>(first: impl FnOnce() -> A, second: impl FnOnce() -> B + Send) -> (A, B) {
    let job = std::sync::Mutex::new(Some(second));
    let take_and_run = || {
        let taken = job.lock().unwrap_or_else(|e| e.into_inner()).take();
        taken.map(|f| f())
    };
    std::thread::scope(|scope| {
        let helper = std::thread::Builder::new()
            .spawn_scoped(scope, take_and_run)
            .ok();
        let a = first();
        let b = match take_and_run() {
            Some(b) => b,
            // Not there any more: a helper was started and took it.
            None => match helper.map(|h| h.join()) {
                Some(Ok(Some(b))) => b,
                Some(Err(panic)) => std::panic::resume_unwind(panic),
                Some(Ok(None)) | None => unreachable!("the second job is taken exactly once"),
            },
        };
        (a, b)
    })
}

#[cfg(test)]
mod tests {
    use super::{both, copy_parallel, split_point, PARALLEL_MIN};
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn copy_parallel_copies_every_byte_small_and_split() {
        // Below the split, and above it with a length that is not a multiple of the page.
        for len in [4097usize, PARALLEL_MIN + 12345] {
            assert_eq!(split_point(len).is_some(), len >= PARALLEL_MIN);
            let src: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
            let mut dst = vec![0u8; len];
            copy_parallel(&mut dst, &src);
            assert!(dst == src, "length {len}");
        }
    }

    #[test]
    fn split_point_is_page_aligned_near_the_middle() {
        let page = crate::device::page_size();
        for len in [PARALLEL_MIN, PARALLEL_MIN + 1, 3 * PARALLEL_MIN + 4095] {
            let half = split_point(len).unwrap();
            assert_eq!(half % page, 0, "{len}");
            assert!(half <= len / 2 && len / 2 - half < page, "{len}: {half}");
        }
        assert_eq!(split_point(PARALLEL_MIN - 1), None);
    }

    #[test]
    fn both_runs_each_job_once_and_returns_both_results() {
        let runs = AtomicUsize::new(0);
        for i in 0..200usize {
            let (a, b) = both(
                || i * 2,
                || {
                    runs.fetch_add(1, Ordering::SeqCst);
                    format!("second {i}")
                },
            );
            assert_eq!((a, b), (i * 2, format!("second {i}")));
        }
        assert_eq!(runs.load(Ordering::SeqCst), 200);
    }

    #[test]
    fn both_reraises_a_panic_of_either_job() {
        let second = std::panic::catch_unwind(|| both(|| 1, || -> u8 { panic!("second") }));
        assert!(second.is_err());
        let first = std::panic::catch_unwind(|| both(|| -> u8 { panic!("first") }, || 2));
        assert!(first.is_err());
    }
}
