//! `dream` (upstream's src/models/dream.cpp): Dream, a diffusion language model built as
//! qwen2 (NeoX rotary embeddings, q/k/v biases) without the output bias, attending both ways
//! and keeping no memory (every decode is upstream's encode).

use super::super::builder::{BuildError, Builder, Outputs};
use super::super::RopeMode;
use super::def::{no_hparams, ArchDef, Memory, Rope};
use super::qwen2::{graph_with, Qwen2Layers};

pub static DEF: ArchDef = ArchDef {
    names: &["dream"],
    rope: Rope::Mode(RopeMode::Neox),
    memory: Memory::None,
    hparams: no_hparams,
    graph,
};

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let kq_scale = b.kq_scale();
    // upstream loads `output.bias` but its graph never adds it
    let l = Qwen2Layers {
        kq_scale,
        rope_freqs: None,
        qk_norm_after_rope: false,
        output_bias: false,
    };
    graph_with(b, l)
}
