//! `qwen2vl` (upstream's src/models/qwen2vl.cpp), text path: qwen2's graph (q/k/v biases;
//! `output.bias`, which upstream loads, is not added). Its M-RoPE rotates text tokens (equal t/h/w positions) as
//! NEOX, which the engine runs; sections that would reach the 4th position are refused.

use super::super::builder::{BuildError, Builder, Outputs};
use super::super::params::ArchParams;
use super::def::{check_mrope_text, ArchDef, Keys, Memory, Rope};
use super::qwen2::{graph_with, Qwen2Layers};

pub static DEF: ArchDef = ArchDef {
    names: &["qwen2vl"],
    rope: Rope::Multi(8),
    memory: Memory::Kv,
    hparams,
    graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    check_mrope_text(k, hp, 8)
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let kq_scale = b.kq_scale();
    let layers = Qwen2Layers {
        kq_scale,
        rope_freqs: None,
        qk_norm_after_rope: false,
        output_bias: false,
    };
    graph_with(b, layers)
}
