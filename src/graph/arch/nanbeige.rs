//! `nanbeige` (upstream's src/models/nanbeige.cpp): llama's graph (NORM rotary embeddings
//! with `rope_freqs`, optional biases). Looped models (`num_loops` > 1, the physical layers
//! run several times) are refused: the engine does not repeat layers yet.

use super::super::params::ArchParams;
use super::super::RopeMode;
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["nanbeige"],
    rope: Rope::Mode(RopeMode::Norm),
    memory: Memory::Kv,
    hparams,
    graph: super::llama::graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    let loops = k.u32("num_loops", 1);
    if loops > 1 {
        return Err(format!(
            "num_loops {loops}: looped layers are not supported by the engine yet"
        ));
    }
    hp.attention_scale = k.f32("attention.scale", 0.0);
    Ok(())
}
