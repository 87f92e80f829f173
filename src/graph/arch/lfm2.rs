//! `lfm2` (upstream's src/models/lfm2.cpp, LFM2): RMS-normed layers that run either a gated
//! short convolution (layers whose `head_count_kv` is 0: `in_proj` into B, C and x, SSM_CONV
//! of B*x over the last `shortconv.l_cache` inputs, times C, `out_proj`) or attention with
//! per-head Q/K RMS norms and NEOX rotary embeddings (over a sliding window when
//! `attention.sliding_window` > 0), each followed by a SiLU-gated FFN; the final norm is
//! `token_embd_norm`. Memory: KV rows for the attention layers, the convolution's last inputs
//! for the others. `lfm2moe` (upstream's src/models/lfm2moe.cpp, lfm2's graph): after
//! `leading_dense_block_count` dense layers, mixtures of experts routed by
//! `expert_gating_func` with the `exp_probs_b` selection bias and normalised weights.

use super::super::builder::{BuildError, Builder, Ffn, Gating, Moe, Outputs};
use super::super::params::{ArchParams, Ssm};
use super::super::{Operand, RopeMode};
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["lfm2", "lfm2moe"],
    rope: Rope::Mode(RopeMode::Neox),
    memory: Memory::Hybrid,
    hparams,
    graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    let l_cache = k.u32_required("shortconv.l_cache")? as usize;
    if l_cache < 2 {
        return Err(format!("shortconv.l_cache = {l_cache} must be > 1"));
    }
    // the conv state: the last l_cache - 1 inputs of each of n_embd channels (upstream's
    // n_embd_r for short convolutions); no SSM state
    hp.ext.ssm = Ssm {
        d_conv: l_cache,
        d_inner: hp.n_embd,
        ..Ssm::default()
    };
    hp.ext.recurrent_layers = (0..hp.n_layer).map(|il| hp.n_head_kv[il] == 0).collect();
    hp.n_swa = k.model.hparams.n_swa;
    hp.swa_layers = (0..hp.n_layer)
        .map(|il| hp.n_swa > 0 && !hp.ext.recurrent_layers[il])
        .collect();
    if k.arch == "lfm2moe" {
        hp.ext.n_layer_dense_lead = k.u32("leading_dense_block_count", 0) as usize;
        hp.n_ff_exp = k.u32_required("expert_feed_forward_length")? as usize;
        hp.expert_weights_scale = k.f32("expert_weights_scale", 0.0);
        hp.ext.gating = match k.u32_required("expert_gating_func")? {
            1 => Gating::Softmax,
            2 => Gating::Sigmoid,
            3 => Gating::SoftmaxWeight,
            g => return Err(format!("expert_gating_func {g} is not supported")),
        };
        if hp.n_expert == 0 || hp.n_expert_used == 0 {
            return Err("expert_count and expert_used_count must be > 0".into());
        }
        // upstream's lfm2moe reads no sliding window
        hp.n_swa = 0;
        hp.swa_layers = vec![false; hp.n_layer];
    } else {
        // only lfm2moe has expert layers
        hp.ext.n_layer_dense_lead = hp.n_layer;
    }
    if !hp.causal {
        return Err("a non-causal short convolution is not supported by llama-hotswap yet".into());
    }
    Ok(())
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let n_embd = hp.n_embd as i64;
    let n_vocab = hp.n_vocab as i64;
    let head = hp.head_k;
    let kq_scale = 1.0 / (hp.head_v as f32).sqrt();
    let l_cache = hp.ext.ssm.d_conv;
    let (tok_embd, mut inp) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;
        let cur = b.rms_norm(inp, Some(attn_norm), hp.eps_rms);
        let mut cur = if hp.is_recurrent(il) {
            let in_proj = b.lw(il, "shortconv.in_proj.weight", &[n_embd, 3 * n_embd])?;
            let conv = b.lw(il, "shortconv.conv.weight", &[l_cache as i64, n_embd])?;
            let out_proj = b.lw(il, "shortconv.out_proj.weight", &[n_embd, n_embd])?;
            let bcx = b.mul_mat(in_proj, cur);
            let n = hp.n_embd;
            let bg = b.view(bcx, 0, n);
            let c = b.view(bcx, n, n);
            let x = b.view(bcx, 2 * n, n);
            let bx = b.mul(bg, Operand::Node(x));
            let conv_out = b.ssm_conv(il, bx, conv, l_cache);
            let y = b.mul(c, Operand::Node(conv_out));
            b.mul_mat(out_proj, y)
        } else {
            let nq = (head * hp.n_head[il]) as i64;
            let wo = b.lw(il, "attn_output.weight", &[nq, n_embd])?;
            let (q, k, v) = b.qkv(il, cur)?;
            let (q, k) = b.qk_norm(il, q, k)?;
            let (q, k) = b.rope_qk(q, k, None, false);
            b.attn(il, q, k, v, wo, None, kq_scale)
        };
        let mut res = inp;
        if il == hp.n_layer - 1 {
            cur = b.get_rows_out(cur);
            res = b.get_rows_out(res);
        }
        let ffn_inp = b.add(res, Operand::Node(cur));
        let x = b.rms_norm(ffn_inp, Some(ffn_norm), hp.eps_rms);
        let out = if il >= hp.ext.n_layer_dense_lead {
            let moe = Moe {
                gating: hp.ext.gating,
                scale_w: hp.expert_weights_scale,
                probs_bias: true,
                exp_scales: false,
                ..Moe::SOFTMAX
            };
            b.lw(il, "exp_probs_b.bias", &[hp.n_expert as i64])?;
            b.moe_layer(il, x, hp.n_ff_exp, moe)?
        } else {
            let ffn = Ffn {
                scaled: false,
                ..Ffn::SWIGLU
            };
            b.ffn_layer(il, x, ffn)?
        };
        inp = b.add(ffn_inp, Operand::Node(out));
        inp = b.cvec(inp, il);
    }
    let norm = b.weight("token_embd_norm.weight", &[n_embd])?;
    let output = b
        .weight_opt("output.weight", &[n_embd, n_vocab])?
        .unwrap_or(tok_embd);
    let embd = b.rms_norm(inp, Some(norm), hp.eps_rms);
    let logits = b.mul_mat(output, embd);
    Ok(Outputs { logits, embd })
}
