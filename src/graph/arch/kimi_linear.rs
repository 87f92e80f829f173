//! `kimi-linear` (upstream's src/models/kimi-linear.cpp; Kimi-Linear-48B-A3B): a hybrid of
//! Kimi's delta attention (the layers whose `head_count_kv` is 0: see `graph/kda.rs`, decay
//! `softplus(ssm_f_b ssm_f_a x + dt_bias) * A`, low-rank output gate `ssm_g_b ssm_g_a`, three
//! conv states Q, K, V in one row) and DeepSeek's latent attention without rotary embeddings
//! (kimi-k3's `gated_mla_nope`: absorbed `attn_k_b`/`attn_v_b`, one compressed K-only cache
//! row per token); `leading_dense_block_count` SwiGLU layers, then experts routed with the
//! `exp_probs_b` selection bias, always renormalised, plus shared experts. Every product is
//! a plain MUL_MAT (upstream passes no per-tensor scales, no projection biases) except the
//! latent attention's output projection, which `build_attn` scales by `attn_output.scale`.

use super::super::builder::{BuildError, Builder, Ffn, Moe, Outputs};
use super::super::kda::{Kda, KdaDecay, KdaOutGate};
use super::super::params::ArchParams;
use super::super::{GluKind, Operand};
use super::bailingmoe3::{gating, hybrid_layers, mla_hparams};
use super::def::{ArchDef, Keys, Memory, Rope};
use super::kimi_k3::gated_mla_nope;

pub static DEF: ArchDef = ArchDef {
    names: &["kimi-linear"],
    rope: Rope::None,
    memory: Memory::HybridLatent,
    hparams,
    graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    hp.n_ff_exp = k.u32_required("expert_feed_forward_length")? as usize;
    hp.expert_weights_scale = k.f32("expert_weights_scale", 0.0);
    // upstream's graph passes norm_w = true whatever the file says
    hp.expert_weights_norm = true;
    if hp.n_ff_exp == 0 {
        return Err("expert_feed_forward_length must be > 0".into());
    }
    let e = &mut hp.ext;
    mla_hparams(k, e)?;
    // upstream builds the MLA query from attn_q alone
    e.n_lora_q = 0;
    e.ssm.d_conv = k.u32_required("ssm.conv_kernel")? as usize;
    e.kda_head = k.u32_required("kda.head_dim")? as usize;
    e.n_expert_shared = k.u32_required("expert_shared_count")? as usize;
    e.n_layer_dense_lead = k.u32("leading_dense_block_count", 0) as usize;
    e.gating = gating(k.u32_required("expert_gating_func")?)?;
    // upstream reads no expert groups for this architecture
    (e.n_expert_groups, e.n_group_used) = (0, 0);
    e.n_ff_shexp = hp.n_ff_exp * e.n_expert_shared.max(1);
    hybrid_layers(hp)
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let e = &hp.ext;
    let n_embd = hp.n_embd as i64;
    let kda = Kda {
        head_dim: e.kda_head,
        d_conv: e.ssm.d_conv,
        decay: KdaDecay::Kimi { lower_bound: None },
        out_gate: KdaOutGate::LowRank,
        l2_eps: hp.eps_rms,
    };
    let ffn = Ffn {
        act: GluKind::Swiglu,
        bias: false,
        scaled: false,
    };
    let (_, mut inp) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;
        let cur = b.rms_norm(inp, Some(attn_norm), hp.eps_rms);
        let cur = if hp.is_recurrent(il) {
            b.kda_layer(il, cur, kda)?
        } else {
            gated_mla_nope(b, il, cur, true)?
        };
        let ffn_inp = b.add(cur, Operand::Node(inp));
        let x = b.rms_norm(ffn_inp, Some(ffn_norm), hp.eps_rms);
        let out = if il < e.n_layer_dense_lead {
            b.ffn_layer(il, x, ffn)?
        } else {
            let moe = Moe {
                gating: e.gating,
                norm_w: true,
                scale_w: hp.expert_weights_scale,
                probs_bias: true,
                exp_scales: false,
                groups: (0, 0),
                act: GluKind::Swiglu,
                biases: false,
            };
            b.moe_shared_layer(il, x, hp.n_ff_exp, moe, e.n_ff_shexp, ffn)?
        };
        let cur = b.add(out, Operand::Node(ffn_inp));
        inp = b.cvec(cur, il);
    }
    // row-wise from here: selecting the output rows first gives upstream's values
    let cur = b.get_rows_out(inp);
    let norm = b.weight("output_norm.weight", &[n_embd])?;
    let output = b.weight("output.weight", &[n_embd, hp.n_vocab as i64])?;
    let embd = b.rms_norm(cur, Some(norm), hp.eps_rms);
    let logits = b.mul_mat_raw(output, embd);
    Ok(Outputs { logits, embd })
}
