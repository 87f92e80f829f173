//! `llama` (upstream's src/models/llama.cpp): RMS norms, rotary embeddings (NORM, with
//! llama-3 frequency factors when `rope_freqs` is present), grouped-query attention with
//! optional q/k/v/o biases, a SiLU-gated FFN or a softmax-routed mixture of experts, tied
//! output when `output.weight` is absent.

use super::super::builder::{BuildError, Builder, Ffn, Moe, Outputs};
use super::super::{Op, RopeMode};
use super::def::{no_hparams, ArchDef, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["llama"],
    rope: Rope::Mode(RopeMode::Norm),
    memory: Memory::Kv,
    hparams: no_hparams,
    graph,
};

/// The graph of llama and of mistral3 (which differs in its hyperparameters only): its
/// FFN adds the biases and multiplies by the per-tensor scales the file has.
pub fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let ffn = Ffn {
        bias: true,
        ..Ffn::SWIGLU
    };
    graph_ffn(b, ffn)
}

/// llama's graph with another dense FFN: the architectures upstream copied from llama
/// differ mostly in which FFN biases and scales their `build_ffn` call passes.
pub fn graph_ffn(b: &mut Builder, ffn: Ffn) -> Result<Outputs, BuildError> {
    let hp = b.hp;
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
    for il in 0..hp.n_layer {
        let nq = (head * hp.n_head[il]) as i64;
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let wo = b.lw(il, "attn_output.weight", &[nq, n_embd])?;
        let wo_b = b.lw_opt(il, "attn_output.bias", &[n_embd])?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;

        let cur = b.rms_norm(inp, Some(attn_norm), hp.eps_rms);
        b.cb_norm(cur, "attn_norm", Some(il));
        let (q, k, v) = b.qkv(il, cur)?;
        let (q, k) = b.rope_qk(q, k, rope_freqs, false);
        // temperature tuning of Q (mistral3; upstream: after RoPE, before attention)
        let q = if hp.attn_temp_scale != 0.0 {
            let (n0, n1) = (b.ne0(q), b.ne1(q));
            let op = Op::AttnTempScale {
                src: q,
                floor_scale: hp.n_ctx_orig_yarn as f32,
                offset: 0.0,
                scale: hp.attn_temp_scale,
            };
            b.push("attn_temp", op, n0, n1)
        } else {
            q
        };
        let cur = b.attn(il, q, k, v, wo, wo_b, kq_scale);
        b.cb_output(cur, "attn_out", Some(il));
        let ffn_inp = b.residual(il, cur, inp);
        let cur = b.rms_norm(ffn_inp, Some(ffn_norm), hp.eps_rms);
        b.cb_norm(cur, "ffn_norm", Some(il));
        let cur = if hp.n_expert == 0 {
            b.ffn_layer(il, cur, ffn)?
        } else {
            let moe = Moe {
                scale_w: hp.expert_weights_scale,
                ..Moe::SOFTMAX
            };
            b.moe_layer(il, cur, hp.n_ff[il], moe)?
        };
        inp = b.layer_out(il, cur, ffn_inp);
    }
    b.rms_output(inp, tok_embd, false)
}
