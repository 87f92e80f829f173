//! `hunyuan_vl` (upstream's src/models/hunyuan-vl.cpp): hunyuan-dense's graph; when the
//! file gives M-RoPE sections the rotation is M-RoPE, whose text path (equal t/h/w
//! positions, sections that never reach the 4th) is NeoX's.

use super::super::params::ArchParams;
use super::super::RopeMode;
use super::def::{check_mrope_text, ArchDef, Keys, Memory, Rope};
use super::hunyuan_dense;

pub static DEF: ArchDef = ArchDef {
    names: &["hunyuan_vl"],
    rope: Rope::Mode(RopeMode::Neox),
    memory: Memory::Kv,
    hparams,
    graph: hunyuan_dense::graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    hunyuan_dense::hparams(k, hp)?;
    let s = k.model.hparams.rope_sections;
    if s[0] > 0 && s[1] > 0 {
        check_mrope_text(k, hp, 8)?;
    }
    Ok(())
}
