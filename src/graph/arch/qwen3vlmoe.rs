//! `qwen3vlmoe` (upstream's src/models/qwen3vlmoe.cpp), text path: qwen3moe's graph
//! (per-head q/k RMS norms, softmax-routed experts with normalised weights) without the
//! experts' per-tensor scales. Its interleaved M-RoPE rotates text tokens as NEOX;
//! deepstack inputs are refused, as for qwen3vl.

use super::super::builder::{BuildError, Builder, Outputs};
use super::super::params::ArchParams;
use super::def::{check_mrope_text, ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["qwen3vlmoe"],
    rope: Rope::Multi(40),
    memory: Memory::Kv,
    hparams,
    graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    if k.u32("n_deepstack_layers", 0) > 0 {
        return Err("deepstack layers are not supported yet".into());
    }
    if hp.n_expert == 0 || hp.n_expert_used == 0 {
        return Err("expert_count and expert_used_count must be > 0".into());
    }
    // upstream: expert_feed_forward_length, else feed_forward_length / expert_used_count
    hp.n_ff_exp = match k.u32("expert_feed_forward_length", 0) as usize {
        0 => hp.n_ff.first().copied().unwrap_or(0) / hp.n_expert_used,
        n => n,
    };
    check_mrope_text(k, hp, 40)
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    super::qwen3::graph_with(b, false)
}
