//! `ernie4_5-moe` (upstream's src/models/ernie4-5-moe.cpp): ernie4_5's graph where every
//! `interleave_moe_layer_step`-th layer past `leading_dense_block_count` is a
//! softmax-routed mixture of experts (see [`super::ernie4_5::graph_with`]).

use super::super::builder::{BuildError, Builder, Outputs};
use super::super::params::ArchParams;
use super::super::RopeMode;
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["ernie4_5-moe"],
    rope: Rope::Mode(RopeMode::Norm),
    memory: Memory::Kv,
    hparams,
    graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    hp.n_ff_exp = k.u32_required("expert_feed_forward_length")? as usize;
    let e = &mut hp.ext;
    e.n_ff_shexp = k.u32("expert_shared_feed_forward_length", 0) as usize;
    e.n_moe_layer_step = k.u32_required("interleave_moe_layer_step")? as usize;
    e.n_layer_dense_lead = k.u32("leading_dense_block_count", 0) as usize;
    if e.n_moe_layer_step == 0 {
        // upstream asserts (aborts) here
        return Err("interleave_moe_layer_step must be > 0".into());
    }
    if hp.n_expert == 0 || hp.n_expert_used == 0 {
        return Err("expert_count and expert_used_count must be > 0".into());
    }
    Ok(())
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    super::ernie4_5::graph_with(b, true)
}
