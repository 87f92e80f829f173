//! Micro-benchmark of the CPU kernels: mat-vec (and a small batch) of a 14336 x 4096 weight
//! (llama-3-8B's FFN shape) per type, on 1 and 2 threads; median of several runs.
//!
//! cargo run --release --example bench_kernels [-- [--upstream LIBGGML_CPU] TYPE...]
//! cargo run --release --example bench_kernels -- pp [TYPE...]  (SmolLM2's batched products;
//! `pp1b`: the generated 1B llama's)
//! cargo run --release --example bench_kernels -- ppk  (repacked Q4_K products of 128 rows in
//! SmolLM2's ffn_down and the 1B llama's shapes, in the process's kernel mode: run it with
//! `LLAMA_HOTSWAP_EXACT=1` and without to compare the modes)
//! cargo run --release --example bench_kernels -- hint [TYPE...]  (mat-vecs with the weight
//! prefetch hint off and on)
//! (types by ggml name: q4_0 f16 ...). With `--upstream` (upstream's libggml-cpu.so), also
//! times upstream's own `vec_dot` on the same bytes, one thread, in the same process,
//! interleaved with ours, so the machine's noise hits both alike.

use std::time::Instant;

use llama::gguf::GgmlType;
use llama::kernels::cpu::{self, Scratch, ThreadPool};

/// CPU time of the calling thread (not wall time: the build machine is shared and loaded, and
/// a one-thread comparison should not count time spent descheduled).
fn thread_cpu_ms() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 * 1e3 + ts.tv_nsec as f64 * 1e-6
}

/// `len` bytes of a fixed varied pattern (weights whose scale fields the caller then fixes).
fn byte_pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 % 251) as u8).collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// Upstream's CPU type traits, looked up with dlopen (example only: the library itself never
/// loads upstream).
#[repr(C)]
struct TypeTraitsCpu {
    from_float: Option<unsafe extern "C" fn(*const f32, *mut u8, i64)>,
    vec_dot:
        Option<unsafe extern "C" fn(i32, *mut f32, usize, *const u8, usize, *const u8, usize, i32)>,
    vec_dot_type: i32,
    nrows: i64,
}

struct Upstream {
    traits: unsafe extern "C" fn(i32) -> *const TypeTraitsCpu,
}

impl Upstream {
    fn open(path: &str) -> Upstream {
        let c = std::ffi::CString::new(path).unwrap();
        // SAFETY: dlopen/dlsym with valid C strings; the symbols are upstream's exported
        // `void ggml_cpu_init(void)` and `const struct ggml_type_traits_cpu *
        // ggml_get_type_traits_cpu(enum ggml_type)`, whose C signatures the types match.
        unsafe {
            let h = libc::dlopen(c.as_ptr(), libc::RTLD_NOW);
            assert!(!h.is_null(), "dlopen {path} failed");
            let init = libc::dlsym(h, c"ggml_cpu_init".as_ptr());
            let traits = libc::dlsym(h, c"ggml_get_type_traits_cpu".as_ptr());
            assert!(
                !init.is_null() && !traits.is_null(),
                "symbols missing in {path}"
            );
            std::mem::transmute::<*mut libc::c_void, unsafe extern "C" fn()>(init)();
            Upstream {
                traits: std::mem::transmute::<
                    *mut libc::c_void,
                    unsafe extern "C" fn(i32) -> *const TypeTraitsCpu,
                >(traits),
            }
        }
    }

    /// Upstream's from_float (of the vec_dot type) then vec_dot over every row, one thread;
    /// returns ms, and writes results to `out`.
    fn mat_vec(
        &self,
        t: GgmlType,
        w: &[u8],
        n_rows: usize,
        k: usize,
        x: &[f32],
        out: &mut [f32],
    ) -> f64 {
        let row = cpu::row_bytes(t, k);
        let vt = cpu::vec_dot_type(t);
        let mut xq = vec![0u8; cpu::row_bytes(vt, k) + 64];
        let start = thread_cpu_ms();
        // SAFETY: the table entries are upstream's kernels for these types; buffers hold the
        // bytes they read/write (`w` n_rows rows, `xq` one converted row, `out` n_rows floats).
        unsafe {
            let tt = &*(self.traits)(t.id() as i32);
            let vtt = &*(self.traits)(vt.id() as i32);
            if vt == GgmlType::F32 {
                std::ptr::copy_nonoverlapping(x.as_ptr().cast::<u8>(), xq.as_mut_ptr(), 4 * k);
            } else {
                (vtt.from_float.unwrap())(x.as_ptr(), xq.as_mut_ptr(), k as i64);
            }
            let dot = tt.vec_dot.unwrap();
            for (i, o) in out.iter_mut().enumerate().take(n_rows) {
                dot(
                    k as i32,
                    o,
                    0,
                    w.as_ptr().add(i * row),
                    0,
                    xq.as_ptr(),
                    0,
                    1,
                );
            }
        }
        thread_cpu_ms() - start
    }
}

/// SmolLM2-135M's mat-vec shapes (Q4_1 layers, Q8_0 output): per-call time at 1 and 2
/// threads, where pool wake-up and chunking overheads show.
fn small_shapes() {
    let x: Vec<f32> = (0..128 * 576)
        .map(|i| (i % 101) as f32 / 50.0 - 1.0)
        .collect();
    for vt in [
        GgmlType::Q8_0,
        GgmlType::Q8_1,
        GgmlType::Q8_K,
        GgmlType::F16,
    ] {
        let k = if vt == GgmlType::Q8_K { 512 } else { 576 };
        let row = cpu::row_bytes(vt, k);
        let mut out = vec![0u8; row * 128];
        let mut times = Vec::new();
        for _ in 0..51 {
            let start = Instant::now();
            for j in 0..128 {
                cpu::quantize_row(vt, &x[j * k..(j + 1) * k], &mut out[j * row..(j + 1) * row]);
            }
            times.push(start.elapsed().as_secs_f64() * 1e6);
        }
        println!(
            "activation conversion to {vt}: 128 rows of {k}: {:.1} us",
            median(times)
        );
    }
    println!("small mat-vecs (SmolLM2-135M shapes), microseconds per call, median of 201:");
    for (t, n_rows, k) in [
        (GgmlType::Q4_1, 576usize, 576usize),
        (GgmlType::Q4_1, 1536, 576),
        (GgmlType::Q4_1, 576, 1536),
        (GgmlType::Q8_0, 49152, 576),
    ] {
        let row = cpu::row_bytes(t, k);
        let mut w = byte_pattern(n_rows * row);
        for block in w.chunks_exact_mut(t.type_size() as usize) {
            block[0..2].copy_from_slice(&half::f16::from_f32(0.01).to_bits().to_le_bytes());
        }
        let x: Vec<f32> = (0..k).map(|i| (i % 13) as f32 / 13.0 - 0.5).collect();
        let mut dst = vec![0f32; n_rows];
        let mut scratch = Scratch::new();
        let mut line = format!("  {:<5} {n_rows:>6} x {k:<5}", t.name());
        for threads in [1, 2] {
            let pool = ThreadPool::new(threads);
            let mut times = Vec::new();
            for _ in 0..201 {
                let start = Instant::now();
                cpu::mul_mat(t, &w, n_rows, k, &x, 1, &mut dst, &pool, &mut scratch);
                times.push(start.elapsed().as_secs_f64() * 1e6);
            }
            line += &format!("  {threads} th {:>8.1}", median(times));
        }
        println!("{line}");
    }
}

/// The mat-vec weight prefetch hint on vs off: products over ~300 MB of weights (more than
/// any cache, as a decode streams a model), in the generated 1B llama's FFN shape and
/// SmolLM2-135M's, at 1 and 2 threads; 15 rounds, each timing both in turn (wall clock), the
/// median of the per-round ratios.
fn prefetch_hint(filter: &[String]) {
    const ROUNDS: usize = 15;
    const BYTES: usize = 300 << 20;
    println!("mat-vec, weights streamed from memory: GB/s hint off -> on (median of {ROUNDS}), median per-round ratio");
    for t in [
        GgmlType::F16,
        GgmlType::Q8_0,
        GgmlType::Q6_K,
        GgmlType::Q4_1,
    ] {
        if !filter.is_empty() && !filter.iter().any(|f| f.eq_ignore_ascii_case(t.name())) {
            continue;
        }
        for (n_rows, k) in [(5632usize, 2048usize), (1536, 576)] {
            if k as u64 % t.block_size() != 0 {
                continue;
            }
            let row = cpu::row_bytes(t, k);
            let n_mat = BYTES / (n_rows * row);
            let mut w = byte_pattern(n_mat * n_rows * row);
            // small finite values for every f16 (the float types' elements, the quantized
            // types' scales: any pattern of this byte pair is a small normal f16)
            for pair in w.chunks_exact_mut(2) {
                pair[1] = 0x11;
            }
            let x: Vec<f32> = (0..k).map(|i| (i % 13) as f32 / 13.0 - 0.5).collect();
            let mut dst = vec![0f32; n_rows];
            let mut scratch = Scratch::new();
            for threads in [1, 2] {
                let pool = ThreadPool::new(threads);
                let mut pass = |on: bool| {
                    cpu::set_weight_prefetch(on);
                    let start = Instant::now();
                    for m in 0..n_mat {
                        let wm = &w[m * n_rows * row..(m + 1) * n_rows * row];
                        cpu::mul_mat(t, wm, n_rows, k, &x, 1, &mut dst, &pool, &mut scratch);
                    }
                    w.len() as f64 / start.elapsed().as_secs_f64() / 1e9
                };
                let (mut off, mut on, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
                for _ in 0..ROUNDS {
                    let (a, b) = (pass(false), pass(true));
                    off.push(a);
                    on.push(b);
                    ratios.push(b / a);
                }
                println!(
                    "  {:<5} {n_rows:>5} x {k:<5} {threads} th: {:>6.2} -> {:>6.2} GB/s  x{:.3}",
                    t.name(),
                    median(off),
                    median(on),
                    median(ratios)
                );
            }
        }
    }
    cpu::set_weight_prefetch(true);
}

/// Prompt-processing products (a batch of 128 activation rows over `shapes`) per weight type,
/// one thread, CPU time of the calling thread, median of 31: the batched (tile) kernels.
fn prompt_shapes(filter: &[String], upstream: Option<&str>, shapes: &[(usize, usize)]) {
    const REPS: usize = 31;
    // upstream's llamafile_sgemm (tinyBLAS), for Q8_0 only: its Q0 path needs no thread pool
    type Sgemm = unsafe extern "C" fn(
        *const SgemmParams,
        i64,
        i64,
        i64,
        *const u8,
        i64,
        *const u8,
        i64,
        *mut f32,
        i64,
        i32,
        i32,
        i32,
    ) -> bool;
    #[repr(C)]
    struct SgemmParams {
        ith: i32,
        nth: i32,
        wsize: usize,
        wdata: *mut u8,
        threadpool: *mut u8,
        use_ref: bool,
    }
    let sgemm: Option<Sgemm> = upstream.map(|path| {
        let c = std::ffi::CString::new(path).unwrap();
        // SAFETY: dlopen/dlsym with valid C strings; `llamafile_sgemm` is upstream's exported
        // function with the C signature of `Sgemm` (ggml-cpu/llamafile/sgemm.h).
        unsafe {
            let h = libc::dlopen(c.as_ptr(), libc::RTLD_NOW);
            assert!(!h.is_null(), "dlopen {path} failed");
            let f = libc::dlsym(h, c"llamafile_sgemm".as_ptr());
            assert!(!f.is_null(), "llamafile_sgemm missing in {path}");
            std::mem::transmute::<*mut libc::c_void, Sgemm>(f)
        }
    });
    let pool = ThreadPool::new(1);
    let m = 128usize;
    println!("batched products, {m} activation rows, 1 thread, ms (CPU time), median of {REPS}:");
    for t in [
        GgmlType::Q8_0,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::Q4_1,
        GgmlType::Q5_1,
        GgmlType::Q4_0,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::IQ4_XS,
    ] {
        if !filter.is_empty() && !filter.iter().any(|f| f.eq_ignore_ascii_case(t.name())) {
            continue;
        }
        // the K-quants only where the rows are whole super-blocks (not SmolLM2's 576)
        if shapes.iter().any(|&(_, k)| k as u64 % t.block_size() != 0) {
            continue;
        }
        let mut line = format!("  {:<6}", t.name());
        let mut total = 0.0;
        for &(n_rows, k) in shapes {
            let row = cpu::row_bytes(t, k);
            let mut w = byte_pattern(n_rows * row);
            if t.is_quantized() {
                // every f16 field a small normal number
                let f16_fields: &[usize] = match t {
                    GgmlType::Q4_1 | GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
                    GgmlType::Q6_K => &[208],
                    _ => &[0],
                };
                for block in w.chunks_exact_mut(t.type_size() as usize) {
                    for &at in f16_fields {
                        let v = half::f16::from_f32(0.01).to_bits().to_le_bytes();
                        block[at..at + 2].copy_from_slice(&v);
                    }
                }
            } else {
                for c in w.chunks_exact_mut(2) {
                    let v = (c[0] % 100) as f32 / 100.0 - 0.5;
                    let bits = if t == GgmlType::BF16 {
                        half::bf16::from_f32(v).to_bits()
                    } else {
                        half::f16::from_f32(v).to_bits()
                    };
                    c.copy_from_slice(&bits.to_le_bytes());
                }
            }
            let x: Vec<f32> = (0..m * k).map(|i| (i % 13) as f32 / 13.0 - 0.5).collect();
            let mut dst = vec![0f32; n_rows * m];
            let mut scratch = Scratch::new();
            let ours = |dst: &mut Vec<f32>, scratch: &mut Scratch| {
                let start = thread_cpu_ms();
                cpu::mul_mat(t, &w, n_rows, k, &x, m, dst, &pool, scratch);
                thread_cpu_ms() - start
            };
            let Some(sgemm) = sgemm.filter(|_| t == GgmlType::Q8_0) else {
                let times: Vec<f64> = (0..REPS).map(|_| ours(&mut dst, &mut scratch)).collect();
                let ms = median(times);
                total += ms;
                line += &format!("  {n_rows}x{k} {ms:>7.3}");
                continue;
            };
            // upstream's product is timed with its activations quantized first, as ggml does
            // before calling it (ours includes that step). The two alternate, one run each per
            // repetition, so a machine whose speed drifts (shared cores) slows both alike; the
            // median of the per-repetition ratios is the figure to compare.
            let mut xq = vec![0u8; row * m];
            let params = SgemmParams {
                ith: 0,
                nth: 1,
                wsize: 0,
                wdata: std::ptr::null_mut(),
                threadpool: std::ptr::null_mut(),
                use_ref: false,
            };
            let (nbk, q8_0) = ((k / 32) as i64, t.id() as i32);
            let mut theirs = vec![0f32; n_rows * m];
            let (mut mine, mut upstream, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
            for _ in 0..REPS {
                let a = ours(&mut dst, &mut scratch);
                let start = thread_cpu_ms();
                for j in 0..m {
                    let at = j * row..(j + 1) * row;
                    cpu::quantize_row(t, &x[j * k..(j + 1) * k], &mut xq[at]);
                }
                // SAFETY: upstream's sgemm on Q8_0 weights (n_rows rows of k/32 blocks) and
                // Q8_0 activations (m rows), writing n_rows x m floats into `theirs`.
                let ok = unsafe {
                    sgemm(
                        &params,
                        n_rows as i64,
                        m as i64,
                        nbk,
                        w.as_ptr(),
                        nbk,
                        xq.as_ptr(),
                        nbk,
                        theirs.as_mut_ptr(),
                        n_rows as i64,
                        q8_0,
                        q8_0,
                        0,
                    )
                };
                let b = thread_cpu_ms() - start;
                assert!(ok, "llamafile_sgemm declined");
                mine.push(a);
                upstream.push(b);
                ratios.push(a / b);
            }
            let ms = median(mine);
            total += ms;
            let same = theirs
                .iter()
                .zip(&dst)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            line += &format!(
                "  {n_rows}x{k} {ms:>7.3} (upstream {:.3}, ratio {:.3}{})",
                median(upstream),
                median(ratios),
                if same { "" } else { " DIFFERS" }
            );
        }
        println!("{line}  sum {total:.3}");
    }
}

/// Repacked Q4_K weights (as loads make them) times 128 activation rows, 1 thread, CPU time,
/// median of 15, per shape, in this process's kernel mode.
fn repacked_q4_k_shapes() {
    let pool = ThreadPool::new(1);
    let m = 128usize;
    let shapes = [
        (576usize, 1536usize),
        (2048, 2048),
        (5632, 2048),
        (2048, 5632),
    ];
    let mut line = format!(
        "Q4_K repacked, {} mode, {m} rows, 1 thread, ms:",
        cpu::kernel_mode().name()
    );
    let mut total = 0.0;
    for (n_rows, k) in shapes {
        let t = GgmlType::Q4_K;
        let mut w = byte_pattern(n_rows * cpu::row_bytes(t, k));
        for block in w.chunks_exact_mut(t.type_size() as usize) {
            block[0..2].copy_from_slice(&half::f16::from_f32(0.01).to_bits().to_le_bytes());
            block[2..4].copy_from_slice(&half::f16::from_f32(0.002).to_bits().to_le_bytes());
        }
        let rp = cpu::repack::repack(cpu::RepackKind::Q4Kx8, t, &w, n_rows, k);
        let x: Vec<f32> = (0..m * k).map(|i| (i % 13) as f32 / 13.0 - 0.5).collect();
        let mut dst = vec![0f32; n_rows * m];
        let mut scratch = Scratch::new();
        let times: Vec<f64> = (0..15)
            .map(|_| {
                let start = thread_cpu_ms();
                cpu::repack::mul_mat_repacked(&rp, &x, m, &mut dst, n_rows, 0, &pool, &mut scratch);
                thread_cpu_ms() - start
            })
            .collect();
        let ms = median(times);
        total += ms;
        line += &format!("  {n_rows}x{k} {ms:.3}");
    }
    println!("{line}  sum {total:.3}");
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut args_upstream_path = None;
    let upstream = args.iter().position(|a| a == "--upstream").map(|i| {
        let path = args.remove(i + 1);
        args.remove(i);
        let up = Upstream::open(&path);
        args_upstream_path = Some(path);
        up
    });
    let filter = args;
    if filter.first().is_some_and(|f| f == "pp" || f == "pp1b") {
        let lib = args_upstream_path.as_deref();
        let shapes: &[(usize, usize)] = if filter[0] == "pp1b" {
            // the generated 1B llama of `make bench-decode`: attention, K/V, FFN up, FFN down
            &[(2048, 2048), (256, 2048), (5632, 2048), (2048, 5632)]
        } else {
            // SmolLM2-135M
            &[(576, 576), (192, 576), (1536, 576), (576, 1536)]
        };
        prompt_shapes(&filter[1..], lib, shapes);
        return;
    }
    if filter.first().is_some_and(|f| f == "ppk") {
        repacked_q4_k_shapes();
        return;
    }
    if filter.first().is_some_and(|f| f == "hint") {
        prefetch_hint(&filter[1..]);
        return;
    }
    if filter.iter().any(|f| f == "small") {
        small_shapes();
        return;
    }
    let (n_rows, k) = (14336usize, 4096usize);
    println!("SIMD: {}; weight {n_rows} x {k}", cpu::simd_level());
    println!(
        "{:<8} {:>10} {:>10} {:>12} {:>12}",
        "type", "mv 1th ms", "mv 2th ms", "GB/s (2th)", "b8 2th ms"
    );
    let mut seed = 0x1234_5678u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for t in cpu::SUPPORTED {
        if !filter.is_empty() && !filter.iter().any(|f| f.eq_ignore_ascii_case(t.name())) {
            continue;
        }
        let row = cpu::row_bytes(t, k);
        let mut w: Vec<u8> = (0..n_rows * row).map(|_| next() as u8).collect();
        // Finite scales: the f16 scale fields of each block get small values.
        let f16_fields: &[usize] = match t {
            GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
            GgmlType::Q2_K => &[80, 82],
            GgmlType::Q3_K => &[108],
            GgmlType::Q6_K => &[208],
            GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => &[],
            _ => &[0],
        };
        if t.is_quantized() {
            for block in w.chunks_exact_mut(t.type_size() as usize) {
                for &at in f16_fields {
                    let v = half::f16::from_f32((next() % 1000) as f32 * 1e-5 - 0.005);
                    block[at..at + 2].copy_from_slice(&v.to_bits().to_le_bytes());
                }
            }
        } else if t == GgmlType::F32 {
            for c in w.chunks_exact_mut(4) {
                c.copy_from_slice(&((next() % 1000) as f32 / 1000.0 - 0.5).to_le_bytes());
            }
        } else {
            for c in w.chunks_exact_mut(2) {
                let v = (next() % 1000) as f32 / 1000.0 - 0.5;
                let bits = if t == GgmlType::F16 {
                    half::f16::from_f32(v).to_bits()
                } else {
                    half::bf16::from_f32(v).to_bits()
                };
                c.copy_from_slice(&bits.to_le_bytes());
            }
        }
        let x: Vec<f32> = (0..8 * k)
            .map(|_| (next() % 2000) as f32 / 1000.0 - 1.0)
            .collect();
        let mut dst = vec![0f32; n_rows * 8];
        let mut scratch = Scratch::new();
        let mut results = Vec::new();
        for (threads, m) in [(1, 1), (2, 1), (2, 8)] {
            let pool = ThreadPool::new(threads);
            let mut times = Vec::new();
            for _ in 0..9 {
                let start = Instant::now();
                cpu::mul_mat(t, &w, n_rows, k, &x, m, &mut dst, &pool, &mut scratch);
                times.push(start.elapsed().as_secs_f64() * 1e3);
            }
            results.push(median(times));
        }
        let gbs = (n_rows * row) as f64 / (results[1] * 1e-3) / 1e9;
        let mut theirs = String::from("-");
        if let Some(up) = &upstream {
            // Interleaved: ours (1 thread) and theirs alternately, medians of each.
            let pool = ThreadPool::new(1);
            let mut out = vec![0f32; n_rows];
            let (mut a, mut b) = (Vec::new(), Vec::new());
            for _ in 0..9 {
                let start = thread_cpu_ms();
                cpu::mul_mat(t, &w, n_rows, k, &x, 1, &mut dst, &pool, &mut scratch);
                a.push(thread_cpu_ms() - start);
                b.push(up.mat_vec(t, &w, n_rows, k, &x, &mut out));
            }
            let (ours, up_ms) = (median(a), median(b));
            let max_rel = out
                .iter()
                .zip(&dst)
                .map(|(u, o)| ((u - o).abs() / u.abs().max(1e-3)) as f64)
                .fold(0.0, f64::max);
            theirs = format!(
                "{up_ms:.2} (ours {ours:.2}, x{:.2}; max rel diff {max_rel:.1e})",
                up_ms / ours
            );
        }
        println!(
            "{:<8} {:>10.2} {:>10.2} {:>12.1} {:>12.2} {}",
            t.name(),
            results[0],
            results[1],
            gbs,
            results[2],
            theirs
        );
    }
}
