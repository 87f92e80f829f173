//! Writes the tokenizer fixtures of `gguf::fixtures::vocab_algos` (RWKV, PLaMo2, UGM
//! variants) into DIR and prints their paths, one a line, for scripts/test-tokenizer.sh.
//! usage: tokenizer_fixtures DIR [VOCAB.gguf with a precompiled_charsmap]
use llama::gguf::fixtures::vocab_algos::write_all;
use llama::gguf::{Gguf, GgufWriter};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(dir) = args.get(1) else {
        eprintln!("usage: tokenizer_fixtures DIR [VOCAB.gguf]");
        std::process::exit(2);
    };
    let charsmap = args.get(2).map(|path| {
        let bytes = std::fs::read(path).expect("read the charsmap vocab");
        let gguf = Gguf::parse(&bytes).expect("parse the charsmap vocab");
        GgufWriter::from_gguf(&gguf)
            .get("tokenizer.ggml.precompiled_charsmap")
            .cloned()
            .expect("the file has tokenizer.ggml.precompiled_charsmap")
    });
    std::fs::create_dir_all(dir).expect("create DIR");
    for path in write_all(dir.as_ref(), charsmap.as_ref()).expect("write the fixtures") {
        println!("{}", path.display());
    }
}
