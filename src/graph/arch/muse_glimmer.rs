//! `muse-glimmer` (upstream's src/models/muse-glimmer.cpp): the embeddings RMS-normed
//! (no weight), pre- and post-norms around attention and FFN (the post-norms with eps
//! 1e-8), per-head RMS norms of Q and K, NORM rotation on the sliding-window layers only
//! (their base; full-attention layers rotate nothing), the attention output gated by
//! sigmoid(`attn_gate`·x) before the output projection, a dense SwiGLU FFN without
//! scales, logits times `logit_scale`, then the final soft-cap when the file gives one.

use super::super::builder::{BuildError, Builder, Ffn, Outputs};
use super::super::params::ArchParams;
use super::super::{Operand, RopeMode};
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["muse-glimmer"],
    rope: Rope::Mode(RopeMode::Norm),
    memory: Memory::Kv,
    hparams,
    graph,
};

/// The post-attention and post-FFN norms' epsilon (upstream's constant).
const POST_NORM_EPS: f32 = 1e-8;

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    hp.n_swa = k.u32_required("attention.sliding_window")?;
    hp.final_logit_softcap = k.f32("final_logit_softcapping", 30.0);
    k.f32_opt("logit_scale")
        .ok_or_else(|| format!("key not found in model: {}", k.key("logit_scale")))?;
    hp.rope_freq_base_swa = k.f32("rope.freq_base_swa", hp.rope_freq_base);
    // (upstream leaves the window layers' scale at its default, 1)
    hp.rope_freq_scale_swa = 1.0;
    hp.swa_layers = k.swa_layers(hp.n_layer, 4)?;
    if hp.head_k != hp.head_v {
        return Err(format!("head sizes {}/{} must agree", hp.head_k, hp.head_v));
    }
    Ok(())
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let n_embd = hp.n_embd as i64;
    let n_vocab = hp.n_vocab as i64;
    let kq_scale = 1.0 / (hp.head_k as f32).sqrt();
    let key = format!("{}.logit_scale", b.model.arch);
    let logit_scale = b.model.meta.get_f64(&key).unwrap_or(0.0) as f32;
    let plain = Ffn {
        scaled: false,
        ..Ffn::SWIGLU
    };
    let (_, inp) = b.inp_embd()?;
    let mut inp = b.rms_norm(inp, None, hp.eps_rms);
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
        if hp.swa_layers[il] {
            (q, k) = b.rope_qk(q, k, None, true);
        }
        let kqv = b.attn_kqv(il, q, k, v, kq_scale, None);
        let gate = b.sigmoid(gate);
        let gated = b.mul(kqv, Operand::Node(gate));
        let cur = b.mul_mat(wo, gated);
        let cur = b.rms_norm(cur, Some(attn_post_norm), POST_NORM_EPS);
        let ffn_inp = b.residual(il, cur, inp);
        let x = b.rms_norm(ffn_inp, Some(ffn_norm), hp.eps_rms);
        let cur = b.ffn_layer(il, x, plain)?;
        let cur = b.rms_norm(cur, Some(ffn_post_norm), POST_NORM_EPS);
        inp = b.layer_out(il, cur, ffn_inp);
    }
    let norm = b.weight("output_norm.weight", &[n_embd])?;
    let output = b.weight("output.weight", &[n_embd, n_vocab])?;
    let embd = b.rms_norm(inp, Some(norm), hp.eps_rms);
    let logits = b.mul_mat(output, embd);
    let mut logits = b.scale(logits, logit_scale);
    let cap = hp.final_logit_softcap;
    if cap != 0.0 {
        logits = b.scale(logits, 1.0 / cap);
        logits = b.tanh(logits);
        logits = b.scale(logits, cap);
    }
    Ok(Outputs { logits, embd })
}
