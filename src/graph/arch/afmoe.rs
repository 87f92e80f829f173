//! `afmoe` (upstream's src/models/afmoe.cpp; Arcee's AFM MoE): embeddings times
//! sqrt(n_embd), pre- and post-norms around attention and FFN (RMS), per-head RMS norms
//! of Q and K, NeoX rotary embeddings on every layer but each 4th (the window pattern's
//! base on sliding-window layers), the attention output gated by sigmoid(`attn_gate`·x)
//! before the output projection, `leading_dense_block_count` dense layers, then experts
//! routed by `expert_gating_func` (none: sigmoid) with the `exp_probs_b` selection bias
//! plus `expert_shared_count` shared experts.

use super::super::builder::{BuildError, Builder, Ffn, Gating, Moe, Outputs};
use super::super::params::ArchParams;
use super::super::{Operand, RopeMode};
use super::def::{gating_or, ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["afmoe"],
    rope: Rope::Mode(RopeMode::Neox),
    memory: Memory::Kv,
    hparams,
    graph,
};

/// Upstream's default `n_no_rope_layer_step` (afmoe does not read the key).
const NO_ROPE_STEP: usize = 4;

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    hp.n_ff_exp = k.u32_required("expert_feed_forward_length")? as usize;
    hp.expert_weights_scale = k.f32("expert_weights_scale", 0.0);
    hp.expert_weights_norm = k.bool("expert_weights_norm", false);
    let e = &mut hp.ext;
    e.n_layer_dense_lead = k.u32("leading_dense_block_count", 0) as usize;
    e.n_expert_shared = k.u32_required("expert_shared_count")? as usize;
    e.gating = gating_or(k, Gating::Sigmoid)?;
    hp.n_swa = k.u32("attention.sliding_window", 0);
    if hp.n_swa > 0 {
        hp.swa_layers = k.swa_layers(hp.n_layer, 4)?;
        hp.rope_freq_base_swa = k.f32("rope.freq_base_swa", hp.rope_freq_base);
        hp.rope_freq_scale_swa = hp.rope_freq_scale;
    }
    if hp.head_k != hp.head_v {
        return Err(format!("head sizes {}/{} must agree", hp.head_k, hp.head_v));
    }
    Ok(())
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let e = &hp.ext;
    let n_embd = hp.n_embd as i64;
    let n_exp = hp.n_expert as i64;
    let kq_scale = 1.0 / (hp.head_v as f32).sqrt();
    let plain = Ffn {
        scaled: false,
        ..Ffn::SWIGLU
    };
    let (tok_embd, inp) = b.inp_embd()?;
    let mut inp = b.scale(inp, (hp.n_embd as f32).sqrt());
    for il in 0..hp.n_layer {
        let nq = (hp.head_k * hp.n_head[il]) as i64;
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let attn_post_norm = b.lw(il, "post_attention_norm.weight", &[n_embd])?;
        let w_gate = b.lw(il, "attn_gate.weight", &[n_embd, nq])?;
        let wo = b.lw(il, "attn_output.weight", &[nq, n_embd])?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;
        let ffn_post_norm = b.lw(il, "post_ffw_norm.weight", &[n_embd])?;

        let x = b.rms_norm(inp, Some(attn_norm), hp.eps_rms);
        let (q, k, v) = b.qkv(il, x)?;
        let gate = b.mul_mat_lora(w_gate, x);
        let (mut q, mut k) = b.qk_norm(il, q, k)?;
        if (il + 1) % NO_ROPE_STEP != 0 {
            (q, k) = b.rope_qk(q, k, None, hp.swa_layers[il]);
        }
        let kqv = b.attn_kqv(il, q, k, v, kq_scale, None);
        let gate = b.sigmoid(gate);
        let gated = b.mul(kqv, Operand::Node(gate));
        let cur = b.mul_mat(wo, gated);
        let mut cur = b.rms_norm(cur, Some(attn_post_norm), hp.eps_rms);
        let mut res = inp;
        if il == hp.n_layer - 1 {
            cur = b.get_rows_out(cur);
            res = b.get_rows_out(res);
        }
        let ffn_inp = b.add(cur, Operand::Node(res));
        let x = b.rms_norm(ffn_inp, Some(ffn_norm), hp.eps_rms);
        let cur = if il >= e.n_layer_dense_lead {
            // upstream requires the selection bias here
            b.lw(il, "exp_probs_b.bias", &[n_exp])?;
            let moe = Moe {
                gating: e.gating,
                norm_w: hp.expert_weights_norm,
                scale_w: hp.expert_weights_scale,
                probs_bias: true,
                exp_scales: false,
                ..Moe::SOFTMAX
            };
            if e.n_expert_shared > 0 {
                let n_ff_shexp = hp.n_ff_exp * e.n_expert_shared;
                b.moe_shared_layer(il, x, hp.n_ff_exp, moe, n_ff_shexp, plain)?
            } else {
                b.moe_layer(il, x, hp.n_ff_exp, moe)?
            }
        } else {
            b.ffn_layer(il, x, plain)?
        };
        let cur = b.rms_norm(cur, Some(ffn_post_norm), hp.eps_rms);
        inp = b.layer_out(il, cur, ffn_inp);
    }
    b.rms_output(inp, tok_embd, false)
}
