//! Fuzzes the GGUF reader: any input must be accepted or rejected without panicking, and
//! accepted files must round-trip through the writer (see `check_reader`). Run with
//! `cargo +nightly fuzz run gguf_reader -- -malloc_limit_mb=64` so that an allocation
//! out of proportion to the input also counts as a finding.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    llama::gguf::fixtures::harness::check_reader(data);
});
