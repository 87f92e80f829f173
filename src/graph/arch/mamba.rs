//! `mamba` (upstream's src/models/mamba.cpp): RMS-normed Mamba-1 mixers (SSM_CONV, the
//! selective SSM_SCAN with a decay per state element, SiLU gate) with residuals, no
//! attention, no rotary embedding; recurrent states instead of a KV cache.

use super::super::builder::{BuildError, Builder, Outputs};
use super::super::params::ArchParams;
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["mamba"],
    rope: Rope::None,
    memory: Memory::Recurrent,
    hparams,
    graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    let ssm = k.ssm()?;
    if ssm.d_inner != 2 * hp.n_embd {
        return Err("only an expansion factor of 2 is supported for now".into());
    }
    hp.ext.ssm = ssm;
    hp.ext.recurrent_layers = vec![true; hp.n_layer];
    Ok(())
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    b.mamba_graph(false)
}
