//! Fuzzes the importance-matrix reader (`sweep --imatrix`; llama-imatrix's GGUF and legacy
//! files): any input is refused with an error or accepted with only finite values in
//! non-empty entries (`llama::quantize::imatrix::fuzz_check`; its unit tests replay
//! mutations of valid files). Run with `cargo +nightly fuzz run imatrix_reader`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    llama::quantize::imatrix::fuzz_check(data);
});
