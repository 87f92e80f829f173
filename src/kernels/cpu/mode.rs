//! The kernel mode and the ISA level, chosen once per process.
//!
//! Two modes, one switch:
//! * **fast** (the default): the fastest kernels this CPU has. Products of a prompt batch take
//!   kernels of our own (integer sums per block, float work once per group of rows), whose
//!   float summation order may differ from upstream's (Q4_0 and IQ4_NL keep the repacked
//!   gemm's order): greedy tokens equal the exact mode's, and the mean KL divergence is within
//!   1e-4 of it, or within 1e-2 where every layer's Q8_0/Q5_0/Q4_1/K-quant product sums in
//!   another order (SmolLM2 Q8_0, Q4_K_M, Q5_K_M, Q4_1: 2.6e-3 / 3.1e-3 / 4.6e-3 / 2.2e-3, as
//!   far apart as upstream's own AVX2 and generic builds; `scripts/test-engine.sh`), not bit
//!   for bit. The K-quants (Q4_K, Q5_K, Q6_K) keep the exact mode's Q8_K activations and sum
//!   per super-block. BF16 products of a prompt batch take an f32 panel GEMM
//!   (`fast_float.rs`) over the f32 activations (KL ≤ 1e-4).
//!   Single-token steps (matrix-vector products) run the exact kernels in both modes.
//! * **exact** (`LLAMA_HOTSWAP_EXACT=1`): the kernels that reproduce upstream's portable x86
//!   build (GGML_NATIVE=OFF, AVX2) bit for bit: every float operation in upstream's order.
//!   The differential tests run in this mode.
//!
//! The ISA level is the best instruction set the kernels use on this CPU ("avx2": AVX2 + FMA
//! + F16C, or "scalar"; `LLAMA_HOTSWAP_KERNELS=scalar` forces the latter). A new level (AVX-512
//! with VNNI, NEON) adds its folder beside `x86/` and one branch in [`isa_level`].
//!
//! Both are read on first use (the library's `llama_backend_init` asks first) and logged once.

use std::sync::OnceLock;

/// Which kernels the CPU backend runs (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelMode {
    /// The fastest kernels for the host (the default).
    Fast,
    /// Upstream's portable build, bit for bit (`LLAMA_HOTSWAP_EXACT=1`).
    Exact,
}

impl KernelMode {
    /// "fast" or "exact".
    pub fn name(self) -> &'static str {
        match self {
            KernelMode::Fast => "fast",
            KernelMode::Exact => "exact",
        }
    }
}

/// The environment variable that selects the exact mode.
pub const EXACT_ENV: &str = "LLAMA_HOTSWAP_EXACT";

/// The mode a value of `LLAMA_HOTSWAP_EXACT` selects: unset, empty, `0`, `false`, `no` or
/// `off` (any case) is the fast mode; anything else (`1`, `true`, ...) the exact one.
pub fn mode_from_env(value: Option<&str>) -> KernelMode {
    match value.map(|v| v.trim().to_ascii_lowercase()) {
        None => KernelMode::Fast,
        Some(v) if matches!(v.as_str(), "" | "0" | "false" | "no" | "off") => KernelMode::Fast,
        Some(_) => KernelMode::Exact,
    }
}

/// The kernel mode of this process: read from `LLAMA_HOTSWAP_EXACT` on first use, logged
/// once, fixed from then on (a model's results never change mode halfway).
pub fn kernel_mode() -> KernelMode {
    static MODE: OnceLock<KernelMode> = OnceLock::new();
    *MODE.get_or_init(|| {
        let raw = std::env::var(EXACT_ENV).ok();
        let mode = mode_from_env(raw.as_deref());
        let why = match mode {
            KernelMode::Fast => format!(
                "fastest kernels for this CPU; {EXACT_ENV}=1 gives upstream-identical results"
            ),
            KernelMode::Exact => "upstream's portable x86 build reproduced bit for bit".to_string(),
        };
        crate::log_info!(
            "CPU kernels: ISA level {}, {} mode ({why})",
            isa_level(),
            mode.name()
        );
        mode
    })
}

/// Whether this process runs the fast kernels.
pub fn fast() -> bool {
    kernel_mode() == KernelMode::Fast
}

/// The best instruction set the CPU kernels use here: "avx2" (AVX2 + FMA + F16C) or
/// "scalar".
pub fn isa_level() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    if super::x86::available() {
        return "avx2";
    }
    "scalar"
}

/// One line for `llama_print_system_info`: `ISA = avx2 | KERNELS = fast | ` and the x86
/// features the CPU reports (1 or 0), in upstream's `NAME = value | ` form.
pub fn system_info() -> String {
    let mut s = format!(
        "ISA = {} | KERNELS = {} | ",
        isa_level(),
        kernel_mode().name()
    );
    #[cfg(target_arch = "x86_64")]
    {
        let flags = [
            ("AVX", std::arch::is_x86_feature_detected!("avx")),
            ("AVX2", std::arch::is_x86_feature_detected!("avx2")),
            ("F16C", std::arch::is_x86_feature_detected!("f16c")),
            ("FMA", std::arch::is_x86_feature_detected!("fma")),
            ("AVX512", std::arch::is_x86_feature_detected!("avx512f")),
            (
                "AVX512_VNNI",
                std::arch::is_x86_feature_detected!("avx512vnni"),
            ),
            (
                "AVX512_BF16",
                std::arch::is_x86_feature_detected!("avx512bf16"),
            ),
            ("AVX_VNNI", std::arch::is_x86_feature_detected!("avxvnni")),
        ];
        for (name, on) in flags {
            s.push_str(&format!("{name} = {} | ", u8::from(on)));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_switch_reads_as_documented() {
        for v in [
            None,
            Some(""),
            Some("0"),
            Some("false"),
            Some("No"),
            Some(" off "),
        ] {
            assert_eq!(mode_from_env(v), KernelMode::Fast, "{v:?}");
        }
        for v in [Some("1"), Some("true"), Some("yes"), Some("2")] {
            assert_eq!(mode_from_env(v), KernelMode::Exact, "{v:?}");
        }
    }

    #[test]
    fn system_info_names_the_level_and_the_mode() {
        let s = system_info();
        assert!(
            s.starts_with(&format!("ISA = {} | KERNELS = ", isa_level())),
            "{s}"
        );
        assert!(s.contains(kernel_mode().name()), "{s}");
    }
}
