//! Devices: the process-wide device registry, memory allocation on devices, and the pure
//! placement rules (which layer goes to which device, row splits, buffer-type overrides).
//!
//! # The registry
//!
//! [`Registry::global`] is created once per process, on first use, and never changes. Its
//! order is upstream's registry order, where GPU backends register before the CPU backend
//! (`ggml-backend-reg.cpp`): CUDA devices (see [`cuda`]), then the virtual GPUs, then the
//! devices of rpc-servers (`RPC0`, … from `LLAMA_RPC_SERVERS` and `llama_ext_rpc_add_server`,
//! see [`rpc`] and docs/rpc.md), then the CPU, which is always present and always last.
//!
//! * **CPU** — named "CPU", described by the first `model name` of /proc/cpuinfo (or "CPU"),
//!   type CPU. Its memory is the physical memory (`MemTotal`); as upstream, all of it is
//!   reported free.
//! * **Virtual GPUs** — type GPU, named `VGPU0`, `VGPU1`, … in the order of
//!   `LLAMA_VIRTUAL_GPUS`, described as "llama-hotswap virtual GPU (24 GiB)". Each is backed by
//!   host memory with an enforced capacity: [`Device::allocate`] fails exactly when
//!   `used + bytes > capacity`, and [`Device::memory`] reports `(capacity - used, capacity)`.
//!   An allocation owns its own buffer (never a view of a file mapping), and dropping it gives
//!   its bytes back.
//! * **CUDA** — `CUDA0`, `CUDA1`, … from [`cuda::probe`] (cudarc, driver loaded at run time;
//!   none without a driver or with `LLAMA_HOTSWAP_NO_CUDA=1`).
//!
//! # `LLAMA_VIRTUAL_GPUS`
//!
//! Read once, when the registry is created. Grammar (whitespace allowed around every token):
//!
//! ```text
//! spec     := "" | entry ("," entry)*
//! entry    := number unit?
//! number   := digit+ ("." digit*)? | "." digit+
//! unit     := "B" | "KiB" | "MiB" | "GiB" | "TiB" | "KB" | "MB" | "GB" | "TB"   (any case)
//! ```
//!
//! `KiB`… are powers of 1024, `KB`… powers of 1000; no unit means bytes; a fraction is rounded
//! down to whole bytes. Example: `24GiB, 8 GiB,512mib,1000000`. A capacity must be at least one
//! byte and fit in `usize`. A malformed entry (including an empty one, as in `8GiB,,4GiB`) logs
//! one error line naming it and that device is skipped; the remaining devices are numbered
//! without gaps. An unset or empty variable means no virtual GPUs.

pub mod capacity;
pub mod cuda;
mod host;
pub mod numa;
pub mod rpc;

/// Physical memory of this host in bytes (`MemTotal`), 0 when unknown: what no single
/// allocation can exceed (upstream's `posix_memalign` of a larger buffer fails).
pub fn host_memory() -> u64 {
    host::total_memory()
}
pub mod overrides;
pub mod placement;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use thiserror::Error;

pub use capacity::{format_capacity, parse_capacity, parse_virtual_gpus, CapacityError};
pub use host::page_size;
pub use overrides::{parse_override_list, BuftOverrides, OverrideError};
pub use placement::{
    compute_placement, row_split, LayerDevice, MemoryInfo, Placement, PlacementError,
    PlacementRequest, RowSlice, SplitMode,
};

/// The environment variable that defines the virtual GPUs.
pub const VIRTUAL_GPUS_ENV: &str = "LLAMA_VIRTUAL_GPUS";

/// ggml's `enum ggml_backend_dev_type`, with the same values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeviceType {
    Cpu = 0,
    Gpu = 1,
    Igpu = 2,
    Accel = 3,
    Meta = 4,
}

impl DeviceType {
    /// The type for a raw ggml value, or None outside the enum.
    pub fn from_raw(raw: i32) -> Option<DeviceType> {
        Some(match raw {
            0 => DeviceType::Cpu,
            1 => DeviceType::Gpu,
            2 => DeviceType::Igpu,
            3 => DeviceType::Accel,
            4 => DeviceType::Meta,
            _ => return None,
        })
    }
}

/// Why a device allocation failed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DeviceError {
    /// The request exceeds the device's free capacity.
    #[error("{device}: out of memory: cannot allocate {requested} bytes, {free} bytes free (capacity {capacity} bytes)")]
    OutOfMemory {
        device: String,
        requested: u64,
        free: u64,
        capacity: u64,
    },
    /// The host could not provide the backing memory.
    #[error("{device}: the host could not allocate {requested} bytes of backing memory")]
    HostAllocation { device: String, requested: u64 },
    /// A remote device's server failed (unreachable, dropped the connection, bad reply).
    #[error("{device}: {error}")]
    Remote { device: String, error: String },
}

/// Capacity accounting of one virtual GPU; shared by the device and its live allocations.
#[derive(Debug)]
struct CapacityPool {
    capacity: u64,
    used: AtomicU64,
}

impl CapacityPool {
    /// Reserves `bytes`, or returns the free bytes seen when `used + bytes > capacity`.
    fn reserve(&self, bytes: u64) -> Result<(), u64> {
        let mut used = self.used.load(Ordering::Acquire);
        loop {
            let free = self.capacity.saturating_sub(used);
            if bytes > free {
                return Err(free);
            }
            match self.used.compare_exchange_weak(
                used,
                used + bytes,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Ok(()),
                Err(current) => used = current,
            }
        }
    }

    fn release(&self, bytes: u64) {
        self.used.fetch_sub(bytes, Ordering::AcqRel);
    }

    fn used(&self) -> u64 {
        self.used.load(Ordering::Acquire)
    }
}

/// Where a device's memory comes from.
#[derive(Debug)]
enum Backing {
    /// Plain host memory, not accounted (the CPU device).
    Host { total: u64 },
    /// Host memory with an enforced capacity (a virtual GPU).
    Capacity(Arc<CapacityPool>),
    /// Device memory of a CUDA GPU.
    Cuda(Arc<cuda::CudaDevice>),
    /// Device `device` of an upstream `rpc-server` (see [`rpc`]).
    Rpc {
        server: Arc<rpc::RpcServer>,
        device: u32,
    },
}

/// One device of the registry.
#[derive(Debug)]
pub struct Device {
    index: usize,
    name: String,
    description: String,
    device_type: DeviceType,
    device_id: Option<String>,
    backing: Backing,
}

impl Device {
    fn cpu(index: usize, total: u64) -> Device {
        Device {
            index,
            name: "CPU".to_string(),
            description: host::cpu_description(),
            device_type: DeviceType::Cpu,
            device_id: None,
            backing: Backing::Host { total },
        }
    }

    fn virtual_gpu(index: usize, number: usize, capacity: u64) -> Device {
        Device {
            index,
            name: format!("VGPU{number}"),
            description: format!("llama-hotswap virtual GPU ({})", format_capacity(capacity)),
            device_type: DeviceType::Gpu,
            device_id: None,
            backing: Backing::Capacity(Arc::new(CapacityPool {
                capacity,
                used: AtomicU64::new(0),
            })),
        }
    }

    /// Position in the registry (the ggml device index).
    pub fn index(&self) -> usize {
        self.index
    }

    /// "CPU", "VGPU0", …
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A description for humans (the CPU model, or the virtual GPU's capacity).
    pub fn description(&self) -> &str {
        &self.description
    }

    pub fn device_type(&self) -> DeviceType {
        self.device_type
    }

    /// Whether upstream would offer this device to a model by default (a GPU).
    pub fn is_gpu(&self) -> bool {
        self.device_type == DeviceType::Gpu
    }

    /// The PCI bus id upstream uses to skip duplicate GPUs; None for the CPU and virtual GPUs.
    pub fn device_id(&self) -> Option<&str> {
        self.device_id.as_deref()
    }

    fn cuda(index: usize, device: Arc<cuda::CudaDevice>) -> Device {
        let info = device.info();
        Device {
            index,
            name: format!("CUDA{}", info.ordinal),
            description: info.description.clone(),
            device_type: DeviceType::Gpu,
            device_id: info.pci_bus_id.clone(),
            backing: Backing::Cuda(device),
        }
    }

    fn rpc(index: usize, number: usize, server: Arc<rpc::RpcServer>, device: u32) -> Device {
        Device {
            index,
            name: format!("RPC{number}"),
            // Upstream describes an RPC device by its endpoint.
            description: server.endpoint().to_string(),
            device_type: DeviceType::Gpu,
            device_id: None,
            backing: Backing::Rpc { server, device },
        }
    }

    /// The `host:port` of the rpc-server this device lives on; None for local devices.
    pub fn rpc_endpoint(&self) -> Option<&str> {
        match &self.backing {
            Backing::Rpc { server, .. } => Some(server.endpoint()),
            _ => None,
        }
    }

    /// Whether this device enforces a capacity (a virtual GPU).
    pub fn is_virtual(&self) -> bool {
        matches!(self.backing, Backing::Capacity(_))
    }

    /// Free and total bytes now. For a virtual GPU, `free = capacity - used`; for the CPU,
    /// free equals total as upstream ("free system memory is ill-defined").
    pub fn memory(&self) -> MemoryInfo {
        match &self.backing {
            Backing::Host { total } => MemoryInfo {
                free: *total,
                total: *total,
            },
            Backing::Capacity(pool) => MemoryInfo {
                free: pool.capacity.saturating_sub(pool.used()),
                total: pool.capacity,
            },
            Backing::Cuda(device) => {
                let total = device.info().total_memory;
                let (free, total) = device.memory().unwrap_or((total, total));
                MemoryInfo { free, total }
            }
            Backing::Rpc { server, device } => {
                // Asked now, as upstream; a server that stopped answering reports nothing free.
                let (free, total) = server.memory(*device).unwrap_or_else(|e| {
                    crate::log_warn!("{}: {e}", self.name);
                    let known = server.devices().iter().find(|d| d.device == *device);
                    (0, known.map_or(0, |d| d.total))
                });
                MemoryInfo { free, total }
            }
        }
    }

    /// Bytes currently allocated on a virtual GPU (0 for the CPU, which is not accounted).
    pub fn used(&self) -> u64 {
        match &self.backing {
            Backing::Host { .. } | Backing::Cuda(_) | Backing::Rpc { .. } => 0,
            Backing::Capacity(pool) => pool.used(),
        }
    }

    /// Allocates `bytes` zeroed bytes on this device. On a virtual GPU this fails exactly when
    /// `used + bytes > capacity`; the reservation is returned when the allocation is dropped.
    /// The backing buffer is written once (zeroed), so its pages are resident afterwards.
    pub fn allocate(&self, bytes: u64) -> Result<DeviceAllocation, DeviceError> {
        self.allocate_with(bytes, Init::Zeroed)
    }

    /// Allocates a copy of `data` on this device (one pass over the bytes), with the capacity
    /// rule of [`Device::allocate`].
    pub fn allocate_copy(&self, data: &[u8]) -> Result<DeviceAllocation, DeviceError> {
        let bytes = u64::try_from(data.len()).unwrap_or(u64::MAX);
        self.allocate_with(bytes, Init::Copy(data))
    }

    /// Allocates `bytes` bytes that the caller overwrites next (e.g. with
    /// [`DeviceAllocation::fill_from_file`]): CUDA memory is left as the driver hands it out
    /// (its old contents are never read back before the fill), host memory is zeroed.
    pub fn allocate_for_overwrite(&self, bytes: u64) -> Result<DeviceAllocation, DeviceError> {
        self.allocate_with(bytes, Init::Unfilled)
    }

    /// Whether this is a CUDA GPU (its memory is reached through the driver, not the host).
    pub fn is_cuda(&self) -> bool {
        matches!(self.backing, Backing::Cuda(_))
    }

    fn allocate_with(&self, bytes: u64, init: Init<'_>) -> Result<DeviceAllocation, DeviceError> {
        if let Backing::Rpc { server, device } = &self.backing {
            let remote = |e: rpc::RpcError| match e.kind {
                rpc::RpcErrorKind::OutOfMemory { requested, .. } => {
                    let (free, capacity) = server.memory(*device).unwrap_or((0, 0));
                    DeviceError::OutOfMemory {
                        device: format!("{} ({})", self.name, server.endpoint()),
                        requested,
                        free,
                        capacity,
                    }
                }
                _ => DeviceError::Remote {
                    device: self.name.clone(),
                    error: e.to_string(),
                },
            };
            let buffer = server.alloc(*device, bytes).map_err(remote)?;
            match init {
                Init::Copy(data) => buffer.write(0, data).map(|_| ()),
                Init::Zeroed => buffer.clear(0),
                Init::Unfilled => Ok(()),
            }
            .map_err(remote)?;
            return Ok(DeviceAllocation {
                memory: Memory::Rpc(buffer),
                device: self.index,
                reserved: bytes,
                pool: None,
            });
        }
        if let Backing::Cuda(device) = &self.backing {
            let len = usize::try_from(bytes).map_err(|_| DeviceError::HostAllocation {
                device: self.name.clone(),
                requested: bytes,
            })?;
            let (free, capacity) = device.memory().unwrap_or((0, device.info().total_memory));
            let mut buffer = device.alloc(len).map_err(|_| DeviceError::OutOfMemory {
                device: self.name.clone(),
                requested: bytes,
                free,
                capacity,
            })?;
            let written = match init {
                Init::Copy(data) => buffer.write(0, data),
                Init::Zeroed => {
                    // Zeroes from one reused chunk: no host buffer as large as the allocation.
                    let zeros = vec![0u8; len.min(16 << 20)];
                    (0..len)
                        .step_by(zeros.len().max(1))
                        .try_for_each(|at| buffer.write(at, &zeros[..zeros.len().min(len - at)]))
                }
                Init::Unfilled => Ok(()),
            };
            written.map_err(|_| DeviceError::HostAllocation {
                device: self.name.clone(),
                requested: bytes,
            })?;
            return Ok(DeviceAllocation {
                memory: Memory::Cuda(buffer),
                device: self.index,
                reserved: bytes,
                pool: None,
            });
        }
        let pool = match &self.backing {
            Backing::Host { .. } | Backing::Cuda(_) | Backing::Rpc { .. } => None,
            Backing::Capacity(pool) => {
                pool.reserve(bytes)
                    .map_err(|free| DeviceError::OutOfMemory {
                        device: self.name.clone(),
                        requested: bytes,
                        free,
                        capacity: pool.capacity,
                    })?;
                Some(Arc::clone(pool))
            }
        };
        let host_error = || DeviceError::HostAllocation {
            device: self.name.clone(),
            requested: bytes,
        };
        let give_back = |pool: &Option<Arc<CapacityPool>>| {
            if let Some(pool) = pool {
                pool.release(bytes);
            }
        };
        let Ok(len) = usize::try_from(bytes) else {
            give_back(&pool);
            return Err(host_error());
        };
        let mut data = Vec::new();
        if data.try_reserve_exact(len).is_err() {
            give_back(&pool);
            return Err(host_error());
        }
        match init {
            Init::Copy(bytes) => data.extend_from_slice(bytes),
            Init::Zeroed | Init::Unfilled => data.resize(len, 0),
        }
        Ok(DeviceAllocation {
            memory: Memory::Host(data),
            device: self.index,
            reserved: bytes,
            pool,
        })
    }
}

/// The bytes behind an allocation.
#[derive(Debug)]
enum Memory {
    /// Host memory (the CPU and virtual GPUs).
    Host(Vec<u8>),
    /// CUDA device memory.
    Cuda(cuda::CudaBuffer),
    /// A buffer on an rpc-server.
    Rpc(rpc::RemoteBuffer),
}

/// Memory allocated on a device: an owned buffer of exactly the requested size. Dropping it
/// returns its bytes to the device's capacity. Bytes move in and out through [`read`],
/// [`write`] and [`fill_from_file`], which work for every kind of device; host-backed
/// allocations can also be borrowed directly ([`host_slice`]).
///
/// [`read`]: DeviceAllocation::read
/// [`write`]: DeviceAllocation::write
/// [`fill_from_file`]: DeviceAllocation::fill_from_file
/// [`host_slice`]: DeviceAllocation::host_slice
#[derive(Debug)]
pub struct DeviceAllocation {
    memory: Memory,
    device: usize,
    reserved: u64,
    pool: Option<Arc<CapacityPool>>,
}

fn range_error(what: &str, offset: usize, len: usize, size: usize) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!("{what} of {len} bytes at {offset} is outside an allocation of {size} bytes"),
    )
}

impl DeviceAllocation {
    /// The registry index of the device it lives on.
    pub fn device_index(&self) -> usize {
        self.device
    }

    pub fn len(&self) -> usize {
        match &self.memory {
            Memory::Host(data) => data.len(),
            Memory::Cuda(buffer) => buffer.len(),
            Memory::Rpc(buffer) => buffer.len() as usize,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The remote buffer, when the bytes live on an rpc-server.
    pub fn rpc_buffer(&self) -> Option<&rpc::RemoteBuffer> {
        match &self.memory {
            Memory::Rpc(buffer) => Some(buffer),
            _ => None,
        }
    }

    /// The device buffer, when the bytes live on a CUDA device.
    pub fn cuda_buffer(&self) -> Option<&cuda::CudaBuffer> {
        match &self.memory {
            Memory::Host(_) | Memory::Rpc(_) => None,
            Memory::Cuda(buffer) => Some(buffer),
        }
    }

    /// The bytes when they live in host memory (CPU, virtual GPU); None on CUDA.
    pub fn host_slice(&self) -> Option<&[u8]> {
        match &self.memory {
            Memory::Host(data) => Some(data),
            Memory::Cuda(_) | Memory::Rpc(_) => None,
        }
    }

    /// The bytes, writable, when they live in host memory (CPU, virtual GPU); None on CUDA.
    pub fn host_slice_mut(&mut self) -> Option<&mut [u8]> {
        match &mut self.memory {
            Memory::Host(data) => Some(data),
            Memory::Cuda(_) | Memory::Rpc(_) => None,
        }
    }

    fn check_range(&self, what: &str, offset: usize, len: usize) -> std::io::Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len() => Ok(()),
            _ => Err(range_error(what, offset, len, self.len())),
        }
    }

    /// Copies `dst.len()` bytes starting at `offset` into `dst`.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> std::io::Result<()> {
        self.check_range("read", offset, dst.len())?;
        match &self.memory {
            Memory::Host(data) => {
                dst.copy_from_slice(&data[offset..offset + dst.len()]);
                Ok(())
            }
            Memory::Cuda(buffer) => buffer.read(offset, dst).map_err(std::io::Error::other),
            Memory::Rpc(buffer) => buffer
                .read(offset as u64, dst)
                .map_err(std::io::Error::other),
        }
    }

    /// Copies `src` into the allocation at `offset`.
    pub fn write(&mut self, offset: usize, src: &[u8]) -> std::io::Result<()> {
        self.check_range("write", offset, src.len())?;
        match &mut self.memory {
            Memory::Host(data) => {
                data[offset..offset + src.len()].copy_from_slice(src);
                Ok(())
            }
            Memory::Cuda(buffer) => buffer.write(offset, src).map_err(std::io::Error::other),
            Memory::Rpc(buffer) => buffer
                .write(offset as u64, src)
                .map(|_| ())
                .map_err(std::io::Error::other),
        }
    }

    /// Reads `len` bytes of `file` at `file_offset` into the allocation at `dst_offset`
    /// (host memory: straight into place; CUDA: through pinned staging buffers). A short read
    /// is an error (`UnexpectedEof`).
    pub fn fill_from_file(
        &mut self,
        file: &std::fs::File,
        file_offset: u64,
        dst_offset: usize,
        len: usize,
    ) -> std::io::Result<()> {
        self.check_range("file read", dst_offset, len)?;
        match &mut self.memory {
            Memory::Host(data) => {
                use std::os::unix::fs::FileExt;
                file.read_exact_at(&mut data[dst_offset..dst_offset + len], file_offset)
            }
            Memory::Cuda(buffer) => buffer.fill_from_file(file, file_offset, dst_offset, len),
            Memory::Rpc(buffer) => {
                // One read and one write per tensor (up to 1 GiB at a time), so a tensor
                // above 10 MiB goes by hash as upstream's client sends it.
                use std::os::unix::fs::FileExt;
                let piece = len.min(1 << 30);
                let mut staging = vec![0u8; piece];
                let mut done = 0;
                while done < len {
                    let n = piece.min(len - done);
                    file.read_exact_at(&mut staging[..n], file_offset + done as u64)?;
                    buffer
                        .write((dst_offset + done) as u64, &staging[..n])
                        .map_err(std::io::Error::other)?;
                    done += n;
                }
                Ok(())
            }
        }
    }
}

/// How [`Device::allocate_with`] initializes a new allocation.
#[derive(Clone, Copy)]
enum Init<'a> {
    Zeroed,
    Copy(&'a [u8]),
    /// Overwritten by the caller next; host memory is zeroed all the same.
    Unfilled,
}

impl Drop for DeviceAllocation {
    fn drop(&mut self) {
        if let Some(pool) = &self.pool {
            pool.release(self.reserved);
        }
    }
}

static GLOBAL: OnceLock<Registry> = OnceLock::new();

/// The environment variable that lists rpc-servers whose devices join the registry:
/// `host:port,host:port,…` (as upstream's `--rpc`).
pub const RPC_SERVERS_ENV: &str = "LLAMA_RPC_SERVERS";

fn pending_rpc_servers() -> std::sync::MutexGuard<'static, Vec<Arc<rpc::RpcServer>>> {
    static PENDING: std::sync::Mutex<Vec<Arc<rpc::RpcServer>>> = std::sync::Mutex::new(Vec::new());
    PENDING.lock().unwrap_or_else(|p| p.into_inner())
}

/// Where the registry asks, when it is created, for the endpoints of rpc-servers the host
/// program registered outside this library (upstream's libggml: the tools' `--rpc`).
static EXTERNAL_RPC_SOURCE: OnceLock<fn() -> Vec<String>> = OnceLock::new();

/// Sets [`EXTERNAL_RPC_SOURCE`] (once; the C API does it when the library is loaded).
pub fn set_external_rpc_source(source: fn() -> Vec<String>) {
    let _ = EXTERNAL_RPC_SOURCE.set(source);
}

/// Connects to the servers the program registered with libggml (first, so that their devices
/// get the names libggml gave them: `RPC0`, …), then those of `LLAMA_RPC_SERVERS`, skipping
/// endpoints already in `servers`; one that cannot be reached (or speaks another protocol
/// version) logs one error line naming it and is skipped.
fn add_rpc_servers_from_program_and_env(servers: &mut Vec<Arc<rpc::RpcServer>>) {
    let external = EXTERNAL_RPC_SOURCE.get().map(|f| f()).unwrap_or_default();
    let spec = std::env::var(RPC_SERVERS_ENV).unwrap_or_default();
    let from_env: Vec<&str> = spec
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .collect();
    let connect = |endpoints: &[&str], source: &str, known: &[Arc<rpc::RpcServer>]| {
        let mut connected: Vec<Arc<rpc::RpcServer>> = Vec::new();
        for &endpoint in endpoints {
            let seen = |s: &Arc<rpc::RpcServer>| s.endpoint() == endpoint;
            if known.iter().any(seen) || connected.iter().any(seen) {
                continue;
            }
            match rpc::RpcServer::connect(endpoint, rpc::Timeouts::from_env()) {
                Ok(s) => connected.push(s),
                Err(e) => crate::log_error!("{source}: {e}; its devices are skipped"),
            }
        }
        connected
    };
    let external: Vec<&str> = external.iter().map(|e| e.trim()).collect();
    let mut ordered = connect(&external, "the program's --rpc (libggml)", servers);
    ordered.append(servers);
    let env_servers = connect(&from_env, RPC_SERVERS_ENV, &ordered);
    ordered.extend(env_servers);
    *servers = ordered;
}

/// Registers an rpc-server's devices for the process registry (`llama_ext_rpc_add_server`):
/// connects and checks the server now, and returns how many devices it offers. The registry
/// is created once; a server added after that is refused (add servers before the first
/// device query or model load, or list them in `LLAMA_RPC_SERVERS`).
pub fn add_rpc_server(endpoint: &str) -> Result<usize, String> {
    if GLOBAL.get().is_some() {
        return Err(format!(
            "cannot add rpc-server {endpoint}: the device registry was already created (add servers before the first device query or model load, or list them in {RPC_SERVERS_ENV})"
        ));
    }
    let mut pending = pending_rpc_servers();
    if let Some(s) = pending.iter().find(|s| s.endpoint() == endpoint.trim()) {
        return Ok(s.devices().len());
    }
    let server = rpc::RpcServer::connect(endpoint.trim(), rpc::Timeouts::from_env())
        .map_err(|e| e.to_string())?;
    let n = server.devices().len();
    pending.push(server);
    Ok(n)
}

/// The devices of the process (or of a test), in upstream's registry order: GPUs first, CPU
/// last.
#[derive(Debug)]
pub struct Registry {
    devices: Vec<Device>,
}

impl Registry {
    /// The process-wide registry, created on first use from `LLAMA_VIRTUAL_GPUS` (one error
    /// line per malformed entry).
    pub fn global() -> &'static Registry {
        GLOBAL.get_or_init(|| {
            let spec = std::env::var_os(VIRTUAL_GPUS_ENV).unwrap_or_default();
            let spec = spec.to_string_lossy();
            let (capacities, errors) = parse_virtual_gpus(&spec);
            for error in &errors {
                crate::log_error!("{VIRTUAL_GPUS_ENV}: {error}; this device is skipped");
            }
            let mut registry = Registry::with_virtual_gpus(&capacities);
            registry.add_cuda_devices(cuda::probe());
            let mut servers = std::mem::take(&mut *pending_rpc_servers());
            add_rpc_servers_from_program_and_env(&mut servers);
            registry.add_rpc_servers(&servers);
            registry
        })
    }

    /// A registry with virtual GPUs, the devices of these rpc-servers, and the CPU. For
    /// tests and tools.
    pub fn with_rpc_servers(capacities: &[u64], servers: &[Arc<rpc::RpcServer>]) -> Registry {
        let mut registry = Registry::with_virtual_gpus(capacities);
        registry.add_rpc_servers(servers);
        registry
    }

    /// Adds every device of every server, named `RPC0`, `RPC1`, … in order, before the CPU
    /// (the CPU stays last here; upstream's ggml registry lists RPC devices after it).
    fn add_rpc_servers(&mut self, servers: &[Arc<rpc::RpcServer>]) {
        let cpu = self
            .devices
            .pop()
            .expect("the registry always has a CPU device");
        let mut number = 0;
        for server in servers {
            for info in server.devices() {
                let index = self.devices.len();
                self.devices
                    .push(Device::rpc(index, number, Arc::clone(server), info.device));
                crate::log_info!(
                    "RPC{number}: device {} of rpc-server {} ({} MiB, {} MiB free)",
                    info.device,
                    server.endpoint(),
                    info.total >> 20,
                    info.free >> 20
                );
                number += 1;
            }
        }
        let mut cpu = cpu;
        cpu.index = self.devices.len();
        self.devices.push(cpu);
    }

    /// A registry with virtual GPUs of the given capacities (no CUDA devices) and the CPU.
    /// For tests and tools; the library uses [`Registry::global`].
    pub fn with_virtual_gpus(capacities: &[u64]) -> Registry {
        let mut devices = Vec::with_capacity(capacities.len() + 1);
        for (number, &capacity) in capacities.iter().enumerate() {
            devices.push(Device::virtual_gpu(devices.len(), number, capacity));
        }
        devices.push(Device::cpu(devices.len(), host::total_memory()));
        Registry { devices }
    }

    /// Puts CUDA devices first (upstream registers the CUDA backend before the others) and
    /// renumbers the rest.
    fn add_cuda_devices(&mut self, cuda_devices: Vec<Arc<cuda::CudaDevice>>) {
        if cuda_devices.is_empty() {
            return;
        }
        let mut devices: Vec<Device> = cuda_devices
            .into_iter()
            .enumerate()
            .map(|(i, d)| Device::cuda(i, d))
            .collect();
        for mut device in std::mem::take(&mut self.devices) {
            device.index = devices.len();
            devices.push(device);
        }
        self.devices = devices;
    }

    /// Every device, in registry order.
    pub fn devices(&self) -> &[Device] {
        &self.devices
    }

    pub fn len(&self) -> usize {
        self.devices.len()
    }

    /// Never true: the CPU is always present.
    pub fn is_empty(&self) -> bool {
        self.devices.is_empty()
    }

    pub fn get(&self, index: usize) -> Option<&Device> {
        self.devices.get(index)
    }

    /// The CPU device (always present, last).
    pub fn cpu(&self) -> &Device {
        self.devices
            .iter()
            .find(|d| d.device_type == DeviceType::Cpu)
            .expect("the registry always has a CPU device")
    }

    /// The GPU devices, in registry order.
    pub fn gpus(&self) -> impl Iterator<Item = &Device> {
        self.devices.iter().filter(|d| d.is_gpu())
    }

    pub fn any_gpu(&self) -> bool {
        self.gpus().next().is_some()
    }

    /// The device with this name, compared case-insensitively (ASCII) as upstream.
    pub fn by_name(&self, name: &str) -> Option<&Device> {
        self.devices
            .iter()
            .find(|d| d.name.eq_ignore_ascii_case(name))
    }

    /// The first device of this type.
    pub fn by_type(&self, device_type: DeviceType) -> Option<&Device> {
        self.devices.iter().find(|d| d.device_type == device_type)
    }

    /// Upstream's default device list for a model (`params.devices == NULL`, split mode not
    /// TENSOR): the GPUs in registry order, skipping a GPU whose `device_id` equals that of
    /// one already chosen, after the RPC devices (upstream puts those first).
    pub fn default_model_devices(&self) -> Vec<&Device> {
        let mut chosen: Vec<&Device> = Vec::new();
        // RPC devices first, "to minimize network transfers" (upstream's words).
        chosen.extend(self.gpus().filter(|d| d.rpc_endpoint().is_some()));
        for device in self.gpus().filter(|d| d.rpc_endpoint().is_none()) {
            let duplicate = device
                .device_id()
                .is_some_and(|id| chosen.iter().any(|c| c.device_id() == Some(id)));
            if duplicate {
                crate::log_info!(
                    "skipping device {} ({}) with id {} - already using a device with the same id",
                    device.name(),
                    device.description(),
                    device.device_id().unwrap_or("unknown id")
                );
            } else {
                chosen.push(device);
            }
        }
        chosen
    }
}
