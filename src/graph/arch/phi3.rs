//! `phi3` (upstream's src/models/phi3.cpp): fused or separate QKV, NeoX rotary embeddings
//! with LongRoPE factors (long when the per-sequence context exceeds the original training
//! context, short otherwise), Q scaled before an unscaled attention, a fused gate-up SwiGLU
//! FFN (`ffn_up` holds both halves), optional output bias. Upstream disables phi3's sliding
//! window, and so do we.

use super::super::builder::{BuildError, Builder, Moe, Outputs};
use super::super::{GluKind, Op, Operand, RopeMode};
use super::def::{no_hparams, ArchDef, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["phi3"],
    rope: Rope::Mode(RopeMode::Neox),
    memory: Memory::Kv,
    hparams: no_hparams,
    graph,
};

/// The graph of phi3 and of phimoe (whose layers carry experts: `ffn_gate_inp`).
pub fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let n_ctx_seq = b.n_ctx_seq;
    let hp = b.hp;
    let n_embd = hp.n_embd as i64;
    let n_vocab = hp.n_vocab as i64;
    let head = hp.head_k;
    let tok_embd = b.weight("token_embd.weight", &[n_embd, n_vocab])?;
    let output_norm = b.weight("output_norm.weight", &[n_embd])?;
    let output_norm_b = b.weight_opt("output_norm.bias", &[n_embd])?;
    let output = b
        .weight_opt("output.weight", &[n_embd, n_vocab])?
        .unwrap_or(tok_embd);
    let output_b = b.weight_opt("output.bias", &[n_vocab])?;
    let half_rot = hp.n_rot as i64 / 2;
    let mut inp = b.get_rows_tokens(tok_embd);
    for il in 0..hp.n_layer {
        let factors = match b.weight_opt("rope_freqs.weight", &[half_rot])? {
            Some(f) => Some(f),
            None if n_ctx_seq > hp.n_ctx_orig_yarn => {
                b.weight_opt("rope_factors_long.weight", &[half_rot])?
            }
            None => {
                // (upstream's loader creates both from metadata; a recording build reads
                // the short ones)
                b.declare_unread("rope_factors_long.weight", &[half_rot]);
                b.weight_opt("rope_factors_short.weight", &[half_rot])?
            }
        };
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let attn_norm_b = b.lw_opt(il, "attn_norm.bias", &[n_embd])?;
        let nq = (head * hp.n_head[il]) as i64;
        let wo = b.lw(il, "attn_output.weight", &[nq, n_embd])?;
        let wo_b = b.lw_opt(il, "attn_output.bias", &[n_embd])?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;
        let ffn_norm_b = b.lw_opt(il, "ffn_norm.bias", &[n_embd])?;
        let n_ff = hp.n_ff[il] as i64;

        let mut residual = inp;
        let mut cur = b.rms_norm(inp, Some(attn_norm), hp.eps_rms);
        if let Some(bias) = attn_norm_b {
            cur = b.add(cur, Operand::Weight(bias));
        }
        let (q, k, v) = b.qkv(il, cur)?;
        let q = b.rope(q, head, RopeMode::Neox, factors, false);
        let k = b.rope(k, head, RopeMode::Neox, factors, false);
        let q = b.scale(q, 1.0 / (head as f32).sqrt());
        let mut cur = b.attn(il, q, k, v, wo, wo_b, 1.0);
        if il == hp.n_layer - 1 {
            cur = b.get_rows_out(cur);
            residual = b.get_rows_out(residual);
        }
        let cur = b.add(cur, Operand::Node(residual));
        let residual = cur;
        let mut x = b.rms_norm(cur, Some(ffn_norm), hp.eps_rms);
        if let Some(bias) = ffn_norm_b {
            x = b.add(x, Operand::Weight(bias));
        }
        let router = format!("blk.{il}.ffn_gate_inp.weight");
        if b.has_else_metadata(&router, hp.n_expert > 0) {
            // phimoe: softmax-routed experts with normalised weights, no scales
            let moe = Moe {
                scale_w: hp.expert_weights_scale,
                exp_scales: false,
                ..Moe::SOFTMAX
            };
            let ffn_out = b.moe_layer(il, x, n_ff as usize, moe)?;
            inp = b.add(residual, Operand::Node(ffn_out));
            inp = b.cvec(inp, il);
            continue;
        }
        let up = b.lw(il, "ffn_up.weight", &[n_embd, 2 * n_ff])?;
        let down = b.lw(il, "ffn_down.weight", &[n_ff, n_embd])?;
        let gu = b.mul_mat_raw(up, x);
        let gate = b.view(gu, 0, n_ff as usize);
        let upv = b.view(gu, n_ff as usize, n_ff as usize);
        let t = b.ne1(gate);
        let h = b.push(
            "glu",
            Op::Glu {
                gate,
                up: upv,
                kind: GluKind::Swiglu,
            },
            n_ff as usize,
            t,
        );
        let ffn_out = b.mul_mat_raw(down, h);
        inp = b.add(residual, Operand::Node(ffn_out));
        inp = b.cvec(inp, il);
    }
    let mut embd = b.rms_norm(inp, Some(output_norm), hp.eps_rms);
    if let Some(bias) = output_norm_b {
        embd = b.add(embd, Operand::Weight(bias));
    }
    let logits = b.linear(output, output_b, embd);
    Ok(Outputs { logits, embd })
}
