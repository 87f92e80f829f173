//! `glm5-next` (upstream's src/models/glm5-next.cpp; GLM-5.3-Flash): Kimi's delta attention
//! (the layers whose `head_count_kv` is 0: see `graph/kda.rs`, low-rank decay and output
//! gates, L2 norms with epsilon 1e-6) and rope-less latent attention (absorbed
//! `attn_k_b`/`attn_v_b` over one compressed K-only cache row per token) whose cells a
//! k-pool lightning indexer selects; DeepSeek-V4's manifold hyper-connections around every
//! attention and FFN (four residual streams: each block reads their mix by `sigmoid`
//! weights, and writes its output into every stream beside a Sinkhorn-normalised mix of the
//! old ones: upstream's fused DSV4_HC_PRE / DSV4_HC_COMB / DSV4_HC_POST); DeepSeek-style
//! MoE (sigmoid routing with the `exp_probs_b` selection bias, shared experts); the output
//! reads the streams' mean. No per-tensor scales (upstream passes none).
//!
//! The indexer's cache is kept as upstream's (each token's key and pool gate, each pool's
//! key: its state files hold it), but its selection is not computed: where every pool of
//! `indexer.kpool` cells fits
//! the indexer's `top_k`, upstream selects all of them and the incomplete tail, and the
//! attention sees exactly the causal cells. Contexts longer than `top_k` cells per sequence
//! (where the selection would drop cells) are refused with a log line, as files that do not
//! select the tail. The indexer's tensors are still checked against the file.

use super::super::builder::{BuildError, Builder, Ffn, Gating, Moe, Outputs};
use super::super::kda::{Kda, KdaDecay, KdaOutGate};
use super::super::params::ArchParams;
use super::super::{GluKind, NodeId, Op, Operand};
use super::bailingmoe3::{gating, hybrid_layers, mla_hparams};
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["glm5-next"],
    rope: Rope::None,
    memory: Memory::HybridLatent,
    hparams,
    graph,
};

/// The residual streams of the hyper-connections (upstream asserts 4).
const HC: usize = 4;

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    let required_f32 = |s: &str| {
        k.f32_opt(s)
            .ok_or_else(|| format!("key not found in model: {}", k.key(s)))
    };
    hp.n_ff_exp = k.u32("expert_feed_forward_length", 0) as usize;
    hp.expert_weights_scale = k.f32("expert_weights_scale", 0.0);
    hp.expert_weights_norm = k.bool("expert_weights_norm", false);
    if hp.n_ff_exp == 0 {
        return Err("expert_feed_forward_length must be > 0".into());
    }
    if hp.n_rot != 0 {
        // upstream asserts n_rot == 0 ("GLM5-Next MLA is nope-only")
        return Err(format!(
            "rope.dimension_count {} must be 0: the latent attention is rope-less",
            hp.n_rot
        ));
    }
    let n_layer = hp.n_layer;
    let hc_eps = required_f32("hyper_connection.epsilon")?;
    let e = &mut hp.ext;
    mla_hparams(k, e)?;
    if e.n_lora_q == 0 {
        return Err(format!(
            "key not found in model: {}",
            k.key("attention.q_lora_rank")
        ));
    }
    e.ssm.d_conv = k.u32_required("ssm.conv_kernel")? as usize;
    e.kda_head = k.u32_required("kda.head_dim")? as usize;
    e.kda_lower_bound = k
        .f32_opt("kda.gate_lower_bound")
        .filter(|&v| v > f32::NEG_INFINITY);
    e.n_expert_shared = k.u32_required("expert_shared_count")? as usize;
    e.n_layer_dense_lead = k.u32("leading_dense_block_count", 0) as usize;
    e.gating = match k.u32("expert_gating_func", 0) {
        0 => Gating::Sigmoid,
        g => gating(g)?,
    };
    e.swiglu_limit_exp = k.f32_layers("swiglu_clamp_exp", n_layer);
    e.swiglu_limit_shexp = k.f32_layers("swiglu_clamp_shexp", n_layer);
    if e.swiglu_limit_shexp.is_empty() {
        e.swiglu_limit_shexp = e.swiglu_limit_exp.clone();
    }
    let ix = &mut e.kpool_indexer;
    ix.n_head = k.u32_required("attention.indexer.head_count")? as usize;
    ix.head = k.u32_required("attention.indexer.key_length")? as usize;
    ix.top_k = k.u32_required("attention.indexer.top_k")? as usize;
    let kpool = k.u32_required("attention.indexer.kpool")? as usize;
    if kpool <= 1 || ix.top_k % kpool != 0 {
        return Err(format!(
            "attention.indexer.kpool {kpool} must be > 1 and divide top_k {} (upstream asserts it)",
            ix.top_k
        ));
    }
    if !k.bool("attention.indexer.kpool_select_tail", true) {
        return Err("attention.indexer.kpool_select_tail false (the incomplete pool hidden) is not supported yet".into());
    }
    ix.full = match k.ints("attention.indexer.types") {
        Some(_) => k.layer_flags("attention.indexer.types", n_layer, true),
        None => vec![k.u32("attention.indexer.types", 1) != 0; n_layer],
    };
    if k.u32_required("hyper_connection.count")? as usize != HC {
        return Err("hyper_connection.count must be 4 (upstream asserts it)".into());
    }
    e.hc_sinkhorn_iters = k.u32_required("hyper_connection.sinkhorn_iterations")? as usize;
    if e.hc_sinkhorn_iters == 0 {
        return Err("hyper_connection.sinkhorn_iterations must be > 0".into());
    }
    e.hc_eps = hc_eps;
    e.n_ff_shexp = hp.n_ff_exp * e.n_expert_shared;
    e.kpool = kpool;
    hybrid_layers(hp)?;
    // upstream's indexer cache (llama_memory_hybrid_idx) on the attention layers with an
    // indexer of their own: key | gate | pooled key per cell
    let row = 3 * hp.ext.kpool_indexer.head;
    hp.ext.idx_rows = (0..n_layer)
        .map(|il| {
            let full = hp.ext.kpool_indexer.full.get(il).copied().unwrap_or(true);
            if !hp.is_recurrent(il) && full {
                row
            } else {
                0
            }
        })
        .collect();
    Ok(())
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let e = &hp.ext;
    let n_embd = hp.n_embd;
    let ne = n_embd as i64;
    if b.n_ctx_seq as usize > e.kpool_indexer.top_k {
        return Err(BuildError::Invalid(format!(
            "a context of {} cells per sequence is more than the indexer's top_k {}: its selection of the cells each token sees is not supported yet (contexts up to top_k are exact)",
            b.n_ctx_seq, e.kpool_indexer.top_k
        )));
    }
    let kda = Kda {
        head_dim: e.kda_head,
        d_conv: e.ssm.d_conv,
        decay: KdaDecay::Kimi {
            lower_bound: e.kda_lower_bound,
        },
        out_gate: KdaOutGate::LowRank,
        l2_eps: 1e-6,
    };
    let (_, inp) = b.inp_embd()?;
    // every stream starts as the token's embedding
    let mut streams = b.repeat_heads(inp, n_embd, HC);
    for il in 0..hp.n_layer {
        let attn_norm = b.lw(il, "attn_norm.weight", &[ne])?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[ne])?;

        let (cur, post, comb) = b.hc_pre_manifold(il, streams, "attn", HC)?;
        let cur = b.rms_norm(cur, Some(attn_norm), hp.eps_rms);
        let cur = if hp.is_recurrent(il) {
            b.kda_layer(il, cur, kda)?
        } else {
            latent_attn(b, il, cur)?
        };
        streams = b.hc_post_manifold(cur, streams, post, comb);

        let (cur, post, comb) = b.hc_pre_manifold(il, streams, "ffn", HC)?;
        let x = b.rms_norm(cur, Some(ffn_norm), hp.eps_rms);
        let shared = Ffn {
            act: GluKind::swiglu_clamp_for(&e.swiglu_limit_shexp, il),
            bias: false,
            scaled: false,
        };
        let out = if il < e.n_layer_dense_lead {
            b.ffn_layer(il, x, shared)?
        } else {
            let moe = Moe {
                gating: e.gating,
                norm_w: hp.expert_weights_norm,
                scale_w: hp.expert_weights_scale,
                probs_bias: true,
                exp_scales: false,
                groups: (e.n_expert_groups, e.n_group_used),
                act: GluKind::swiglu_clamp_for(&e.swiglu_limit_exp, il),
                biases: false,
            };
            b.moe_shared_layer(il, x, hp.n_ff_exp, moe, e.n_ff_shexp, shared)?
        };
        streams = b.hc_post_manifold(out, streams, post, comb);
        streams = b.cvec_streams(streams, il, HC);
    }
    // the output rows, then the streams' mean
    let streams = b.get_rows_out(streams);
    let mut acc = b.view(streams, 0, n_embd);
    for s in 1..HC {
        let x = b.view(streams, s * n_embd, n_embd);
        acc = b.add(acc, Operand::Node(x));
    }
    let cur = b.scale(acc, 1.0 / HC as f32);
    let norm = b.weight("output_norm.weight", &[ne])?;
    let output = b.weight("output.weight", &[ne, hp.n_vocab as i64])?;
    let embd = b.rms_norm(cur, Some(norm), hp.eps_rms);
    let logits = b.mul_mat_raw(output, embd);
    Ok(Outputs { logits, embd })
}

/// The rope-less latent attention of layer `il` (the sparse attention's checks on its
/// indexer's tensors included: see the module's note).
fn latent_attn(b: &mut Builder, il: usize, cur: NodeId) -> Result<NodeId, BuildError> {
    let hp = b.hp;
    let e = &hp.ext;
    let ne = hp.n_embd as i64;
    let n_head = hp.n_head[il];
    let nh = n_head as i64;
    let kv_lora = e.n_lora_kv as i64;
    let (head_k, head_v) = (e.head_k_mla, e.head_v_mla);
    let lq = e.n_lora_q as i64;
    let wq_a = b.lw(il, "attn_q_a.weight", &[ne, lq])?;
    let q_a_norm = b.lw(il, "attn_q_a_norm.weight", &[lq])?;
    let wq_b = b.lw(il, "attn_q_b.weight", &[lq, nh * head_k as i64])?;
    let wkv_a = b.lw(il, "attn_kv_a_mqa.weight", &[ne, kv_lora])?;
    let kv_a_norm = b.lw(il, "attn_kv_a_norm.weight", &[kv_lora])?;
    let wk_b = b.lw(il, "attn_k_b.weight", &[head_k as i64, kv_lora, nh])?;
    let wv_b = b.lw(il, "attn_v_b.weight", &[kv_lora, head_v as i64, nh])?;
    let wo = b.lw(il, "attn_output.weight", &[nh * head_v as i64, ne])?;
    if e.kpool_indexer.full.get(il).copied().unwrap_or(true) {
        let ix = &e.kpool_indexer;
        let (ih, inh) = (ix.head as i64, ix.n_head as i64);
        let k_norm = b.lw(il, "indexer.k_norm.weight", &[ih])?;
        let k_norm_b = b.lw(il, "indexer.k_norm.bias", &[ih])?;
        b.lw(il, "indexer.proj.weight", &[ne, inh])?;
        let wk = b.lw(il, "indexer.attn_k.weight", &[ne, ih])?;
        b.lw(il, "indexer.attn_q_b.weight", &[lq, inh * ih])?;
        let w_gate = b.lw(il, "indexer_compressor_gate.weight", &[ne, ih])?;
        let ape = b.lw(il, "indexer_compressor_ape.weight", &[ih, e.kpool as i64])?;
        // the indexer cache upstream keeps (its state files hold it): each token's key
        // (layer-normed) and pool gate, and the pools' keys
        let k = b.mul_mat_raw(wk, cur);
        let k = b.layer_norm(k, Some(k_norm), Some(k_norm_b), hp.eps_norm);
        let g = b.mul_mat_raw(w_gate, cur);
        let op = Op::KpoolIndexSet {
            k,
            g,
            ape,
            layer: hp.n_layer + il,
            kpool: e.kpool,
        };
        b.push("indexer_kpool_set", op, 0, 0);
    }

    let q = b.mul_mat_raw(wq_a, cur);
    let q = b.rms_norm(q, Some(q_a_norm), hp.eps_rms);
    let q = b.mul_mat_raw(wq_b, q);
    let kv = b.mul_mat_raw(wkv_a, cur);
    let kv = b.rms_norm(kv, Some(kv_a_norm), hp.eps_rms);
    let q = b.mul_mat_heads(wk_b, q, n_head);
    let kq_scale = 1.0 / (head_k as f32).sqrt();
    let out = b.attn_latent_heads(il, q, kv, wv_b, kq_scale, None);
    Ok(b.mul_mat_raw(wo, out))
}
