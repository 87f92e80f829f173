//! Upload bandwidth to the first CUDA device (`make bench-upload`; a benchmark, not a test).
//!
//! For a 1 GiB buffer it times `CudaBuffer::fill_from_file` from a page-cached file (pread into
//! the pinned staging ring, asynchronous copies) against a raw copy of the same bytes already in
//! page-locked memory (`write_pinned`, one `cuMemcpyHtoD`), median of 5 runs each (after one
//! warm-up run each, runs interleaved), and prints both speeds and their ratio (goal: at least
//! 80%). Checks once that the uploaded bytes are the file's. Without a usable GPU it prints why
//! and exits 0.
//!
//! Then it times the host's floor (the file read into page-locked memory by as many threads
//! as the ring has, nothing copied to the device), a write of the same bytes from pageable
//! memory and a read back into it (both staged through the ring) and, with
//! `BENCH_UPLOAD_MODEL` set (as `make bench-upload` does), the load of a generated ~1 GiB
//! F16 model with every layer on the GPU, per load mode.
//!
//! Environment: `BENCH_UPLOAD_MIB` (buffer size, default 1024), `BENCH_UPLOAD_RUNS` (default
//! 5), `BENCH_UPLOAD_DIR` (where the temporary files go; default the system temp directory),
//! `BENCH_UPLOAD_MODEL` (also time model loads).

use std::io::Write;
use std::os::unix::fs::FileExt;
use std::time::Instant;

use llama::device::cuda;

const MIB: usize = 1 << 20;

fn env_usize(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(text) => text.trim().parse().unwrap_or_else(|_| {
            eprintln!("bench-upload: {name}={text:?} is not a number");
            std::process::exit(2);
        }),
        Err(_) => default,
    }
}

fn median(mut seconds: Vec<f64>) -> f64 {
    seconds.sort_by(f64::total_cmp);
    seconds[seconds.len() / 2]
}

/// Seconds of each of `runs` calls of `f`; what a call returns is dropped after its time is
/// taken (a loaded model's teardown is not part of its load).
fn timed<T>(runs: usize, mut f: impl FnMut() -> T) -> Vec<f64> {
    (0..runs)
        .map(|_| {
            let start = Instant::now();
            let out = f();
            let seconds = start.elapsed().as_secs_f64();
            drop(out);
            seconds
        })
        .collect()
}

fn fail(what: &str, error: impl std::fmt::Display) -> ! {
    eprintln!("bench-upload: {what}: {error}");
    std::process::exit(1);
}

fn main() {
    if let Err(reason) = cuda::availability() {
        println!("bench-upload: skipping: {reason}");
        return;
    }
    let Some(device) = cuda::probe().into_iter().next() else {
        println!("bench-upload: skipping: no CUDA device");
        return;
    };
    let len = env_usize("BENCH_UPLOAD_MIB", 1024) * MIB;
    let runs = env_usize("BENCH_UPLOAD_RUNS", 5).max(1);
    let info = device.info();
    println!(
        "bench-upload: CUDA{} {} ({}), {} MiB, median of {runs} runs, {} host threads",
        info.ordinal,
        info.description,
        info.pci_bus_id.as_deref().unwrap_or("no PCI id"),
        len / MIB,
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );

    // The bytes, in page-locked memory (the raw copy's source) and in a file (written from
    // there, so it sits in the page cache).
    let mut pinned = device
        .alloc_pinned(len)
        .unwrap_or_else(|e| fail("alloc_pinned", e));
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for word in pinned.chunks_mut(8) {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        let bytes = state.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes();
        word.copy_from_slice(&bytes[..word.len()]);
    }
    let dir = std::env::var_os("BENCH_UPLOAD_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let mut file = tempfile::NamedTempFile::new_in(&dir)
        .unwrap_or_else(|e| fail(&format!("temporary file in {}", dir.display()), e));
    file.write_all(&pinned)
        .and_then(|()| file.flush())
        .unwrap_or_else(|e| fail("write the temporary file", e));
    let file = file.as_file();

    let mut buffer = device.alloc(len).unwrap_or_else(|e| fail("alloc", e));
    let fill = |buffer: &mut cuda::CudaBuffer| -> f64 {
        let start = Instant::now();
        buffer
            .fill_from_file(file, 0, 0, len)
            .unwrap_or_else(|e| fail("fill_from_file", e));
        start.elapsed().as_secs_f64()
    };
    let raw = |buffer: &mut cuda::CudaBuffer| -> f64 {
        let start = Instant::now();
        buffer
            .write_pinned(0, &pinned)
            .unwrap_or_else(|e| fail("write_pinned", e));
        start.elapsed().as_secs_f64()
    };

    // Warm-up (page cache, staging ring, driver paths), then a check that the upload is right.
    raw(&mut buffer);
    fill(&mut buffer);
    let mut back = vec![0u8; len];
    buffer
        .read(0, &mut back)
        .unwrap_or_else(|e| fail("read back", e));
    if back[..] != pinned[..] {
        let at = back.iter().zip(pinned.iter()).position(|(a, b)| a != b);
        fail(
            "check",
            format!("uploaded bytes differ from the file at {at:?}"),
        );
    }
    drop(back);

    let mut fill_times = Vec::with_capacity(runs);
    let mut raw_times = Vec::with_capacity(runs);
    for _ in 0..runs {
        fill_times.push(fill(&mut buffer));
        raw_times.push(raw(&mut buffer));
    }
    let gbps = |seconds: f64| len as f64 / seconds / 1e9;
    let fill_gbps = gbps(median(fill_times.clone()));
    let raw_gbps = gbps(median(raw_times.clone()));
    let list = |times: &[f64]| {
        times
            .iter()
            .map(|&t| format!("{:.1}", gbps(t)))
            .collect::<Vec<_>>()
            .join(" ")
    };
    println!(
        "fill_from_file (page-cached file): {fill_gbps:6.2} GB/s   runs: {}",
        list(&fill_times)
    );
    println!(
        "raw pinned host-to-device copy:    {raw_gbps:6.2} GB/s   runs: {}",
        list(&raw_times)
    );
    let ratio = fill_gbps / raw_gbps * 100.0;
    println!(
        "ratio: {ratio:.1}% of the raw copy (goal >= 80%: {})",
        if ratio >= 80.0 { "met" } else { "NOT met" }
    );

    // The host's own floor: the same file read into page-locked memory by as many threads as
    // the ring has, with no copy to the device. An upload through host memory cannot beat it.
    let threads = cuda::staging_buffers();
    let part_len = len.div_ceil(threads);
    let floor_times = timed(runs, || {
        std::thread::scope(|scope| {
            for (i, part) in pinned.chunks_mut(part_len).enumerate() {
                scope.spawn(move || {
                    file.read_exact_at(part, (i * part_len) as u64)
                        .unwrap_or_else(|e| fail("floor read", e))
                });
            }
        })
    });
    let versus_raw = |label: &str, times: &[f64]| {
        let speed = gbps(median(times.to_vec()));
        println!(
            "{label}: {speed:6.2} GB/s   runs: {}  ({:.1}% of the raw copy)",
            list(times),
            speed / raw_gbps * 100.0
        );
    };
    versus_raw(
        &format!("floor: pread into pinned memory, {threads} threads, no device copy"),
        &floor_times,
    );

    // A write from pageable host memory (a mapping, an arena, a vector), which the loader and
    // hot-swap use for bytes they already hold: staged through the same ring.
    let host: Vec<u8> = pinned.to_vec();
    let write_times = timed(runs, || {
        buffer
            .write(0, &host)
            .unwrap_or_else(|e| fail("write (pageable)", e))
    });
    versus_raw("write from pageable memory", &write_times);
    // And back: a read into pageable memory (hot-swap compares a GPU tensor's current bytes
    // with the candidate's this way).
    let mut back = vec![0u8; len];
    let read_times = timed(runs, || {
        buffer
            .read(0, &mut back)
            .unwrap_or_else(|e| fail("read (pageable)", e))
    });
    versus_raw("read into pageable memory", &read_times);
    drop((host, back, buffer, pinned));

    if std::env::var_os("BENCH_UPLOAD_MODEL").is_some() {
        model_load(&dir, runs);
    }
}

/// Loads a generated ~1 GiB F16 llama with every layer on the GPU (page-cached file), per load
/// mode, and prints the bytes that went to the GPU per second of `load`.
fn model_load(dir: &std::path::Path, runs: usize) {
    use llama::gguf::fixtures::{tiny_llama, TinyLlamaOpts};
    use llama::gguf::GgmlType;
    use llama::loader::{load, LoadOptions, ModelSource};
    use llama::model::LoadMode;

    let opts = TinyLlamaOpts {
        n_layer: 8,
        n_embd: 2048,
        n_head: 16,
        n_head_kv: 16,
        n_ff: 8192,
        ..TinyLlamaOpts::with_type(GgmlType::F16)
    };
    let path = dir.join(format!("bench-upload-{}.gguf", std::process::id()));
    tiny_llama(&opts)
        .and_then(|w| w.write_to(&path))
        .unwrap_or_else(|e| fail("write the model", e));
    let size = std::fs::metadata(&path).map_or(0, |m| m.len());
    // Warm the page cache.
    std::fs::read(&path).unwrap_or_else(|e| fail("read the model", e));
    for mode in [LoadMode::Auto, LoadMode::None] {
        let times = timed(runs, || {
            load(
                ModelSource::Path(path.clone()),
                LoadOptions {
                    load_mode: mode,
                    ..Default::default()
                },
            )
            .unwrap_or_else(|e| fail("load", e))
        });
        let seconds = median(times);
        println!(
            "model load ({:.2} GB F16, all layers on CUDA0, {mode:?}): {:.0} ms, {:.2} GB/s",
            size as f64 / 1e9,
            seconds * 1e3,
            size as f64 / seconds / 1e9
        );
    }
    let _ = std::fs::remove_file(&path);
}
