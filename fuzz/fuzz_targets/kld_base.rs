//! Fuzzes the reader of upstream's base-logits file (`--kl-divergence-base`) in
//! `llama-hotswap-perplexity`: any input is refused with an error or accepted, and an
//! accepted file is exactly its header, tokens and rows (every chunk readable, twice). The
//! binary's module is compiled in here as it is (`fuzz_check` is the harness).
#![no_main]

#[allow(dead_code)]
#[path = "../../src/bin/llama-hotswap-perplexity/kld_file.rs"]
mod kld_file;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    kld_file::fuzz_check(data);
});
