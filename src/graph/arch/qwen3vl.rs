//! `qwen3vl` (upstream's src/models/qwen3vl.cpp), text path: qwen3's graph (per-head q/k
//! RMS norms before the rotation). Its interleaved M-RoPE rotates text tokens (equal t/h/w
//! positions) as NEOX, which the engine runs. Deepstack inputs (`n_deepstack_layers` > 0:
//! image features added to the first layers) are refused.

use super::super::builder::{BuildError, Builder, Outputs};
use super::super::params::ArchParams;
use super::def::{check_mrope_text, ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["qwen3vl"],
    rope: Rope::Multi(40),
    memory: Memory::Kv,
    hparams,
    graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    if k.u32("n_deepstack_layers", 0) > 0 {
        return Err("deepstack layers are not supported yet".into());
    }
    check_mrope_text(k, hp, 40)
}

/// qwen3's graph; upstream's `build_ffn` gets no per-tensor scales.
fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    super::qwen3::graph_with(b, false)
}
