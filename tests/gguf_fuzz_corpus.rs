//! Replays the committed fuzz corpus (fuzz/corpus/gguf_reader) through the reader's fuzz
//! harness: no input may panic. `cargo test --test gguf_fuzz_corpus -- --ignored` rewrites
//! the seed files from the writer and the corrupt-file helpers.

use std::path::PathBuf;

use llama::gguf::fixtures::corrupt::{base_file, Corruption};
use llama::gguf::fixtures::harness::check_reader;
use llama::gguf::fixtures::{tiny_llama, tiny_moe, vocab_only, TinyLlamaOpts};
use llama::gguf::{GgmlType, GgufWriter, MetaArray};

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/gguf_reader")
}

#[test]
fn committed_corpus_never_panics() {
    let mut entries: Vec<_> = std::fs::read_dir(corpus_dir())
        .expect("fuzz/corpus/gguf_reader exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    entries.sort();
    assert!(
        entries.len() >= 24,
        "seed corpus looks incomplete: {}",
        entries.len()
    );
    for path in entries {
        let bytes = std::fs::read(&path).unwrap();
        let outcome = std::panic::catch_unwind(|| check_reader(&bytes));
        assert!(outcome.is_ok(), "panic on corpus file {}", path.display());
    }
}

#[test]
fn generated_seeds_never_panic() {
    for (_, bytes) in seeds() {
        check_reader(&bytes);
    }
}

/// Small files covering every value type, tensor types, alignments, versions, and every
/// corruption.
fn seeds() -> Vec<(String, Vec<u8>)> {
    let small = TinyLlamaOpts {
        n_layer: 1,
        n_embd: 32,
        n_head: 2,
        n_head_kv: 1,
        n_ff: 32,
        n_vocab: 12,
        chat_template: Some("{{ messages }}".into()),
        ..TinyLlamaOpts::default()
    };
    let mut seeds = vec![("base".to_string(), base_file())];
    for ty in [GgmlType::F32, GgmlType::F16, GgmlType::Q8_0, GgmlType::Q4_0] {
        let opts = TinyLlamaOpts {
            weight_type: ty,
            ..small.clone()
        };
        let bytes = tiny_llama(&opts).unwrap().to_bytes().unwrap();
        seeds.push((format!("tiny_{}", ty.name()), bytes));
    }
    let moe = TinyLlamaOpts {
        n_expert: 2,
        n_expert_used: 1,
        ..small.clone()
    };
    seeds.push((
        "tiny_moe".into(),
        tiny_moe(&moe).unwrap().to_bytes().unwrap(),
    ));
    seeds.push(("vocab_only".into(), vocab_only(&small).to_bytes().unwrap()));

    let mut all_types = GgufWriter::new();
    all_types
        .set_version(2)
        .set("u8", 1u8)
        .set("i8", -1i8)
        .set("u16", 2u16)
        .set("i16", -2i16)
        .set("u32", 3u32)
        .set("i32", -3i32)
        .set("f32", 0.5f32)
        .set("bool", true)
        .set("str", "text")
        .set("u64", 4u64)
        .set("i64", -4i64)
        .set("f64", 0.25f64)
        .set("arr_u8", vec![1u8, 2])
        .set("arr_bool", vec![true, false])
        .set("arr_f64", vec![1.5f64])
        .set("arr_str", vec!["x", "", "yz"])
        .set("arr_empty", MetaArray::I64(Vec::new()));
    all_types.set_alignment(64).unwrap();
    for (i, ty) in [GgmlType::BF16, GgmlType::Q4_K, GgmlType::I8, GgmlType::Q1_0]
        .into_iter()
        .enumerate()
    {
        let ne0 = ty.block_size() as i64;
        let len = ty.row_size(ne0).unwrap() as usize;
        let data = (0..len).map(|b| (b * 7 + i) as u8).collect();
        all_types
            .add_tensor(&format!("t{i}"), &[ne0], ty, data)
            .unwrap();
    }
    seeds.push(("all_types_v2_align64".into(), all_types.to_bytes().unwrap()));

    for &kind in Corruption::ALL {
        seeds.push((format!("corrupt_{}", kind.slug()), kind.bytes()));
    }
    seeds
}

#[test]
#[ignore = "rewrites fuzz/corpus/gguf_reader; run by hand when the fixtures change"]
fn regenerate_seed_corpus() {
    let dir = corpus_dir();
    std::fs::create_dir_all(&dir).unwrap();
    for (name, bytes) in seeds() {
        std::fs::write(dir.join(format!("seed_{name}.gguf")), bytes).unwrap();
    }
}
