//! The monotonic microsecond clock behind `llama_time_us` and the performance counters: a
//! leaf, so the context's counters (`perf_counters`) can read it without importing the
//! backend functions that export it.

use std::sync::OnceLock;

/// The fallback origin, fixed at the first call (`llama_backend_init` makes that early).
pub(crate) fn time_origin() -> std::time::Instant {
    static ORIGIN: OnceLock<std::time::Instant> = OnceLock::new();
    *ORIGIN.get_or_init(std::time::Instant::now)
}

/// Microseconds on `CLOCK_MONOTONIC` (upstream's `ggml_time_us`); since [`time_origin`]
/// where that clock fails.
pub(crate) fn monotonic_us() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the struct it is given; CLOCK_MONOTONIC always exists.
    if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) } != 0 {
        return i64::try_from(time_origin().elapsed().as_micros()).unwrap_or(i64::MAX);
    }
    ts.tv_sec * 1_000_000 + ts.tv_nsec / 1000
}
