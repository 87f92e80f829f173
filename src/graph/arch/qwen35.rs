//! `qwen35` and `qwen35moe` (upstream's src/models/qwen35.cpp, qwen35moe.cpp: Qwen3.5/3.6),
//! and the graph `qwen3next` shares: RMS-normed layers that run either a gated delta net
//! (linear attention over a recurrent state: `attention.recurrent_layers`, else every layer
//! but each `full_attention_interval`-th) or gated attention (Q and a per-head output gate
//! from one projection, per-head Q/K RMS norms, NEOX rotary embeddings: the interleaved
//! M-RoPE's text path for qwen35), a post-attention RMS norm, then a SiLU-gated FFN
//! (qwen35) or softmax-routed experts plus a sigmoid-gated shared expert. Memory: KV rows for
//! the attention layers, conv and delta-net states for the others.

use super::super::builder::{BuildError, Builder, Ffn, Moe, Outputs};
use super::super::delta_net::QwenGdn;
use super::super::params::ArchParams;
use super::super::{NodeId, Operand};
use super::def::{check_mrope_text, ArchDef, Keys, Memory, Rope};
use crate::model::meta::MetaArray;

pub static DEF: ArchDef = ArchDef {
    names: &["qwen35", "qwen35moe"],
    rope: Rope::Multi(40),
    memory: Memory::Hybrid,
    hparams,
    graph,
};

/// The hyperparameters upstream's three loaders read (qwen3next has no rope sections).
pub fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    hp.eps_rms = k
        .f32_opt("attention.layer_norm_rms_epsilon")
        .ok_or_else(|| {
            format!(
                "key not found in model: {}",
                k.key("attention.layer_norm_rms_epsilon")
            )
        })?;
    if k.arch != "qwen3next" {
        check_mrope_text(k, hp, 40)?;
    }
    let mut ssm = k.ssm()?;
    ssm.n_group = k.u32_required("ssm.group_count")? as usize;
    hp.ext.ssm = ssm;
    let key = k.key("attention.recurrent_layers");
    hp.ext.recurrent_layers = match k.model.meta.get_array(&key) {
        Some(MetaArray::Ints(_) | MetaArray::Bools(_)) => {
            k.layer_flags("attention.recurrent_layers", hp.n_layer, false)
        }
        Some(_) => return Err(format!("{key} has an unexpected array type")),
        None => match k.model.meta.get_u32(&key) {
            Some(v) => vec![v != 0; hp.n_layer],
            None => {
                let interval = k.u32("full_attention_interval", 4).max(1) as usize;
                (0..hp.n_layer).map(|il| (il + 1) % interval != 0).collect()
            }
        },
    };
    if hp.head_k != hp.head_v {
        return Err(format!("head sizes {}/{} must agree", hp.head_k, hp.head_v));
    }
    if k.arch != "qwen35" {
        if hp.n_expert == 0 || hp.n_expert_used == 0 {
            return Err("expert_count and expert_used_count must be > 0".into());
        }
        hp.n_ff_exp = k.u32("expert_feed_forward_length", 0) as usize;
        if hp.n_ff_exp == 0 {
            hp.n_ff_exp = hp.n_ff.first().copied().unwrap_or(0) / hp.n_expert_used;
        }
        hp.ext.n_ff_shexp = k.u32("expert_shared_feed_forward_length", 0) as usize;
        if hp.ext.n_ff_shexp == 0 {
            hp.ext.n_ff_shexp = hp.n_ff_exp;
        }
    }
    Ok(())
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    graph_with(b, QwenGdn::Qwen35)
}

/// The graph of qwen35, qwen35moe (experts when the architecture is not `qwen35`) and, with
/// `QwenGdn::Qwen3Next`, qwen3next.
pub fn graph_with(b: &mut Builder, kind: QwenGdn) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let n_embd = hp.n_embd as i64;
    let moe = b.model.arch != "qwen35";
    let (tok_embd, mut inp) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let post_norm = b.lw(il, "post_attention_norm.weight", &[n_embd])?;
        let cur = b.rms_norm(inp, Some(attn_norm), hp.eps_rms);
        let cur = if hp.is_recurrent(il) {
            b.qwen_gdn_layer(il, cur, kind)?
        } else {
            gated_attn(b, il, cur)?
        };
        let ffn_res = b.residual(il, cur, inp);
        let x = b.rms_norm(ffn_res, Some(post_norm), hp.eps_rms);
        let out = if moe {
            moe_ffn(b, il, x, kind)?
        } else {
            let ffn = Ffn {
                scaled: true,
                ..Ffn::SWIGLU
            };
            b.ffn_layer(il, x, ffn)?
        };
        let cur = b.add(out, Operand::Node(ffn_res));
        inp = b.cvec(cur, il);
    }
    b.rms_output(inp, tok_embd, false)
}

/// The full-attention layer: Q and its output gate from one projection (per head: Q, then
/// the gate), Q/K RMS norms, rotary embeddings, attention, times sigmoid(gate), `wo`.
fn gated_attn(b: &mut Builder, il: usize, cur: NodeId) -> Result<NodeId, BuildError> {
    let hp = b.hp;
    let n_embd = hp.n_embd as i64;
    let head = hp.head_k;
    let nq = (head * hp.n_head[il]) as i64;
    let (nk, nv) = (hp.n_embd_k_gqa(il) as i64, hp.n_embd_v_gqa(il) as i64);
    let wq = b.lw(il, "attn_q.weight", &[n_embd, 2 * nq])?;
    let wk = b.lw(il, "attn_k.weight", &[n_embd, nk])?;
    let wv = b.lw(il, "attn_v.weight", &[n_embd, nv])?;
    let bq = b.lw_opt(il, "attn_q.bias", &[2 * nq])?;
    let bk = b.lw_opt(il, "attn_k.bias", &[nk])?;
    let bv = b.lw_opt(il, "attn_v.bias", &[nv])?;
    let wo = b.lw(il, "attn_output.weight", &[nq, n_embd])?;
    let q_full = b.linear(wq, bq, cur);
    let k = b.linear(wk, bk, cur);
    let v = b.linear(wv, bv, cur);
    let q = b.view_heads(q_full, 2 * head, 0, head);
    let gate = b.view_heads(q_full, 2 * head, head, head);
    let (q, k) = b.qk_norm(il, q, k)?;
    let (q, k) = b.rope_qk(q, k, None, false);
    let kq_scale = b.kq_scale();
    let kqv = b.attn_kqv(il, q, k, v, kq_scale, None);
    let gate = b.sigmoid(gate);
    let kqv = b.mul(kqv, Operand::Node(gate));
    Ok(b.mul_mat(wo, kqv))
}

/// Softmax-routed experts (normalised weights, per-expert scales when the file has them)
/// plus the shared expert times sigmoid of its gate; qwen3next's layers without a router
/// run a plain FFN.
pub fn moe_ffn(b: &mut Builder, il: usize, x: NodeId, kind: QwenGdn) -> Result<NodeId, BuildError> {
    let hp = b.hp;
    let n_embd = hp.n_embd as i64;
    let n_exp = hp.n_expert as i64;
    if kind == QwenGdn::Qwen3Next
        && b.lw_opt(il, "ffn_gate_inp.weight", &[n_embd, n_exp])?
            .is_none()
    {
        let ffn = Ffn {
            scaled: false,
            ..Ffn::SWIGLU
        };
        return b.ffn_layer(il, x, ffn);
    }
    let moe = Moe {
        scale_w: hp.expert_weights_scale,
        ..Moe::SOFTMAX
    };
    let moe_out = b.moe_layer(il, x, hp.n_ff_exp, moe)?;
    let n_sh = hp.ext.n_ff_shexp as i64;
    if b.lw_opt(il, "ffn_up_shexp.weight", &[n_embd, n_sh])?
        .is_none()
    {
        return Ok(moe_out);
    }
    let ffn = Ffn {
        scaled: true,
        ..Ffn::SWIGLU
    };
    let shexp = b.ffn_named(il, x, "_shexp", hp.ext.n_ff_shexp, ffn)?;
    let w = b.lw(il, "ffn_gate_inp_shexp.weight", &[n_embd])?;
    let g = b.mul_mat_lora(w, x);
    let g = b.sigmoid(g);
    let shexp = b.mul(shexp, Operand::Node(g));
    Ok(b.add(moe_out, Operand::Node(shexp)))
}
