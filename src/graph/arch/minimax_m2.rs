//! `minimax-m2` (upstream's src/models/minimax-m2.cpp): RMS norms of the whole Q and K
//! projections (one weight over all heads) before NeoX rotary embeddings of the first
//! `rope.dimension_count` values of each head, then in every layer experts of
//! `feed_forward_length` rows routed by `expert_gating_func` with the required
//! `exp_probs_b` selection bias and normalised weights.

use super::super::builder::{BuildError, Builder, Moe, Outputs};
use super::super::params::ArchParams;
use super::super::{GluKind, RopeMode};
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["minimax-m2"],
    rope: Rope::Mode(RopeMode::Neox),
    memory: Memory::Kv,
    hparams,
    graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    // read as upstream (required), though the experts are feed_forward_length rows
    k.u32_required("expert_feed_forward_length")?;
    hp.ext.gating = super::dots1::gating(k)?;
    if hp.n_expert == 0 || hp.n_expert_used == 0 {
        return Err("expert_count and expert_used_count must be > 0".into());
    }
    Ok(())
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    for il in 0..hp.n_layer {
        b.lw(il, "exp_probs_b.bias", &[hp.n_expert as i64])?;
    }
    let moe = Moe {
        gating: hp.ext.gating,
        norm_w: true,
        scale_w: hp.expert_weights_scale,
        probs_bias: true,
        exp_scales: false,
        groups: (0, 0),
        act: GluKind::Swiglu,
        biases: false,
    };
    let nk = hp.n_embd_k_gqa(0) as i64;
    graph_with(b, moe, nk)
}

/// The graph of minimax-m2 and of olmoe: whole-vector q/k RMS norms (K's weight of
/// `k_norm_len` values), rotary embeddings, experts of `feed_forward_length` rows in every
/// layer routed as `moe` says, a separate `output.weight`.
pub fn graph_with(b: &mut Builder, moe: Moe, k_norm_len: i64) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let n_embd = hp.n_embd as i64;
    let head = hp.head_k;
    let kq_scale = 1.0 / (head as f32).sqrt();
    let (_, mut inp) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let nq = (head * hp.n_head[il]) as i64;
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let wo = b.lw(il, "attn_output.weight", &[nq, n_embd])?;
        let q_norm = b.lw(il, "attn_q_norm.weight", &[nq])?;
        let k_norm = b.lw(il, "attn_k_norm.weight", &[k_norm_len])?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;

        let cur = b.rms_norm(inp, Some(attn_norm), hp.eps_rms);
        let (q, k, v) = b.qkv(il, cur)?;
        let q = b.rms_norm(q, Some(q_norm), hp.eps_rms);
        let k = b.rms_norm(k, Some(k_norm), hp.eps_rms);
        let (q, k) = b.rope_qk(q, k, None, false);
        let cur = b.attn(il, q, k, v, wo, None, kq_scale);
        let ffn_inp = b.residual(il, cur, inp);
        let x = b.rms_norm(ffn_inp, Some(ffn_norm), hp.eps_rms);
        let cur = b.moe_layer(il, x, hp.n_ff[il], moe)?;
        inp = b.layer_out(il, cur, ffn_inp);
    }
    let n_vocab = hp.n_vocab as i64;
    let output = b.weight("output.weight", &[n_embd, n_vocab])?;
    let norm = b.weight("output_norm.weight", &[n_embd])?;
    let embd = b.rms_norm(inp, Some(norm), hp.eps_rms);
    let logits = b.mul_mat(output, embd);
    Ok(Outputs { logits, embd })
}
