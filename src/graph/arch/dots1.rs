//! `dots1` (upstream's src/models/dots1.cpp): llama's attention with per-head q/k RMS
//! norms before NeoX rotary embeddings, `leading_dense_block_count` dense layers, then
//! experts routed by `expert_gating_func` (with the optional `exp_probs_b` selection
//! bias) plus shared experts of `expert_shared_count` × `expert_feed_forward_length` rows.

use super::super::blocks::{PreNormAttn, QkNorm};
use super::super::builder::{BuildError, Builder, Ffn, Gating, Moe, Outputs};
use super::super::params::ArchParams;
use super::super::{GluKind, RopeMode};
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["dots1"],
    rope: Rope::Mode(RopeMode::Neox),
    memory: Memory::Kv,
    hparams,
    graph,
};

/// `expert_gating_func` as upstream's `build_moe_ffn` takes it (absent or 0, "none",
/// aborts there: an error here).
pub fn gating(k: &Keys) -> Result<Gating, String> {
    match k.u32("expert_gating_func", 0) {
        1 => Ok(Gating::Softmax),
        2 => Ok(Gating::Sigmoid),
        3 => Ok(Gating::SoftmaxWeight),
        g => Err(format!("expert_gating_func {g} is not supported")),
    }
}

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    hp.n_ff_exp = k.u32_required("expert_feed_forward_length")? as usize;
    hp.expert_weights_scale = k.f32("expert_weights_scale", 0.0);
    hp.expert_weights_norm = k.bool("expert_weights_norm", false);
    let e = &mut hp.ext;
    e.n_expert_shared = k.u32_required("expert_shared_count")? as usize;
    e.n_layer_dense_lead = k.u32("leading_dense_block_count", 0) as usize;
    e.gating = gating(k)?;
    if hp.n_expert == 0 || hp.n_expert_used == 0 {
        return Err("expert_count and expert_used_count must be > 0".into());
    }
    Ok(())
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    graph_with(b, hp.n_ff_exp * hp.ext.n_expert_shared)
}

/// The graph of dots1 and of bailingmoe2, whose shared experts have `n_ff_shexp` rows.
pub fn graph_with(b: &mut Builder, n_ff_shexp: usize) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let e = &hp.ext;
    let n_embd = hp.n_embd as i64;
    let head = hp.head_k;
    let kq_scale = 1.0 / (head as f32).sqrt();
    let plain = Ffn {
        scaled: false,
        ..Ffn::SWIGLU
    };
    let (_, mut inp) = b.inp_embd()?;
    let attn = PreNormAttn {
        rope_freqs: None,
        kq_scale,
        qk_norm: QkNorm::BeforeRope,
        out_bias: true,
    };
    for il in 0..hp.n_layer {
        let ffn_inp = b.pre_norm_attn(il, inp, attn)?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;
        let x = b.rms_norm(ffn_inp, Some(ffn_norm), hp.eps_rms);
        let cur = if il < e.n_layer_dense_lead {
            b.ffn_layer(il, x, plain)?
        } else {
            let moe = Moe {
                gating: e.gating,
                norm_w: hp.expert_weights_norm,
                scale_w: hp.expert_weights_scale,
                probs_bias: true,
                exp_scales: false,
                groups: (0, 0),
                act: GluKind::Swiglu,
                biases: false,
            };
            b.moe_shared_layer(il, x, hp.n_ff_exp, moe, n_ff_shexp, plain)?
        };
        inp = b.layer_out(il, cur, ffn_inp);
    }
    let n_vocab = hp.n_vocab as i64;
    let output = b.weight("output.weight", &[n_embd, n_vocab])?;
    let norm = b.weight("output_norm.weight", &[n_embd])?;
    let embd = b.rms_norm(inp, Some(norm), hp.eps_rms);
    let logits = b.mul_mat(output, embd);
    Ok(Outputs { logits, embd })
}
