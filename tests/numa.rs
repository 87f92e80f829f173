//! `llama_numa_init`'s thread placement on a machine of several nodes: the topology is given
//! (this machine has one node, where upstream pins nothing), the pinning is real. Its own test
//! binary: the recorded strategy is once per process, as upstream's.

use llama::device::numa::{self, Strategy, Topology};
use llama::kernels::cpu::pool::ThreadPool;
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[test]
fn distribute_pins_worker_i_on_node_i_mod_nodes() {
    let cpus = numa::thread_cpus().expect("sched_getaffinity");
    if cpus.len() < 2 {
        eprintln!(
            "skipped: this machine lets us run on {} CPU(s); the test needs 2",
            cpus.len()
        );
        return;
    }
    // Two nodes of one CPU each, made of the first two CPUs we may use.
    let topology = Topology {
        nodes: vec![vec![cpus[0]], vec![cpus[1]]],
    };
    let state = numa::init_with(Strategy::Distribute, topology);
    assert!(state.is_numa());
    // A second init changes nothing (upstream: "NUMA already initialized").
    let again = numa::init_with(Strategy::Isolate, Topology::default());
    assert_eq!(again.strategy, Strategy::Distribute);

    let pool = ThreadPool::new(3);
    let seen: Mutex<Vec<(usize, Vec<usize>)>> = Mutex::new(Vec::new());
    pool.parallel_for(3, &|_task, thread| {
        seen.lock()
            .unwrap()
            .push((thread, numa::thread_cpus().unwrap()));
        // hold this task until all three threads hold one, so each thread runs exactly one
        let start = Instant::now();
        while seen.lock().unwrap().len() < 3 && start.elapsed() < Duration::from_secs(20) {
            std::thread::yield_now();
        }
    });
    let mut seen = seen.into_inner().unwrap();
    seen.sort();
    assert_eq!(seen.len(), 3, "every thread ran a task: {seen:?}");
    // the calling thread (0) is not pinned; workers 1 and 2 are on nodes 1 and 0
    assert_eq!(seen[0].1, cpus, "the caller keeps its CPUs");
    assert_eq!(seen[1], (1, vec![cpus[1]]));
    assert_eq!(seen[2], (2, vec![cpus[0]]));
}
