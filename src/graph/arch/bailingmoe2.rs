//! `bailingmoe2` (upstream's src/models/bailingmoe2.cpp; Ling/Ring 2.0): dots1's layer
//! shape — per-head q/k RMS norms before NeoX rotary embeddings (Q, K and V from a fused
//! `attn_qkv`), `leading_dense_block_count` dense layers, experts routed by
//! `expert_gating_func` with the optional `exp_probs_b` selection bias — with shared
//! experts of (`expert_shared_feed_forward_length`, else `expert_feed_forward_length`) ×
//! `expert_shared_count` rows. MTP layers (`nextn_predict_layers`) stay unused.

use super::super::builder::{BuildError, Builder, Outputs};
use super::super::params::ArchParams;
use super::super::RopeMode;
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["bailingmoe2"],
    rope: Rope::Mode(RopeMode::Neox),
    memory: Memory::Kv,
    hparams,
    graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    hp.n_ff_exp = k.u32_required("expert_feed_forward_length")? as usize;
    hp.expert_weights_scale = k.f32("expert_weights_scale", 0.0);
    hp.expert_weights_norm = k.bool("expert_weights_norm", false);
    k.u32_required("expert_gating_func")?;
    let e = &mut hp.ext;
    e.n_layer_dense_lead = k.u32("leading_dense_block_count", 0) as usize;
    e.n_ff_shexp = k.u32("expert_shared_feed_forward_length", 0) as usize;
    e.n_expert_shared = k.u32_required("expert_shared_count")? as usize;
    e.gating = super::dots1::gating(k)?;
    if hp.n_expert == 0 || hp.n_expert_used == 0 {
        return Err("expert_count and expert_used_count must be > 0".into());
    }
    Ok(())
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let per_shared = match hp.ext.n_ff_shexp {
        0 => hp.n_ff_exp,
        n => n,
    };
    super::dots1::graph_with(b, per_shared * hp.ext.n_expert_shared)
}
