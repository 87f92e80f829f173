//! `maple` (upstream's src/models/maple.cpp): qwen3-moe's block — RMS norms, per-head RMS
//! norms of Q and K — with sliding-window layers (the file's pattern array) that alone
//! rotate (NeoX, their own rotary width, base and scale; full-attention layers rotate
//! nothing), and softmax-routed experts (weights normalised, no scales) whose SwiGLU clamps
//! at the layer's `swiglu_clamp_exp` when it is > 0 (ggml's SWIGLU_CLAMP).

use super::super::builder::{BuildError, Builder, Gating, Moe, Outputs};
use super::super::params::ArchParams;
use super::super::{GluKind, RopeMode};
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["maple"],
    rope: Rope::Mode(RopeMode::Neox),
    memory: Memory::Kv,
    hparams,
    graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    hp.n_swa = k.u32_required("attention.sliding_window")?;
    hp.n_ff_exp = k.u32_required("expert_feed_forward_length")? as usize;
    let pattern = k.key("attention.sliding_window_pattern");
    if k.model.meta.get_array(&pattern).is_none() {
        return Err(format!("key not found in model: {pattern}"));
    }
    hp.swa_layers = k.swa_layers(hp.n_layer, 0)?;
    hp.rope_freq_base_swa = k.f32("rope.freq_base_swa", hp.rope_freq_base);
    hp.rope_freq_scale_swa = hp.rope_freq_scale;
    clamp_limits(k, hp.n_layer)?;
    if hp.n_expert == 0 || hp.n_expert_used == 0 {
        return Err("n_expert and n_expert_used must be > 0 for Maple".into());
    }
    if hp.head_k != hp.head_v {
        return Err(format!("head sizes {}/{} must agree", hp.head_k, hp.head_v));
    }
    Ok(())
}

/// Each layer's `swiglu_clamp_exp` (required).
fn clamp_limits(k: &Keys, n_layer: usize) -> Result<Vec<f32>, String> {
    let n_all = k.model.hparams.n_layer_all as usize;
    Ok(k.f32_per_layer("swiglu_clamp_exp", n_all)?[..n_layer].to_vec())
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let n_embd = hp.n_embd as i64;
    let n_vocab = hp.n_vocab as i64;
    let head = hp.head_k;
    let kq_scale = 1.0 / (head as f32).sqrt();
    let keys = Keys {
        model: b.model,
        arch: &b.model.arch,
    };
    let limits = clamp_limits(&keys, hp.n_layer).map_err(BuildError::Invalid)?;
    let key = format!("{}.rope.dimension_count_swa", b.model.arch);
    let n_rot_swa = b.model.meta.get_u32(&key).map_or(hp.n_rot, |v| v as usize);
    let (_, mut inp) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let nq = (head * hp.n_head[il]) as i64;
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let wo = b.lw(il, "attn_output.weight", &[nq, n_embd])?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;

        let x = b.rms_norm(inp, Some(attn_norm), hp.eps_rms);
        let (q, k, v) = b.qkv(il, x)?;
        let (mut q, mut k) = b.qk_norm(il, q, k)?;
        if hp.swa_layers[il] {
            let mut rope = b.rope_params(true);
            rope.n_rot = n_rot_swa;
            q = b.rope_with(q, head, rope, None);
            k = b.rope_with(k, head, rope, None);
        }
        let cur = b.attn(il, q, k, v, wo, None, kq_scale);
        b.cb_output(cur, "attn_out", Some(il));
        let ffn_inp = b.residual(il, cur, inp);
        let x = b.rms_norm(ffn_inp, Some(ffn_norm), hp.eps_rms);
        let limit = limits[il];
        let moe = Moe {
            gating: Gating::Softmax,
            norm_w: true,
            scale_w: 1.0,
            probs_bias: false,
            exp_scales: false,
            act: if limit > 1e-6 {
                GluKind::SwigluClamp(limit)
            } else {
                GluKind::Swiglu
            },
            ..Moe::SOFTMAX
        };
        let cur = b.moe_layer(il, x, hp.n_ff_exp, moe)?;
        inp = b.layer_out(il, cur, ffn_inp);
    }
    let norm = b.weight("output_norm.weight", &[n_embd])?;
    let output = b.weight("output.weight", &[n_embd, n_vocab])?;
    let embd = b.rms_norm(inp, Some(norm), hp.eps_rms);
    let logits = b.mul_mat(output, embd);
    Ok(Outputs { logits, embd })
}
