//! Upload bandwidth to the first CUDA device (`make bench-upload`; a benchmark, not a test).
//!
//! For a 1 GiB buffer it times `CudaBuffer::fill_from_file` from a page-cached file (pread into
//! the pinned staging ring, asynchronous copies) against a raw copy of the same bytes already in
//! page-locked memory (`write_pinned`, one `cuMemcpyHtoD`), median of 5 runs each (after one
//! warm-up run each, runs interleaved), and prints both speeds and their ratio (goal: at least
//! 80%). Checks once that the uploaded bytes are the file's. Without a usable GPU it prints why
//! and exits 0.
//!
//! Environment: `BENCH_UPLOAD_MIB` (buffer size, default 1024), `BENCH_UPLOAD_RUNS` (default
//! 5), `BENCH_UPLOAD_DIR` (where the temporary file goes; default the system temp directory).

use std::io::Write;
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
}
