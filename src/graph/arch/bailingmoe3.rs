//! `bailingmoe3` (upstream's src/models/bailingmoe3.cpp; Ling/Ring 2.5): a hybrid of Kimi's
//! delta attention (the layers whose `head_count_kv` is 0: see `graph/kda.rs`, decay
//! `lower_bound * sigmoid(f * A)`, full-rank output gate `ssm_g_a`) and DeepSeek's latent
//! attention (absorbed `attn_k_b`/`attn_v_b`, one compressed K-only cache row per token,
//! NORM rotary embeddings or M-RoPE's text path when the file has sections) whose heads are
//! gated by `sigmoid(attn_gate x)` before `attn_output`; `leading_dense_block_count` dense
//! layers, then sigmoid- or softmax-routed experts with the `exp_probs_b` selection bias
//! plus shared experts, both with SwiGLU limits when `swiglu_clamp_(sh)exp` sets them.
//! No per-tensor scales anywhere (upstream passes none). The NextN (MTP) block is not
//! built (upstream only builds it for an MTP context).

use super::super::builder::{BuildError, Builder, Ffn, Gating, Moe, Outputs};
use super::super::kda::{Kda, KdaDecay, KdaOutGate};
use super::super::params::ArchParams;
use super::super::{GluKind, NodeId, Operand, RopeMode};
use super::deepseek2::check_mla_sizes;
use super::def::{check_mrope_text, ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["bailingmoe3"],
    rope: Rope::Mode(RopeMode::Norm),
    memory: Memory::HybridLatent,
    hparams,
    graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    hp.n_ff_exp = k.u32("expert_feed_forward_length", 0) as usize;
    hp.expert_weights_scale = k.f32("expert_weights_scale", 0.0);
    hp.expert_weights_norm = k.bool("expert_weights_norm", false);
    let n_layer = hp.n_layer;
    let e = &mut hp.ext;
    mla_hparams(k, e)?;
    e.ssm.d_conv = k.u32_required("ssm.conv_kernel")? as usize;
    e.kda_head = k.u32_required("kda.head_dim")? as usize;
    if !k.bool("kda.safe_gate", true) {
        // upstream asserts kda_safe_gate
        return Err("kda.safe_gate false is not supported (upstream asserts it)".into());
    }
    let lb = k
        .f32_opt("kda.gate_lower_bound")
        .ok_or_else(|| format!("key not found in model: {}", k.key("kda.gate_lower_bound")))?;
    if lb >= 0.0 || lb.is_nan() {
        return Err(format!(
            "kda.gate_lower_bound {lb} must be < 0 (upstream asserts it)"
        ));
    }
    e.kda_lower_bound = Some(lb);
    e.mrope_sections = k.mrope_sections();
    e.n_expert_shared = k.u32_required("expert_shared_count")? as usize;
    e.n_layer_dense_lead = k.u32_required("leading_dense_block_count")? as usize;
    e.gating = gating(k.u32_required("expert_gating_func")?)?;
    e.swiglu_limit_exp = k.f32_layers("swiglu_clamp_exp", n_layer);
    e.swiglu_limit_shexp = k.f32_layers("swiglu_clamp_shexp", n_layer);
    if hp.n_ff_exp == 0 {
        return Err("expert_feed_forward_length must be > 0".into());
    }
    e.n_ff_shexp = k.u32("expert_shared_feed_forward_length", 0) as usize;
    if e.n_ff_shexp == 0 {
        e.n_ff_shexp = hp.n_ff_exp * e.n_expert_shared.max(1);
    }
    if hp.ext.mrope_sections.is_some() {
        check_mrope_text(k, hp, 8)?;
    }
    hybrid_layers(hp)
}

/// The MLA sizes the Kimi-Linear family reads (`key_length_mla`, `value_length_mla`,
/// `kv_lora_rank` required, `q_lora_rank` optional).
pub fn mla_hparams(k: &Keys, e: &mut super::super::params::Extras) -> Result<(), String> {
    e.head_k_mla = k.u32_required("attention.key_length_mla")? as usize;
    e.head_v_mla = k.u32_required("attention.value_length_mla")? as usize;
    e.n_lora_kv = k.u32_required("attention.kv_lora_rank")? as usize;
    e.n_lora_q = k.u32("attention.q_lora_rank", 0) as usize;
    Ok(())
}

/// upstream's `expert_gating_func` values.
pub fn gating(v: u32) -> Result<Gating, String> {
    match v {
        1 => Ok(Gating::Softmax),
        2 => Ok(Gating::Sigmoid),
        3 => Ok(Gating::SoftmaxWeight),
        4 => Ok(Gating::SqrtSoftplus),
        g => Err(format!("expert_gating_func {g} is not supported yet")),
    }
}

/// The layers of a KDA + MLA hybrid: KDA where `head_count_kv` is 0 (upstream's
/// `is_recr`), else one compressed MLA head of `kv_lora_rank` plus the rotary values.
pub fn hybrid_layers(hp: &mut ArchParams) -> Result<(), String> {
    check_mla_sizes(hp)?;
    let e = &mut hp.ext;
    e.recurrent_layers = hp.n_head_kv.iter().map(|&h| h == 0).collect();
    if hp.n_head.first().copied().unwrap_or(0) == 0 {
        return Err("head_count of layer 0 (the KDA heads) must be > 0".into());
    }
    for (h, &recr) in hp.n_head_kv.iter_mut().zip(&e.recurrent_layers) {
        if !recr {
            *h = 1;
        }
    }
    e.k_rope_offset = e.n_lora_kv;
    Ok(())
}

/// A SwiGLU with layer `il`'s limit from `limits` (upstream: only above 1e-6).
pub fn swiglu(limits: &[f32], il: usize) -> GluKind {
    match limits.get(il) {
        Some(&l) if l > 1e-6 => GluKind::SwigluLimit(l),
        _ => GluKind::Swiglu,
    }
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let e = &hp.ext;
    let n_embd = hp.n_embd as i64;
    let kda = Kda {
        head_dim: e.kda_head,
        d_conv: e.ssm.d_conv,
        decay: KdaDecay::Bailing {
            lower_bound: e.kda_lower_bound.unwrap_or(-5.0),
        },
        out_gate: KdaOutGate::Full("ssm_g_a"),
        l2_eps: hp.eps_rms,
    };
    let (tok_embd, mut inp) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;
        let cur = b.rms_norm(inp, Some(attn_norm), hp.eps_rms);
        let cur = if hp.is_recurrent(il) {
            b.kda_layer(il, cur, kda)?
        } else {
            gated_mla(b, il, cur)?
        };
        let ffn_inp = b.add(cur, Operand::Node(inp));
        let x = b.rms_norm(ffn_inp, Some(ffn_norm), hp.eps_rms);
        let shared = Ffn {
            act: swiglu(&e.swiglu_limit_shexp, il),
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
                act: swiglu(&e.swiglu_limit_exp, il),
                biases: false,
            };
            b.moe_shared_layer(il, x, hp.n_ff_exp, moe, e.n_ff_shexp, shared)?
        };
        let cur = b.add(out, Operand::Node(ffn_inp));
        inp = b.cvec(cur, il);
    }
    // upstream norms every row, then keeps the output rows
    let norm = b.weight("output_norm.weight", &[n_embd])?;
    let output = b.output_weight(tok_embd)?;
    let embd = b.rms_norm(inp, Some(norm), hp.eps_rms);
    let embd = b.get_rows_out(embd);
    let logits = b.mul_mat_raw(output, embd);
    Ok(Outputs { logits, embd })
}

/// The latent attention of layer `il` with its per-head output gate.
fn gated_mla(b: &mut Builder, il: usize, cur: NodeId) -> Result<NodeId, BuildError> {
    let hp = b.hp;
    let e = &hp.ext;
    let n_embd = hp.n_embd as i64;
    let n_head = hp.n_head[il];
    let nh = n_head as i64;
    let (n_rot, kv_lora) = (hp.n_rot, e.n_lora_kv);
    let (head_k, head_v) = (e.head_k_mla, e.head_v_mla);
    let nope = head_k - n_rot;
    let mode = b.rope_mode;
    let q = if e.n_lora_q > 0 {
        let lq = e.n_lora_q as i64;
        let wq_a = b.lw(il, "attn_q_a.weight", &[n_embd, lq])?;
        let q_a_norm = b.lw(il, "attn_q_a_norm.weight", &[lq])?;
        let wq_b = b.lw(il, "attn_q_b.weight", &[lq, nh * head_k as i64])?;
        let q = b.mul_mat_raw(wq_a, cur);
        let q = b.rms_norm(q, Some(q_a_norm), hp.eps_rms);
        b.mul_mat_raw(wq_b, q)
    } else {
        let wq = b.lw(il, "attn_q.weight", &[n_embd, nh * head_k as i64])?;
        b.mul_mat_raw(wq, cur)
    };
    let wkv_a = b.lw(
        il,
        "attn_kv_a_mqa.weight",
        &[n_embd, (kv_lora + n_rot) as i64],
    )?;
    let kv_a_norm = b.lw(il, "attn_kv_a_norm.weight", &[kv_lora as i64])?;
    let wk_b = b.lw(il, "attn_k_b.weight", &[nope as i64, kv_lora as i64, nh])?;
    let wv_b = b.lw(il, "attn_v_b.weight", &[kv_lora as i64, head_v as i64, nh])?;
    let w_gate = b.lw(il, "attn_gate.weight", &[n_embd, nh])?;
    let wo = b.lw(il, "attn_output.weight", &[nh * head_v as i64, n_embd])?;

    let q_nope = b.view_heads(q, head_k, 0, nope);
    let q_pe = b.view_heads(q, head_k, nope, n_rot);
    let kv_all = b.mul_mat_raw(wkv_a, cur);
    let kv = b.view(kv_all, 0, kv_lora);
    let k_pe = b.view(kv_all, kv_lora, n_rot);
    let q_pe = b.rope(q_pe, n_rot, mode, None, false);
    let k_pe = b.rope(k_pe, n_rot, mode, None, false);
    let kv = b.rms_norm(kv, Some(kv_a_norm), hp.eps_rms);
    let q_nope = b.mul_mat_heads(wk_b, q_nope, n_head);
    let q = b.concat_heads(q_nope, q_pe, n_head);
    let k = b.concat_heads(kv, k_pe, 1);
    let kq_scale = 1.0 / (head_k as f32).sqrt();
    let out = b.attn_latent_heads(il, q, k, wv_b, kq_scale, None);
    let gate = b.mul_mat_raw(w_gate, cur);
    let gate = b.sigmoid(gate);
    let gate = b.repeat_heads(gate, 1, head_v);
    let out = b.mul(out, Operand::Node(gate));
    Ok(b.mul_mat_raw(wo, out))
}
