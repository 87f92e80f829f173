//! Fuzzes the sweep's resume reader (`llama-hotswap-perplexity sweep --csv/--jsonl` on an
//! existing file): byte 0 picks CSV or JSON lines, the rest is the file. Any text is refused
//! or recognised as a sweep output; recognised, only an unfinished last line may be cut, and
//! its rows written back read back the same. The binary's module is compiled in as it is.
#![no_main]

#[allow(dead_code)]
#[path = "../../src/bin/llama-hotswap-perplexity/sweep/rows.rs"]
mod rows;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rows::fuzz_check(data);
});
