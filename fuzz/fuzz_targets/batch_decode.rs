//! Fuzzes decode's batch intake (token ids, positions, sequence ids, output flags, absent
//! fields) on a tiny model: decode must return one of upstream's codes (0, 1, -1) without
//! panicking, and a refused batch must leave the memory untouched (see `check_batch`).
//! Run with `cargo +nightly fuzz run batch_decode`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    llama::context::harness::check_batch(data);
});
