//! What every part of the CUDA room shares: errors, the device facts the registry reads, the
//! staging sizes (a leaf: it imports no sibling).

use cudarc::driver::result::DriverError;

/// Set to disable CUDA (anything but empty or `0`).
pub const NO_CUDA_ENV: &str = "LLAMA_HOTSWAP_NO_CUDA";

/// Size of one staging buffer: the chunk of an upload that one thread reads and copies.
/// 4 MiB measured best on an H100 and an H200 (2 and 8 MiB were slower at 16 threads).
pub const STAGING_BYTES: usize = 4 << 20;

/// Number of page-locked staging buffers (and upload threads) per device: one per core, 4 to
/// 16 (64 MiB of pinned memory at most, as the 4 × 16 MiB this replaced).
pub fn staging_buffers() -> usize {
    static BUFFERS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *BUFFERS.get_or_init(|| {
        std::thread::available_parallelism()
            .map_or(4, |n| n.get())
            .clamp(4, 16)
    })
}

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

/// A failed CUDA operation: what was being done (`op`, naming the device and the driver call)
/// and what went wrong (`code`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{op}: {code}")]
pub struct CudaError {
    pub op: String,
    pub code: CudaCode,
}

/// What went wrong in a [`CudaError`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CudaCode {
    /// The driver returned this `CUresult` (`text`: its name and description).
    #[error("{text}")]
    Driver { result: u32, text: String },
    /// cudarc panicked (a missing library or symbol); the panic's message.
    #[error("panicked: {0}")]
    Panicked(String),
    /// A range outside an allocation of `len` bytes.
    #[error("outside an allocation of {len} bytes")]
    OutOfRange { len: usize },
}

impl CudaError {
    /// A failed driver call.
    pub fn driver(op: impl Into<String>, error: DriverError) -> CudaError {
        CudaError {
            op: op.into(),
            code: CudaCode::Driver {
                result: error.0 as u32,
                text: describe(error),
            },
        }
    }

    /// The same error with `context` (e.g. the device's label) in front of the operation.
    pub fn on(self, context: &str) -> CudaError {
        CudaError {
            op: format!("{context}: {}", self.op),
            ..self
        }
    }
}

/// "CUDA_ERROR_OUT_OF_MEMORY (out of memory)".
pub(super) fn describe(error: DriverError) -> String {
    let name = match error.error_name() {
        Ok(name) => name.to_string_lossy().into_owned(),
        Err(_) => format!("{:?}", error.0),
    };
    match error.error_string() {
        Ok(text) => format!("{name} ({})", text.to_string_lossy()),
        Err(_) => name,
    }
}

/// Pageable copies from this size on go through the staging ring; smaller ones are one
/// synchronous `cuMemcpy` (the driver stages those itself, and a thread would cost more).
pub(super) const STAGED_MIN: usize = 1 << 20;
