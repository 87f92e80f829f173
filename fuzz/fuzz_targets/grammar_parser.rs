//! Fuzzes the GBNF parser and matcher: any input must be accepted or refused without
//! panicking, accepted grammars print, apply to a small vocabulary and accept every token
//! they allow (see `check_input`). Run with
//! `cargo +nightly fuzz run grammar_parser -- -max_len=4096 -timeout=10`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    llama::sampling::grammar::harness::check_input(data);
});
