//! `bloom` (upstream's src/models/bloom.cpp): gpt2's graph without position embeddings but
//! with ALiBi (a fixed maximum bias of 8) and a LayerNorm of the token embeddings
//! (`token_embd_norm`).

use super::super::builder::{BuildError, Builder, Outputs};
use super::super::params::ArchParams;
use super::def::{ArchDef, Keys, Memory, Rope};
use super::gpt2::{graph_with, Classic};

pub static DEF: ArchDef = ArchDef {
    names: &["bloom"],
    rope: Rope::None,
    memory: Memory::Kv,
    hparams,
    graph,
};

fn hparams(_: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    // upstream: "TODO: become GGUF KV parameter"; the file's key is not read
    hp.ext.max_alibi_bias = 8.0;
    Ok(())
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let c = Classic {
        pos_embd: None,
        tok_norm: true,
        bias_required: true,
        ..Classic::GPT2
    };
    graph_with(b, c)
}
