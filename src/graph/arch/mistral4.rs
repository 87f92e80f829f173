//! `mistral4` (upstream's src/models/mistral4.cpp): deepseek2's hyperparameters, tensors
//! and graph (multi-head latent attention, sigmoid-routed experts with a selection bias,
//! shared experts, dense lead layers); the experts' gate and up may come fused
//! (`ffn_gate_up_exps`).

use super::super::RopeMode;
use super::def::{ArchDef, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["mistral4"],
    rope: Rope::Mode(RopeMode::Norm),
    memory: Memory::KvLatent,
    hparams: super::deepseek2::hparams,
    graph: super::deepseek2::graph,
};
