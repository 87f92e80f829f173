//! `deepseek2` (upstream's src/models/deepseek2.cpp; DeepSeek-V2/V3/R1, Kimi-K2): multi-head
//! latent attention as upstream builds it — Q through a low-rank `attn_q_a`/`attn_q_b` pair
//! (or `attn_q` for the lite models), K and V compressed into one `kv_lora_rank` latent plus
//! a shared rotary part (`attn_kv_a_mqa`), the no-rope half of Q absorbed into the latent by
//! `attn_k_b`, attention over the compressed cache (one KV head, V the latent part of K), and
//! the output decompressed per head by `attn_v_b` —; `leading_dense_block_count` dense layers,
//! then mixtures of experts with softmax or sigmoid gating, a selection bias
//! (`exp_probs_b`), expert groups, weight normalisation and scaling, and shared experts.

use super::super::builder::{BuildError, Builder, Ffn, Gating, Moe, Outputs};
use super::super::params::ArchParams;
use super::super::{GluKind, NodeId, Op, RopeMode};
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["deepseek2"],
    rope: Rope::Mode(RopeMode::Norm),
    memory: Memory::KvLatent,
    hparams,
    graph,
};

pub fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    let n_vocab = hp.n_vocab;
    let n_layer = hp.n_layer;
    // the lite models (DeepSeek-V2-Lite, GigaChat3-10B, Kanana-2-30B) have no Q low rank
    let lite = n_layer == 27 || n_layer == 26 || (n_layer == 48 && n_vocab == 128256);
    let e = &mut hp.ext;
    e.n_layer_dense_lead = k.u32("leading_dense_block_count", 0) as usize;
    e.n_lora_q = if lite {
        0
    } else {
        k.u32_required("attention.q_lora_rank")? as usize
    };
    e.n_lora_kv = k.u32_required("attention.kv_lora_rank")? as usize;
    e.head_k_mla = k.u32("attention.key_length_mla", 0) as usize;
    e.head_v_mla = k.u32("attention.value_length_mla", 0) as usize;
    e.n_expert_shared = k.u32_required("expert_shared_count")? as usize;
    hp.n_ff_exp = k.u32("expert_feed_forward_length", 0) as usize;
    hp.expert_weights_scale = k.f32("expert_weights_scale", 0.0);
    hp.expert_weights_norm = k.bool("expert_weights_norm", false);
    e.gating = match k.u32("expert_gating_func", 0) {
        // files without the key: DeepSeek V2 / V2.5 (softmax), GLM 4.7 Lite (sigmoid)
        0 if (n_layer == 47 || n_layer == 48) && n_vocab == 154880 => Gating::Sigmoid,
        0 | 1 => Gating::Softmax,
        2 => Gating::Sigmoid,
        3 => Gating::SoftmaxWeight,
        4 => Gating::SqrtSoftplus,
        g => return Err(format!("expert_gating_func {g} is not supported yet")),
    };
    if let Some(v) = k.f32_opt("rope.scaling.yarn_log_multiplier") {
        // the convert script multiplied it by 0.1 (upstream cancels that)
        e.rope_yarn_log_mul = v / 0.1;
    }
    e.yarn_mscale_from_log_mul = true;
    hp.attn_temp_scale = k.f32("attention.temperature_scale", 0.0);
    e.attn_temp_floor = k.u32("attention.temperature_length", 0) as f32;
    if e.head_k_mla == 0 || e.head_v_mla == 0 {
        // a file from before MLA (only `attn_kv_b`): upstream runs it as plain multi-head
        // attention, which this engine does not build yet
        return Err("files without MLA head sizes (attention.key_length_mla, attn_kv_b only) are not supported yet".into());
    }
    compressed_mla_cache(hp)
}

/// Checks MLA's sizes against the compressed cache's: rotary values below the MLA key length,
/// the cached key `kv_lora_rank + n_rot` values and the value its latent `kv_lora_rank`.
pub fn check_mla_sizes(hp: &ArchParams) -> Result<(), String> {
    let e = &hp.ext;
    if hp.n_rot >= e.head_k_mla {
        return Err(format!(
            "rope.dimension_count {} must be below key_length_mla {}",
            hp.n_rot, e.head_k_mla
        ));
    }
    if hp.head_k != e.n_lora_kv + hp.n_rot || hp.head_v != e.n_lora_kv {
        return Err(format!(
            "attention.key_length {} / value_length {} must be kv_lora_rank + rope ({}) / kv_lora_rank ({})",
            hp.head_k,
            hp.head_v,
            e.n_lora_kv + hp.n_rot,
            e.n_lora_kv
        ));
    }
    Ok(())
}

/// MLA's compressed cache on every layer ([`check_mla_sizes`]): one KV head of
/// `kv_lora_rank + n_rot` values whose rotary part starts at `kv_lora_rank` (V is the latent
/// part).
pub fn compressed_mla_cache(hp: &mut ArchParams) -> Result<(), String> {
    check_mla_sizes(hp)?;
    hp.n_head_kv.iter_mut().for_each(|h| *h = 1);
    hp.ext.k_rope_offset = hp.ext.n_lora_kv;
    Ok(())
}

pub fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    graph_with(b, None)
}

/// DeepSeek's sparse attention (upstream's deepseek32.cpp and glm-dsa.cpp over deepseek2's
/// graph): a lightning indexer picks the cells each token's MLA attention reads; its
/// projections, FFNs and experts take their per-tensor scales.
#[derive(Clone, Copy, Debug)]
pub struct Dsa {
    /// The indexer's rotary mode (DeepSeek-V3.2: NEOX, GLM-5: NORM).
    pub rope: RopeMode,
    /// The indexer key's norm weights may be absent (GLM-5's loader does not require them;
    /// its projections a graph cannot do without, upstream dereferences anyway: refused here).
    pub norm_optional: bool,
}

/// deepseek2's graph, with DeepSeek's sparse attention when `dsa` is given.
pub fn graph_with(b: &mut Builder, dsa: Option<Dsa>) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let e = &hp.ext;
    let n_embd = hp.n_embd as i64;
    let (n_rot, kv_lora) = (hp.n_rot, e.n_lora_kv);
    let (head_k, head_v) = (e.head_k_mla, e.head_v_mla);
    let nope = head_k - n_rot;
    let r = b.rope;
    // upstream pre-scales kq_scale for YaRN (see its TAG_DEEPSEEK2_YARN_LOG_MUL_FIX)
    let attn_factor_org = r.attn_factor * (1.0 + 0.1 * (1.0 / r.freq_scale).ln());
    let mscale = attn_factor_org * (1.0 + 0.1 * e.rope_yarn_log_mul * (1.0 / r.freq_scale).ln());
    let kq_scale = mscale * mscale / (head_k as f32).sqrt();

    let (tok_embd, mut inp) = b.inp_embd()?;
    // the last full indexer layer's selection (GLM-5.2's shared layers reuse it)
    let mut prev_sel = None;
    for il in 0..hp.n_layer {
        let n_head = hp.n_head[il];
        let nh = n_head as i64;
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let kv_a_norm = b.lw(il, "attn_kv_a_norm.weight", &[kv_lora as i64])?;
        let wkv_a = b.lw(
            il,
            "attn_kv_a_mqa.weight",
            &[n_embd, (kv_lora + n_rot) as i64],
        )?;
        let wk_b = b.lw(il, "attn_k_b.weight", &[nope as i64, kv_lora as i64, nh])?;
        let wv_b = b.lw(il, "attn_v_b.weight", &[kv_lora as i64, head_v as i64, nh])?;
        let wo = b.lw(il, "attn_output.weight", &[nh * head_v as i64, n_embd])?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;

        let cur = b.rms_norm(inp, Some(attn_norm), hp.eps_rms);
        let mut sel = None;
        let q = if e.n_lora_q > 0 {
            let lq = e.n_lora_q as i64;
            let wq_a = b.lw(il, "attn_q_a.weight", &[n_embd, lq])?;
            let q_a_norm = b.lw(il, "attn_q_a_norm.weight", &[lq])?;
            let wq_b = b.lw(il, "attn_q_b.weight", &[lq, nh * head_k as i64])?;
            let q = b.mul_mat_raw(wq_a, cur);
            let qr = b.rms_norm(q, Some(q_a_norm), hp.eps_rms);
            if let Some(d) = dsa {
                sel = Some(indexer(b, il, d, cur, qr, &mut prev_sel)?);
            }
            b.mul_mat_raw(wq_b, qr)
        } else if dsa.is_some() {
            return Err(BuildError::Invalid(
                "the sparse attention's indexer needs attention.q_lora_rank".into(),
            ));
        } else {
            let wq = b.lw(il, "attn_q.weight", &[n_embd, nh * head_k as i64])?;
            b.mul_mat_raw(wq, cur)
        };
        let kv_cmpr_pe = b.mul_mat_raw(wkv_a, cur);
        let kv_cmpr = b.view(kv_cmpr_pe, 0, kv_lora);
        let k_pe = b.view(kv_cmpr_pe, kv_lora, n_rot);
        let k_pe = b.rope(k_pe, n_rot, RopeMode::Norm, None, false);
        let kv_cmpr = b.rms_norm(kv_cmpr, Some(kv_a_norm), hp.eps_rms);

        // per head: the no-rope part absorbed into the latent, the rotary part rotated
        let q_nope = b.view_heads(q, head_k, 0, nope);
        let q_pe = b.view_heads(q, head_k, nope, n_rot);
        let q_pe = b.rope(q_pe, n_rot, RopeMode::Norm, None, false);
        let q_nope = b.mul_mat_heads(wk_b, q_nope, n_head);
        let mut q = b.concat_heads(q_nope, q_pe, n_head);
        let k = b.concat_heads(kv_cmpr, k_pe, 1);
        if hp.attn_temp_scale != 0.0 {
            let (n0, n1) = (b.ne0(q), b.ne1(q));
            let op = Op::AttnTempScale {
                src: q,
                floor_scale: e.attn_temp_floor,
                offset: 0.0,
                scale: hp.attn_temp_scale,
            };
            q = b.push("attn_temp", op, n0, n1);
        }
        let cur = b.attn_latent(il, q, k, wv_b, wo, kq_scale, sel);
        let ffn_inp = b.residual(il, cur, inp);
        let x = b.rms_norm(ffn_inp, Some(ffn_norm), hp.eps_rms);
        // (the sparse-attention graphs pass the per-tensor scales, deepseek2's does not)
        let scales = dsa.is_some();
        let plain = Ffn {
            scaled: scales,
            ..Ffn::SWIGLU
        };
        let cur = if il < e.n_layer_dense_lead {
            b.ffn_layer(il, x, plain)?
        } else {
            let moe = Moe {
                gating: e.gating,
                norm_w: hp.expert_weights_norm,
                scale_w: hp.expert_weights_scale,
                probs_bias: true,
                exp_scales: scales,
                groups: (e.n_expert_groups, e.n_group_used),
                act: GluKind::Swiglu,
                biases: false,
            };
            let n_ff = hp.n_ff_exp;
            b.moe_shared_layer(il, x, n_ff, moe, n_ff * e.n_expert_shared, plain)?
        };
        inp = b.layer_out(il, cur, ffn_inp);
    }
    b.rms_output(inp, tok_embd, false)
}

/// The lightning indexer of layer `il` (upstream's block in deepseek32.cpp): its queries from
/// Q's normed low-rank input `qr`, its one key from the layer input `cur` (LayerNorm with
/// bias), both rotated (the first `n_rot` values of each head) and multiplied by the
/// Walsh-Hadamard matrix, the key cached, per-head weights from `cur` pre-scaled by
/// `1/sqrt(head * n_head)`; the selection of the best cells for every token. A shared layer
/// (GLM-5.2) reuses the previous full layer's selection.
pub fn indexer(
    b: &mut Builder,
    il: usize,
    d: Dsa,
    cur: NodeId,
    qr: NodeId,
    prev: &mut Option<NodeId>,
) -> Result<NodeId, BuildError> {
    let hp = b.hp;
    let ix = &hp.ext.indexer;
    if !ix.full.get(il).copied().unwrap_or(true) {
        // upstream asserts here
        return prev.ok_or_else(|| {
            BuildError::Invalid(format!(
                "layer {il}: a shared indexer layer must follow a full one"
            ))
        });
    }
    let n_embd = hp.n_embd as i64;
    let (nh, head) = (ix.n_head as i64, ix.head as i64);
    let lq = hp.ext.n_lora_q as i64;
    let wq = b.lw(il, "indexer.attn_q_b.weight", &[lq, nh * head])?;
    let wk = b.lw(il, "indexer.attn_k.weight", &[n_embd, head])?;
    let (k_norm, k_norm_b) = if d.norm_optional {
        (
            b.lw_opt(il, "indexer.k_norm.weight", &[head])?,
            b.lw_opt(il, "indexer.k_norm.bias", &[head])?,
        )
    } else {
        (
            Some(b.lw(il, "indexer.k_norm.weight", &[head])?),
            Some(b.lw(il, "indexer.k_norm.bias", &[head])?),
        )
    };
    let wp = b.lw(il, "indexer.proj.weight", &[n_embd, nh])?;
    let q = b.mul_mat_raw(wq, qr);
    let q = b.rope(q, ix.head, d.rope, None, false);
    let k = b.mul_mat_raw(wk, cur);
    let k = b.layer_norm(k, k_norm, k_norm_b, hp.eps_norm);
    let k = b.rope(k, ix.head, d.rope, None, false);
    // (upstream's queries are [head, n_head, T], its key [head, 1, T]: one row per batch)
    let q = b.hadamard_dense(q, ix.head, false);
    let k = b.hadamard_dense(k, ix.head, true);
    let w = b.mul_mat_raw(wp, cur);
    let w = b.scale(w, 1.0 / ((ix.head * ix.n_head) as f32).sqrt());
    let sel = b.lightning_indexer(il, q, k, w);
    *prev = Some(sel);
    Ok(sel)
}
