//! `deci` (upstream's src/models/deci.cpp): llama's graph per layer, where Nemotron-NAS
//! files may give a layer no attention (`head_count` 0), a linear attention (`head_count_kv`
//! 0: only `attn_output`) or no FFN (`feed_forward_length` 0). Uniform files run llama's
//! graph; files with such layers are refused (not supported by the engine yet).

use super::super::builder::{BuildError, Builder, Ffn, Outputs};
use super::super::params::ArchParams;
use super::super::RopeMode;
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["deci"],
    rope: Rope::Mode(RopeMode::Norm),
    memory: Memory::Kv,
    hparams,
    graph,
};

fn hparams(_: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    for il in 0..hp.n_layer {
        if hp.n_head[il] == 0 || hp.n_head_kv[il] == 0 || hp.n_ff[il] == 0 {
            return Err(format!(
                "layer {il} has no attention, a linear attention or no FFN: not supported yet"
            ));
        }
    }
    Ok(())
}

/// llama's graph; upstream's `build_ffn` gets the FFN biases, not the per-tensor scales.
fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let ffn = Ffn {
        bias: true,
        scaled: false,
        ..Ffn::SWIGLU
    };
    super::llama::graph_ffn(b, ffn)
}
