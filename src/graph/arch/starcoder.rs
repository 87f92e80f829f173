//! `starcoder` (upstream's src/models/starcoder.cpp): gpt2's graph (learned positions,
//! LayerNorms with biases, fused QKV, GELU FFN); the K/V heads may be fewer (multi-query).

use super::super::builder::{BuildError, Builder, Outputs};
use super::super::RopeMode;
use super::def::{no_hparams, ArchDef, Memory, Rope};
use super::gpt2::{graph_with, Classic};

pub static DEF: ArchDef = ArchDef {
    names: &["starcoder"],
    // upstream's llama_model_rope_type says NORM though the graph never rotates (a K-shift
    // rotates the cache as upstream's does)
    rope: Rope::Mode(RopeMode::Norm),
    memory: Memory::Kv,
    hparams: no_hparams,
    graph,
};

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let c = Classic {
        pos_embd: Some(true),
        tok_norm: false,
        bias_required: true,
        ..Classic::GPT2
    };
    graph_with(b, c)
}
