//! `qwen4exp` (upstream's src/models/qwen4exp.cpp, Qwen4-exp): qwen35moe's hybrid stack
//! (gated delta net layers, whose output gate is `sigmoid(z)` here, and gated attention
//! with Q/K norms and the interleaved M-RoPE's text path; softmax-routed experts plus a
//! sigmoid-gated shared expert) inside low-rank gated hyper-connections (`hc` residual
//! streams; a mixer before the token mixer, the MoE and the output head, which has no
//! norm of its own: see `builder/hc_lowrank.rs`). One recurrent layer may add the PLE n-gram
//! hash embedding: each token's n-grams hashed to rows of `per_layer_token_embd`, projected
//! to a key and a value, the value gated per stream by a signed-square-root sigmoid of the
//! key's dot product with the streams, then a depthwise causal conv dilated by the n-gram
//! size (its history in the layer's recurrent conv row, after the delta net's; the last
//! `ngram - 1` tokens and their positions beside it: a predecessor is the token at the
//! nearest position at or before, as upstream finds it in the KV cells).
//!
//! The attention layers' sparse top-k selection (QSA: blocks of `compress_ratios[il]`
//! cells scored by a mean-pooled indexer key) is not computed: where the context holds at
//! most `top_k + ratio - 1` cells per sequence, upstream keeps every cell and the attention
//! is exactly the causal one. Longer contexts are refused with a log line; the indexer's
//! tensors are still checked against the file (its raw keys are cached, as upstream's
//! state files hold them). The per-tensor scales apply as upstream
//! passes them; the Q/K/V biases a file may carry are unused, as upstream's graph leaves
//! them.

use super::super::builder::{BuildError, Builder, Outputs};
use super::super::delta_net::QwenGdn;
use super::super::params::{ArchParams, PleHash};
use super::super::{NodeId, Op, Operand};
use super::def::{ArchDef, Keys, Memory, Rope};
use crate::model::meta::MetaArray;
use std::sync::Arc;

pub static DEF: ArchDef = ArchDef {
    names: &["qwen4exp"],
    rope: Rope::Multi(40),
    memory: Memory::Hybrid,
    hparams,
    graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    super::qwen35::hparams(k, hp)?;
    let n_layer = hp.n_layer;
    let nonzero = |s: &str| -> Result<usize, String> {
        match k.u32_required(s)? {
            0 => Err(format!("{} must be greater than zero, got 0", k.key(s))),
            v => Ok(v as usize),
        }
    };
    for s in [
        "ssm.conv_kernel",
        "ssm.inner_size",
        "ssm.state_size",
        "ssm.time_step_rank",
        "ssm.group_count",
    ] {
        nonzero(s)?;
    }
    // the shared expert defaults to the dense width here (qwen35moe: the experts')
    hp.ext.n_ff_shexp = k.u32("expert_shared_feed_forward_length", 0) as usize;
    if hp.ext.n_ff_shexp == 0 {
        hp.ext.n_ff_shexp = hp.n_ff.first().copied().unwrap_or(0);
    }
    let hc = k.u32_required("hyper_connection.count")? as usize;
    if hc <= 1 {
        return Err(format!(
            "{} must be greater than one, got {hc}",
            k.key("hyper_connection.count")
        ));
    }
    hp.ext.hc = hc;
    hp.ext.hc_low_rank = nonzero("hyper_connection.low_rank")?;
    let ix = &mut hp.ext.kpool_indexer;
    ix.n_head = nonzero("attention.indexer.head_count")?;
    ix.head = nonzero("attention.indexer.key_length")?;
    ix.top_k = nonzero("attention.indexer.top_k")?;
    let key = k.key("attention.compress_ratios");
    hp.ext.compress_ratios = match k.model.meta.get_array(&key) {
        Some(MetaArray::Ints(v)) => (0..n_layer)
            .map(|il| v.get(il).map_or(0, |&x| x.max(0) as usize))
            .collect(),
        Some(_) => return Err(format!("{key} has an unexpected array type")),
        None => vec![k.u32("attention.compress_ratios", 0) as usize; n_layer],
    };
    hp.ext.ple = ple(k, hp)?.map(Arc::new);
    // upstream's indexer cache (llama_memory_hybrid_idx) on the attention layers: the raw
    // indexer keys, pooled and rotated when read
    let head = hp.ext.kpool_indexer.head;
    hp.ext.idx_rows = (0..n_layer)
        .map(|il| if hp.is_recurrent(il) { 0 } else { head })
        .collect();
    Ok(())
}

/// The PLE hash embedding's keys (`ple.*`), when `ple.layers` lists a layer.
fn ple(k: &Keys, hp: &ArchParams) -> Result<Option<PleHash>, String> {
    let ints = |s: &str| k.ints(s).unwrap_or_default();
    let layers = ints("ple.layers");
    if layers.is_empty() {
        return Ok(None);
    }
    if layers.len() != 1 {
        return Err(format!(
            "{} lists {} layers, but only one PLE layer is supported",
            k.key("ple.layers"),
            layers.len()
        ));
    }
    let layer = usize::try_from(layers[0])
        .ok()
        .filter(|&l| l < hp.n_layer)
        .ok_or_else(|| format!("PLE layer {} is out of range", layers[0]))?;
    if !hp.is_recurrent(layer) {
        return Err(format!("PLE layer {layer} is not a linear attention layer"));
    }
    let req = |s: &str| k.u32_required(s).map(|v| v as usize);
    let ngram = req("ple.ngram_size")?;
    let heads_per_ngram = req("ple.heads_per_ngram")?;
    let conv_kernel = req("ple.conv_kernel")?;
    let eos = req("ple.eos_token_id")? as i64;
    let image_token = k.u32("ple.image_token_id", 0) as i64;
    let head_dim = req("embedding_length_per_layer_input")?;
    if conv_kernel == 0 || head_dim == 0 {
        return Err("ple.conv_kernel and embedding_length_per_layer_input must be > 0".into());
    }
    // upstream's LLAMA_MAX_PLE_NGRAM / LLAMA_MAX_PLE_HEADS
    if !(2..=8).contains(&ngram) {
        return Err(format!("PLE n-gram size {ngram} is out of range"));
    }
    let n_heads = (ngram - 1) * heads_per_ngram;
    if n_heads == 0 || n_heads > 64 {
        return Err(format!("PLE head count {n_heads} is out of range"));
    }
    let arr = |s: &str, n: usize| -> Result<Vec<u64>, String> {
        let v = ints(s);
        if v.len() < n {
            return Err(format!(
                "{} has {} entries, but at least {n} are required",
                k.key(s),
                v.len()
            ));
        }
        Ok(v.iter().take(n).map(|&x| x as u64).collect())
    };
    if n_heads * head_dim != hp.n_embd {
        // upstream's ple_key / ple_value products assert it
        return Err(format!(
            "the PLE rows ({n_heads} heads of {head_dim}) must fill n_embd {}",
            hp.n_embd
        ));
    }
    let multipliers = arr("ple.layer_multipliers", ngram)?;
    let offsets = arr("ple.head_offsets", n_heads)?;
    let vocab_sizes = arr("ple.head_vocab_sizes", n_heads)?;
    for h in 0..n_heads {
        let max = i32::MAX as u64;
        if vocab_sizes[h] == 0 || offsets[h] > max || offsets[h] + vocab_sizes[h] > max {
            return Err(format!(
                "PLE head {h} range does not fit the int32 row index"
            ));
        }
    }
    Ok(Some(PleHash {
        layer,
        ngram,
        heads_per_ngram,
        conv_kernel,
        eos,
        image_token,
        head_dim,
        multipliers,
        offsets,
        vocab_sizes,
        channels: hp.ext.hc * hp.n_embd,
    }))
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let e = &hp.ext;
    let (hc, rank) = (e.hc, e.hc_low_rank);
    for il in (0..hp.n_layer).filter(|&il| !hp.is_recurrent(il)) {
        let r = e.compress_ratios.get(il).copied().unwrap_or(0);
        let keeps_all = e.kpool_indexer.top_k + r.max(1) - 1;
        if r > 0 && b.n_ctx_seq as usize > keeps_all {
            return Err(BuildError::Invalid(format!(
                "a context of {} cells per sequence is more than the sparse attention keeps ({} = indexer top_k {} + compress ratio {r} - 1, layer {il}): its top-k selection of the cells each token sees is not supported yet (contexts up to that size are exact)",
                b.n_ctx_seq, keeps_all, e.kpool_indexer.top_k
            )));
        }
    }
    let (tok_embd, inp) = b.inp_embd()?;
    let ple_emb = match &e.ple {
        Some(p) => Some(ple_embd(b, p)?),
        None => None,
    };
    // the streams start as hc copies of the embedding
    let mut streams = b.hc_expand(inp, hc);
    for il in 0..hp.n_layer {
        if let (Some(p), Some(emb)) = (&e.ple, ple_emb) {
            if p.layer == il {
                streams = ple_layer(b, il, p, emb, streams)?;
            }
        }
        let w = b.hc_lowrank_weights(&format!("blk.{il}.hc_attn"), hc, rank, true)?;
        let (cur, inject) = b.hc_lowrank_mix(streams, w, hc);
        let cur = if hp.is_recurrent(il) {
            b.qwen_gdn_layer(il, cur, QwenGdn::Qwen4Exp)?
        } else {
            gated_attn(b, il, cur)?
        };
        let inject = inject.expect("the block mixer has an inject projection");
        streams = b.hc_lowrank_combine(streams, cur, inject, hc);

        let w = b.hc_lowrank_weights(&format!("blk.{il}.hc_ffn"), hc, rank, true)?;
        let (cur, inject) = b.hc_lowrank_mix(streams, w, hc);
        let out = super::qwen35::moe_ffn(b, il, cur, QwenGdn::Qwen35)?;
        let inject = inject.expect("the block mixer has an inject projection");
        streams = b.hc_lowrank_combine(streams, out, inject, hc);
    }
    // everything after the last layer is per token: the output rows first
    let streams = b.get_rows_out(streams);
    let head = b.hc_lowrank_weights("output_hc", hc, rank, false)?;
    let (embd, _) = b.hc_lowrank_mix(streams, head, hc);
    let (ne, nv) = (hp.n_embd as i64, hp.n_vocab as i64);
    let output = b
        .weight_opt("output.weight", &[ne, nv])?
        .unwrap_or(tok_embd);
    let logits = b.mul_mat(output, embd);
    Ok(Outputs { logits, embd })
}

/// The PLE rows of the micro-batch's tokens (`[head_dim * n_heads, T]`): upstream's
/// `build_inp_ple`.
fn ple_embd(b: &mut Builder, p: &Arc<PleHash>) -> Result<NodeId, BuildError> {
    let name = "per_layer_token_embd.weight";
    let min_rows = (0..p.n_heads())
        .map(|h| p.offsets[h] + p.vocab_sizes[h])
        .max()
        .unwrap_or(0) as i64;
    // the converter pads the table: any row count from the heads' ranges on; from metadata
    // (a recording build) upstream's loader creates exactly the heads' rows
    let rows = match b.model.tensors.index_of(name) {
        Some(i) => b.model.tensors.at(i).read().layout.ne[1],
        None if b.recording() => min_rows,
        None => return Err(BuildError::MissingTensor(name.into())),
    };
    if rows < min_rows {
        return Err(BuildError::Invalid(format!(
            "{name} has {rows} rows, too few for the PLE head ranges ({min_rows})"
        )));
    }
    let table = b.weight(name, &[p.head_dim as i64, rows])?;
    let op = Op::GetRowsNgram {
        table,
        hash: p.clone(),
    };
    let t = b.n_tokens;
    Ok(b.push("ple_embd", op, p.head_dim * p.n_heads(), t))
}

/// The PLE block of layer `il` on the streams (upstream's `build_ple`).
fn ple_layer(
    b: &mut Builder,
    il: usize,
    p: &PleHash,
    emb: NodeId,
    streams: NodeId,
) -> Result<NodeId, BuildError> {
    let hp = b.hp;
    let (hc, n) = (hp.ext.hc, hp.n_embd);
    let (ne, hcd) = (n as i64, (hc * n) as i64);
    // (upstream declares the projections' input as n_embd wide: the gathered rows must be)
    let w_key = b.lw(il, "ple_key.weight", &[ne, hcd])?;
    let w_value = b.lw(il, "ple_value.weight", &[ne, ne])?;
    let norm_key = b.lw(il, "ple_norm_key.weight", &[ne, hc as i64])?;
    let norm_query = b.lw(il, "ple_norm_query.weight", &[ne, hc as i64])?;
    let norm_conv = b.lw(il, "ple_norm_conv.weight", &[ne, hc as i64])?;
    let conv = b.lw(il, "ple_conv1d.weight", &[p.conv_kernel as i64, hcd])?;

    let key = b.mul_mat_lora(w_key, emb);
    let value = b.mul_mat_lora(w_value, emb);
    let key = b.hc_grouped_norm(key, norm_key);
    let query = b.hc_grouped_norm(streams, norm_query);
    // per stream: the dot product, scaled, then sigmoid of its signed square root
    let s = b.hc_stream_dots(key, query, hc);
    let s = b.scale(s, 1.0 / (n as f32).sqrt());
    let t = b.ne1(s);
    let abs = b.push("abs", Op::Abs { src: s }, hc, t);
    let mag = b.clamp(abs, 1e-6, f32::INFINITY);
    let mag = b.push("sqrt", Op::Sqrt { src: mag }, hc, t);
    let sgn = b.push("sgn", Op::Sgn { src: s }, hc, t);
    let gate = b.mul(sgn, Operand::Node(mag));
    let gate = b.sigmoid(gate);
    // the value in every stream, times the stream's gate
    let v = b.push("repeat", Op::Repeat { src: value, n: hc }, hc * n, t);
    let g = b.push("repeat", Op::RepeatEach { src: gate, n }, hc * n, t);
    let gated = b.mul(v, Operand::Node(g));
    let normed = b.hc_grouped_norm(gated, norm_conv);
    let row0 = hp.n_embd_r();
    let conv_out = b.ssm_conv_dilated(il, normed, conv, p.conv_kernel, row0, p.ngram);
    let conv_out = b.silu(conv_out);
    let add = b.add(gated, Operand::Node(conv_out));
    Ok(b.add(streams, Operand::Node(add)))
}

/// The full-attention layer (upstream's `build_layer_attn` without the sparse selection:
/// see the module's note): Q and its output gate from one projection (per head: Q, then
/// the gate), Q/K RMS norms, rotary embeddings, attention, times sigmoid(gate), `wo`; every
/// projection with its per-tensor scale.
fn gated_attn(b: &mut Builder, il: usize, cur: NodeId) -> Result<NodeId, BuildError> {
    let hp = b.hp;
    let ne = hp.n_embd as i64;
    let head = hp.head_k;
    let nq = (head * hp.n_head[il]) as i64;
    let (nk, nv) = (hp.n_embd_k_gqa(il) as i64, hp.n_embd_v_gqa(il) as i64);
    let wq = b.lw(il, "attn_q.weight", &[ne, 2 * nq])?;
    let wk = b.lw(il, "attn_k.weight", &[ne, nk])?;
    let wv = b.lw(il, "attn_v.weight", &[ne, nv])?;
    let wo = b.lw(il, "attn_output.weight", &[nq, ne])?;
    // upstream's loader creates Q/K/V biases (Q's with its gate) from metadata; no graph
    // reads them
    b.declare_unread(&format!("blk.{il}.attn_q.bias"), &[2 * nq]);
    b.declare_unread(&format!("blk.{il}.attn_k.bias"), &[nk]);
    b.declare_unread(&format!("blk.{il}.attn_v.bias"), &[nv]);
    let ix = &hp.ext.kpool_indexer;
    let (ih, inh) = (ix.head as i64, ix.n_head as i64);
    b.lw(il, "indexer.q_proj.weight", &[ne, inh * ih])?;
    let wik = b.lw(il, "indexer.k_proj.weight", &[ne, ih])?;
    b.lw(il, "indexer.q_norm.weight", &[ih])?;
    b.lw(il, "indexer.k_norm.weight", &[ih])?;
    if hp.ext.compress_ratios.get(il).copied().unwrap_or(0) > 0 {
        // the raw indexer keys upstream caches (its state files hold them)
        let k_raw = b.mul_mat_lora(wik, cur);
        let op = Op::SetRows {
            src: k_raw,
            layer: hp.n_layer + il,
            v: false,
        };
        b.push("indexer_k_set", op, 0, 0);
    }

    let q_full = b.mul_mat(wq, cur);
    let k = b.mul_mat(wk, cur);
    let v = b.mul_mat(wv, cur);
    let q = b.view_heads(q_full, 2 * head, 0, head);
    let gate = b.view_heads(q_full, 2 * head, head, head);
    let (q, k) = b.qk_norm(il, q, k)?;
    let (q, k) = b.rope_qk(q, k, None, false);
    let kq_scale = b.kq_scale();
    let kqv = b.attn_kqv(il, q, k, v, kq_scale, None);
    let gate = b.sigmoid(gate);
    let kqv = b.mul(kqv, Operand::Node(gate));
    Ok(b.mul_mat(wo, kqv))
}
