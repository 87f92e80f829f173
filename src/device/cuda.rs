//! Hook for CUDA devices. **There are no CUDA devices yet**: [`probe`] returns an empty list.
//!
//! When CUDA support lands, `probe` enumerates the CUDA devices (through the driver API,
//! loaded at run time so the library still works without a driver) and returns one
//! [`CudaDeviceInfo`] per device. The registry then registers them as GPU devices named
//! `CUDA0`, `CUDA1`, … *before* the virtual GPUs and the CPU, as upstream registers the CUDA
//! backend first, and their `device_id` becomes the PCI bus id that upstream uses to skip
//! duplicate GPUs.

/// What the registry needs to know about one CUDA device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaDeviceInfo {
    /// The CUDA device ordinal.
    pub ordinal: u32,
    /// The device's name, e.g. "NVIDIA H100 80GB HBM3".
    pub description: String,
    /// Lower-case PCI bus id ("0000:c1:00.0"), when known.
    pub pci_bus_id: Option<String>,
    /// Total device memory in bytes.
    pub total_memory: u64,
}

/// The CUDA devices of this machine. Always empty for now: CUDA is not supported yet.
pub fn probe() -> Vec<CudaDeviceInfo> {
    Vec::new()
}
