//! `phimoe` (upstream's src/models/phimoe.cpp, which runs phi3's graph): phi3's layers
//! with biased RMS norms, the output bias, and softmax-routed experts of
//! `feed_forward_length` rows with normalised weights in every layer.

use super::super::params::ArchParams;
use super::super::RopeMode;
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["phimoe"],
    rope: Rope::Mode(RopeMode::Neox),
    memory: Memory::Kv,
    hparams,
    graph: super::phi3::graph,
};

fn hparams(_: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    if hp.n_expert == 0 || hp.n_expert_used == 0 {
        return Err("expert_count and expert_used_count must be > 0".into());
    }
    Ok(())
}
