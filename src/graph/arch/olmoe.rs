//! `olmoe` (upstream's src/models/olmoe.cpp): minimax-m2's layer shape — whole-vector q/k
//! RMS norms before NeoX rotary embeddings, experts of `feed_forward_length` rows in every
//! layer — with softmax routing and unnormalised weights.

use super::super::builder::{BuildError, Builder, Moe, Outputs};
use super::super::params::ArchParams;
use super::super::RopeMode;
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["olmoe"],
    rope: Rope::Mode(RopeMode::Neox),
    memory: Memory::Kv,
    hparams,
    graph,
};

fn hparams(_: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    if hp.n_expert == 0 || hp.n_expert_used == 0 {
        return Err("expert_count and expert_used_count must be > 0".into());
    }
    Ok(())
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let moe = Moe {
        norm_w: false,
        scale_w: b.hp.expert_weights_scale,
        exp_scales: false,
        ..Moe::SOFTMAX
    };
    let n_embd = b.hp.n_embd as i64;
    super::minimax_m2::graph_with(b, moe, n_embd)
}
