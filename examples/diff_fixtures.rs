//! Writes the fixtures of the differential test (ours vs upstream on the same files) into the
//! directory given as the first argument, one file (or split set) per case, and prints the
//! paths to probe, one per line.

use std::path::PathBuf;

use llama::gguf::fixtures::{tiny_llama, tiny_moe, vocab_only, TinyLlamaOpts};
use llama::gguf::{GgmlType, SplitMode};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = PathBuf::from(std::env::args().nth(1).ok_or("usage: diff_fixtures DIR")?);
    std::fs::create_dir_all(&dir)?;
    let mut cases: Vec<(String, TinyLlamaOpts)> = Vec::new();
    for ty in [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::Q8_0,
        GgmlType::Q4_0,
    ] {
        cases.push((format!("llama-{}", ty.name()), TinyLlamaOpts::with_type(ty)));
    }
    cases.push((
        "no-file-type".into(),
        TinyLlamaOpts {
            file_type: None,
            weight_type: GgmlType::Q8_0,
            ..Default::default()
        },
    ));
    cases.push((
        "chat-template".into(),
        TinyLlamaOpts {
            chat_template: Some("{% for m in messages %}{{ m.content }}{% endfor %}".into()),
            ..Default::default()
        },
    ));
    cases.push((
        "tied".into(),
        TinyLlamaOpts {
            tie_embeddings: true,
            ..Default::default()
        },
    ));
    cases.push((
        "pad-eos".into(),
        TinyLlamaOpts {
            pad_id: Some(3),
            add_eos: true,
            add_bos: false,
            ..Default::default()
        },
    ));
    for (name, opts) in &cases {
        let path = dir.join(format!("{name}.gguf"));
        tiny_llama(opts)?.write_to(&path)?;
        println!("{}", path.display());
    }
    let moe = dir.join("moe.gguf");
    tiny_moe(&TinyLlamaOpts::moe())?.write_to(&moe)?;
    println!("{}", moe.display());
    let vocab = dir.join("vocab-only.gguf");
    vocab_only(&TinyLlamaOpts::default()).write_to(&vocab)?;
    println!("{}", vocab.display());
    let prefix = dir.join("split");
    let shards = tiny_llama(&TinyLlamaOpts {
        n_layer: 4,
        ..Default::default()
    })?
    .write_split(prefix.to_str().ok_or("path")?, SplitMode::MaxTensors(10))?;
    println!("{}", shards[0].display());
    Ok(())
}
