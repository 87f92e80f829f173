//! `exaone` (upstream's src/models/exaone.cpp): llama's graph with NeoX rotary embeddings (with
//! `rope_freqs` when present), optional q/k/v/o biases, a SiLU-gated FFN.

use super::super::builder::{BuildError, Builder, Ffn, Outputs};
use super::super::RopeMode;
use super::def::{no_hparams, ArchDef, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["exaone"],
    rope: Rope::Mode(RopeMode::Neox),
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
