//! `mamba2` (upstream's src/models/mamba2.cpp, graph in mamba.cpp): mamba's layers with
//! Mamba-2 mixers (one decay per head, grouped B/C, a grouped RMS norm before the output).

use super::super::builder::{BuildError, Builder, Outputs};
use super::super::params::ArchParams;
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["mamba2"],
    rope: Rope::None,
    memory: Memory::Recurrent,
    hparams,
    graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    hp.ext.ssm = k.ssm()?;
    hp.ext.recurrent_layers = vec![true; hp.n_layer];
    Ok(())
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    b.mamba_graph(true)
}
