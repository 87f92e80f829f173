//! `cohere2` (upstream's src/models/cohere2.cpp): command-r's parallel-residual graph with
//! sliding-window attention on 3 of every 4 layers; only those rotate (NORM, with
//! `rope_freqs`); the full-attention layers use no positional encoding.

use super::super::builder::{BuildError, Builder, Outputs};
use super::super::params::ArchParams;
use super::super::RopeMode;
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["cohere2"],
    rope: Rope::Mode(RopeMode::Norm),
    memory: Memory::Kv,
    hparams,
    graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    hp.swa_layers = k.swa_layers(hp.n_layer, 4)?;
    hp.rope_freq_base_swa = k.f32("rope.freq_base_swa", hp.rope_freq_base);
    hp.rope_freq_scale_swa = hp.rope_freq_scale;
    for key in ["attention.sliding_window", "logit_scale"] {
        if k.model.meta.get_f64(&k.key(key)).is_none()
            && k.model.meta.get_u32(&k.key(key)).is_none()
        {
            return Err(format!("{} is missing", k.key(key)));
        }
    }
    hp.n_swa = k.u32("attention.sliding_window", 0);
    Ok(())
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    super::command_r::graph_with(b, true)
}
