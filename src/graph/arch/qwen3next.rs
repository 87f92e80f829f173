//! `qwen3next` (upstream's src/models/qwen3next.cpp, Qwen3-Next): qwen35moe's graph (see
//! `qwen35.rs`) with plain NEOX rotary embeddings and its linear-attention projections from
//! `attn_qkv`/`attn_gate` or the legacy fused `ssm_in`, `ssm_ba`, without per-tensor scales,
//! Q/K heads repeated over the V heads.

use super::super::builder::{BuildError, Builder, Outputs};
use super::super::delta_net::QwenGdn;
use super::super::RopeMode;
use super::def::{ArchDef, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["qwen3next"],
    rope: Rope::Mode(RopeMode::Neox),
    memory: Memory::Hybrid,
    hparams: super::qwen35::hparams,
    graph,
};

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    super::qwen35::graph_with(b, QwenGdn::Qwen3Next)
}
