//! Writes the ~2 GB F16 benchmark model (never committed) to the path given, if absent.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::path::PathBuf::from(
        std::env::args()
            .nth(1)
            .ok_or("usage: write_large PATH [BYTES]")?,
    );
    let bytes: u64 = std::env::args()
        .nth(2)
        .map_or(Ok(2_000_000_000), |b| b.parse())?;
    if !path.exists() {
        let info = llama::gguf::fixtures::write_large_f16(&path, bytes)?;
        eprintln!(
            "wrote {} ({} bytes, {} tensors)",
            path.display(),
            info.file_size,
            info.n_tensors
        );
    }
    Ok(())
}
