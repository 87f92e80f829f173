//! `maincoder` (upstream's src/models/maincoder.cpp): llama's structure with per-head RMS
//! norms of Q and K applied after the (NORM) rotary embedding.

use super::super::builder::{BuildError, Builder, Outputs};
use super::super::RopeMode;
use super::def::{no_hparams, ArchDef, Memory, Rope};
use super::qwen2::{graph_with, Qwen2Layers};

pub static DEF: ArchDef = ArchDef {
    names: &["maincoder"],
    rope: Rope::Mode(RopeMode::Norm),
    memory: Memory::Kv,
    hparams: no_hparams,
    graph,
};

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let layers = Qwen2Layers {
        kq_scale: 1.0 / (b.hp.head_v as f32).sqrt(),
        rope_freqs: None,
        qk_norm_after_rope: true,
        output_bias: false,
    };
    graph_with(b, layers)
}
