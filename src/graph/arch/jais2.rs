//! `jais2` (upstream's src/models/jais2.cpp): gpt2's pre-LayerNorm graph with NeoX rotary
//! embeddings instead of position embeddings and a squared-ReLU FFN without gate; Q, K and
//! V fused or separate, biases required.

use super::super::builder::{Act, BuildError, Builder, Outputs};
use super::super::RopeMode;
use super::def::{no_hparams, ArchDef, Memory, Rope};
use super::gpt2::{graph_with, Classic};

pub static DEF: ArchDef = ArchDef {
    names: &["jais2"],
    rope: Rope::Mode(RopeMode::Neox),
    memory: Memory::Kv,
    hparams: no_hparams,
    graph,
};

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let c = Classic {
        pos_embd: None,
        fused_qkv: false,
        rope: true,
        act: Act::ReluSqr,
        ..Classic::GPT2
    };
    graph_with(b, c)
}
