//! `cohere2moe` (upstream's src/models/cohere2moe.cpp): cohere2's parallel block — one
//! norm (RMS when the file gives `layer_norm_rms_epsilon`, else LayerNorm without bias)
//! feeds both attention and FFN, whose outputs are added to the layer's input — with NORM
//! rotary embeddings on the sliding-window layers and on the `leading_dense_block_count`
//! dense layers (the global base; full-attention MoE layers rotate nothing), then experts
//! routed by `expert_gating_func` (none: sigmoid; no selection bias) with their per-expert
//! scales, plus shared experts averaged with them (sum × 0.5); logits × `logit_scale`.
//! The MTP block (`nextn_predict_layers`) is not run, as upstream's main graph.

use super::super::builder::{BuildError, Builder, Ffn, Gating, Moe, Outputs};
use super::super::params::ArchParams;
use super::super::{NodeId, Operand, RopeMode, WeightId};
use super::def::{gating_or, swa_pattern, ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["cohere2moe"],
    rope: Rope::Mode(RopeMode::Norm),
    memory: Memory::Kv,
    hparams,
    graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    if k.f32_opt("attention.layer_norm_epsilon").is_none()
        && k.f32_opt("attention.layer_norm_rms_epsilon").is_none()
    {
        return Err("missing Cohere2 MoE norm epsilon".into());
    }
    if hp.n_expert == 0 || hp.n_expert_used == 0 {
        return Err("n_expert and n_expert_used must be > 0 for Cohere2Moe".into());
    }
    hp.n_swa = k.u32_required("attention.sliding_window")?;
    k.f32_opt("logit_scale")
        .ok_or_else(|| format!("key not found in model: {}", k.key("logit_scale")))?;
    hp.n_ff_exp = k.u32_required("expert_feed_forward_length")? as usize;
    hp.expert_weights_norm = k.bool("expert_weights_norm", false);
    hp.expert_weights_scale = k.f32("expert_weights_scale", 0.0);
    let e = &mut hp.ext;
    e.n_layer_dense_lead = k.u32_required("leading_dense_block_count")? as usize;
    e.n_ff_shexp = k.u32("expert_shared_feed_forward_length", 0) as usize;
    e.n_expert_shared = k.u32("expert_shared_count", 0) as usize;
    e.gating = gating_or(k, Gating::Sigmoid)?;
    hp.swa_layers = swa_pattern(k, hp.n_layer, 4, true)?;
    hp.rope_freq_base_swa = k.f32("rope.freq_base_swa", hp.rope_freq_base);
    hp.rope_freq_scale_swa = hp.rope_freq_scale;
    if hp.head_k != hp.head_v || hp.n_rot != hp.head_k {
        return Err(format!(
            "n_rot {} and head sizes {}/{} must agree",
            hp.n_rot, hp.head_k, hp.head_v
        ));
    }
    Ok(())
}

/// The block's norm: RMS when the file gave an RMS epsilon, else LayerNorm.
fn norm(b: &mut Builder, x: NodeId, w: WeightId) -> NodeId {
    let hp = b.hp;
    if hp.eps_rms == 0.0 {
        b.layer_norm(x, Some(w), None, hp.eps_norm)
    } else {
        b.rms_norm(x, Some(w), hp.eps_rms)
    }
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let e = &hp.ext;
    let n_embd = hp.n_embd as i64;
    let kq_scale = 1.0 / (hp.head_k as f32).sqrt();
    let key = format!("{}.logit_scale", b.model.arch);
    let logit_scale = b.model.meta.get_f64(&key).unwrap_or(0.0) as f32;
    let n_ff_exp = if hp.n_ff_exp > 0 {
        hp.n_ff_exp
    } else {
        hp.n_ff[0]
    };
    let n_ff_shexp = if e.n_ff_shexp > 0 {
        e.n_ff_shexp
    } else {
        n_ff_exp * e.n_expert_shared
    };
    let (tok_embd, mut inp) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let nq = (hp.head_k * hp.n_head[il]) as i64;
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let wo = b.lw(il, "attn_output.weight", &[nq, n_embd])?;

        let mut x = norm(b, inp, attn_norm);
        let (mut q, mut k, v) = b.qkv(il, x)?;
        if hp.swa_layers[il] || il < e.n_layer_dense_lead {
            (q, k) = b.rope_qk(q, k, None, false);
        }
        let mut attn_out = b.attn(il, q, k, v, wo, None, kq_scale);
        let mut res = inp;
        if il == hp.n_layer - 1 {
            attn_out = b.get_rows_out(attn_out);
            res = b.get_rows_out(res);
            x = b.get_rows_out(x);
        }
        let cur = if il < e.n_layer_dense_lead {
            b.ffn_layer(il, x, Ffn::SWIGLU)?
        } else {
            let moe = Moe {
                gating: e.gating,
                norm_w: hp.expert_weights_norm,
                scale_w: hp.expert_weights_scale,
                probs_bias: false,
                exp_scales: true,
                ..Moe::SOFTMAX
            };
            let moe_out = b.moe_layer(il, x, n_ff_exp, moe)?;
            if e.n_expert_shared > 0 {
                let sh = b.ffn_named(il, x, "_shexp", n_ff_shexp, Ffn::SWIGLU)?;
                let sum = b.add(moe_out, Operand::Node(sh));
                b.scale(sum, 0.5)
            } else {
                moe_out
            }
        };
        let cur = b.add(cur, Operand::Node(res));
        inp = b.add(cur, Operand::Node(attn_out));
        inp = b.cvec(inp, il);
    }
    let out_norm = b.weight("output_norm.weight", &[n_embd])?;
    let output = b.output_weight(tok_embd)?;
    let embd = norm(b, inp, out_norm);
    let mut logits = b.mul_mat_lora(output, embd);
    if logit_scale != 0.0 {
        logits = b.scale(logits, logit_scale);
    }
    Ok(Outputs { logits, embd })
}
