//! `minimax-m3` (upstream's src/models/minimax-m3.cpp): MiniMax-M2's attention with per-head
//! Q/K RMS norms before NeoX rotary embeddings of the first `rope.dimension_count` values,
//! DeepSeek-V3's `leading_dense_block_count` dense layers then sigmoid-routed experts (the
//! `exp_probs_b` selection bias) plus shared experts, all with gpt-oss's clamped SwiGLU, and
//! MiniMax Sparse Attention after the dense layers: an indexer (`indexer.*`: one query head
//! per KV head, one key per token kept in a cache of its own, RMS-normed and rotated like Q
//! and K) scores every position, each block of `indexer.block_size` positions scores its
//! maximum, and each KV head attends to its `indexer.top_k` best blocks plus the token's
//! `indexer.local_blocks` latest ones (see [`Op::MsaSelect`](super::super::Op::MsaSelect)).
//! As upstream, the sparse attention runs with flash attention on and one sequence or a
//! KV stream per sequence; otherwise every layer attends densely.

use super::super::builder::{BuildError, Builder, Ffn, Moe, Outputs};
use super::super::params::{ArchParams, Indexer};
use super::super::{GluKind, RopeMode};
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["minimax-m3"],
    rope: Rope::Mode(RopeMode::Neox),
    memory: Memory::Kv,
    hparams,
    graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    hp.n_ff_exp = k.u32_required("expert_feed_forward_length")? as usize;
    hp.expert_weights_scale = k.f32("expert_weights_scale", 0.0);
    hp.expert_weights_norm = k.bool("expert_weights_norm", false);
    let e = &mut hp.ext;
    e.n_layer_dense_lead = k.u32("leading_dense_block_count", 0) as usize;
    e.n_expert_shared = k.u32_required("expert_shared_count")? as usize;
    k.u32_required("expert_gating_func")?;
    e.gating = super::dots1::gating(k)?;
    let ix = Indexer {
        n_head: k.u32_required("attention.indexer.head_count")? as usize,
        head: k.u32_required("attention.indexer.key_length")? as usize,
        top_k: k.u32_required("attention.indexer.top_k")? as usize,
        block: k.u32_required("attention.indexer.block_size")? as usize,
        local: k.u32_required("attention.indexer.local_blocks")? as usize,
        full: Vec::new(),
    };
    // upstream asserts a block size above 0, and one indexer head per KV head
    if ix.block == 0 {
        return Err("attention.indexer.block_size must be > 0".into());
    }
    if ix.head == 0 || ix.head < hp.n_rot {
        return Err(format!(
            "attention.indexer.key_length {} must be at least rope.dimension_count {}",
            ix.head, hp.n_rot
        ));
    }
    let sparse = hp.ext.n_layer_dense_lead..hp.n_layer;
    if let Some(il) = sparse.clone().find(|&il| hp.n_head_kv[il] != ix.n_head) {
        return Err(format!(
            "attention.indexer.head_count {} must equal head_count_kv {} (one indexer head per KV head, layer {il})",
            ix.n_head, hp.n_head_kv[il]
        ));
    }
    if hp.n_expert == 0 || hp.n_expert_used == 0 {
        return Err("expert_count and expert_used_count must be > 0".into());
    }
    hp.ext.n_ff_shexp = hp.n_ff_exp * hp.ext.n_expert_shared;
    hp.ext.indexer = ix;
    Ok(())
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let e = &hp.ext;
    let ix = &e.indexer;
    let ne = hp.n_embd as i64;
    let head = hp.head_k;
    let kq_scale = 1.0 / (head as f32).sqrt();
    let (ih, ihn) = (ix.head as i64, ix.n_head as i64);
    // gpt-oss's SwiGLU (LLM_FFN_SWIGLU_OAI_MOE), no per-tensor scales (upstream passes none)
    let ffn = Ffn {
        act: GluKind::SwigluOai,
        bias: false,
        scaled: false,
    };
    let (_, mut inp) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let nq = (head * hp.n_head[il]) as i64;
        let attn_norm = b.lw(il, "attn_norm.weight", &[ne])?;
        let wo = b.lw(il, "attn_output.weight", &[nq, ne])?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[ne])?;

        let cur = b.rms_norm(inp, Some(attn_norm), hp.eps_rms);
        let (q, k, v) = b.qkv(il, cur)?;
        let (q, k) = b.qk_norm(il, q, k)?;
        let (q, k) = b.rope_qk(q, k, None, false);
        let cur = if il < e.n_layer_dense_lead {
            b.attn(il, q, k, v, wo, None, kq_scale)
        } else {
            let wiq = b.lw(il, "indexer.q_proj.weight", &[ne, ihn * ih])?;
            let wik = b.lw(il, "indexer.k_proj.weight", &[ne, ih])?;
            let iq_norm = b.lw(il, "indexer.q_norm.weight", &[ih])?;
            let ik_norm = b.lw(il, "indexer.k_norm.weight", &[ih])?;
            let iq = b.mul_mat_raw(wiq, cur);
            let ik = b.mul_mat_raw(wik, cur);
            let iq = b.head_rms_norm(iq, ix.head, iq_norm, hp.eps_rms);
            let ik = b.head_rms_norm(ik, ix.head, ik_norm, hp.eps_rms);
            let mode = b.rope_mode;
            let iq = b.rope(iq, ix.head, mode, None, false);
            let ik = b.rope(ik, ix.head, mode, None, false);
            b.attn_msa(il, (q, k, v), (iq, ik), wo, kq_scale)
        };
        let ffn_inp = b.residual(il, cur, inp);
        let x = b.rms_norm(ffn_inp, Some(ffn_norm), hp.eps_rms);
        let out = if il < e.n_layer_dense_lead {
            b.ffn_layer(il, x, ffn)?
        } else {
            // required here (upstream's create_tensor without TENSOR_NOT_REQUIRED)
            b.lw(il, "exp_probs_b.bias", &[hp.n_expert as i64])?;
            let moe = Moe {
                gating: e.gating,
                norm_w: hp.expert_weights_norm,
                scale_w: hp.expert_weights_scale,
                probs_bias: true,
                exp_scales: false,
                groups: (0, 0),
                act: GluKind::SwigluOai,
                biases: false,
            };
            b.moe_shared_layer(il, x, hp.n_ff_exp, moe, e.n_ff_shexp, ffn)?
        };
        inp = b.layer_out(il, out, ffn_inp);
    }
    let output = b.weight("output.weight", &[ne, hp.n_vocab as i64])?;
    let norm = b.weight("output_norm.weight", &[ne])?;
    let embd = b.rms_norm(inp, Some(norm), hp.eps_rms);
    let logits = b.mul_mat(output, embd);
    Ok(Outputs { logits, embd })
}
