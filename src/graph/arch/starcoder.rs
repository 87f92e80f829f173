//! `starcoder` (upstream's src/models/starcoder.cpp): gpt2's graph (learned positions,
//! LayerNorms with biases, fused QKV, GELU FFN); the K/V heads may be fewer (multi-query).

use super::super::builder::{BuildError, Builder, Outputs};
use super::def::{no_hparams, ArchDef, Memory, Rope};
use super::gpt2::{graph_with, Classic};

pub static DEF: ArchDef = ArchDef {
    names: &["starcoder"],
    rope: Rope::None,
    memory: Memory::Kv,
    hparams: no_hparams,
    graph,
};

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let c = Classic {
        pos_embd: Some(true),
        tok_norm: false,
        bias_required: true,
        qk_norm: false,
    };
    graph_with(b, c)
}
