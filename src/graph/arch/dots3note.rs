//! `dots3note` (upstream's src/models/dots3note.cpp): deepseek32's sparse latent attention
//! (a lightning indexer, NEOX-rotated, picks the cells each token's MLA reads) on the
//! full-attention layers, plain latent attention over a sliding
//! window (`attention.sliding_window`, `sliding_window_pattern`, their own rope base) on
//! the others; the shared rotary key RMS-normed (`attn_k_norm`) before its rotation; the
//! heads gated by `sigmoid(attn_gate x)` before `attn_output`; `leading_dense_block_count`
//! dense layers, then routed experts with the `exp_probs_b` selection bias plus shared
//! experts. The output projection, FFNs and experts take their per-tensor scales.
//! Sliding-window layers with their own MLA sizes (`*_mla_swa`, `kv_lora_rank_swa`
//! different from the full layers') are refused: the cache here has one row width.

use super::super::builder::{BuildError, Builder, Ffn, Moe, Outputs};
use super::super::params::ArchParams;
use super::super::{GluKind, NodeId, Op, Operand, RopeMode, RopeParams};
use super::bailingmoe3::gating;
use super::deepseek2::{compressed_mla_cache, indexer, Dsa};
use super::deepseek32::indexer_params;
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["dots3note"],
    rope: Rope::Mode(RopeMode::Norm),
    memory: Memory::KvLatent,
    hparams,
    graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    // upstream fixes the indexer key's LayerNorm eps
    hp.eps_norm = 1e-6;
    hp.n_ff_exp = k.u32("expert_feed_forward_length", 0) as usize;
    hp.expert_weights_scale = k.f32("expert_weights_scale", 0.0);
    hp.expert_weights_norm = k.bool("expert_weights_norm", false);
    if hp.n_ff_exp == 0 {
        return Err("expert_feed_forward_length must be > 0".into());
    }
    let n_layer = hp.n_layer;
    hp.n_swa = k.u32_required("attention.sliding_window")?;
    if k.ints("attention.sliding_window_pattern").is_none() {
        return Err(format!(
            "key not found in model: {} (an array)",
            k.key("attention.sliding_window_pattern")
        ));
    }
    hp.swa_layers = k.swa_layers(n_layer, 0)?;
    hp.rope_freq_base_swa = k
        .f32_opt("rope.freq_base_swa")
        .ok_or_else(|| format!("key not found in model: {}", k.key("rope.freq_base_swa")))?;
    let e = &mut hp.ext;
    e.n_expert_shared = k.u32_required("expert_shared_count")? as usize;
    e.n_layer_dense_lead = k.u32_required("leading_dense_block_count")? as usize;
    e.gating = gating(k.u32_required("expert_gating_func")?)?;
    e.n_lora_q = k.u32_required("attention.q_lora_rank")? as usize;
    e.n_lora_kv = k.u32_required("attention.kv_lora_rank")? as usize;
    e.head_k_mla = k.u32_required("attention.key_length_mla")? as usize;
    e.head_v_mla = k.u32_required("attention.value_length_mla")? as usize;
    let swa = (
        k.u32_required("attention.kv_lora_rank_swa")? as usize,
        k.u32_required("attention.key_length_mla_swa")? as usize,
        k.u32_required("attention.value_length_mla_swa")? as usize,
    );
    if swa != (e.n_lora_kv, e.head_k_mla, e.head_v_mla) {
        return Err(format!(
            "sliding-window layers with their own MLA sizes (kv_lora_rank_swa, key/value_length_mla_swa {swa:?}, full layers {:?}) are not supported yet",
            (e.n_lora_kv, e.head_k_mla, e.head_v_mla)
        ));
    }
    e.n_ff_shexp = hp.n_ff_exp * e.n_expert_shared;
    compressed_mla_cache(hp)?;
    // (the graph computes the indexer on every full-attention layer; upstream's indexer
    // cache holds the layers `attention.indexer.types` marks, a required array)
    let mut ix = indexer_params(k, hp)?;
    let types = k.key("attention.indexer.types");
    k.model
        .meta
        .get_array(&types)
        .ok_or_else(|| format!("key not found in model: {types} (an array)"))?;
    ix.full = k.layer_flags("attention.indexer.types", n_layer, false);
    hp.ext.indexer = ix;
    Ok(())
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let e = &hp.ext;
    let n_embd = hp.n_embd as i64;
    let (tok_embd, mut inp) = b.inp_embd()?;
    let mut prev_sel = None;
    let scaled = Ffn {
        act: GluKind::Swiglu,
        bias: false,
        scaled: true,
    };
    for il in 0..hp.n_layer {
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;
        let cur = b.rms_norm(inp, Some(attn_norm), hp.eps_rms);
        let mut cur = attention(b, il, cur, &mut prev_sel)?;
        let mut res = inp;
        if il == hp.n_layer - 1 {
            cur = b.get_rows_out(cur);
            res = b.get_rows_out(res);
        }
        let ffn_inp = b.add(cur, Operand::Node(res));
        let x = b.rms_norm(ffn_inp, Some(ffn_norm), hp.eps_rms);
        let out = if il < e.n_layer_dense_lead {
            b.ffn_layer(il, x, scaled)?
        } else {
            let moe = Moe {
                gating: e.gating,
                norm_w: hp.expert_weights_norm,
                scale_w: hp.expert_weights_scale,
                probs_bias: true,
                exp_scales: true,
                groups: (e.n_expert_groups, e.n_group_used),
                act: GluKind::Swiglu,
                biases: false,
            };
            b.moe_shared_layer(il, x, hp.n_ff_exp, moe, e.n_ff_shexp, scaled)?
        };
        let cur = b.add(out, Operand::Node(ffn_inp));
        inp = b.cvec(cur, il);
    }
    let norm = b.weight("output_norm.weight", &[n_embd])?;
    let output = b.output_weight(tok_embd)?;
    let embd = b.rms_norm(inp, Some(norm), hp.eps_rms);
    let logits = b.mul_mat_raw(output, embd);
    Ok(Outputs { logits, embd })
}

/// ROPE (NORM) with the layer's base (the sliding-window one on those layers) and the
/// context's frequency scale (upstream passes it on every layer).
fn rope(b: &mut Builder, x: NodeId, swa: bool) -> NodeId {
    let (hp, r) = (b.hp, b.rope);
    let params = RopeParams {
        n_rot: hp.n_rot,
        mode: RopeMode::Norm,
        n_ctx_orig: r.n_ctx_orig,
        freq_base: if swa {
            hp.rope_freq_base_swa
        } else {
            r.freq_base
        },
        freq_scale: r.freq_scale,
        ext_factor: r.ext_factor,
        attn_factor: r.attn_factor,
        beta_fast: r.beta_fast,
        beta_slow: r.beta_slow,
    };
    let (n0, n1) = (b.ne0(x), b.ne1(x));
    let op = Op::Rope {
        src: x,
        head_dim: hp.n_rot,
        params,
        freq_factors: None,
    };
    b.push("rope", op, n0, n1)
}

/// Layer `il`'s gated latent attention, sparse on the full-attention layers.
fn attention(
    b: &mut Builder,
    il: usize,
    cur: NodeId,
    prev_sel: &mut Option<NodeId>,
) -> Result<NodeId, BuildError> {
    let hp = b.hp;
    let e = &hp.ext;
    let n_embd = hp.n_embd as i64;
    let swa = hp.swa_layers.get(il).copied().unwrap_or(false);
    let n_head = hp.n_head[il];
    let nh = n_head as i64;
    let (n_rot, kv_lora) = (hp.n_rot, e.n_lora_kv);
    let (head_k, head_v) = (e.head_k_mla, e.head_v_mla);
    let nope = head_k - n_rot;
    let lq = e.n_lora_q as i64;
    let wq_a = b.lw(il, "attn_q_a.weight", &[n_embd, lq])?;
    let q_a_norm = b.lw(il, "attn_q_a_norm.weight", &[lq])?;
    let wq_b = b.lw(il, "attn_q_b.weight", &[lq, nh * head_k as i64])?;
    let wkv_a = b.lw(
        il,
        "attn_kv_a_mqa.weight",
        &[n_embd, (kv_lora + n_rot) as i64],
    )?;
    let kv_a_norm = b.lw(il, "attn_kv_a_norm.weight", &[kv_lora as i64])?;
    let k_norm = b.lw(il, "attn_k_norm.weight", &[n_rot as i64])?;
    let wk_b = b.lw(il, "attn_k_b.weight", &[nope as i64, kv_lora as i64, nh])?;
    let wv_b = b.lw(il, "attn_v_b.weight", &[kv_lora as i64, head_v as i64, nh])?;
    let w_gate = b.lw(il, "attn_gate.weight", &[n_embd, nh])?;
    let wo = b.lw(il, "attn_output.weight", &[nh * head_v as i64, n_embd])?;

    let qr = b.mul_mat_raw(wq_a, cur);
    let qr = b.rms_norm(qr, Some(q_a_norm), hp.eps_rms);
    let sel = if swa {
        None
    } else {
        // (the indexer rotates NEOX, as deepseek32's)
        let d = Dsa {
            rope: RopeMode::Neox,
            norm_optional: false,
        };
        Some(indexer(b, il, d, cur, qr, prev_sel)?)
    };
    let q = b.mul_mat_raw(wq_b, qr);
    let q_nope = b.view_heads(q, head_k, 0, nope);
    let q_pe = b.view_heads(q, head_k, nope, n_rot);
    let kv_all = b.mul_mat_raw(wkv_a, cur);
    let kv = b.view(kv_all, 0, kv_lora);
    let k_pe = b.view(kv_all, kv_lora, n_rot);
    let k_pe = b.rms_norm(k_pe, Some(k_norm), hp.eps_rms);
    let q_pe = rope(b, q_pe, swa);
    let k_pe = rope(b, k_pe, swa);
    let kv = b.rms_norm(kv, Some(kv_a_norm), hp.eps_rms);
    let q_nope = b.mul_mat_heads(wk_b, q_nope, n_head);
    let q = b.concat_heads(q_nope, q_pe, n_head);
    let k = b.concat_heads(kv, k_pe, 1);
    let kq_scale = 1.0 / (head_k as f32).sqrt();
    let out = b.attn_latent_heads(il, q, k, wv_b, kq_scale, sel);
    let gate = b.mul_mat_lora(w_gate, cur);
    let gate = b.sigmoid(gate);
    let gate = b.repeat_heads(gate, 1, head_v);
    let out = b.mul(out, Operand::Node(gate));
    Ok(b.mul_mat(wo, out))
}
