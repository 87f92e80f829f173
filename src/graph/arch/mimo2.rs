//! `mimo2` (upstream's src/models/mimo2.cpp; Xiaomi MiMo-V2): pre-norm layers with
//! per-layer head counts and sliding-window layers (the file's pattern array; their own
//! rotary base), Q/K/V from `attn_qkv` or separate projections without biases or scales
//! (V may have its own head size), NeoX rotation, attention sinks when the file has them,
//! the attention output times `attention.value_scale` (when given and not 1); layers
//! without a router run a dense FFN, the others sigmoid-routed experts (weights normalised,
//! the optional `exp_probs_b` selection bias). The MTP block is not run, as upstream's main
//! graph.

use super::super::builder::{BuildError, Builder, Ffn, Gating, Moe, Outputs};
use super::super::params::ArchParams;
use super::super::{NodeId, RopeMode};
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["mimo2"],
    rope: Rope::Mode(RopeMode::Neox),
    memory: Memory::Kv,
    hparams,
    graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    hp.n_ff_exp = k.u32_required("expert_feed_forward_length")? as usize;
    hp.n_swa = k.u32_required("attention.sliding_window")?;
    // (rope.freq_base_swa: upstream's default 10000 when absent, as the common reader's)
    let pattern = k.key("attention.sliding_window_pattern");
    if k.model.meta.get_array(&pattern).is_none() {
        return Err(format!("key not found in model: {pattern}"));
    }
    hp.swa_layers = k.swa_layers(hp.n_layer, 0)?;
    // (upstream reads no expert_weights_scale here: 0, no scaling)
    hp.expert_weights_scale = 0.0;
    Ok(())
}

/// `attention.value_scale` when the file gives one other than 1 (upstream's
/// `f_attn_value_scale`), else 0: none.
fn value_scale(b: &Builder) -> f32 {
    let key = format!("{}.attention.value_scale", b.model.arch);
    match b.model.meta.get_f64(&key) {
        Some(v) if v as f32 != 1.0 => v as f32,
        _ => 0.0,
    }
}

/// Q, K and V as mimo2 projects them: the fused `attn_qkv` or the separate weights, no
/// biases, no per-tensor scales.
fn qkv(b: &mut Builder, il: usize, x: NodeId) -> Result<(NodeId, NodeId, NodeId), BuildError> {
    let hp = b.hp;
    let n_embd = hp.n_embd as i64;
    let nq = hp.head_k * hp.n_head[il];
    let nk = hp.n_embd_k_gqa(il);
    let nv = hp.n_embd_v_gqa(il);
    let fused = b.lw_opt(il, "attn_qkv.weight", &[n_embd, (nq + nk + nv) as i64])?;
    if let Some(w) = fused {
        let qkv = b.mul_mat_lora(w, x);
        return Ok((
            b.view(qkv, 0, nq),
            b.view(qkv, nq, nk),
            b.view(qkv, nq + nk, nv),
        ));
    }
    let wq = b.lw(il, "attn_q.weight", &[n_embd, nq as i64])?;
    let wk = b.lw(il, "attn_k.weight", &[n_embd, nk as i64])?;
    let wv = b.lw(il, "attn_v.weight", &[n_embd, nv as i64])?;
    // upstream's loader creates the separate projections' biases, its graph adds none
    b.declare_unread(&format!("blk.{il}.attn_q.bias"), &[nq as i64]);
    b.declare_unread(&format!("blk.{il}.attn_k.bias"), &[nk as i64]);
    b.declare_unread(&format!("blk.{il}.attn_v.bias"), &[nv as i64]);
    Ok((
        b.mul_mat_lora(wq, x),
        b.mul_mat_lora(wk, x),
        b.mul_mat_lora(wv, x),
    ))
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let n_embd = hp.n_embd as i64;
    let n_vocab = hp.n_vocab as i64;
    let kq_scale = 1.0 / (hp.head_k as f32).sqrt();
    let v_scale = value_scale(b);
    let plain = Ffn {
        scaled: false,
        ..Ffn::SWIGLU
    };
    let moe = Moe {
        gating: Gating::Sigmoid,
        norm_w: true,
        scale_w: hp.expert_weights_scale,
        probs_bias: true,
        exp_scales: false,
        ..Moe::SOFTMAX
    };
    let (_, mut inp) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let nh = hp.n_head[il];
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let wo = b.lw(il, "attn_output.weight", &[(hp.head_v * nh) as i64, n_embd])?;
        let sinks = b.lw_opt(il, "attn_sinks.weight", &[nh as i64])?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;

        let x = b.rms_norm(inp, Some(attn_norm), hp.eps_rms);
        let (q, k, v) = qkv(b, il, x)?;
        let (q, k) = b.rope_qk(q, k, None, hp.swa_layers[il]);
        let mut cur = b.attn_sinks(il, q, k, v, wo, None, kq_scale, sinks);
        if v_scale != 0.0 {
            cur = b.scale(cur, v_scale);
        }
        let ffn_inp = b.residual(il, cur, inp);
        let x = b.rms_norm(ffn_inp, Some(ffn_norm), hp.eps_rms);
        let router = format!("blk.{il}.ffn_gate_inp.weight");
        let cur = if !b.has(&router) {
            b.ffn_layer(il, x, plain)?
        } else {
            // upstream's loader creates the dense FFN beside the experts on every layer
            let n_ff = hp.n_ff[il] as i64;
            b.declare_unread(&format!("blk.{il}.ffn_gate.weight"), &[n_embd, n_ff]);
            b.declare_unread(&format!("blk.{il}.ffn_down.weight"), &[n_ff, n_embd]);
            b.declare_unread(&format!("blk.{il}.ffn_up.weight"), &[n_embd, n_ff]);
            b.moe_layer(il, x, hp.n_ff_exp, moe)?
        };
        inp = b.layer_out(il, cur, ffn_inp);
    }
    // upstream requires output.weight here (no tied fallback)
    let norm = b.weight("output_norm.weight", &[n_embd])?;
    let output = b.weight("output.weight", &[n_embd, n_vocab])?;
    let embd = b.rms_norm(inp, Some(norm), hp.eps_rms);
    let logits = b.mul_mat(output, embd);
    Ok(Outputs { logits, embd })
}
