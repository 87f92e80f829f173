//! `rnd1` (upstream's src/models/rnd1.cpp): RND1, a diffusion language model shaped as
//! qwen3moe (normalised softmax-routed experts without their scales), attending both ways
//! and keeping no memory (every decode is upstream's encode): llada-moe's graph with the
//! expert weights normalised.

use super::super::builder::{BuildError, Builder, Outputs};
use super::super::RopeMode;
use super::def::{ArchDef, Memory, Rope};
use super::llada_moe::{graph_with, hparams};

pub static DEF: ArchDef = ArchDef {
    names: &["rnd1"],
    rope: Rope::Mode(RopeMode::Neox),
    memory: Memory::None,
    hparams,
    graph,
};

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    graph_with(b, true)
}
