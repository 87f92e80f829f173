//! NUMA placement of compute threads, as upstream's CPU backend does it (`ggml_numa_init`,
//! `set_numa_thread_affinity` in ggml-cpu.c): `llama_numa_init` records a strategy and the
//! machine's nodes once; on a machine with more than one node, each kernel worker pins itself
//! when it starts — DISTRIBUTE: worker `i` on the CPUs of node `i % nodes`; ISOLATE: every
//! worker on the node the initialising thread ran on; NUMACTL: every worker on the CPU set the
//! process was started with (what `numactl` gave it). MIRROR, or one node: nothing is pinned
//! (upstream's default). Model mappings are then neither prefetched nor read ahead
//! (`MADV_RANDOM`), so each page is first touched, and placed, by the thread that computes
//! with it. The `sched_*` calls are the `unsafe` OS edge here.
#![allow(unsafe_code)]

use std::path::Path;
use std::sync::OnceLock;

/// ggml's `enum ggml_numa_strategy` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    Disabled,
    Distribute,
    Isolate,
    Numactl,
    Mirror,
}

impl Strategy {
    /// The strategy of ggml's enum value `v` (0..=4), `None` when out of range.
    pub fn from_ggml(v: i32) -> Option<Strategy> {
        Some(match v {
            0 => Strategy::Disabled,
            1 => Strategy::Distribute,
            2 => Strategy::Isolate,
            3 => Strategy::Numactl,
            4 => Strategy::Mirror,
            _ => return None,
        })
    }
}

/// The machine's NUMA nodes as sysfs lists them: `nodes[n]` holds node n's CPU numbers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Topology {
    pub nodes: Vec<Vec<usize>>,
}

/// ggml's limits (`GGML_NUMA_MAX_NODES`, `GGML_NUMA_MAX_CPUS`).
const MAX_NODES: usize = 8;
const MAX_CPUS: usize = 512;

impl Topology {
    /// Reads `<root>/node/node<n>/cpu<c>` the way upstream does: nodes counted from 0 while
    /// `node<n>` exists, CPUs from 0 while `<root>/cpu/cpu<c>` exists.
    pub fn read(root: &Path) -> Topology {
        let n_nodes = (0..MAX_NODES)
            .take_while(|n| root.join(format!("node/node{n}")).exists())
            .count();
        let n_cpus = (0..MAX_CPUS)
            .take_while(|c| root.join(format!("cpu/cpu{c}")).exists())
            .count();
        let nodes = (0..n_nodes)
            .map(|n| {
                (0..n_cpus)
                    .filter(|c| root.join(format!("node/node{n}/cpu{c}")).exists())
                    .collect()
            })
            .collect();
        Topology { nodes }
    }

    /// The node holding `cpu`, if any.
    pub fn node_of(&self, cpu: usize) -> Option<usize> {
        self.nodes.iter().position(|cpus| cpus.contains(&cpu))
    }
}

/// What `llama_numa_init` recorded.
#[derive(Clone, Debug)]
pub struct NumaState {
    pub strategy: Strategy,
    pub topology: Topology,
    /// The node of the CPU the initialising thread ran on (ISOLATE's node).
    pub current_node: usize,
    /// The initialising thread's CPU set (NUMACTL's set).
    pub cpuset: Vec<usize>,
}

impl NumaState {
    /// More than one node: only then is anything pinned (upstream's `ggml_is_numa`).
    pub fn is_numa(&self) -> bool {
        self.topology.nodes.len() > 1
    }

    /// The CPUs kernel worker `thread_index` (1.. for workers; 0 is the calling thread) is to
    /// run on, or `None` when it is left where the OS puts it.
    pub fn cpus_for(&self, thread_index: usize) -> Option<&[usize]> {
        if !self.is_numa() {
            return None;
        }
        let node = match self.strategy {
            Strategy::Distribute => thread_index % self.topology.nodes.len(),
            Strategy::Isolate => self.current_node,
            Strategy::Numactl => return Some(&self.cpuset),
            Strategy::Disabled | Strategy::Mirror => return None,
        };
        self.topology.nodes.get(node).map(Vec::as_slice)
    }
}

static STATE: OnceLock<NumaState> = OnceLock::new();

/// Records `strategy` and the machine's nodes (`/sys/devices/system`), once per process as
/// upstream (a second call is logged and changes nothing). Returns what is in force.
pub fn init(strategy: Strategy) -> &'static NumaState {
    init_with(strategy, Topology::read(Path::new("/sys/devices/system")))
}

/// [`init`] with a given topology (tests describe a machine of several nodes with it).
pub fn init_with(strategy: Strategy, topology: Topology) -> &'static NumaState {
    let mut fresh = false;
    let state = STATE.get_or_init(|| {
        fresh = true;
        let current_node = current_cpu()
            .and_then(|cpu| topology.node_of(cpu))
            .unwrap_or(0);
        NumaState {
            strategy,
            topology,
            current_node,
            cpuset: thread_cpus().unwrap_or_default(),
        }
    });
    if !fresh {
        crate::log_warn!("llama_numa_init: NUMA already initialized");
    } else if state.is_numa() {
        crate::log_info!(
            "NUMA: {} nodes, strategy {:?}: kernel workers are pinned as upstream's",
            state.topology.nodes.len(),
            state.strategy
        );
        let balancing = std::fs::read_to_string("/proc/sys/kernel/numa_balancing");
        if balancing.is_ok_and(|b| b.trim() != "0") {
            crate::log_warn!(
                "/proc/sys/kernel/numa_balancing is enabled, this has been observed to impair performance"
            );
        }
    }
    state
}

/// What `llama_numa_init` recorded, if it was called.
pub fn state() -> Option<&'static NumaState> {
    STATE.get()
}

/// Whether model mappings should be neither prefetched nor read ahead (several nodes and a
/// strategy recorded).
pub fn is_numa() -> bool {
    state().is_some_and(NumaState::is_numa)
}

/// Pins the calling thread, kernel worker `thread_index`, as the recorded strategy says;
/// nothing when there is none. A refusal by the OS is logged (the thread runs unpinned).
pub fn pin_worker(thread_index: usize) {
    let Some(cpus) = state().and_then(|s| s.cpus_for(thread_index)) else {
        return;
    };
    if let Err(e) = set_thread_cpus(cpus) {
        crate::log_warn!("NUMA: could not pin kernel thread {thread_index}: {e}");
    }
}

/// The CPU the calling thread runs on.
pub fn current_cpu() -> Option<usize> {
    // SAFETY: sched_getcpu takes no arguments and reads nothing of ours.
    let cpu = unsafe { libc::sched_getcpu() };
    usize::try_from(cpu).ok()
}

/// The calling thread's allowed CPUs.
pub fn thread_cpus() -> Option<Vec<usize>> {
    // SAFETY: an all-zero cpu_set_t is a valid (empty) set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a live cpu_set_t of the size passed; pid 0 is the calling thread.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return None;
    }
    let max = 8 * std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: CPU_ISSET reads the set within its size (cpu < the set's bit count).
    Some(
        (0..max)
            .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
            .collect(),
    )
}

/// Restricts the calling thread to `cpus`.
pub fn set_thread_cpus(cpus: &[usize]) -> std::io::Result<()> {
    // SAFETY: an all-zero cpu_set_t is a valid (empty) set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let max = 8 * std::mem::size_of::<libc::cpu_set_t>();
    for &c in cpus.iter().filter(|&&c| c < max) {
        // SAFETY: c is below the set's bit count.
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: `set` is a live cpu_set_t of the size passed; pid 0 is the calling thread.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(strategy: Strategy, nodes: Vec<Vec<usize>>) -> NumaState {
        NumaState {
            strategy,
            topology: Topology { nodes },
            current_node: 1,
            cpuset: vec![0, 3],
        }
    }

    #[test]
    fn strategies_choose_upstreams_cpus() {
        let two = vec![vec![0, 1], vec![2, 3]];
        let d = state(Strategy::Distribute, two.clone());
        assert_eq!(d.cpus_for(0), Some(&[0, 1][..]));
        assert_eq!(d.cpus_for(1), Some(&[2, 3][..]));
        assert_eq!(d.cpus_for(2), Some(&[0, 1][..]));
        assert_eq!(
            state(Strategy::Isolate, two.clone()).cpus_for(0),
            Some(&[2, 3][..])
        );
        assert_eq!(
            state(Strategy::Numactl, two.clone()).cpus_for(5),
            Some(&[0, 3][..])
        );
        assert_eq!(state(Strategy::Mirror, two.clone()).cpus_for(1), None);
        assert_eq!(state(Strategy::Disabled, two).cpus_for(1), None);
        // one node: nothing pinned, whatever the strategy
        assert_eq!(
            state(Strategy::Distribute, vec![vec![0, 1]]).cpus_for(1),
            None
        );
    }

    #[test]
    fn topology_reads_sysfs_as_upstream() {
        let root = std::env::temp_dir().join(format!("numa-sysfs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for c in 0..4 {
            std::fs::create_dir_all(root.join(format!("cpu/cpu{c}"))).unwrap();
        }
        for (n, cpus) in [(0, [0, 2]), (1, [1, 3])] {
            for c in cpus {
                std::fs::create_dir_all(root.join(format!("node/node{n}/cpu{c}"))).unwrap();
            }
        }
        // node3 without node2: counting stops at the first gap, as upstream's loop does
        std::fs::create_dir_all(root.join("node/node3/cpu0")).unwrap();
        let t = Topology::read(&root);
        assert_eq!(t.nodes, vec![vec![0, 2], vec![1, 3]]);
        assert_eq!(t.node_of(3), Some(1));
        assert_eq!(t.node_of(7), None);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn affinity_round_trips_on_this_thread() {
        let before = thread_cpus().expect("sched_getaffinity");
        assert!(!before.is_empty());
        std::thread::spawn(move || {
            set_thread_cpus(&before[..1]).unwrap();
            assert_eq!(thread_cpus().unwrap(), before[..1].to_vec());
            assert_eq!(current_cpu(), Some(before[0]));
        })
        .join()
        .unwrap();
    }
}
