//! Builds the inputs of `make bench-sweep` and `make test-sweep` from real models (never
//! committed; written under the cache by the scripts):
//!
//! * `split MODEL PREFIX`: MODEL as one-tensor shards `PREFIX-NNNNN-of-MMMMM.gguf` (the
//!   layout quant-sweep users keep their models in); skipped when the last shard exists.
//! * `candidates PREFIX SOURCE OUTDIR TENSOR...`: for each TENSOR, a drop-in replacement of
//!   the base shard that holds it: the same file name and metadata (`split.*` included), the
//!   tensor's bytes and type taken from SOURCE (a GGUF with the same tensor names and shapes,
//!   e.g. a requantized copy). This is the GGUF-Tool-Suite layout: one directory per type,
//!   shards named as the base's, so a full-reload round is "put this shard in place, load".
//!
//! Prints the paths it wrote, one per line.

use std::path::{Path, PathBuf};

use llama::gguf::{Gguf, GgufWriter, SplitMode};

type Error = Box<dyn std::error::Error>;

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("split") if args.len() == 3 => split(Path::new(&args[1]), &args[2]),
        Some("candidates") if args.len() >= 5 => candidates(
            &args[1],
            Path::new(&args[2]),
            Path::new(&args[3]),
            &args[4..],
        ),
        _ => Err("usage: sweep_fixtures split MODEL PREFIX | \
                  candidates PREFIX SOURCE OUTDIR TENSOR..."
            .into()),
    }
}

fn split(model: &Path, prefix: &str) -> Result<(), Error> {
    let bytes = std::fs::read(model)?;
    let gguf = Gguf::parse(&bytes)?;
    let n = gguf.tensors().len() as u32;
    let last = PathBuf::from(llama::gguf::split_path(prefix, n - 1, n));
    if !last.exists() {
        // Written into a directory of its own and renamed into place: a run stopped halfway
        // (or two at once) never leaves a partial set under the prefix's directory.
        let dir = Path::new(prefix).parent().ok_or("bad prefix")?;
        let stem = Path::new(prefix).file_name().ok_or("bad prefix")?;
        let tmp = dir.with_extension(format!("tmp{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp)?;
        let tmp_prefix = tmp.join(stem);
        GgufWriter::from_gguf(&gguf).write_split(
            tmp_prefix.to_str().ok_or("non-UTF-8 path")?,
            SplitMode::MaxTensors(1),
        )?;
        if dir.exists() && !last.exists() {
            std::fs::remove_dir_all(dir)?;
        }
        if std::fs::rename(&tmp, dir).is_err() {
            std::fs::remove_dir_all(&tmp)?;
        }
        if !last.exists() {
            return Err(format!("{}: not written", last.display()).into());
        }
    }
    for k in 0..n {
        println!("{}", llama::gguf::split_path(prefix, k, n));
    }
    Ok(())
}

fn candidates(prefix: &str, source: &Path, out: &Path, tensors: &[String]) -> Result<(), Error> {
    let src_bytes = std::fs::read(source)?;
    let src = Gguf::parse(&src_bytes)?;
    // The base shards: PREFIX-00001-of-N.gguf tells N.
    let first = std::fs::read_dir(Path::new(prefix).parent().ok_or("bad prefix")?)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.to_string_lossy()
                .starts_with(&format!("{prefix}-00001-of-"))
        })
        .ok_or("no first shard for the prefix")?;
    let first_bytes = std::fs::read(&first)?;
    let count = match Gguf::parse(&first_bytes)?.get("split.count") {
        Some(llama::gguf::Value::U16(n)) => u32::from(*n),
        _ => return Err("the base is not a split set".into()),
    };
    std::fs::create_dir_all(out)?;
    for name in tensors {
        let info = src
            .tensor(name)
            .ok_or_else(|| format!("{name}: not in {}", source.display()))?;
        let data = src.tensor_data(info).ok_or("tensor data missing")?.to_vec();
        let mut written = false;
        for k in 0..count {
            let shard = PathBuf::from(llama::gguf::split_path(prefix, k, count));
            let file = std::fs::File::open(&shard)?;
            let header = llama::gguf::read_header(&file)?;
            let g = header.gguf()?;
            if g.tensor(name).is_none() {
                continue;
            }
            let mut w = GgufWriter::new();
            for kv in g.kvs() {
                let key = String::from_utf8_lossy(kv.key).into_owned();
                w.set(&key, llama::gguf::MetaValue::from_value(&kv.value));
            }
            w.add_tensor(name, info.shape(), info.ggml_type, data.clone())?;
            let dest = out.join(shard.file_name().ok_or("bad shard name")?);
            w.write_to(&dest)?;
            println!("{}", dest.display());
            written = true;
            break;
        }
        if !written {
            return Err(format!("{name}: no base shard holds it").into());
        }
    }
    Ok(())
}
