//! `ernie4_5` (upstream's src/models/ernie4-5.cpp): llama's structure with NORM rotary
//! embeddings and q/k/v biases; `attn_output.bias`, which upstream loads, is not added;
//! the FFN takes no per-tensor scales. Experts in the file are ignored (only
//! `ernie4_5-moe` reads them).

use super::super::blocks::{PreNormAttn, QkNorm};
use super::super::builder::{BuildError, Builder, Ffn, Moe, Outputs};
use super::super::RopeMode;
use super::def::{no_hparams, ArchDef, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["ernie4_5"],
    rope: Rope::Mode(RopeMode::Norm),
    memory: Memory::Kv,
    hparams: no_hparams,
    graph,
};

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    graph_with(b, false)
}

/// The graph of ernie4_5 and, with `moe`, of ernie4_5-moe: layer `il` is a mixture of
/// experts when `il >= leading_dense_block_count` and `(il + 1) % interleave_moe_layer_step
/// == 0` (softmax routing, normalised weights, the optional `exp_probs_b` selection bias,
/// shared experts of `expert_shared_feed_forward_length` rows when > 0).
pub fn graph_with(b: &mut Builder, moe: bool) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let e = &hp.ext;
    let n_embd = hp.n_embd as i64;
    let head = hp.head_k;
    if hp.head_v != head || hp.n_rot != head {
        return Err(BuildError::Invalid(format!(
            "n_rot {} and head sizes {}/{} must agree",
            hp.n_rot, hp.head_k, hp.head_v
        )));
    }
    let kq_scale = 1.0 / (head as f32).sqrt();
    let plain = Ffn {
        scaled: false,
        ..Ffn::SWIGLU
    };
    let (tok_embd, mut inp) = b.inp_embd()?;
    let attn = PreNormAttn {
        rope_freqs: None,
        kq_scale,
        qk_norm: QkNorm::None,
        out_bias: false,
    };
    for il in 0..hp.n_layer {
        let ffn_inp = b.pre_norm_attn(il, inp, attn)?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;
        let x = b.rms_norm(ffn_inp, Some(ffn_norm), hp.eps_rms);
        let is_moe = moe && il >= e.n_layer_dense_lead && (il + 1) % e.n_moe_layer_step == 0;
        let cur = if is_moe {
            let m = Moe {
                scale_w: hp.expert_weights_scale,
                probs_bias: true,
                exp_scales: false,
                ..Moe::SOFTMAX
            };
            if e.n_ff_shexp > 0 {
                b.moe_shared_layer(il, x, hp.n_ff_exp, m, e.n_ff_shexp, plain)?
            } else {
                b.moe_layer(il, x, hp.n_ff_exp, m)?
            }
        } else {
            b.ffn_layer(il, x, plain)?
        };
        inp = b.layer_out(il, cur, ffn_inp);
    }
    b.rms_output(inp, tok_embd, false)
}
