//! `codeshell (upstream's src/models/codeshell.cpp)`: gpt2's pre-LayerNorm graph
//! without position embeddings but with NeoX rotary embeddings over whole heads; Q, K and V
//! fused or separate, all biases required, a GELU FFN without gate.

use super::super::builder::{BuildError, Builder, Outputs};
use super::super::RopeMode;
use super::def::{no_hparams, ArchDef, Memory, Rope};
use super::gpt2::{graph_with, Classic};

pub static DEF: ArchDef = ArchDef {
    names: &["codeshell"],
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
        ..Classic::GPT2
    };
    graph_with(b, c)
}
