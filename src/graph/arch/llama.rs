//! The llama family: `llama` (upstream's src/models/llama.cpp), `mistral3`, `qwen2`, `qwen3`
//! and `qwen3moe` share one structure — RMS norms, rotary embeddings, grouped-query
//! attention (optional q/k/v biases, optional per-head q/k RMS norms), SiLU-gated FFN or a
//! softmax-routed mixture of experts, tied output when `output.weight` is absent — and differ
//! in the rotary mode, the q/k norms and the expert layout ([`Variant`]).

use super::super::builder::{BuildError, Builder};
use super::super::{GluKind, NodeId, Operand, RopeMode};

/// What distinguishes the members of the family.
#[derive(Clone, Copy, Debug)]
pub struct Variant {
    pub rope: RopeMode,
    /// Per-head RMS norms of Q and K before the rotation (qwen3, qwen3moe).
    pub qk_norm: bool,
    /// llama-3 frequency factors (`rope_freqs.weight`) when present (llama, mistral3).
    pub rope_freqs: bool,
    /// FFN biases and per-tensor scales, as each architecture passes them to `build_ffn`.
    pub ffn_bias: bool,
    pub ffn_scale: bool,
    /// `output.bias` added to the logits (qwen2).
    pub output_bias: bool,
}

impl Variant {
    pub fn of(arch: &str) -> Option<Variant> {
        Some(match arch {
            "llama" | "mistral3" => Variant {
                rope: RopeMode::Norm,
                qk_norm: false,
                rope_freqs: true,
                ffn_bias: true,
                ffn_scale: true,
                output_bias: false,
            },
            "qwen2" => Variant {
                rope: RopeMode::Neox,
                qk_norm: false,
                rope_freqs: false,
                ffn_bias: false,
                ffn_scale: false,
                output_bias: true,
            },
            "qwen3" | "qwen3moe" => Variant {
                rope: RopeMode::Neox,
                qk_norm: true,
                rope_freqs: false,
                ffn_bias: false,
                ffn_scale: true,
                output_bias: false,
            },
            _ => return None,
        })
    }
}

/// Builds the graph; returns (logits, final hidden state) nodes.
pub fn build(b: &mut Builder, var: Variant) -> Result<(NodeId, NodeId), BuildError> {
    let hp = b.hp;
    let n_embd = hp.n_embd as i64;
    let n_vocab = hp.n_vocab as i64;
    let head = hp.head_k;
    if hp.head_v != head || hp.n_rot != head {
        return Err(BuildError::Invalid(format!(
            "llama: n_rot {} and head sizes {}/{} must agree",
            hp.n_rot, hp.head_k, hp.head_v
        )));
    }
    let tok_embd = b.weight("token_embd.weight", &[n_embd, n_vocab])?;
    let output_norm = b.weight("output_norm.weight", &[n_embd])?;
    let output = b
        .weight_opt("output.weight", &[n_embd, n_vocab])?
        .unwrap_or(tok_embd);
    let rope_freqs = if var.rope_freqs {
        b.weight_opt("rope_freqs.weight", &[hp.n_rot as i64 / 2])?
    } else {
        None
    };
    let kq_scale = if hp.attention_scale == 0.0 {
        1.0 / (head as f32).sqrt()
    } else {
        hp.attention_scale
    };

    let mut inp = b.get_rows_tokens(tok_embd);
    for il in 0..hp.n_layer {
        let n_head = hp.n_head[il] as i64;
        let nq = head as i64 * n_head;
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let wo = b.lw(il, "attn_output.weight", &[nq, n_embd])?;
        let wo_b = b.lw_opt(il, "attn_output.bias", &[n_embd])?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;

        let cur = b.rms_norm(inp, Some(attn_norm), hp.eps_rms);
        let (q, k, v) = b.qkv(il, cur)?;
        let (q, k) = if var.qk_norm {
            let qn = b.lw(il, "attn_q_norm.weight", &[head as i64])?;
            let kn = b.lw(il, "attn_k_norm.weight", &[head as i64])?;
            (
                b.head_rms_norm(q, head, qn, hp.eps_rms),
                b.head_rms_norm(k, head, kn, hp.eps_rms),
            )
        } else {
            (q, k)
        };
        let q = b.rope(q, head, var.rope, rope_freqs, false);
        let k = b.rope(k, head, var.rope, rope_freqs, false);
        // mistral3's temperature tuning of Q (upstream: after RoPE, before attention)
        let q = if hp.attn_temp_scale != 0.0 {
            let (n0, n1) = (b.ne0(q), b.ne1(q));
            b.push(
                "attn_temp",
                crate::graph::Op::AttnTempScale {
                    src: q,
                    floor_scale: hp.n_ctx_orig_yarn as f32,
                    scale: hp.attn_temp_scale,
                },
                n0,
                n1,
            )
        } else {
            q
        };
        let mut cur = b.attn(il, q, k, v, wo, wo_b, kq_scale);
        let mut res = inp;
        if il == hp.n_layer - 1 {
            cur = b.get_rows_out(cur);
            res = b.get_rows_out(res);
        }
        let ffn_inp = b.add(cur, Operand::Node(res));
        let cur = b.rms_norm(ffn_inp, Some(ffn_norm), hp.eps_rms);
        let cur = if hp.n_expert == 0 {
            let n_ff = hp.n_ff[il] as i64;
            let up = b.lw(il, "ffn_up.weight", &[n_embd, n_ff])?;
            let gate = b.lw(il, "ffn_gate.weight", &[n_embd, n_ff])?;
            let down = b.lw(il, "ffn_down.weight", &[n_ff, n_embd])?;
            let (up_b, gate_b, down_b) = if var.ffn_bias {
                (
                    b.lw_opt(il, "ffn_up.bias", &[n_ff])?,
                    b.lw_opt(il, "ffn_gate.bias", &[n_ff])?,
                    b.lw_opt(il, "ffn_down.bias", &[n_embd])?,
                )
            } else {
                (None, None, None)
            };
            b.ffn(
                cur,
                up,
                up_b,
                gate,
                gate_b,
                down,
                down_b,
                GluKind::Swiglu,
                var.ffn_scale,
            )
        } else {
            let n_ff = if hp.n_ff_exp > 0 {
                hp.n_ff_exp as i64
            } else {
                hp.n_ff[il] as i64
            };
            let n_exp = hp.n_expert as i64;
            let gate_inp = b.lw(il, "ffn_gate_inp.weight", &[n_embd, n_exp])?;
            let up = b.lw(il, "ffn_up_exps.weight", &[n_embd, n_ff, n_exp])?;
            let gate = b.lw(il, "ffn_gate_exps.weight", &[n_embd, n_ff, n_exp])?;
            let down = b.lw(il, "ffn_down_exps.weight", &[n_ff, n_embd, n_exp])?;
            b.moe_ffn(
                cur,
                gate_inp,
                up,
                gate,
                down,
                hp.n_expert_used,
                true,
                hp.expert_weights_scale,
            )
        };
        inp = b.add(cur, Operand::Node(ffn_inp));
    }
    let embd = b.rms_norm(inp, Some(output_norm), hp.eps_rms);
    let output_b = if var.output_bias {
        b.weight_opt("output.bias", &[n_vocab])?
    } else {
        None
    };
    let logits = b.linear(output, output_b, embd);
    Ok((logits, embd))
}
