//! `mistral3` (upstream's src/models/mistral3.cpp): llama's graph, with the yarn betas and
//! llama 4's attention temperature tuning read from the file.

use super::super::params::ArchParams;
use super::super::RopeMode;
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["mistral3"],
    rope: Rope::Mode(RopeMode::Norm),
    memory: Memory::Kv,
    hparams,
    graph: super::llama::graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    hp.yarn_beta_fast = k.f32("rope.scaling.yarn_beta_fast", 32.0);
    hp.yarn_beta_slow = k.f32("rope.scaling.yarn_beta_slow", 1.0);
    hp.attn_temp_scale = k.f32("attention.temperature_scale", 0.0);
    if hp.attn_temp_scale != 0.0 && hp.n_ctx_orig_yarn == 0 {
        return Err("invalid n_ctx_orig_yarn for attention temperature scaling".into());
    }
    Ok(())
}
