//! Fuzzes the ggml-rpc reply parsers (`device::rpc::wire`): every parser over arbitrary
//! bytes returns a value within its documented bounds or an error, never panics; a decoded
//! `rpc_tensor` re-encodes to the same bytes. Run with `cargo +nightly fuzz run rpc_reply`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    llama::device::rpc::wire::fuzz_replies(data);
});
