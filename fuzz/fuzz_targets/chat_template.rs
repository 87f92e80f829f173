//! Fuzzes the chat templates: the input, split at NUL bytes, is a template string followed
//! by role/content pairs (as C strings arrive). Detection and formatting must not panic,
//! and must not take more than linear time or memory in the input (run with
//! `cargo +nightly fuzz run chat_template -- -malloc_limit_mb=64 -timeout=5`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use llama::chat::{self, Message};

fuzz_target!(|data: &[u8]| {
    let mut parts = data.split(|&b| b == 0);
    let tmpl = parts.next().unwrap_or_default();
    let rest: Vec<&[u8]> = parts.collect();
    let chat: Vec<Message<'_>> = rest
        .chunks_exact(2)
        .map(|pair| Message { role: pair[0], content: pair[1] })
        .collect();
    let add_ass = data.len() % 2 == 1;
    if let Some(t) = chat::detect(tmpl) {
        let _ = chat::apply(t, &chat, add_ass);
    }
    for (_, t) in &chat::BUILTIN_TEMPLATES {
        let _ = chat::apply(*t, &chat, add_ass);
    }
});
