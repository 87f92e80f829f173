//! `deepseek4` (upstream's src/models/deepseek4.cpp; DeepSeek-V4): manifold
//! hyper-connections (four residual streams, Sinkhorn-normalised mixes: DSV4_HC_PRE /
//! DSV4_HC_COMB / DSV4_HC_POST, the output head reading their `sigmoid`-weighted sum) around
//! an attention with one shared K = V head per token (RMS-normed low-rank Q, RMS-normed
//! heads, NORM rotation of each head's last `n_rot` values, attention sinks, a sliding
//! window on every layer) whose output turns back from the query's position (ROPE_BACK) and
//! goes through a grouped low-rank projection (`attn_output_a` per group, `attn_output_b`);
//! then DeepSeek MoE routed by `sqrt(softplus)` with the `exp_probs_b` bias plus shared
//! experts, SwiGLU clamped by `swiglu_clamp_exp` / `_shexp`.
//!
//! Compressed attention (`attention.compress_ratios`): a layer of ratio 4 (CSA) or 128 (HCA)
//! also attends to one compressed key per finished block of `ratio` tokens. Each token's
//! compressor row (`attn_compressor_kv` / `_gate` projections, the gate plus `ape[pos %
//! ratio]`) is kept exactly in a memory layer at the token's cell (upstream's F32 compressor
//! state); the token that closes a block compresses it (per value, the softmax of the
//! scores over the block's rows — with CSA the previous block's rows too, on the rows' other
//! half — weighting the values; RMS norm, rotation at the block's first position with
//! `compress_rope_freq_base`) into a compressed-key layer at its cell (upstream's compressed
//! cache, in the cache's type). Attention reads the raw rows, then the compressed ones in
//! block order (upstream's CONCAT), a token at position `p` seeing `(p + 1) / ratio` of them.
//!
//! The CSA layers' lightning indexer keeps its own compressed keys (`indexer_compressor_*`,
//! Hadamard-rotated, in two more memory layers) and picks per token the `indexer.top_k`
//! best of them (Σ over its heads of relu(q · k) times the head's weight); the attention
//! sees only those. Refused at context creation: hash-routed layers (`hash_layer_count` >
//! 0), a 2-D `attn_output_a`, and media input with its own routing bias.

use super::super::builder::{BuildError, Builder, Ffn, Moe, Outputs};
use super::super::params::ArchParams;
use super::super::{GluKind, NodeId, Op, RopeMode, RopeParams, WeightId};
use super::bailingmoe3::gating;
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["deepseek4"],
    rope: Rope::Mode(RopeMode::Norm),
    memory: Memory::KvLatent,
    hparams,
    graph,
};

/// The residual streams of the hyper-connections (upstream asserts 4).
const HC: usize = 4;
/// CSA's and HCA's compression ratios.
const CSA: u32 = 4;
const HCA: u32 = 128;

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    let required_f32 = |s: &str| {
        k.f32_opt(s)
            .ok_or_else(|| format!("key not found in model: {}", k.key(s)))
    };
    let n_layer = hp.n_layer;
    hp.n_ff_exp = k.u32_required("expert_feed_forward_length")? as usize;
    hp.expert_weights_scale = required_f32("expert_weights_scale")?;
    hp.expert_weights_norm = k.bool("expert_weights_norm", false);
    hp.n_swa = k.u32_required("attention.sliding_window")?;
    // upstream's set_swa_pattern(0): every layer slides
    hp.swa_layers = vec![true; n_layer];
    hp.rope_freq_base_swa = hp.rope_freq_base;
    hp.rope_freq_scale_swa = 1.0;
    if hp.head_k != hp.head_v || hp.n_rot > hp.head_k || hp.head_k == 0 {
        return Err(format!(
            "attention.key_length {} must equal value_length {} and hold rope.dimension_count {}",
            hp.head_k, hp.head_v, hp.n_rot
        ));
    }
    // one K row per token, read as V too (upstream's K-only cache)
    hp.n_head_kv.iter_mut().for_each(|h| *h = 1);
    let hc_eps = required_f32("hyper_connection.epsilon")?;
    let ratios: Vec<u32> = match k.ints("attention.compress_ratios") {
        Some(v) if v.len() >= n_layer => v.iter().map(|&r| r as u32).collect(),
        _ => return Err("attention.compress_ratios is missing or shorter than block_count".into()),
    };
    if let Some(r) = ratios.iter().find(|&&r| r != 0 && r != CSA && r != HCA) {
        return Err(format!(
            "compression ratio {r}: only 0, 4 and 128 exist (upstream refuses others)"
        ));
    }
    if k.u32("hash_layer_count", 0) > 0 {
        return Err("hash-routed layers (hash_layer_count > 0) are not supported yet".into());
    }
    let e = &mut hp.ext;
    e.n_lora_q = k.u32_required("attention.q_lora_rank")? as usize;
    e.n_expert_shared = k.u32_required("expert_shared_count")? as usize;
    e.n_ff_shexp = hp.n_ff_exp * e.n_expert_shared;
    e.gating = gating(k.u32_required("expert_gating_func")?)?;
    if e.gating != super::super::builder::Gating::SqrtSoftplus {
        // upstream: "DeepSeek-V4 loader currently expects sqrtsoftplus MoE scoring"
        return Err("expert_gating_func must be 4 (sqrt(softplus))".into());
    }
    e.swiglu_limit_exp = k.f32_layers("swiglu_clamp_exp", n_layer);
    e.swiglu_limit_shexp = k.f32_layers("swiglu_clamp_shexp", n_layer);
    if e.swiglu_limit_shexp.is_empty() {
        e.swiglu_limit_shexp = e.swiglu_limit_exp.clone();
    }
    if k.u32_required("hyper_connection.count")? as usize != HC {
        return Err("hyper_connection.count must be 4 (upstream asserts it)".into());
    }
    e.hc = HC;
    e.hc_eps = hc_eps;
    e.hc_sinkhorn_iters = k.u32_required("hyper_connection.sinkhorn_iterations")? as usize;
    let ix = &mut e.kpool_indexer;
    ix.n_head = k.u32_required("attention.indexer.head_count")? as usize;
    ix.head = k.u32_required("attention.indexer.key_length")? as usize;
    ix.top_k = k.u32_required("attention.indexer.top_k")? as usize;
    let d = &mut e.dsv4;
    d.o_groups = k.u32_required("attention.output_group_count")? as usize;
    d.o_rank = k.u32_required("attention.output_lora_rank")? as usize;
    d.rope_base = required_f32("attention.compress_rope_freq_base")?;
    let n_head = hp.n_head.first().copied().unwrap_or(0);
    if d.o_groups == 0 || n_head % d.o_groups != 0 || hp.n_head.iter().any(|&h| h != n_head) {
        return Err(format!(
            "attention.output_group_count {} must divide head_count {n_head}",
            d.o_groups
        ));
    }
    let head = hp.head_k;
    let ih = e.kpool_indexer.head;
    if ratios[..n_layer].contains(&CSA) && (ih == 0 || ih < hp.n_rot || !ih.is_power_of_two()) {
        return Err(format!(
            "attention.indexer.key_length {ih} must be a power of two of at least rope.dimension_count {}",
            hp.n_rot
        ));
    }
    // per layer: the compressor rows (kv and score, exact: twice their width in cache
    // values), the compressed keys, then the CSA indexer's compressor rows and keys
    let state = |r: u32| match r {
        CSA => 2 * (2 * 2 * head),
        HCA => 2 * (2 * head),
        _ => 0,
    };
    let csa = |r: u32, w: usize| if r == CSA { w } else { 0 };
    let rs = &ratios[..n_layer];
    e.mem_extra = rs
        .iter()
        .map(|&r| state(r))
        .chain(rs.iter().map(|&r| if r > 0 { head } else { 0 }))
        .chain(rs.iter().map(|&r| csa(r, 2 * (2 * 2 * ih))))
        .chain(rs.iter().map(|&r| csa(r, ih)))
        .collect();
    e.dsv4.ratios = ratios;
    Ok(())
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let e = &hp.ext;
    let n_embd = hp.n_embd;
    let ne = n_embd as i64;
    if b.embd_input {
        return Err(BuildError::Invalid(
            "media input (its exp_probs_b_vl routing) is not supported yet".into(),
        ));
    }
    // the MTP block (nextn_predict_layers) is not run, as upstream's main graph
    let nextn = b
        .model
        .meta
        .get_u32("deepseek4.nextn_predict_layers")
        .unwrap_or(0) as usize;
    let n_main = hp.n_layer.saturating_sub(nextn);
    let n_trunk = if nextn > 0
        && b.model
            .tensors
            .index_of(&format!("blk.{n_main}.nextn.eh_proj.weight"))
            .is_some()
    {
        n_main
    } else {
        hp.n_layer
    };
    let (_, inp) = b.inp_embd()?;
    let mut streams = b.hc_expand(inp, HC);
    for il in 0..n_trunk {
        let attn_norm = b.lw(il, "attn_norm.weight", &[ne])?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[ne])?;

        let (cur, post, comb) = b.hc_pre_manifold(il, streams, "attn", HC)?;
        let cur = b.rms_norm(cur, Some(attn_norm), hp.eps_rms);
        let cur = attention(b, il, cur)?;
        streams = b.hc_post_manifold(cur, streams, post, comb);

        let (cur, post, comb) = b.hc_pre_manifold(il, streams, "ffn", HC)?;
        let x = b.rms_norm(cur, Some(ffn_norm), hp.eps_rms);
        let shared = Ffn {
            act: GluKind::swiglu_clamp_for(&e.swiglu_limit_shexp, il),
            bias: false,
            scaled: false,
        };
        let moe = Moe {
            gating: e.gating,
            norm_w: hp.expert_weights_norm,
            scale_w: hp.expert_weights_scale,
            probs_bias: true,
            exp_scales: false,
            groups: (0, 0),
            act: GluKind::swiglu_clamp_for(&e.swiglu_limit_exp, il),
            biases: false,
        };
        // (upstream's loader creates the media inputs' selection bias; text never reads it)
        b.declare_unread(
            &format!("blk.{il}.exp_probs_b_vl.bias"),
            &[hp.n_expert as i64],
        );
        let out = b.moe_shared_layer(il, x, hp.n_ff_exp, moe, e.n_ff_shexp, shared)?;
        streams = b.hc_post_manifold(out, streams, post, comb);
        streams = b.cvec_streams(streams, il, HC);
    }
    let streams = b.get_rows_out(streams);
    let cur = b.hc_head(streams, HC, e.hc_eps)?;
    let norm = b.weight("output_norm.weight", &[ne])?;
    let output = b.weight("output.weight", &[ne, hp.n_vocab as i64])?;
    let embd = b.rms_norm(cur, Some(norm), hp.eps_rms);
    let logits = b.mul_mat_raw(output, embd);
    Ok(Outputs { logits, embd })
}

/// Layer `il`'s rotation: compressed layers take `compress_rope_freq_base` with the
/// context's scaling (the attention factor `1 / (1 + 0.1 ln(1 / freq_scale))` under YaRN),
/// the others the plain base without scaling (upstream's `*_l` values).
fn rope_params(b: &Builder, compressed: bool) -> RopeParams {
    let r = b.rope;
    let n_rot = b.hp.n_rot;
    if compressed {
        let attn_factor = if r.ext_factor == 0.0 {
            1.0
        } else {
            1.0 / (1.0 + 0.1 * (1.0 / r.freq_scale).ln())
        };
        RopeParams {
            n_rot,
            mode: RopeMode::Norm,
            n_ctx_orig: r.n_ctx_orig,
            freq_base: b.hp.ext.dsv4.rope_base,
            freq_scale: r.freq_scale,
            ext_factor: r.ext_factor,
            attn_factor,
            beta_fast: r.beta_fast,
            beta_slow: r.beta_slow,
        }
    } else {
        RopeParams {
            n_rot,
            mode: RopeMode::Norm,
            n_ctx_orig: 0,
            freq_base: r.freq_base,
            freq_scale: 1.0,
            ext_factor: 0.0,
            attn_factor: 1.0,
            beta_fast: 0.0,
            beta_slow: 0.0,
        }
    }
}

/// Every head's last `n_rot` values rotated (`ggml_rope_set_offset` to the rest), or turned
/// back (ROPE_BACK) with `back`.
fn rope_tail(b: &mut Builder, x: NodeId, n_head: usize, p: RopeParams, back: bool) -> NodeId {
    let head = b.ne0(x) / n_head;
    let n_rot = p.n_rot;
    let nope = b.view_heads(x, head, 0, head - n_rot);
    let pe = b.view_heads(x, head, head - n_rot, n_rot);
    let pe = if back {
        let t = b.ne1(pe);
        let op = Op::RopeBack {
            src: pe,
            head_dim: n_rot,
            params: p,
        };
        b.push("rope_back", op, n_rot * n_head, t)
    } else {
        b.rope_with(pe, n_rot, p, None)
    };
    b.concat_heads(nope, pe, n_head)
}

/// The compressor of a compressed layer: its rows kept (layer `n_layer + il`), the blocks a
/// token closes compressed into layer `2 n_layer + il`; on CSA layers the indexer's own
/// compressor too (layers `3 n_layer + il`, `4 n_layer + il`, keys Hadamard-rotated).
/// Returns the compression and, on CSA layers, the indexer keys' compression.
fn compressor(
    b: &mut Builder,
    il: usize,
    cur: NodeId,
    ratio: u32,
) -> Result<(NodeId, Option<NodeId>), BuildError> {
    let hp = b.hp;
    let n_layer = hp.n_layer;
    let comp = compress(b, il, cur, ratio, "attn_compressor", hp.head_k, n_layer, 0)?;
    let lid = if ratio == CSA {
        let ih = hp.ext.kpool_indexer.head;
        Some(compress(
            b,
            il,
            cur,
            ratio,
            "indexer_compressor",
            ih,
            3 * n_layer,
            ih,
        )?)
    } else {
        None
    };
    Ok((comp, lid))
}

/// One compressor (`<prefix>_{kv,gate,ape,norm}`) of `head`-wide keys: rows into memory
/// layer `first + il`, keys into `first + n_layer + il`.
#[allow(clippy::too_many_arguments)]
fn compress(
    b: &mut Builder,
    il: usize,
    cur: NodeId,
    ratio: u32,
    prefix: &str,
    head: usize,
    first: usize,
    hadamard: usize,
) -> Result<NodeId, BuildError> {
    let hp = b.hp;
    let ne = hp.n_embd as i64;
    let coff = if ratio == CSA { 2 } else { 1 };
    let w = (coff * head) as i64;
    let wkv = b.lw(il, &format!("{prefix}_kv.weight"), &[ne, w])?;
    let wgate = b.lw(il, &format!("{prefix}_gate.weight"), &[ne, w])?;
    let ape = b.lw(il, &format!("{prefix}_ape.weight"), &[w, ratio as i64])?;
    let norm = b.lw(il, &format!("{prefix}_norm.weight"), &[head as i64])?;
    let kv = b.mul_mat_raw(wkv, cur);
    let score = b.mul_mat_raw(wgate, cur);
    let set = Op::Dsv4StateSet {
        kv,
        score,
        ape,
        ratio: ratio as usize,
        layer: first + il,
    };
    let dep = b.push("dsv4_state_set", set, 0, 0);
    let rope = rope_params(b, true);
    let op = Op::Dsv4Compress {
        dep,
        norm,
        src_layer: first + il,
        dst_layer: first + hp.n_layer + il,
        ratio: ratio as usize,
        overlap: ratio == CSA,
        head,
        eps: hp.eps_rms,
        rope,
        hadamard,
    };
    Ok(b.push("dsv4_compress", op, 0, 0))
}

/// The CSA layer's lightning indexer (upstream's `build_lid_top_k`): Q from the normed
/// low-rank `qr` (`indexer.attn_q_b`, each head's last `n_rot` values rotated, then
/// Hadamard-rotated), per-head weights `indexer.proj` scaled by `1/sqrt(head * n_head)`;
/// the best `top_k` compressed keys per token.
fn lid_top_k(
    b: &mut Builder,
    il: usize,
    cur: NodeId,
    qr: NodeId,
    dep: NodeId,
) -> Result<NodeId, BuildError> {
    let hp = b.hp;
    let ix = &hp.ext.kpool_indexer;
    let (ih, inh) = (ix.head, ix.n_head);
    let (ne, lq) = (hp.n_embd as i64, hp.ext.n_lora_q as i64);
    let wq = b.lw(il, "indexer.attn_q_b.weight", &[lq, (inh * ih) as i64])?;
    let wp = b.lw(il, "indexer.proj.weight", &[ne, inh as i64])?;
    let q = b.mul_mat_raw(wq, qr);
    let p = rope_params(b, true);
    let q = rope_tail(b, q, inh, p, false);
    let q = b.hadamard(q, ih);
    let w = b.mul_mat_raw(wp, cur);
    let w = b.scale(w, 1.0 / ((ih * inh) as f32).sqrt());
    // one block index per pick: never more than upstream's view of the compressed cache
    let n_view = ((b.n_ctx_seq.max(1) as usize) / CSA as usize)
        .next_multiple_of(256)
        .max(256);
    let k = ix.top_k.min(n_view).max(1);
    let t = b.ne1(q);
    let op = Op::Dsv4LidTopK {
        q,
        w,
        dep,
        layer: 4 * hp.n_layer + il,
        ratio: CSA as usize,
        head: ih,
        k,
    };
    Ok(b.push("lid_top_k", op, k, t))
}

/// Layer `il`'s attention (upstream's `build_attention_impl`).
fn attention(b: &mut Builder, il: usize, cur: NodeId) -> Result<NodeId, BuildError> {
    let hp = b.hp;
    let e = &hp.ext;
    let ne = hp.n_embd as i64;
    let n_head = hp.n_head[il];
    let nh = n_head as i64;
    let head = hp.head_k;
    let lq = e.n_lora_q as i64;
    let (groups, rank) = (e.dsv4.o_groups, e.dsv4.o_rank);
    let group_dim = n_head * head / groups;
    let ratio = e.dsv4.ratios[il];
    let sinks = b.lw(il, "attn_sinks.weight", &[nh])?;
    let wq_a = b.lw(il, "attn_q_a.weight", &[ne, lq])?;
    let q_a_norm = b.lw(il, "attn_q_a_norm.weight", &[lq])?;
    let wq_b = b.lw(il, "attn_q_b.weight", &[lq, nh * head as i64])?;
    let wkv = b.lw(il, "attn_kv.weight", &[ne, head as i64])?;
    let kv_norm = b.lw(il, "attn_kv_a_norm.weight", &[head as i64])?;
    let wo_a = wo_a(b, il, group_dim, rank, groups)?;
    let wo_b = b.lw(il, "attn_output_b.weight", &[(groups * rank) as i64, ne])?;

    let p = rope_params(b, ratio != 0);
    let qr = b.mul_mat_raw(wq_a, cur);
    let qr = b.rms_norm(qr, Some(q_a_norm), hp.eps_rms);
    let q = b.mul_mat_raw(wq_b, qr);
    let q = b.head_rms_norm_plain(q, head, hp.eps_rms);
    let q = rope_tail(b, q, n_head, p, false);
    let kv = b.mul_mat_raw(wkv, cur);
    let kv = b.rms_norm(kv, Some(kv_norm), hp.eps_rms);
    let kv = rope_tail(b, kv, 1, p, false);

    let (comp, sel) = if ratio != 0 {
        let (c, lid) = compressor(b, il, cur, ratio)?;
        let sel = match lid {
            Some(dep) => Some(lid_top_k(b, il, cur, qr, dep)?),
            None => None,
        };
        (Some(c), sel)
    } else {
        (None, None)
    };
    let set = Op::SetRows {
        src: kv,
        layer: il,
        v: false,
    };
    let ks = b.push("k_set", set, 0, 0);
    let scale = 1.0 / (head as f32).sqrt();
    let t = b.ne1(q);
    let out = match comp {
        Some(c) => {
            let op = Op::FlashAttnComp {
                q,
                deps: [ks, c],
                layer: il,
                comp_layer: 2 * hp.n_layer + il,
                ratio: ratio as usize,
                n_head,
                dk: head,
                scale,
                n_swa: hp.n_swa,
                sinks: Some(sinks),
                sel,
            };
            b.push("fattn", op, n_head * head, t)
        }
        None => {
            let op = Op::FlashAttnExt {
                q,
                deps: [ks, ks],
                layer: il,
                n_head,
                n_head_kv: 1,
                dk: head,
                dv: head,
                scale,
                softcap: 0.0,
                n_swa: hp.n_swa,
                v_in_k: true,
                sinks: Some(sinks),
                max_bias: 0.0,
                sel: None,
            };
            b.push("fattn", op, n_head * head, t)
        }
    };
    let out = rope_tail(b, out, n_head, p, true);
    // the grouped projection: group g's heads times matrix g of attn_output_a
    let oa = b.mul_mat_heads(wo_a, out, groups);
    Ok(b.mul_mat_raw(wo_b, oa))
}

/// `attn_output_a` as `[group_dim, rank, groups]`.
fn wo_a(
    b: &mut Builder,
    il: usize,
    group_dim: usize,
    rank: usize,
    groups: usize,
) -> Result<WeightId, BuildError> {
    let want = [group_dim as i64, rank as i64, groups as i64];
    match b.lw(il, "attn_output_a.weight", &want) {
        Err(BuildError::BadShape { got, .. })
            if got[..2] == [group_dim as i64, (rank * groups) as i64] =>
        {
            Err(BuildError::Invalid(format!(
                "blk.{il}.attn_output_a.weight is 2-D ({group_dim} x {}): the reshape to {group_dim} x {rank} x {groups} is not supported yet",
                rank * groups
            )))
        }
        r => r,
    }
}
