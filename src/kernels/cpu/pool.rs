//! A persistent thread pool for the kernels: `n_threads - 1` workers plus the calling thread.
//!
//! One job at a time: [`ThreadPool::parallel_for`] publishes a borrowed closure and opens it;
//! every thread (the caller included) claims task indices from an atomic counter. When the
//! caller finds no task left it closes the job and waits only for the workers that *entered*
//! it, so the borrow never outlives the call — and a worker that the OS has descheduled (the
//! build machines run many processes on 2 cores) never holds the caller up unless it holds a
//! task. Entering is Dekker-style: a worker first counts itself in (`inside`), then checks that
//! the job is still open; the caller first closes, then waits for `inside` to drop to zero.
//!
//! Waiting: after a job a worker spins for [`SPIN`] watching for the next one (a decode runs
//! hundreds of matmuls back to back, and a condvar wake-up per matmul would cost more than a
//! small matmul), then sleeps on a condvar. An idle pool therefore uses no CPU after ~0.1 ms.

use std::cell::{Cell, UnsafeCell};
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a worker keeps polling for the next job before it goes to sleep.
const SPIN: Duration = Duration::from_micros(100);

/// The closure of the job in flight, with its lifetime erased (see `parallel_for`).
type JobFn = dyn Fn(usize, usize) + Sync;

/// `state` = generation × 2 + 1 while the job of that generation is open.
const OPEN: u64 = 1;

struct Shared {
    /// Generation and open bit (see [`OPEN`]). A new generation is published for every job and
    /// for control messages (shrink, shutdown), which are never open.
    state: AtomicU64,
    /// The job of the current generation. Written by the submitting thread only while no worker
    /// is `inside` and the previous job is closed; read by a worker only while it is counted
    /// `inside` and has seen the job open.
    job: UnsafeCell<Option<*const JobFn>>,
    n_tasks: AtomicUsize,
    next_task: AtomicUsize,
    /// Workers currently inside a job (counted in before checking that it is open).
    inside: AtomicUsize,
    /// Workers with an index at or above this exit when they see the next generation.
    live_workers: AtomicUsize,
    /// Workers whose thread has started (its runtime set-up, which allocates, is done).
    started: AtomicUsize,
    panicked: AtomicBool,
    /// Number of workers asleep on `wake`.
    sleepers: Mutex<usize>,
    wake: Condvar,
}

// SAFETY: `job` is the only non-Sync field. The submitter writes it only after closing the
// previous job (SeqCst store) and seeing `inside == 0` (SeqCst load), and before opening the
// next job (SeqCst store, which also publishes the write). A worker reads it only after counting
// itself `inside` (SeqCst) and then seeing the job open (SeqCst load): in the single SeqCst order
// either the submitter's `inside` check comes after the worker's increment (so the submitter
// waits for the worker to leave before writing again), or the worker's open-check comes after
// the close (so the worker sees it closed, or a later job that was fully written before it was
// opened). The pointee is `Sync`.
unsafe impl Sync for Shared {}
// SAFETY: as above; the raw pointer is only dereferenced under that protocol.
unsafe impl Send for Shared {}

thread_local! {
    /// The pool thread index of this thread while it runs a task, for nested calls.
    static IN_TASK: Cell<Option<usize>> = const { Cell::new(None) };
}

/// A persistent pool of worker threads. See the module documentation.
pub struct ThreadPool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    /// Serializes `parallel_for` calls from different threads on the same pool.
    submit: Mutex<()>,
}

impl std::fmt::Debug for ThreadPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadPool")
            .field("n_threads", &self.n_threads())
            .finish()
    }
}

/// The most threads a pool runs (ggml's `GGML_MAX_N_THREADS`); larger requests are clamped.
pub const MAX_THREADS: usize = 512;

impl ThreadPool {
    /// A pool that runs jobs on `n_threads` threads (the caller and `n_threads - 1` workers);
    /// 0 is taken as 1.
    pub fn new(n_threads: usize) -> ThreadPool {
        let shared = Arc::new(Shared {
            state: AtomicU64::new(0),
            job: UnsafeCell::new(None),
            n_tasks: AtomicUsize::new(0),
            next_task: AtomicUsize::new(0),
            inside: AtomicUsize::new(0),
            live_workers: AtomicUsize::new(0),
            started: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            sleepers: Mutex::new(0),
            wake: Condvar::new(),
        });
        let mut pool = ThreadPool {
            shared,
            workers: Vec::new(),
            submit: Mutex::new(()),
        };
        pool.set_n_threads(n_threads);
        pool
    }

    /// Threads a job runs on, the caller included.
    pub fn n_threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// Splits `items` into tasks of equal runs (about 4 per thread, so a thread the OS holds
    /// back leaves little behind): `(n_tasks, items_per_task)`, the last task maybe shorter;
    /// `(0, 1)` for no items.
    pub fn even_tasks(&self, items: usize) -> (usize, usize) {
        let per = items
            .div_ceil(items.min(self.n_threads() * 4).max(1))
            .max(1);
        (items.div_ceil(per), per)
    }

    /// Grows or shrinks the pool to `n_threads` (0 is taken as 1). Removed workers are joined
    /// before this returns.
    pub fn set_n_threads(&mut self, n_threads: usize) {
        let mut want = n_threads.clamp(1, MAX_THREADS) - 1;
        let have = self.workers.len();
        if want < have {
            self.shared.live_workers.store(want, SeqCst);
            self.publish(None, 0); // a closed generation: wakes everyone, runs nothing
            for worker in self.workers.drain(want..) {
                let _ = worker.join();
            }
            // the remaining workers all started (the pool waited for them)
            self.shared.started.store(want, SeqCst);
        } else if want > have {
            self.shared.live_workers.store(want, SeqCst);
            let seen = self.shared.state.load(SeqCst) >> 1;
            for index in have..want {
                let shared = Arc::clone(&self.shared);
                let spawned = std::thread::Builder::new()
                    .name(format!("llama-kernel-{}", index + 1))
                    .spawn(move || worker_loop(&shared, index, seen));
                match spawned {
                    Ok(handle) => self.workers.push(handle),
                    Err(e) => {
                        // the OS refused a thread: run on those that started (every job
                        // still runs, on fewer threads), never abort the host
                        crate::log_warn!(
                            "thread pool: could not start thread {} of {}: {e}; running on {}",
                            index + 2,
                            want + 1,
                            index + 1
                        );
                        want = index;
                        self.shared.live_workers.store(want, SeqCst);
                        break;
                    }
                }
            }
            // wait until the new threads run: a worker the OS schedules late would otherwise
            // make its start-up allocations in the middle of a later job
            while self.shared.started.load(SeqCst) < want {
                std::thread::yield_now();
            }
        }
    }

    /// Runs `task(task_index, thread_index)` once for every `task_index` in `0..n_tasks`,
    /// spread over the pool's threads, and returns when all are done. `thread_index` is in
    /// `0..n_threads()` (0 is the calling thread) and is the same for all tasks a thread runs
    /// in a row, so it can index per-thread scratch space.
    ///
    /// Called from inside a task of this pool, tasks run on the calling thread only, with its
    /// thread index. Calls from several threads at once take turns. A panicking task is
    /// re-raised here after every thread has stopped using `task`.
    pub fn parallel_for(&self, n_tasks: usize, task: &(dyn Fn(usize, usize) + Sync)) {
        if n_tasks == 0 {
            return;
        }
        if let Some(thread_index) = IN_TASK.with(Cell::get) {
            (0..n_tasks).for_each(|i| task(i, thread_index));
            return;
        }
        if self.workers.is_empty() || n_tasks == 1 {
            IN_TASK.with(|t| t.set(Some(0)));
            let result = catch_unwind(AssertUnwindSafe(|| (0..n_tasks).for_each(|i| task(i, 0))));
            IN_TASK.with(|t| t.set(None));
            if let Err(payload) = result {
                resume_unwind(payload);
            }
            return;
        }
        let guard = lock(&self.submit);
        // SAFETY: the lifetime of `task` is erased so workers can hold it. It stays valid: this
        // function does not return (or unwind) before it has closed the job and seen no worker
        // inside it, and workers never touch the pointer outside a job they entered while open.
        let erased: *const JobFn = unsafe {
            std::mem::transmute::<*const (dyn Fn(usize, usize) + Sync + '_), *const JobFn>(task)
        };
        self.shared.panicked.store(false, Relaxed);
        self.publish(Some(erased), n_tasks);
        IN_TASK.with(|t| t.set(Some(0)));
        let mine = catch_unwind(AssertUnwindSafe(|| run_tasks(&self.shared, task, 0)));
        IN_TASK.with(|t| t.set(None));
        self.close_and_wait();
        drop(guard);
        if let Err(payload) = mine {
            resume_unwind(payload);
        }
        if self.shared.panicked.load(SeqCst) {
            panic!("a kernel task panicked on a pool thread");
        }
    }

    /// Publishes the next generation (open when it carries a job) and wakes sleeping workers.
    /// Called only while no job is open and no worker is inside one.
    fn publish(&self, job: Option<*const JobFn>, n_tasks: usize) {
        let shared = &*self.shared;
        // SAFETY: no worker reads `job` now: the previous job was closed and `inside` seen 0
        // (`close_and_wait`), and the next generation is not open yet (see `Shared`).
        unsafe { *shared.job.get() = job };
        shared.n_tasks.store(n_tasks, Relaxed);
        shared.next_task.store(0, Relaxed);
        let generation = (shared.state.load(SeqCst) >> 1) + 1;
        let open = if job.is_some() { OPEN } else { 0 };
        shared.state.store(generation << 1 | open, SeqCst);
        let sleepers = lock(&shared.sleepers);
        if *sleepers > 0 {
            shared.wake.notify_all();
        }
    }

    /// Closes the open job, then waits (spinning, then yielding) until no worker is inside it.
    fn close_and_wait(&self) {
        let shared = &*self.shared;
        shared.state.fetch_and(!OPEN, SeqCst);
        let mut spins = 0u32;
        while shared.inside.load(SeqCst) != 0 {
            if spins < 1 << 12 {
                std::hint::spin_loop();
                spins += 1;
            } else {
                std::thread::yield_now();
            }
        }
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        self.set_n_threads(1);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// Claims and runs tasks of the current job until none are left.
fn run_tasks(shared: &Shared, task: &(dyn Fn(usize, usize) + Sync + '_), thread_index: usize) {
    let n_tasks = shared.n_tasks.load(Relaxed);
    loop {
        let i = shared.next_task.fetch_add(1, Relaxed);
        if i >= n_tasks {
            return;
        }
        task(i, thread_index);
    }
}

fn worker_loop(shared: &Shared, index: usize, mut seen: u64) {
    // Before counting as started: the pool's first job already runs where NUMA puts it.
    crate::device::numa::pin_worker(index + 1);
    shared.started.fetch_add(1, SeqCst);
    loop {
        seen = wait_for_generation(shared, seen);
        if index >= shared.live_workers.load(SeqCst) {
            return;
        }
        shared.inside.fetch_add(1, SeqCst);
        let state = shared.state.load(SeqCst);
        if state & OPEN != 0 {
            // Possibly a newer job than the generation that woke us: take part in it.
            seen = state >> 1;
            // SAFETY: counted inside, then saw the job open: the submitter will not write `job`
            // or return before `inside` drops back (see `Shared`).
            let job = unsafe { *shared.job.get() };
            if let Some(job) = job {
                // SAFETY: the submitter keeps the closure alive while any worker is inside.
                let task = unsafe { &*job };
                IN_TASK.with(|t| t.set(Some(index + 1)));
                if catch_unwind(AssertUnwindSafe(|| run_tasks(shared, task, index + 1))).is_err() {
                    shared.panicked.store(true, SeqCst);
                }
                IN_TASK.with(|t| t.set(None));
            }
        }
        shared.inside.fetch_sub(1, SeqCst);
    }
}

/// Returns the first generation different from `seen`: spins for [`SPIN`], then sleeps.
fn wait_for_generation(shared: &Shared, seen: u64) -> u64 {
    let start = Instant::now();
    let mut polls = 0u32;
    loop {
        let generation = shared.state.load(Acquire) >> 1;
        if generation != seen {
            return generation;
        }
        std::hint::spin_loop();
        polls += 1;
        if polls % 64 == 0 && start.elapsed() > SPIN {
            break;
        }
    }
    let mut sleepers = lock(&shared.sleepers);
    *sleepers += 1;
    loop {
        let generation = shared.state.load(SeqCst) >> 1;
        if generation != seen {
            *sleepers -= 1;
            return generation;
        }
        sleepers = shared
            .wake
            .wait(sleepers)
            .unwrap_or_else(|p| p.into_inner());
    }
}

/// Wraps a pointer for disjoint writes from pool threads (matrix products, attention).
pub(super) struct SharedOut<T>(*mut T);

// by hand: derived Copy would require `T: Copy`, and the pointer is Copy for any T
impl<T> Clone for SharedOut<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for SharedOut<T> {}

// SAFETY: used only for writes to disjoint elements by different tasks, while the owning `&mut`
// borrow is held by the function that spawned the tasks and waits for them.
unsafe impl<T: Send> Sync for SharedOut<T> {}

// SAFETY: as above: the pointer is only used for those disjoint writes.
unsafe impl<T: Send> Send for SharedOut<T> {}

impl<T> SharedOut<T> {
    pub(super) fn new(out: &mut [T]) -> SharedOut<T> {
        SharedOut(out.as_mut_ptr())
    }
    /// The pointer (a method, so closures capture the whole `Sync` wrapper, not the field).
    pub(super) fn ptr(&self) -> *mut T {
        self.0
    }
    /// `len` elements from `start`.
    ///
    /// # Safety
    /// The range lies within the wrapped buffer, which outlives the use, and no other
    /// thread reads or writes it meanwhile.
    pub(super) unsafe fn slice<'a>(self, start: usize, len: usize) -> &'a mut [T] {
        // SAFETY: the caller's contract above
        unsafe { std::slice::from_raw_parts_mut(self.0.add(start), len) }
    }
}

/// Below this many values (of the output) a row-wise op runs on the calling thread: waking
/// the pool would cost more than the work (a decode step's rows).
const PAR_ROWS_MIN: usize = 8192;

/// Runs `f(first_row, rows, thread)` over `dst` cut into runs of whole rows of `row_len`
/// values, spread over `pool` when there is enough work (ggml splits its row-wise ops among
/// its threads likewise). Each row must be computed from its index and inputs alone, so the
/// result does not depend on the split. `thread` indexes per-thread scratch space as in
/// [`ThreadPool::parallel_for`].
pub fn for_row_runs<T: Send>(
    pool: &ThreadPool,
    dst: &mut [T],
    row_len: usize,
    f: &(dyn Fn(usize, &mut [T], usize) + Sync),
) {
    let n_rows = dst.len().checked_div(row_len).unwrap_or(0);
    let nth = pool.n_threads();
    if nth == 1 || n_rows < 2 || dst.len() < PAR_ROWS_MIN || dst.len() % row_len != 0 {
        f(0, dst, 0);
        return;
    }
    // a few runs per thread, so a thread the OS delays does not hold the others up
    let per = n_rows.div_ceil(nth * 4);
    let n_runs = n_rows.div_ceil(per);
    let out = SharedOut::new(dst);
    pool.parallel_for(n_runs, &|run, thread| {
        let first = run * per;
        let rows = per.min(n_rows - first);
        // SAFETY: run `run` covers rows first..first + rows of `dst`, disjoint from every
        // other run's and inside it (first + rows <= n_rows); `dst` stays mutably borrowed
        // until parallel_for returns.
        let chunk = unsafe { out.slice(first * row_len, rows * row_len) };
        f(first, chunk, thread);
    });
}
