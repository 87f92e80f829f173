//! `gpt-oss` (upstream's src/models/openai-moe.cpp): attention with q/k/v/o biases, NeoX
//! rotary embeddings, per-head attention sinks, sliding-window attention on every other
//! layer (its own rope base), a post-attention RMS norm, then in every layer a mixture of
//! experts routed by a biased router over its top-k logits soft-maxed
//! (`SOFTMAX_WEIGHT`), with per-expert biases and the clamped SwiGLU (`swiglu_oai`).

use super::super::builder::{BuildError, Builder, Gating, Moe, Outputs};
use super::super::params::ArchParams;
use super::super::{GluKind, Operand, RopeMode};
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["gpt-oss"],
    rope: Rope::Mode(RopeMode::Neox),
    memory: Memory::Kv,
    hparams,
    graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    hp.n_ff_exp = k.u32("expert_feed_forward_length", 0) as usize;
    hp.n_swa = k.model.hparams.n_swa;
    hp.swa_layers = k.swa_layers(hp.n_layer, 2)?;
    hp.rope_freq_base_swa = k.f32("rope.freq_base_swa", hp.rope_freq_base);
    hp.rope_freq_scale_swa = hp.rope_freq_scale;
    if hp.n_expert == 0 || hp.n_expert_used == 0 || hp.n_ff_exp == 0 {
        return Err(
            "expert_count, expert_used_count and expert_feed_forward_length must be > 0".into(),
        );
    }
    Ok(())
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let n_embd = hp.n_embd as i64;
    let head = hp.n_rot;
    if hp.head_k != head || hp.head_v != head {
        return Err(BuildError::Invalid(format!(
            "head sizes {}/{} must equal rope.dimension_count {head}",
            hp.head_k, hp.head_v
        )));
    }
    let kq_scale = 1.0 / (head as f32).sqrt();
    let (_, mut inp) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let nh = hp.n_head[il] as i64;
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let post_norm = b.lw(il, "post_attention_norm.weight", &[n_embd])?;
        let wo = b.lw(il, "attn_output.weight", &[nh * head as i64, n_embd])?;
        let wo_b = b.lw(il, "attn_output.bias", &[n_embd])?;
        let sinks = b.lw(il, "attn_sinks.weight", &[nh])?;

        let swa = hp.swa_layers[il];
        let cur = b.rms_norm(inp, Some(attn_norm), hp.eps_rms);
        let (q, k, v) = b.qkv(il, cur)?;
        let (q, k) = b.rope_qk(q, k, None, swa);
        let cur = b.attn_sinks(il, q, k, v, wo, Some(wo_b), kq_scale, Some(sinks));
        let ffn_inp = b.add(cur, Operand::Node(inp));
        let x = b.rms_norm(ffn_inp, Some(post_norm), hp.eps_rms);
        let moe = Moe {
            gating: Gating::SoftmaxWeight,
            norm_w: false,
            scale_w: hp.expert_weights_scale,
            probs_bias: false,
            exp_scales: false,
            groups: (0, 0),
            act: GluKind::SwigluOai,
            biases: true,
        };
        let cur = b.moe_layer(il, x, hp.n_ff_exp, moe)?;
        inp = b.layer_out(il, cur, ffn_inp);
    }
    // upstream selects the output rows after the last layer (the same rows)
    let inp = b.get_rows_out(inp);
    let norm = b.weight("output_norm.weight", &[n_embd])?;
    let output = b.weight("output.weight", &[n_embd, hp.n_vocab as i64])?;
    let embd = b.rms_norm(inp, Some(norm), hp.eps_rms);
    let logits = b.mul_mat(output, embd);
    Ok(Outputs { logits, embd })
}
