//! `smallthinker` (upstream's src/models/smallthinker.cpp): llama's RMS-normed block whose
//! experts are routed from the layer's input before its attention norm (pre-norm routing:
//! the router reads the residual stream, the experts the FFN-normed one), ReLU-gated
//! experts (REGLU), normalised weights, no expert scales. With a sliding window (forced to
//! 4096, the full-attention layer first in each period of 4) the layers at multiples of 4
//! rotate nothing; without one every layer rotates (NeoX).

use super::super::builder::{BuildError, Builder, Gating, Moe, MoeRoute, Outputs};
use super::super::params::ArchParams;
use super::super::{GluKind, Operand, RopeMode};
use super::def::{swa_pattern, ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["smallthinker"],
    rope: Rope::Mode(RopeMode::Neox),
    memory: Memory::Kv,
    hparams,
    graph,
};

/// Upstream's default `n_no_rope_layer_step` (set to n_layer without a window).
const NO_ROPE_STEP: usize = 4;

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    if hp.n_expert == 0 || hp.n_expert_used == 0 {
        return Err("n_expert and n_expert_used must be > 0 for SMALLTHINKER".into());
    }
    if k.u32("attention.sliding_window", 0) > 0 {
        hp.n_swa = 4096;
        hp.swa_layers = swa_pattern(k, hp.n_layer, 4, true)?;
        hp.rope_freq_base_swa = k.f32("rope.freq_base_swa", hp.rope_freq_base);
        hp.rope_freq_scale_swa = hp.rope_freq_scale;
    }
    hp.n_ff_exp = k.u32("expert_feed_forward_length", 0) as usize;
    // upstream's build_moe_ffn aborts on gating "none" (the default here)
    hp.ext.gating = match k.u32("expert_gating_func", 0) {
        1 => Gating::Softmax,
        2 => Gating::Sigmoid,
        3 => Gating::SoftmaxWeight,
        g => return Err(format!("expert_gating_func {g} is not supported")),
    };
    // (upstream reads no expert_weights_scale here: 0, no scaling)
    hp.expert_weights_scale = 0.0;
    if hp.head_k != hp.head_v || hp.n_rot != hp.head_k {
        return Err(format!(
            "n_rot {} and head sizes {}/{} must agree",
            hp.n_rot, hp.head_k, hp.head_v
        ));
    }
    Ok(())
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let n_embd = hp.n_embd as i64;
    let kq_scale = 1.0 / (hp.head_k as f32).sqrt();
    let iswa = hp.n_swa > 0;
    let moe = Moe {
        gating: hp.ext.gating,
        norm_w: true,
        scale_w: hp.expert_weights_scale,
        probs_bias: false,
        exp_scales: false,
        act: GluKind::Reglu,
        ..Moe::SOFTMAX
    };
    let (tok_embd, mut inp) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let nq = (hp.head_k * hp.n_head[il]) as i64;
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let wo = b.lw(il, "attn_output.weight", &[nq, n_embd])?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;
        let w = b.moe_weights(il, "exps", hp.n_ff_exp, hp.n_expert, moe)?;

        let mut probs = b.mul_mat_lora(w.gate_inp, inp);
        let x = b.rms_norm(inp, Some(attn_norm), hp.eps_rms);
        let (mut q, mut k, v) = b.qkv(il, x)?;
        if !iswa || il % NO_ROPE_STEP != 0 || NO_ROPE_STEP == hp.n_layer {
            (q, k) = b.rope_qk(q, k, None, hp.swa_layers[il]);
        }
        let mut cur = b.attn(il, q, k, v, wo, None, kq_scale);
        let mut res = inp;
        if il == hp.n_layer - 1 {
            cur = b.get_rows_out(cur);
            res = b.get_rows_out(res);
            probs = b.get_rows_out(probs);
        }
        let ffn_inp = b.add(cur, Operand::Node(res));
        let x = b.rms_norm(ffn_inp, Some(ffn_norm), hp.eps_rms);
        let cur = b.moe_ffn_routed(x, probs, w, hp.n_expert_used, moe, MoeRoute::default());
        inp = b.layer_out(il, cur, ffn_inp);
    }
    b.rms_output(inp, tok_embd, false)
}
