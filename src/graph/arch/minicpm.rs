//! `minicpm` (upstream's src/models/minicpm.cpp): granite's graph with MiniCPM's scales:
//! embeddings times `embedding_scale` (default 12), residual branches times
//! `residual_scale` (default 1.4/sqrt(n_layer)), logits divided by `logit_scale` (default
//! 256/n_embd); rotary embeddings on every layer; dense or softmax-routed experts.

use super::super::builder::{BuildError, Builder, Outputs};
use super::super::RopeMode;
use super::def::{no_hparams, ArchDef, Keys, Memory, Rope};
use super::granite::{graph_with, Scales};

pub static DEF: ArchDef = ArchDef {
    names: &["minicpm"],
    rope: Rope::Mode(RopeMode::Norm),
    memory: Memory::Kv,
    hparams: no_hparams,
    graph,
};

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let keys = Keys {
        model: b.model,
        arch: &b.model.arch,
    };
    let default_logit = if hp.n_embd > 0 {
        256.0 / hp.n_embd as f32
    } else {
        1.0
    };
    let scales = Scales {
        embedding: keys.f32("embedding_scale", 12.0),
        residual: keys.f32("residual_scale", 1.4 / (hp.n_layer as f32).sqrt()),
        logit: keys.f32("logit_scale", default_logit),
        rope: true,
        n_ff_shexp: 0,
    };
    graph_with(b, &scales)
}
