//! Fuzzes the state reader (`llama_state_set_data`, `llama_state_seq_set_data` and the
//! session files share it): raw bytes and mutations of valid states offered to every restore
//! path; a failure must leave the state as it was, a success must read back unchanged and
//! still decode (see `check_state`). Run with `cargo +nightly fuzz run state_reader`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    llama::context::harness::check_state(data);
});
