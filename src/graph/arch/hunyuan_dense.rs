//! `hunyuan-dense` (upstream's src/models/hunyuan-vl.cpp, which it shares): llama's
//! structure with NeoX rotary embeddings (`rope_freqs` when present; the base scaled by
//! `rope.scaling.alpha`^(d/(d-2)) when the file gives one), then per-head RMS norms of Q
//! and K after the rotation.

use super::super::builder::{BuildError, Builder, Outputs};
use super::super::params::ArchParams;
use super::super::RopeMode;
use super::def::{ArchDef, Keys, Memory, Rope};
use super::qwen2::{graph_with, Qwen2Layers};

pub static DEF: ArchDef = ArchDef {
    names: &["hunyuan-dense"],
    rope: Rope::Mode(RopeMode::Neox),
    memory: Memory::Kv,
    hparams,
    graph,
};

pub fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    let alpha = k.f32("rope.scaling.alpha", 0.0);
    if alpha > 0.0 {
        let dim = hp.head_k as f32;
        hp.rope_freq_base *= alpha.powf(dim / (dim - 2.0));
    }
    Ok(())
}

pub fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let layers = Qwen2Layers {
        kq_scale: 1.0 / (hp.head_v as f32).sqrt(),
        rope_freqs: b.weight_opt("rope_freqs.weight", &[hp.n_rot as i64 / 2])?,
        qk_norm_after_rope: true,
        output_bias: false,
    };
    graph_with(b, layers)
}
