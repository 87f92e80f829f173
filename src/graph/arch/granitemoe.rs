//! `granitemoe` (upstream's src/models/granite-moe.cpp, which runs granite's graph):
//! granite's scales with rotary embeddings on every layer (it does not read
//! `rope.scaling.finetuned`), softmax-routed experts and, when
//! `expert_shared_feed_forward_length` is set, a shared expert.

use super::super::builder::{BuildError, Builder, Outputs};
use super::super::params::ArchParams;
use super::super::RopeMode;
use super::def::{ArchDef, Keys, Memory, Rope};
use super::granite::{graph_with, Scales};

pub static DEF: ArchDef = ArchDef {
    names: &["granitemoe"],
    rope: Rope::Mode(RopeMode::Norm),
    memory: Memory::Kv,
    hparams,
    graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    hp.attention_scale = k.f32("attention.scale", 0.0);
    if k.model.meta.get_f64(&k.key("logit_scale")).is_none() {
        return Err(format!("{} is missing", k.key("logit_scale")));
    }
    Ok(())
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let keys = Keys {
        model: b.model,
        arch: &b.model.arch,
    };
    let scales = Scales {
        embedding: keys.f32("embedding_scale", 0.0),
        residual: keys.f32("residual_scale", 0.0),
        logit: keys.f32("logit_scale", 1.0),
        rope: true,
        n_ff_shexp: keys.u32("expert_shared_feed_forward_length", 0) as i64,
    };
    graph_with(b, &scales)
}
