//! The CUDA kernels compile: every kernel of `src/kernels/cuda/kernels.cu` goes through NVRTC
//! (no GPU needed) to PTX for sm_80 and sm_90 with an entry of its name, and a broken source
//! gives NVRTC's log. `make test-cuda-mock` points `LLAMA_HOTSWAP_NVRTC` at the NVRTC of PyPI's
//! `nvidia-cuda-nvrtc-cu12` (scripts/setup-venv.sh) and sets `LLAMA_HOTSWAP_REQUIRE_NVRTC=1`,
//! so CI fails rather than skips; elsewhere a missing NVRTC skips with the reason.

use llama::device::cuda;
use llama::kernels::cuda::{KERNELS, SOURCE};

fn nvrtc_or_skip() -> bool {
    match cuda::nvrtc_version() {
        Ok((version, path)) => {
            eprintln!("NVRTC {version} ({path})");
            true
        }
        Err(reason) => {
            assert!(
                std::env::var("LLAMA_HOTSWAP_REQUIRE_NVRTC").map_or(true, |v| v != "1"),
                "NVRTC required: {reason}"
            );
            eprintln!("skipping: {reason}");
            false
        }
    }
}

#[test]
fn every_kernel_compiles_to_ptx_for_sm80_and_sm90() {
    if !nvrtc_or_skip() {
        return;
    }
    for arch in [80, 90] {
        let ptx = cuda::compile_ptx(SOURCE, "kernels.cu", arch).unwrap();
        assert!(ptx.contains(&format!(".target sm_{arch}")), "sm_{arch}");
        for k in KERNELS {
            assert!(
                ptx.contains(&format!(".entry {k}(")),
                "sm_{arch}: no entry for {k}"
            );
        }
        // reproducible by construction: no atomics anywhere
        assert!(!ptx.contains("atom."), "sm_{arch}: an atomic in the PTX");
    }
}

#[test]
fn a_broken_kernel_reports_nvrtc_log() {
    if !nvrtc_or_skip() {
        return;
    }
    let err = cuda::compile_ptx(
        "extern \"C\" __global__ void f(float *x) { x[0] = undefined_name; }",
        "broken.cu",
        80,
    )
    .unwrap_err();
    assert!(
        err.contains("broken.cu") && err.contains("undefined_name"),
        "{err}"
    );
}

#[test]
fn ptx_is_cached_per_source_version_and_architecture() {
    if !nvrtc_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::env::set_var("LLAMA_HOTSWAP_CACHE", dir.path());
    let first = llama::kernels::cuda::ptx(80).unwrap();
    let files: Vec<_> = std::fs::read_dir(dir.path().join("ptx")).unwrap().collect();
    assert_eq!(files.len(), 1, "one cached PTX file");
    let name = files[0]
        .as_ref()
        .unwrap()
        .file_name()
        .into_string()
        .unwrap();
    assert!(name.contains("sm80") && name.contains("nvrtc"), "{name}");
    // the cached copy is what a second call returns
    std::fs::write(
        files[0].as_ref().unwrap().path(),
        format!("{first}\n// cached"),
    )
    .unwrap();
    assert!(llama::kernels::cuda::ptx(80)
        .unwrap()
        .ends_with("// cached"));
    std::env::remove_var("LLAMA_HOTSWAP_CACHE");
}

/// A host build of `quant.cuh` (the same text NVRTC compiles): reads `ty k m`, m rows of k f32
/// activations and one weight row of type ty from stdin; writes the quantized activations, then
/// the dot of the weight row with each quantized row (blocks summed in order) as f32.
const HARNESS: &str = r#"
#include "quant.cuh"
#include <stdio.h>
#include <stdlib.h>
int main(void) {
    int ty, k, m;
    if (fread(&ty, 4, 1, stdin) != 1 || fread(&k, 4, 1, stdin) != 1 || fread(&m, 4, 1, stdin) != 1) return 2;
    int kind = act_kind(ty), nb = k / block_values(ty), qb = q8_block_bytes(ty), wb = weight_block_bytes(ty);
    float *x = (float *)malloc(sizeof(float) * k * m);
    u8 *xq = (u8 *)malloc((size_t)qb * nb * m);
    u8 *w = (u8 *)malloc((size_t)wb * nb);
    if (fread(x, 4, (size_t)k * m, stdin) != (size_t)k * m || fread(w, 1, (size_t)wb * nb, stdin) != (size_t)wb * nb) return 3;
    for (int i = 0; i < nb * m; i++) quantize_act_block(x + (size_t)i * block_values(ty), xq + (size_t)i * qb, kind);
    fwrite(xq, 1, (size_t)qb * nb * m, stdout);
    for (int r = 0; r < m; r++) {
        float s = 0.0f;
        for (int ib = 0; ib < nb; ib++) s += block_dot_q8(w, ty, ib, xq + (size_t)r * nb * qb);
        fwrite(&s, 4, 1, stdout);
    }
    for (int i = 0; i < k; i++) {
        float v = deq(w, ty, i);
        fwrite(&v, 4, 1, stdout);
    }
    return 0;
}
"#;

/// A small deterministic generator (xorshift64*), no dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }
}

/// Activations with the cases that decide rounding: random rows at several scales, an
/// all-zero block, and a block whose multiplier is exactly 1 with values on .5 ties.
fn activations(rng: &mut Rng, k: usize, m: usize) -> Vec<f32> {
    let mut x: Vec<f32> = (0..k * m)
        .map(|i| rng.unit() * [1.0f32, 0.01, 37.0, 1e-6][(i / k) % 4])
        .collect();
    x[..32].fill(0.0);
    let ties: Vec<f32> = (0..32)
        .map(|j| {
            if j == 0 {
                127.0
            } else {
                (j as f32 - 16.0) + 0.5
            }
        })
        .collect();
    x[32..64].copy_from_slice(&ties);
    x
}

/// Random bytes for a row of k values of type ty, with small finite f16 scales where the type
/// keeps them (any byte pattern is a valid quant).
fn weight_row(rng: &mut Rng, ty: llama::gguf::GgmlType, k: usize) -> Vec<u8> {
    use llama::gguf::GgmlType as T;
    // block bytes, values per block, byte offsets of the f16 scales
    let (block, values, scales): (usize, usize, &[usize]) = match ty {
        T::Q4_0 => (18, 32, &[0]),
        T::Q4_1 => (20, 32, &[0, 2]),
        T::Q5_0 => (22, 32, &[0]),
        T::Q5_1 => (24, 32, &[0, 2]),
        T::Q8_0 => (34, 32, &[0]),
        T::IQ4_NL => (18, 32, &[0]),
        T::Q2_K => (84, 256, &[80, 82]),
        T::Q3_K => (110, 256, &[108]),
        T::IQ4_XS => (136, 256, &[0]),
        T::Q4_K => (144, 256, &[0, 2]),
        T::Q5_K => (176, 256, &[0, 2]),
        T::Q6_K => (210, 256, &[208]),
        _ => unreachable!("no test row for {ty}"),
    };
    let mut w: Vec<u8> = (0..block * k / values).map(|_| rng.next() as u8).collect();
    for b in w.chunks_exact_mut(block) {
        for &at in scales {
            let v = half::f16::from_f32(rng.unit() * 0.05);
            b[at..at + 2].copy_from_slice(&v.to_bits().to_le_bytes());
        }
    }
    w
}

#[test]
fn host_build_of_the_gpu_quantizer_gives_the_cpu_engines_bytes() {
    use llama::gguf::GgmlType as T;
    use llama::kernels::cpu;
    use std::io::Write;
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("quant.cuh"),
        llama::kernels::cuda::QUANT_SOURCE,
    )
    .unwrap();
    std::fs::write(dir.path().join("harness.cpp"), HARNESS).unwrap();
    let exe = dir.path().join("harness");
    let built = match std::process::Command::new(&cxx)
        .args(["-O2", "-ffp-contract=off", "-o"])
        .arg(&exe)
        .arg(dir.path().join("harness.cpp"))
        .current_dir(dir.path())
        .status()
    {
        Ok(s) => s,
        Err(e) => {
            eprintln!("skipping: no C++ compiler ({cxx}: {e})");
            return;
        }
    };
    assert!(built.success(), "{cxx} could not compile quant.cuh");
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (k, m) = (512usize, 8usize);
    for ty in [
        T::Q4_0,
        T::Q4_1,
        T::Q5_0,
        T::Q5_1,
        T::Q8_0,
        T::Q4_K,
        T::Q5_K,
        T::Q6_K,
    ] {
        let x = activations(&mut rng, k, m);
        let w = weight_row(&mut rng, ty, k);
        let mut input = Vec::new();
        for v in [ty.id() as i32, k as i32, m as i32] {
            input.extend_from_slice(&v.to_le_bytes());
        }
        input.extend(x.iter().flat_map(|v| v.to_le_bytes()));
        input.extend_from_slice(&w);
        let mut child = std::process::Command::new(&exe)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(&input).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{ty}: harness failed");
        let vt = cpu::vec_dot_type(ty);
        let rb = cpu::row_bytes(vt, k);
        assert_eq!(
            out.stdout.len(),
            m * rb + 4 * m + 4 * k,
            "{ty}: output size"
        );
        let dot = cpu::dot_fn(ty);
        for r in 0..m {
            let mut cpu_q = vec![0u8; rb];
            cpu::quantize_row(vt, &x[r * k..(r + 1) * k], &mut cpu_q);
            assert_eq!(
                &out.stdout[r * rb..(r + 1) * rb],
                &cpu_q[..],
                "{ty}: row {r} quantized to other bytes than the CPU's {vt}"
            );
            let at = m * rb + 4 * r;
            let gpu = f32::from_le_bytes(out.stdout[at..at + 4].try_into().unwrap());
            let want = dot(k, &w, &cpu_q);
            // float order across blocks may differ: bound by the blocks' magnitudes
            let values = ty.block_size() as usize;
            let nb = k / values;
            let (wb, qb) = (w.len() / nb, rb / nb);
            let mag: f32 = (0..nb)
                .map(|b| {
                    dot(
                        values,
                        &w[b * wb..(b + 1) * wb],
                        &cpu_q[b * qb..(b + 1) * qb],
                    )
                    .abs()
                })
                .sum();
            let tol = 1e-5 * mag + 1e-30;
            assert!(
                (gpu - want).abs() <= tol,
                "{ty}: row {r}: block dot {gpu} vs the CPU's {want}"
            );
        }
        // GET_ROWS' dequantization: the CPU's values (up to the GPU's fused multiply-adds)
        let mut cpu_w = vec![0f32; k];
        cpu::dequantize_row(ty, &w, &mut cpu_w);
        let at = m * rb + 4 * m;
        for (i, want) in cpu_w.iter().enumerate() {
            let b = &out.stdout[at + 4 * i..at + 4 * i + 4];
            let got = f32::from_le_bytes(b.try_into().unwrap());
            assert!(
                got == *want,
                "{ty}: value {i} dequantized to {got}, the CPU's {want}"
            );
        }
    }
}
