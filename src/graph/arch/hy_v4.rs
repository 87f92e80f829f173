//! `hy_v4` (upstream's src/models/hy-v4.cpp; Hunyuan V4): independent hyper-connections
//! (`hyper_connection.count` residual streams; each block reads their `sigmoid`-weighted
//! sum and adds its output, weighted by `magnitude * sigmoid(..)`, back into every stream:
//! DeepSeek-V4's layout without the Sinkhorn comb; the output head reads one more weighted
//! sum), around a gated latent attention (absorbed `attn_k_b`/`attn_v_b` over one compressed
//! K-only cache row per token, NORM rotation, attention sinks, the heads' values gated by
//! `sigmoid(attn_gate x)` before `attn_output`), sparse when the file has an indexer
//! (`attention.indexer.top_k` > 0: a lightning indexer without the Hadamard rotation whose
//! heads rotate their last `n_rot` values; "shared" layers of `attention.indexer.types`
//! reuse the previous selection); `leading_dense_block_count` dense layers, then routed
//! experts (SwiGLU clamped by `swiglu_clamp_exp`, the `exp_probs_b` selection bias) plus
//! shared experts. No per-tensor scales (upstream passes none).

use super::super::builder::{BuildError, Builder, Ffn, Moe, Outputs};
use super::super::params::{ArchParams, Indexer};
use super::super::{GluKind, HcMixKind, NodeId, Operand, RopeMode};
use super::bailingmoe3::{gating, mla_hparams};
use super::deepseek2::compressed_mla_cache;
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["hy_v4"],
    rope: Rope::Mode(RopeMode::Norm),
    memory: Memory::KvLatent,
    hparams,
    graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    let required_f32 = |s: &str| {
        k.f32_opt(s)
            .ok_or_else(|| format!("key not found in model: {}", k.key(s)))
    };
    let n_layer = hp.n_layer;
    hp.n_ff_exp = k.u32_required("expert_feed_forward_length")? as usize;
    hp.expert_weights_scale = k.f32("expert_weights_scale", 0.0);
    hp.expert_weights_norm = k.bool("expert_weights_norm", false);
    let e = &mut hp.ext;
    mla_hparams(k, e)?;
    e.n_lora_q = k.u32_required("attention.q_lora_rank")? as usize;
    e.n_layer_dense_lead = k.u32("leading_dense_block_count", 0) as usize;
    e.n_expert_shared = k.u32_required("expert_shared_count")? as usize;
    e.n_ff_shexp = hp.n_ff_exp * e.n_expert_shared;
    if n_layer > e.n_layer_dense_lead {
        // upstream's build_moe_ffn aborts on any other value
        e.gating = gating(k.u32("expert_gating_func", 0))?;
    }
    // (routed experts only: upstream leaves the shared experts' limit at 0)
    e.swiglu_limit_exp = k.f32_layers("swiglu_clamp_exp", n_layer);
    e.hc = k.u32_required("hyper_connection.count")? as usize;
    e.hc_eps = required_f32("hyper_connection.epsilon")?;
    e.hc_magnitude = required_f32("hyper_connection.magnitude")?;
    if e.hc == 0 {
        return Err("hyper_connection.count must be > 0".into());
    }
    if e.head_k_mla == 0 || e.head_v_mla == 0 || e.n_lora_kv == 0 {
        // upstream asserts is_mla()
        return Err("the attention must be latent (key_length_mla, value_length_mla)".into());
    }
    compressed_mla_cache(hp)?;
    let top_k = k.u32("attention.indexer.top_k", 0) as usize;
    if top_k > 0 {
        // the indexer key's LayerNorm takes the RMS eps (upstream copies it)
        hp.eps_norm = hp.eps_rms;
        let ix = Indexer {
            n_head: k.u32("attention.indexer.head_count", 0) as usize,
            head: k.u32("attention.indexer.key_length", 0) as usize,
            top_k,
            full: k.layer_flags("attention.indexer.types", n_layer, true),
            ..Default::default()
        };
        if ix.n_head == 0 || ix.head <= hp.n_rot {
            return Err("bad indexer head count / key length".into());
        }
        if !ix.full.first().copied().unwrap_or(true) {
            return Err("layer 0 must own an indexer, nothing precedes it to share".into());
        }
        hp.ext.indexer = ix;
    }
    Ok(())
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let e = &hp.ext;
    let (hc, n_embd) = (e.hc, hp.n_embd);
    let ne = n_embd as i64;
    let plain = Ffn {
        act: GluKind::Swiglu,
        bias: false,
        scaled: false,
    };
    let (_, inp) = b.inp_embd()?;
    let mut streams = b.hc_expand(inp, hc);
    let mut prev_sel = None;
    for il in 0..hp.n_layer {
        let attn_norm = b.lw(il, "attn_norm.weight", &[ne])?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[ne])?;

        let (cur, post) = hc_pre(b, il, streams, "attn")?;
        let cur = b.rms_norm(cur, Some(attn_norm), hp.eps_rms);
        let cur = attention(b, il, cur, &mut prev_sel)?;
        streams = b.hc_post_independent(cur, streams, post, hc);

        let (cur, post) = hc_pre(b, il, streams, "ffn")?;
        let x = b.rms_norm(cur, Some(ffn_norm), hp.eps_rms);
        let out = if il < e.n_layer_dense_lead {
            b.ffn_layer(il, x, plain)?
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
            b.moe_shared_layer(il, x, hp.n_ff_exp, moe, e.n_ff_shexp, plain)?
        };
        streams = b.hc_post_independent(out, streams, post, hc);
    }
    let streams = b.get_rows_out(streams);
    let cur = b.hc_head(streams, hc, e.hc_eps)?;
    let norm = b.weight("output_norm.weight", &[ne])?;
    let output = b.weight("output.weight", &[ne, hp.n_vocab as i64])?;
    let embd = b.rms_norm(cur, Some(norm), hp.eps_rms);
    let logits = b.mul_mat_raw(output, embd);
    Ok(Outputs { logits, embd })
}

/// A block's input from the streams (`build_hc_pre` with `hc_<which>_*`): their sum
/// weighted by `pre`, and the `post` weights the block's output goes back with.
fn hc_pre(
    b: &mut Builder,
    il: usize,
    streams: NodeId,
    which: &str,
) -> Result<(NodeId, NodeId), BuildError> {
    let e = &b.hp.ext;
    let (hc, eps, magnitude) = (e.hc, e.hc_eps, e.hc_magnitude);
    let n_embd = b.hp.n_embd as i64;
    let mix = 2 * hc as i64;
    let w_fn = b.lw(
        il,
        &format!("hc_{which}_fn.weight"),
        &[hc as i64 * n_embd, mix],
    )?;
    let base = b.lw(il, &format!("hc_{which}_base.weight"), &[mix])?;
    let scale = b.lw(il, &format!("hc_{which}_scale.weight"), &[2])?;
    let kind = HcMixKind::Independent { magnitude };
    let mixed = b.hc_mix(streams, [w_fn, scale, base], hc, eps, kind);
    let pre = b.view(mixed, 0, hc);
    let post = b.view(mixed, hc, hc);
    Ok((b.hc_reduce(streams, pre, hc), post))
}

/// The last `n_rot` values of every head rotated (`ggml_rope_set_offset` to the nope part).
fn rope_tail(b: &mut Builder, x: NodeId, head: usize, n_head: usize) -> NodeId {
    let n_rot = b.hp.n_rot;
    let nope = b.view_heads(x, head, 0, head - n_rot);
    let pe = b.view_heads(x, head, head - n_rot, n_rot);
    let pe = b.rope(pe, n_rot, RopeMode::Norm, None, false);
    b.concat_heads(nope, pe, n_head)
}

/// The lightning indexer of a full layer (upstream's `build_indexer_top_k`): Q from the
/// normed low-rank `qr`, one key from `cur` (LayerNorm with bias), both rotated on their
/// last `n_rot` values (no Hadamard rotation: it does not change the products), per-head
/// weights pre-scaled by `1/sqrt(head * n_head)`; a shared layer reuses the previous
/// selection.
fn indexer(
    b: &mut Builder,
    il: usize,
    cur: NodeId,
    qr: NodeId,
    prev: &mut Option<NodeId>,
) -> Result<NodeId, BuildError> {
    let hp = b.hp;
    let ix = &hp.ext.indexer;
    if !ix.full.get(il).copied().unwrap_or(true) {
        return prev.ok_or_else(|| {
            BuildError::Invalid(format!(
                "layer {il}: a shared indexer layer must follow a full one"
            ))
        });
    }
    let ne = hp.n_embd as i64;
    let (nh, head) = (ix.n_head as i64, ix.head as i64);
    let lq = hp.ext.n_lora_q as i64;
    let wq = b.lw(il, "indexer.attn_q_b.weight", &[lq, nh * head])?;
    let wk = b.lw(il, "indexer.attn_k.weight", &[ne, head])?;
    let k_norm = b.lw(il, "indexer.k_norm.weight", &[head])?;
    let k_norm_b = b.lw(il, "indexer.k_norm.bias", &[head])?;
    let wp = b.lw(il, "indexer.proj.weight", &[ne, nh])?;
    let q = b.mul_mat_raw(wq, qr);
    let q = rope_tail(b, q, ix.head, ix.n_head);
    let k = b.mul_mat_raw(wk, cur);
    let k = b.layer_norm(k, Some(k_norm), Some(k_norm_b), hp.eps_norm);
    let k = rope_tail(b, k, ix.head, 1);
    let w = b.mul_mat_raw(wp, cur);
    let w = b.scale(w, 1.0 / ((ix.head * ix.n_head) as f32).sqrt());
    let sel = b.lightning_indexer(il, q, k, w);
    *prev = Some(sel);
    Ok(sel)
}

/// Layer `il`'s gated latent attention with sinks, sparse when the model has an indexer.
fn attention(
    b: &mut Builder,
    il: usize,
    cur: NodeId,
    prev_sel: &mut Option<NodeId>,
) -> Result<NodeId, BuildError> {
    let hp = b.hp;
    let e = &hp.ext;
    let ne = hp.n_embd as i64;
    let n_head = hp.n_head[il];
    let nh = n_head as i64;
    let (n_rot, kv_lora) = (hp.n_rot, e.n_lora_kv);
    let (head_k, head_v) = (e.head_k_mla, e.head_v_mla);
    let nope = head_k - n_rot;
    let lq = e.n_lora_q as i64;
    let sinks = b.lw(il, "attn_sinks.weight", &[nh])?;
    let wq_a = b.lw(il, "attn_q_a.weight", &[ne, lq])?;
    let q_a_norm = b.lw(il, "attn_q_a_norm.weight", &[lq])?;
    let wq_b = b.lw(il, "attn_q_b.weight", &[lq, nh * head_k as i64])?;
    let wkv_a = b.lw(il, "attn_kv_a_mqa.weight", &[ne, (kv_lora + n_rot) as i64])?;
    let kv_a_norm = b.lw(il, "attn_kv_a_norm.weight", &[kv_lora as i64])?;
    let wk_b = b.lw(il, "attn_k_b.weight", &[nope as i64, kv_lora as i64, nh])?;
    let wv_b = b.lw(il, "attn_v_b.weight", &[kv_lora as i64, head_v as i64, nh])?;
    let wo = b.lw(il, "attn_output.weight", &[nh * head_v as i64, ne])?;
    let w_gate = b.lw(il, "attn_gate.weight", &[ne, nh * head_v as i64])?;

    let qr = b.mul_mat_raw(wq_a, cur);
    let qr = b.rms_norm(qr, Some(q_a_norm), hp.eps_rms);
    let sel = if e.indexer.top_k > 0 {
        Some(indexer(b, il, cur, qr, prev_sel)?)
    } else {
        None
    };
    let q = b.mul_mat_raw(wq_b, qr);
    let q_nope = b.view_heads(q, head_k, 0, nope);
    let q_pe = b.view_heads(q, head_k, nope, n_rot);
    let kv_all = b.mul_mat_raw(wkv_a, cur);
    let kv = b.view(kv_all, 0, kv_lora);
    let k_pe = b.view(kv_all, kv_lora, n_rot);
    let q_pe = b.rope(q_pe, n_rot, RopeMode::Norm, None, false);
    let k_pe = b.rope(k_pe, n_rot, RopeMode::Norm, None, false);
    let kv = b.rms_norm(kv, Some(kv_a_norm), hp.eps_rms);
    let q_nope = b.mul_mat_heads(wk_b, q_nope, n_head);
    let q = b.concat_heads(q_nope, q_pe, n_head);
    let k = b.concat_heads(kv, k_pe, 1);
    let kq_scale = 1.0 / (head_k as f32).sqrt();
    let out = b.attn_latent_heads_sinks(il, q, k, wv_b, kq_scale, sel, Some(sinks));
    let gate = b.mul_mat_raw(w_gate, cur);
    let gate = b.sigmoid(gate);
    let out = b.mul(out, Operand::Node(gate));
    Ok(b.mul_mat_lora(wo, out))
}
