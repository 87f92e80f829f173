//! CUDA kernels: CUDA C in this folder (`kernels.cu`), compiled at run time by NVRTC for the
//! device's compute capability, PTX cached on disk per source, NVRTC version, crate version and
//! architecture (`<cache>/ptx/`), loaded once per device.

use std::collections::HashMap;
use std::sync::Arc;

use crate::device::cuda::{self, CudaDevice, CudaFunction, CudaModule};

/// The kernels' CUDA C source: the activation quantizer and integer block dots (`quant.cuh`,
/// also compiled on the host by tests/cuda_kernels.rs), then the kernels.
pub const SOURCE: &str = concat!(include_str!("quant.cuh"), include_str!("kernels.cu"));

/// The part of [`SOURCE`] that is plain C++ as well (the host test compiles it with `c++`).
pub const QUANT_SOURCE: &str = include_str!("quant.cuh");

/// Every kernel of [`SOURCE`].
pub const KERNELS: [&str; 16] = [
    "k_get_rows",
    "k_copy_rows",
    "k_norm",
    "k_binary",
    "k_unary",
    "k_glu",
    "k_mul_mat",
    "k_quantize_q8",
    "k_rope",
    "k_set_rows",
    "k_flash_attn",
    "k_soft_max",
    "k_top_k",
    "k_get_rows_ids",
    "k_div_sum_rows",
    "k_weighted_sum",
];

/// Weight types the CUDA kernels compute with (MUL_MAT, GET_ROWS, weight operands).
pub fn supports(ty: crate::gguf::GgmlType) -> bool {
    use crate::gguf::GgmlType as T;
    matches!(
        ty,
        T::F32
            | T::F16
            | T::Q4_0
            | T::Q4_1
            | T::Q5_0
            | T::Q5_1
            | T::Q8_0
            | T::Q2_K
            | T::Q3_K
            | T::Q4_K
            | T::Q5_K
            | T::Q6_K
            | T::IQ4_NL
            | T::IQ4_XS
    )
}

/// What a quantized weight type's activations are quantized to before its integer block dots
/// (the CPU engine's vec_dot type): 0 Q8_0, 1 Q8_1, 2 Q8_K, with the values and bytes of one
/// activation block; `None` for F32/F16 (f32 activations).
pub fn activation_blocks(ty: crate::gguf::GgmlType) -> Option<(i32, usize, usize)> {
    use crate::gguf::GgmlType as T;
    match ty {
        T::Q4_0 | T::Q5_0 | T::Q8_0 | T::IQ4_NL => Some((0, 32, 34)),
        T::Q4_1 | T::Q5_1 => Some((1, 32, 36)),
        T::Q2_K | T::Q3_K | T::Q4_K | T::Q5_K | T::Q6_K | T::IQ4_XS => Some((2, 256, 292)),
        _ => None,
    }
}

/// FNV-1a, 64 bits: the cache key of a source (no dependency for one hash).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn cache_dir() -> Option<std::path::PathBuf> {
    let base = std::env::var_os("LLAMA_HOTSWAP_CACHE")
        .filter(|v| !v.is_empty())
        .map(std::path::PathBuf::from)
        .or_else(|| {
            std::env::var_os("XDG_CACHE_HOME")
                .filter(|v| !v.is_empty())
                .map(|x| std::path::PathBuf::from(x).join("llama-hotswap"))
        })
        .or_else(|| {
            std::env::var_os("HOME")
                .map(|h| std::path::PathBuf::from(h).join(".cache/llama-hotswap"))
        })?;
    Some(base.join("ptx"))
}

/// PTX of [`SOURCE`] for `compute_<arch>`: from the cache, else compiled (and cached; a cache
/// that cannot be written is only logged).
pub fn ptx(arch: u32) -> Result<String, String> {
    let (version, _) = cuda::nvrtc_version()?;
    let key = format!(
        "{:016x}-nvrtc{version}-v{}-sm{arch}",
        fnv1a(SOURCE.as_bytes()),
        env!("CARGO_PKG_VERSION")
    );
    let path = cache_dir().map(|d| d.join(format!("{key}.ptx")));
    if let Some(text) = path.as_ref().and_then(|p| std::fs::read_to_string(p).ok()) {
        if text.contains(".entry") {
            return Ok(text);
        }
    }
    let text = cuda::compile_ptx(SOURCE, "kernels.cu", arch)?;
    if let Some(p) = path {
        let tmp = p.with_extension(format!("tmp{}", std::process::id()));
        let written = p
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(&tmp, &text))
            .and_then(|()| std::fs::rename(&tmp, &p));
        if let Err(e) = written {
            crate::log_warn!("CUDA: cannot cache PTX at {}: {e}", p.display());
        }
    }
    Ok(text)
}

/// The kernels loaded on one device.
#[derive(Debug)]
pub struct CudaKernels {
    module: CudaModule,
    functions: HashMap<&'static str, CudaFunction>,
}

impl CudaKernels {
    /// Compiles (or reads from the cache) and loads the kernels for `device`'s architecture.
    pub fn load(device: &Arc<CudaDevice>) -> Result<CudaKernels, String> {
        let (major, minor) = device.compute_capability().map_err(|e| e.to_string())?;
        let arch = major * 10 + minor;
        // a device newer than the NVRTC at hand runs PTX of an older architecture (JIT)
        let text = [arch, 90, 80]
            .into_iter()
            .filter(|&a| a <= arch)
            .map(ptx)
            .find_map(Result::ok)
            .map_or_else(|| ptx(arch), Ok)?;
        let module = device.load_module(&text).map_err(|e| e.to_string())?;
        let mut functions = HashMap::new();
        for name in KERNELS {
            functions.insert(name, module.function(name).map_err(|e| e.to_string())?);
        }
        Ok(CudaKernels { module, functions })
    }

    /// Launches kernel `name` (one of [`KERNELS`]).
    pub fn launch(
        &self,
        name: &'static str,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        args: &[cuda::KernelArg],
    ) -> Result<(), String> {
        let f = *self
            .functions
            .get(name)
            .ok_or_else(|| format!("no CUDA kernel {name}"))?;
        if grid.0 == 0 || grid.1 == 0 || grid.2 == 0 {
            return Ok(());
        }
        self.module
            .launch(f, grid, block, 0, args)
            .map_err(|e| e.to_string())
    }
}

/// The bytes of an f32 slice (for copies to and from device memory).
pub fn f32_bytes(v: &[f32]) -> &[u8] {
    // SAFETY: f32 has no padding and every byte of it is initialized; u8 has alignment 1; the
    // length covers exactly the slice's bytes and the borrow keeps it alive.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

/// The bytes of an f32 slice, writable (any bytes written form valid f32 values).
pub fn f32_bytes_mut(v: &mut [f32]) -> &mut [u8] {
    // SAFETY: as in `f32_bytes`; every bit pattern is a valid f32, and the exclusive borrow
    // makes this the only view.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

/// The bytes of an i32 slice.
pub fn i32_bytes(v: &[i32]) -> &[u8] {
    // SAFETY: as in `f32_bytes`.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}
