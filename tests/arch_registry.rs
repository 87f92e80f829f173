//! The registry of architectures (src/graph/arch/) is the one list: every name is registered
//! once, rotates as `llama_model_rope_type` reports, has its row in the engine's
//! differential test (scripts/test-engine.sh ALL_ARCHS) and its line in
//! docs/adding-an-architecture.md's list.

use llama::graph::arch::{lookup, missing_pieces, supported_names, REGISTRY};

#[test]
fn every_name_is_registered_once_and_rotates_as_the_model_table_says() {
    let names = supported_names();
    assert!(!REGISTRY.is_empty());
    for (i, n) in names.iter().enumerate() {
        assert!(!names[..i].contains(n), "{n} registered twice");
        let def = lookup(n).expect("a registered name is found");
        assert_eq!(
            def.rope.raw(),
            llama::model::arch::rope_type(n, [0; 4]),
            "{n}: the registry and model::arch disagree on the rope type"
        );
    }
    assert!(lookup("made-up").is_none());
}

#[test]
fn the_engine_test_has_a_row_for_every_registered_architecture() {
    let script = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scripts/test-engine.sh"
    ))
    .unwrap();
    let line = script
        .lines()
        .find_map(|l| l.strip_prefix("ALL_ARCHS=\""))
        .expect("scripts/test-engine.sh sets ALL_ARCHS");
    let mut listed: Vec<&str> = line.trim_end_matches('"').split_whitespace().collect();
    let mut registered = supported_names();
    listed.sort_unstable();
    registered.sort_unstable();
    assert_eq!(
        listed, registered,
        "scripts/test-engine.sh ALL_ARCHS must list exactly the registered architectures"
    );
}

#[test]
fn the_docs_list_every_registered_architecture() {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/adding-an-architecture.md"
    ))
    .unwrap();
    let marker = "<!-- registry: checked by tests/arch_registry.rs -->\n";
    let at = doc
        .find(marker)
        .expect("the docs page has the registry list")
        + marker.len();
    let line = doc[at..].lines().next().unwrap_or("");
    let listed: Vec<&str> = line.split(", ").map(str::trim).collect();
    assert_eq!(
        listed,
        supported_names(),
        "docs/adding-an-architecture.md must list the registered architectures in REGISTRY's order"
    );
}

/// The refusal's "it needs ..." line is for architectures the registry lacks: one that gets
/// registered must drop its entry (and a known-missing one keeps naming what it needs).
#[test]
fn missing_pieces_name_unregistered_architectures_only() {
    for name in supported_names() {
        assert!(
            missing_pieces(name).is_none(),
            "{name} is registered but still listed as missing pieces"
        );
    }
    for name in ["deepseek4", "qwen4exp", "minimax-m3"] {
        assert!(
            lookup(name).is_some() || missing_pieces(name).is_some(),
            "{name} is neither registered nor says what it needs"
        );
    }
}
