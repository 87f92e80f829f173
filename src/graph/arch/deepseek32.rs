//! `deepseek32` (upstream's src/models/deepseek32.cpp; DeepSeek-V3.2): deepseek2's graph
//! (multi-head latent attention over the compressed cache, sigmoid-routed experts with a
//! selection bias and shared experts) with DeepSeek's sparse attention: per layer a
//! lightning indexer (`indexer.*`: 64 heads scoring every cached position against one cached
//! indexer key per token, NEOX-rotated and multiplied by the Walsh-Hadamard matrix) picks the
//! `indexer.top_k` positions each token's attention reads. The projections, FFNs and experts
//! take their per-tensor scales.

use super::super::builder::{BuildError, Builder, Outputs};
use super::super::params::{ArchParams, Indexer};
use super::super::RopeMode;
use super::deepseek2::{graph_with, Dsa};
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["deepseek32"],
    rope: Rope::Mode(RopeMode::Norm),
    memory: Memory::KvLatent,
    hparams,
    graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    k.u32_required("expert_gating_func")?;
    super::deepseek2::hparams(k, hp)?;
    // upstream fixes the indexer key's LayerNorm eps
    hp.eps_norm = 1e-6;
    hp.ext.indexer = indexer_params(k, hp)?;
    Ok(())
}

/// The indexer's sizes (`attention.indexer.head_count`, `key_length`, `top_k`, required),
/// checked as upstream's graph needs them: the rotary part fits a head, and the head is the
/// size of the Hadamard matrix upstream's cache makes for it (a power of two from 64).
pub fn indexer_params(k: &Keys, hp: &ArchParams) -> Result<Indexer, String> {
    let ix = Indexer {
        n_head: k.u32_required("attention.indexer.head_count")? as usize,
        head: k.u32_required("attention.indexer.key_length")? as usize,
        top_k: k.u32_required("attention.indexer.top_k")? as usize,
        full: Vec::new(),
        ..Default::default()
    };
    if ix.n_head == 0 || ix.top_k == 0 {
        return Err("attention.indexer.head_count and top_k must be above 0".into());
    }
    if hp.n_rot > ix.head {
        return Err(format!(
            "rope.dimension_count {} must not exceed attention.indexer.key_length {}",
            hp.n_rot, ix.head
        ));
    }
    // upstream's rotation is the largest power of two (from 64) dividing the head; any
    // other head fails its product (an assertion)
    if ix.head < 64 || !ix.head.is_power_of_two() {
        return Err(format!(
            "attention.indexer.key_length {} must be a power of two from 64 (the Hadamard rotation's size)",
            ix.head
        ));
    }
    Ok(ix)
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    graph_with(
        b,
        Some(Dsa {
            rope: RopeMode::Neox,
            norm_optional: false,
        }),
    )
}
