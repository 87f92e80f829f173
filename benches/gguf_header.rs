//! Header-parse benchmark: a GGUF header with 10,000 tensors and 1,000 keys, parsed from
//! memory (`Gguf::parse_header`) and read from a sparse file on disk (`read_header`).
//! Prints the median of several runs. `cargo bench --bench gguf_header`; under `cargo test`
//! it runs once as a smoke test. `-- --large PATH` also streams a ~2 GB F16 llama model to
//! PATH (never commit it) and times reading its header.

use std::io::Write;
use std::time::{Duration, Instant};

use llama::gguf::fixtures::write_large_f16;
use llama::gguf::{read_header, GgmlType, Gguf, GgufWriter, MetaValue};

const N_TENSORS: usize = 10_000;
const N_KEYS: usize = 1_000;

fn big_header() -> GgufWriter {
    let mut writer = GgufWriter::new();
    writer.set("general.architecture", "llama");
    for i in 0..N_KEYS {
        let key = format!("bench.key.{i:04}");
        let value: MetaValue = match i % 5 {
            0 => (i as u32).into(),
            1 => format!("a string value number {i}").into(),
            2 => (i as f32 * 0.5).into(),
            3 => vec![i as i32; 16].into(),
            _ => vec!["token"; 8].into(),
        };
        writer.set(&key, value);
    }
    for i in 0..N_TENSORS {
        let (dims, ty) = match i % 4 {
            0 => (vec![4096i64], GgmlType::F32),
            1 => (vec![4096, 4096], GgmlType::F16),
            2 => (vec![4096, 11008], GgmlType::Q4_K),
            _ => (vec![11008, 4096], GgmlType::Q8_0),
        };
        writer
            .add_tensor_deferred(
                &format!("blk.{}.tensor_{}.weight", i / 10, i % 10),
                &dims,
                ty,
            )
            .expect("valid tensor");
    }
    writer
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn time<R>(runs: usize, mut f: impl FnMut() -> R) -> Duration {
    let samples = (0..runs)
        .map(|_| {
            let start = Instant::now();
            std::hint::black_box(f());
            start.elapsed()
        })
        .collect();
    median(samples)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let benchmarking = args.iter().any(|a| a == "--bench");
    let runs = if benchmarking { 31 } else { 1 };

    let writer = big_header();
    let layout = writer.layout().expect("layout");
    let header = writer.header_bytes().expect("header");
    let prefix = &header[..];
    println!(
        "header: {} tensors, {} keys, {:.1} KiB of metadata, {:.1} GiB of (absent) data",
        N_TENSORS,
        N_KEYS + 1,
        prefix.len() as f64 / 1024.0,
        (layout.file_size - layout.data_offset) as f64 / (1u64 << 30) as f64
    );

    let parse = time(runs, || {
        let gguf = Gguf::parse_header(prefix, layout.file_size).expect("parses");
        assert_eq!(gguf.tensors().len(), N_TENSORS);
        gguf.tensor("blk.999.tensor_9.weight").map(|t| t.offset)
    });
    println!(
        "Gguf::parse_header, median of {runs}: {:.3} ms",
        parse.as_secs_f64() * 1e3
    );

    let mut file = tempfile::NamedTempFile::new().expect("temp file");
    file.write_all(prefix).expect("write header");
    file.as_file()
        .set_len(layout.file_size)
        .expect("sparse data");
    let from_disk = time(runs, || {
        let header = read_header(file.as_file()).expect("reads");
        header.gguf().expect("parses").tensors().len()
    });
    println!(
        "read_header + gguf() on a {:.0} GiB sparse file, median of {runs}: {:.3} ms",
        layout.file_size as f64 / (1u64 << 30) as f64,
        from_disk.as_secs_f64() * 1e3
    );

    let gguf = Gguf::parse_header(prefix, layout.file_size).expect("parses");
    let lookups = time(runs, || {
        let found = gguf
            .tensors()
            .iter()
            .filter(|t| gguf.tensor(t.name).is_some())
            .count();
        assert_eq!(found, N_TENSORS);
    });
    println!(
        "{N_TENSORS} tensor lookups by name, median of {runs}: {:.3} ms",
        lookups.as_secs_f64() * 1e3
    );

    if let Some(i) = args.iter().position(|a| a == "--large") {
        let path = std::path::PathBuf::from(args.get(i + 1).expect("--large PATH"));
        let start = Instant::now();
        let info = write_large_f16(&path, 2_000_000_000).expect("write large model");
        println!(
            "wrote {} ({} tensors, {:.2} GB) in {:.1} s",
            path.display(),
            info.n_tensors,
            info.file_size as f64 / 1e9,
            start.elapsed().as_secs_f64()
        );
        let file = std::fs::File::open(&path).expect("open large model");
        let read = time(runs, || read_header(&file).expect("reads").n_tensors());
        println!(
            "read_header of the large model, median of {runs}: {:.3} ms",
            read.as_secs_f64() * 1e3
        );
    }
}
