//! `internlm2` (upstream's src/models/internlm2.cpp): llama's graph: RMS norms, NORM rotary embeddings,
//! an optional `attn_output.bias`, a SiLU-gated FFN.

use super::super::builder::{BuildError, Builder, Ffn, Outputs};
use super::super::RopeMode;
use super::def::{no_hparams, ArchDef, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["internlm2"],
    rope: Rope::Mode(RopeMode::Norm),
    memory: Memory::Kv,
    hparams: no_hparams,
    graph,
};

/// llama's graph; upstream's `build_ffn` gets no FFN biases nor per-tensor scales.
fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let ffn = Ffn {
        scaled: false,
        ..Ffn::SWIGLU
    };
    super::llama::graph_ffn(b, ffn)
}
