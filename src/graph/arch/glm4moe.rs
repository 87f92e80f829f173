//! `glm4moe` (upstream's src/models/glm4-moe.cpp; GLM-4.5 … 4.7): llama's attention with
//! q/k/v biases and optional per-head q/k RMS norms, NeoX rotary embeddings (M-RoPE's text
//! path when the file gives rope sections), a post-attention norm before the FFN,
//! `leading_dense_block_count` dense layers, then sigmoid-gated experts with the
//! `exp_probs_b` selection bias plus shared experts.

use super::super::builder::{BuildError, Builder, Ffn, Gating, Moe, Outputs};
use super::super::params::ArchParams;
use super::super::{GluKind, RopeMode};
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["glm4moe"],
    rope: Rope::Mode(RopeMode::Neox),
    memory: Memory::Kv,
    hparams,
    graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    hp.n_ff_exp = k.u32("expert_feed_forward_length", 0) as usize;
    hp.expert_weights_scale = k.f32("expert_weights_scale", 0.0);
    hp.expert_weights_norm = k.bool("expert_weights_norm", false);
    let e = &mut hp.ext;
    e.mrope_sections = k.mrope_sections();
    e.n_expert_shared = k.u32_required("expert_shared_count")? as usize;
    e.n_layer_dense_lead = k.u32("leading_dense_block_count", 0) as usize;
    e.gating = match k.u32("expert_gating_func", 0) {
        0 | 2 => Gating::Sigmoid,
        1 => Gating::Softmax,
        3 => Gating::SoftmaxWeight,
        g => return Err(format!("expert_gating_func {g} is not supported yet")),
    };
    if hp.n_expert == 0 || hp.n_expert_used == 0 {
        return Err("expert_count and expert_used_count must be > 0".into());
    }
    if hp.n_ff_exp == 0 {
        hp.n_ff_exp = hp.n_ff.first().copied().unwrap_or(0) / hp.n_expert_used;
    }
    Ok(())
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let e = &hp.ext;
    let n_embd = hp.n_embd as i64;
    let head = hp.head_k;
    let kq_scale = 1.0 / (head as f32).sqrt();
    let (tok_embd, mut inp) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let nq = (head * hp.n_head[il]) as i64;
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let wo = b.lw(il, "attn_output.weight", &[nq, n_embd])?;
        let post_norm = b.lw(il, "post_attention_norm.weight", &[n_embd])?;
        let qn = b.lw_opt(il, "attn_q_norm.weight", &[head as i64])?;
        let kn = b.lw_opt(il, "attn_k_norm.weight", &[head as i64])?;

        let cur = b.rms_norm(inp, Some(attn_norm), hp.eps_rms);
        let (mut q, mut k, v) = b.qkv(il, cur)?;
        if let Some(qn) = qn {
            q = b.head_rms_norm(q, head, qn, hp.eps_rms);
        }
        if let Some(kn) = kn {
            k = b.head_rms_norm(k, head, kn, hp.eps_rms);
        }
        let (q, k) = b.rope_qk(q, k, None, false);
        let cur = b.attn(il, q, k, v, wo, None, kq_scale);
        let ffn_inp = b.residual(il, cur, inp);
        let x = b.rms_norm(ffn_inp, Some(post_norm), hp.eps_rms);
        let plain = Ffn {
            scaled: false,
            ..Ffn::SWIGLU
        };
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
            // upstream requires the selection bias here (deepseek2's is optional)
            b.lw(il, "exp_probs_b.bias", &[hp.n_expert as i64])?;
            if e.n_expert_shared > 0 {
                let n_ff = hp.n_ff_exp * e.n_expert_shared;
                b.moe_shared_layer(il, x, hp.n_ff_exp, moe, n_ff, plain)?
            } else {
                b.moe_layer(il, x, hp.n_ff_exp, moe)?
            }
        };
        inp = b.layer_out(il, cur, ffn_inp);
    }
    b.rms_output(inp, tok_embd, false)
}
