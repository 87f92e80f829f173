//! `hy_v3` (upstream's src/models/hy-v3.cpp; Hunyuan V3): qwen3-moe's attention (per-head
//! RMS norms of Q and K before NeoX rotation); layers without a router (`ffn_gate_inp`)
//! run a dense FFN, the others experts routed by `expert_gating_func` (none: sigmoid) with
//! the `exp_probs_b` selection bias and their scales, plus an always-on shared expert. The
//! MTP block (`nextn_predict_layers`) is not run, as upstream's main graph.

use super::super::blocks::{PreNormAttn, QkNorm};
use super::super::builder::{BuildError, Builder, Ffn, Gating, Moe, Outputs};
use super::super::params::ArchParams;
use super::super::{Operand, RopeMode};
use super::def::{gating_or, ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["hy_v3"],
    rope: Rope::Mode(RopeMode::Neox),
    memory: Memory::Kv,
    hparams,
    graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    hp.n_ff_exp = k.u32_required("expert_feed_forward_length")? as usize;
    hp.ext.n_ff_shexp = k.u32("expert_shared_feed_forward_length", 0) as usize;
    hp.ext.gating = gating_or(k, Gating::Sigmoid)?;
    hp.expert_weights_scale = k.f32("expert_weights_scale", 0.0);
    hp.expert_weights_norm = k.bool("expert_weights_norm", false);
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
    let n_exp = hp.n_expert as i64;
    let n_ff_exp = if hp.n_ff_exp > 0 {
        hp.n_ff_exp
    } else {
        hp.n_ff[0] / hp.n_expert_used.max(1)
    };
    let n_ff_shexp = if hp.ext.n_ff_shexp > 0 {
        hp.ext.n_ff_shexp
    } else {
        n_ff_exp
    };
    let attn = PreNormAttn {
        rope_freqs: None,
        kq_scale: 1.0 / (hp.head_k as f32).sqrt(),
        qk_norm: QkNorm::BeforeRope,
        out_bias: false,
    };
    let moe = Moe {
        gating: hp.ext.gating,
        norm_w: hp.expert_weights_norm,
        scale_w: hp.expert_weights_scale,
        probs_bias: false,
        exp_scales: true,
        ..Moe::SOFTMAX
    };
    let (tok_embd, mut inp) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;
        let ffn_inp = b.pre_norm_attn(il, inp, attn)?;
        let x = b.rms_norm(ffn_inp, Some(ffn_norm), hp.eps_rms);
        let router = format!("blk.{il}.ffn_gate_inp.weight");
        let cur = if !b.has(&router) {
            b.ffn_layer(il, x, Ffn::SWIGLU)?
        } else {
            // upstream's loader creates the dense FFN beside the experts on every layer
            let n_ff = hp.n_ff[il] as i64;
            b.declare_unread(&format!("blk.{il}.ffn_gate.weight"), &[n_embd, n_ff]);
            b.declare_unread(&format!("blk.{il}.ffn_down.weight"), &[n_ff, n_embd]);
            b.declare_unread(&format!("blk.{il}.ffn_up.weight"), &[n_embd, n_ff]);
            let mut w = b.moe_weights(il, "exps", n_ff_exp, hp.n_expert, moe)?;
            // (this file's selection bias has no ".bias" suffix)
            w.probs_b = b.lw_opt(il, "exp_probs_b", &[n_exp])?;
            let routed = b.moe_ffn(x, w, hp.n_expert_used, moe);
            let shared = b.ffn_named(il, x, "_shexp", n_ff_shexp, Ffn::SWIGLU)?;
            b.add(routed, Operand::Node(shared))
        };
        inp = b.layer_out(il, cur, ffn_inp);
    }
    b.rms_output(inp, tok_embd, false)
}
