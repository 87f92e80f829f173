//! An idle thread pool uses no CPU: after a burst of jobs, the workers sleep (they spin only
//! ~0.1 ms after a job). Its own test binary, so the process CPU time measured here is the
//! pool's alone and not that of other tests running in parallel.

use std::time::Duration;

use llama::kernels::cpu::ThreadPool;

mod common;

fn process_cpu_seconds() -> f64 {
    let usage = common::rusage_self();
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

fn busy_burst(pool: &ThreadPool) -> f64 {
    let before = process_cpu_seconds();
    for _ in 0..2000 {
        pool.parallel_for(64, &|i, _| {
            std::hint::black_box((0..200).fold(i, |a, b| a ^ b));
        });
    }
    process_cpu_seconds() - before
}

#[test]
fn idle_pool_does_not_spin() {
    let mut pool = ThreadPool::new(4);
    for round in 0..2 {
        let busy = busy_burst(&pool);
        std::thread::sleep(Duration::from_millis(20)); // past the spin window
        let before = process_cpu_seconds();
        std::thread::sleep(Duration::from_secs(1));
        let idle = process_cpu_seconds() - before;
        println!("round {round}: burst {busy:.3} s CPU, idle second {idle:.4} s CPU");
        // One spinning worker would burn ~1 s here; sleeping ones use next to nothing.
        assert!(
            idle < 0.05,
            "idle pool used {idle:.3} s of CPU in one second"
        );
        pool.set_n_threads(3);
    }
}
