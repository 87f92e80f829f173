//! Fuzzes the LoRA adapter parser (`llama_adapter_lora_init`'s checks): raw bytes offered as
//! an adapter of a small fake model; a refusal is fine, a panic or an accepted adapter whose
//! factors do not fit the model is not (see `check_lora`). Run with
//! `cargo +nightly fuzz run lora_reader fuzz/corpus/lora_reader`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    llama::model::adapter::harness::check_lora(data);
});
