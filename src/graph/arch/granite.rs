//! `granite` (upstream's src/models/granite.cpp): llama's structure with an embedding
//! scale, residual branches scaled by `residual_scale`, logits divided by `logit_scale`,
//! rotary embeddings only when `rope.scaling.finetuned` (default true), and, with experts,
//! a softmax-routed mixture plus an optional shared expert.

use super::super::builder::{BuildError, Builder, Ffn, Moe, Outputs};
use super::super::params::ArchParams;
use super::super::{Operand, RopeMode};
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["granite"],
    rope: Rope::Mode(RopeMode::Norm),
    memory: Memory::Kv,
    hparams,
    graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    hp.attention_scale = k.f32("attention.scale", 0.0);
    if k.model.meta.get_f64(&k.key("logit_scale")).is_none() {
        return Err(format!("{} is missing", k.key("logit_scale")));
    }
    Ok(())
}

/// The scales granite's graph applies (upstream's `f_embedding_scale`, `f_residual_scale`,
/// `f_logit_scale`; 0: none) and whether it rotates and reads a shared expert.
pub struct Scales {
    pub embedding: f32,
    pub residual: f32,
    /// The logits are divided by this.
    pub logit: f32,
    pub rope: bool,
    pub n_ff_shexp: i64,
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let keys = Keys {
        model: b.model,
        arch: &b.model.arch,
    };
    let scales = Scales {
        embedding: keys.f32("embedding_scale", 0.0),
        residual: keys.f32("residual_scale", 0.0),
        logit: keys.f32("logit_scale", 1.0),
        rope: keys.bool("rope.scaling.finetuned", true),
        n_ff_shexp: keys.u32("expert_shared_feed_forward_length", 0) as i64,
    };
    graph_with(b, &scales)
}

/// The graph of granite and of minicpm (which differs in its scales' defaults).
pub fn graph_with(b: &mut Builder, s: &Scales) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let (logit_scale, residual_scale, embedding_scale) = (s.logit, s.residual, s.embedding);
    let (n_ff_shexp, use_rope) = (s.n_ff_shexp, s.rope);

    let n_embd = hp.n_embd as i64;
    let head = hp.head_k;
    if hp.head_v != head || hp.n_rot != head {
        return Err(BuildError::Invalid(format!(
            "n_rot {} and head sizes {}/{} must agree",
            hp.n_rot, hp.head_k, hp.head_v
        )));
    }
    let rope_freqs = b.weight_opt("rope_freqs.weight", &[hp.n_rot as i64 / 2])?;
    let kq_scale = b.kq_scale();
    let (tok_embd, mut inp) = b.inp_embd()?;
    if embedding_scale != 0.0 {
        inp = b.scale(inp, embedding_scale);
    }
    for il in 0..hp.n_layer {
        let nq = (head * hp.n_head[il]) as i64;
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let wo = b.lw(il, "attn_output.weight", &[nq, n_embd])?;
        let wo_b = b.lw_opt(il, "attn_output.bias", &[n_embd])?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;

        let cur = b.rms_norm(inp, Some(attn_norm), hp.eps_rms);
        let (mut q, mut k, v) = b.qkv(il, cur)?;
        if use_rope {
            (q, k) = b.rope_qk(q, k, rope_freqs, hp.swa_layers[il]);
        }
        let mut cur = b.attn(il, q, k, v, wo, wo_b, kq_scale);
        let mut res = inp;
        if il == hp.n_layer - 1 {
            cur = b.get_rows_out(cur);
            res = b.get_rows_out(res);
        }
        if residual_scale != 0.0 {
            cur = b.scale(cur, residual_scale);
        }
        let ffn_inp = b.add(cur, Operand::Node(res));
        let x = b.rms_norm(ffn_inp, Some(ffn_norm), hp.eps_rms);
        let mut cur = if hp.n_expert == 0 {
            let ffn = Ffn {
                bias: true,
                scaled: false,
                ..Ffn::SWIGLU
            };
            b.ffn_layer(il, x, ffn)?
        } else {
            // upstream's build_moe_ffn call passes no per-expert scales
            let moe = Moe {
                scale_w: hp.expert_weights_scale,
                exp_scales: false,
                ..Moe::SOFTMAX
            };
            let moe_out = b.moe_layer(il, x, hp.n_ff[il], moe)?;
            if n_ff_shexp > 0 {
                let up = b.lw(il, "ffn_up_shexp.weight", &[n_embd, n_ff_shexp])?;
                let gate = b.lw(il, "ffn_gate_shexp.weight", &[n_embd, n_ff_shexp])?;
                let down = b.lw(il, "ffn_down_shexp.weight", &[n_ff_shexp, n_embd])?;
                let sh = b.ffn(x, up, None, gate, None, down, None, Ffn::SWIGLU.act, false);
                b.add(moe_out, Operand::Node(sh))
            } else {
                moe_out
            }
        };
        if residual_scale != 0.0 {
            cur = b.scale(cur, residual_scale);
        }
        inp = b.layer_out(il, cur, ffn_inp);
    }
    let mut out = b.rms_output(inp, tok_embd, false)?;
    out.logits = b.scale(out.logits, 1.0 / logit_scale);
    Ok(out)
}
