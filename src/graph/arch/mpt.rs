//! `mpt` (upstream's src/models/mpt.cpp): gpt2's graph with optional biases and position
//! embeddings, ALiBi (`attention.max_alibi_bias`), Q/K/V clamped (`attention.clamp_kqv`),
//! LayerNorms of the whole Q and K rows when the file has `attn_q_norm`, and the FFN's
//! activation divided by its AWQ scales (`ffn.act.scales`) when present.

use super::super::builder::{BuildError, Builder, Outputs};
use super::super::params::ArchParams;
use super::def::{ArchDef, Keys, Memory, Rope};
use super::gpt2::{graph_with, Classic};

pub static DEF: ArchDef = ArchDef {
    names: &["mpt"],
    rope: Rope::None,
    memory: Memory::Kv,
    hparams,
    graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    hp.ext.clamp_kqv = k.f32("attention.clamp_kqv", 0.0);
    hp.ext.max_alibi_bias = k.f32("attention.max_alibi_bias", 0.0);
    Ok(())
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let c = Classic {
        pos_embd: Some(false),
        tok_norm: false,
        bias_required: false,
        qk_norm: true,
        fused_qkv: false,
        ..Classic::GPT2
    };
    graph_with(b, c)
}
