//! `granitehybrid` (upstream's src/models/granite-hybrid.cpp, Granite 4): granite's layers
//! where each layer whose `head_count_kv` is 0 runs a Mamba-2 mixer instead of attention;
//! residual branches scaled by `residual_scale`, logits divided by `logit_scale` (both when
//! given), rotary embeddings when `rope.scaling.finetuned` (default true), a dense FFN or a
//! softmax-routed mixture with an optional shared expert. Memory: KV rows for the attention
//! layers, recurrent states for the others.

use super::super::builder::{BuildError, Builder, Ffn, Moe, Outputs};
use super::super::params::ArchParams;
use super::super::{Operand, RopeMode};
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["granitehybrid"],
    rope: Rope::Mode(RopeMode::Norm),
    memory: Memory::Hybrid,
    hparams,
    graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    hp.attention_scale = k.f32("attention.scale", 0.0);
    hp.ext.ssm = k.ssm()?;
    // a layer is recurrent iff its KV head count is 0
    hp.ext.recurrent_layers = (0..hp.n_layer).map(|il| hp.n_head_kv[il] == 0).collect();
    Ok(())
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let keys = Keys {
        model: b.model,
        arch: &b.model.arch,
    };
    let residual_scale = keys.f32("residual_scale", 0.0);
    let logit_scale = keys.f32("logit_scale", 0.0);
    let use_rope = keys.bool("rope.scaling.finetuned", true);
    let n_ff_shexp = keys.u32("expert_shared_feed_forward_length", 0) as i64;
    let hp = b.hp;
    let n_embd = hp.n_embd as i64;
    let head = hp.head_k;
    if hp.head_v != head {
        return Err(BuildError::Invalid(format!(
            "head sizes {}/{} must agree",
            hp.head_k, hp.head_v
        )));
    }
    let rope_freqs = b.weight_opt("rope_freqs.weight", &[hp.n_rot as i64 / 2])?;
    let kq_scale = b.kq_scale();
    let (tok_embd, mut inp) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;
        let cur = b.rms_norm(inp, Some(attn_norm), hp.eps_rms);
        let mut cur = if hp.is_recurrent(il) {
            b.mamba2_layer(il, cur)?
        } else {
            let nq = (head * hp.n_head[il]) as i64;
            let wo = b.lw(il, "attn_output.weight", &[nq, n_embd])?;
            let wo_b = b.lw_opt(il, "attn_output.bias", &[n_embd])?;
            let (mut q, mut k, v) = b.qkv(il, cur)?;
            if use_rope {
                (q, k) = b.rope_qk(q, k, rope_freqs, hp.swa_layers[il]);
            }
            b.attn(il, q, k, v, wo, wo_b, kq_scale)
        };
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
        let mut cur = if b
            .lw_opt(il, "ffn_gate_inp.weight", &[n_embd, hp.n_expert as i64])?
            .is_none()
        {
            let ffn = Ffn {
                bias: true,
                scaled: false,
                ..Ffn::SWIGLU
            };
            b.ffn_layer(il, x, ffn)?
        } else {
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
    if logit_scale != 0.0 {
        out.logits = b.scale(out.logits, 1.0 / logit_scale);
    }
    Ok(out)
}
