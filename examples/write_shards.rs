//! Writes the split models of `make bench-hotswap` (never committed) under DIR, if absent:
//!
//! * `DIR/small/small-NNNNN-of-01002.gguf`: a tiny llama model with 111 layers (1,002 small
//!   tensors), split one tensor per shard with `GgufWriter::write_split`
//!   (`SplitMode::MaxTensors(1)`): 1,002 shard files.
//! * `DIR/big/big-000NN-of-000MM.gguf`: a ~2 GB llama-shaped F16 model (n_embd 4096, n_ff 8192,
//!   4 layers, 40,000-token vocabulary), also one tensor per shard, as quant-sweep users lay
//!   models out; `blk.0.ffn_down.weight` is F16 [8192, 4096], exactly 64 MiB, in its own shard.
//! * `DIR/variants/{f16a,f16b,q8_0}.gguf`: replacement versions of that tensor's shard: the
//!   original bytes (`f16a`, identical to the shard as written), other F16 bytes (`f16b`), and
//!   Q8_0 and Q4_0 bytes (`q8_0`, `q4_0`: type changes).
//!
//! Prints `key=value` lines for the script: the first shard of each model, the path of the
//! swapped tensor's shard, its name, its offset in that shard and its size.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use llama::gguf::fixtures::{
    llama_tensor_specs, tiny_llama, vocab_only, SplitMix64, TinyLlamaOpts,
};
use llama::gguf::types::GgmlType;
use llama::gguf::writer::{
    split_path, GgufWriter, PendingTensor, SplitMode, KEY_SPLIT_COUNT, KEY_SPLIT_NO,
    KEY_SPLIT_TENSORS_COUNT,
};

const SWAPPED: &str = "blk.0.ffn_down.weight";
/// Bumped when the files' contents change, so stale caches are rewritten.
const VERSION: &str = "v2";

type Error = Box<dyn std::error::Error>;

fn main() -> Result<(), Error> {
    let dir = PathBuf::from(std::env::args().nth(1).ok_or("usage: write_shards DIR")?);
    let marker = dir.join(format!(".complete-{VERSION}"));
    let small_prefix = dir.join("small").join("small");
    let big_prefix = dir.join("big").join("big");
    let variants = dir.join("variants");

    let small_opts = TinyLlamaOpts {
        name: "hotswap-shards".into(),
        n_layer: 111,
        ..TinyLlamaOpts::default()
    };
    let big_opts = TinyLlamaOpts {
        name: "hotswap-bench-f16".into(),
        n_embd: 4096,
        n_head: 32,
        n_head_kv: 32,
        n_ff: 8192,
        n_vocab: 40000,
        n_ctx_train: 4096,
        n_layer: 4,
        ..TinyLlamaOpts::with_type(GgmlType::F16)
    };
    // The big model as one writer with deferred data, then split one tensor per shard.
    let mut big = vocab_only(&big_opts);
    for spec in llama_tensor_specs(&big_opts) {
        big.add_tensor_deferred(&spec.name, &spec.dims, spec.ggml_type)?;
    }
    let shards = big.split(SplitMode::MaxTensors(1))?;
    let count = shards.len() as u32;
    let swapped_no = shards
        .iter()
        .position(|s| s.tensors()[0].name == SWAPPED)
        .ok_or("swapped tensor missing")?;
    let swapped = &shards[swapped_no];
    let small_count = llama_tensor_specs(&small_opts).len() as u32;

    if !marker.exists() {
        if dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        }
        for d in [&small_prefix, &big_prefix] {
            std::fs::create_dir_all(d.parent().unwrap())?;
        }
        std::fs::create_dir_all(&variants)?;

        let small = tiny_llama(&small_opts)?;
        let paths = small.write_split(&small_prefix.to_string_lossy(), SplitMode::MaxTensors(1))?;
        eprintln!("wrote {} shards of {}", paths.len(), small_prefix.display());

        for (no, shard) in shards.iter().enumerate() {
            let path = split_path(&big_prefix.to_string_lossy(), no as u32, count);
            shard.write_to_with(&path, |_, t, out| fill(t, 1, out))?;
        }
        eprintln!("wrote {count} shards of {}", big_prefix.display());

        // Replacement shards: same split keys, one tensor.
        swapped.write_to_with(variants.join("f16a.gguf"), |_, t, out| fill(t, 1, out))?;
        swapped.write_to_with(variants.join("f16b.gguf"), |_, t, out| fill(t, 2, out))?;
        let t = &swapped.tensors()[0];
        for (ty, file, seed) in [
            (GgmlType::Q8_0, "q8_0.gguf", 3),
            (GgmlType::Q4_0, "q4_0.gguf", 4),
        ] {
            let mut w = GgufWriter::new();
            w.set(KEY_SPLIT_NO, swapped_no as u16)
                .set(KEY_SPLIT_COUNT, count as u16)
                .set(KEY_SPLIT_TENSORS_COUNT, shards.len() as i32)
                .add_tensor_deferred(&t.name, &t.dims, ty)?;
            w.write_to_with(variants.join(file), |_, t, out| fill(t, seed, out))?;
        }
        std::fs::write(&marker, b"")?;
    }

    let layout = swapped.layout()?;
    let print = |k: &str, v: &dyn std::fmt::Display| println!("{k}={v}");
    print(
        "small_first",
        &split_path(&small_prefix.to_string_lossy(), 0, small_count),
    );
    print("small_count", &small_count);
    print(
        "big_first",
        &split_path(&big_prefix.to_string_lossy(), 0, count),
    );
    print("big_count", &count);
    print(
        "big_shard",
        &split_path(&big_prefix.to_string_lossy(), swapped_no as u32, count),
    );
    print("tensor", &SWAPPED);
    print("offset", &(layout.data_offset + layout.tensor_offsets[0]));
    print("nbytes", &swapped.tensors()[0].nbytes);
    print("variants", &variants.display());
    print("big_bytes", &dir_bytes(big_prefix.parent().unwrap())?);
    Ok(())
}

fn dir_bytes(dir: &Path) -> io::Result<u64> {
    let mut total = 0;
    for e in std::fs::read_dir(dir)? {
        total += e?.metadata()?.len();
    }
    Ok(total)
}

/// Cheap deterministic bytes for a tensor: F32 norms near 1, F16 small random values, Q8_0 and
/// Q4_0 blocks with a small scale and random quants. `seed` picks the version.
fn fill(t: &PendingTensor, seed: u64, out: &mut dyn Write) -> io::Result<()> {
    let mut rng = SplitMix64::new(seed.wrapping_mul(0x9e37_79b9) ^ t.name.len() as u64);
    for b in t.name.bytes() {
        rng = SplitMix64::new(rng.next_u64() ^ u64::from(b));
    }
    let mut chunk = vec![0u8; 1 << 20];
    let mut left = t.nbytes;
    match t.ggml_type {
        GgmlType::Q8_0 | GgmlType::Q4_0 => {
            // Blocks of an f16 scale and random quants (34 bytes for Q8_0, 18 for Q4_0).
            // Chunks hold whole blocks.
            let block = if t.ggml_type == GgmlType::Q8_0 {
                34usize
            } else {
                18
            };
            let per_chunk = (chunk.len() / block) * block;
            while left > 0 {
                let n = left.min(per_chunk as u64) as usize;
                for blk in chunk[..n].chunks_exact_mut(block) {
                    blk[..2].copy_from_slice(&0x2000u16.to_le_bytes());
                    for q in blk[2..].chunks_mut(8) {
                        let r = rng.next_u64().to_le_bytes();
                        q.copy_from_slice(&r[..q.len()]);
                    }
                }
                out.write_all(&chunk[..n])?;
                left -= n as u64;
            }
        }
        ty => {
            while left > 0 {
                let n = left.min(chunk.len() as u64) as usize;
                if ty == GgmlType::F32 {
                    for v in chunk[..n].chunks_exact_mut(4) {
                        let x = 1.0f32 + 0.05 * rng.next_signed_unit();
                        v.copy_from_slice(&x.to_le_bytes());
                    }
                } else {
                    for quad in chunk[..n].chunks_mut(8) {
                        let r = rng.next_u64();
                        for (i, half) in quad.chunks_mut(2).enumerate() {
                            let bits = (r >> (16 * i)) as u16;
                            let h = (bits & 0x83ff) | 0x2000 | ((bits & 0x0400) << 1);
                            half.copy_from_slice(&h.to_le_bytes()[..half.len()]);
                        }
                    }
                }
                out.write_all(&chunk[..n])?;
                left -= n as u64;
            }
        }
    }
    Ok(())
}
