//! `qwen3moe` (upstream's src/models/qwen3moe.cpp): qwen3 with a softmax-routed mixture of
//! experts of `expert_feed_forward_length` rows in every layer.

use super::super::params::ArchParams;
use super::super::RopeMode;
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["qwen3moe"],
    rope: Rope::Mode(RopeMode::Neox),
    memory: Memory::Kv,
    hparams,
    graph: super::qwen3::graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    hp.n_ff_exp = k.u32("expert_feed_forward_length", 0) as usize;
    Ok(())
}
