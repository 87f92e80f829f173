//! `exaone-moe` (upstream's src/models/exaone-moe.cpp; EXAONE 4.5 MoE): pre-norm layers with
//! per-head RMS norms of Q and K, NEOX rotary embeddings on the sliding-window layers only
//! (full-attention layers rotate nothing), `leading_dense_block_count` dense layers, then
//! routed experts (the file's gating function, selection bias when present, weight
//! normalisation and scaling) plus shared experts of `expert_shared_feed_forward_length`
//! rows (else the experts' length).

use super::super::builder::{BuildError, Builder, Ffn, Gating, Moe, Outputs};
use super::super::params::ArchParams;
use super::super::RopeMode;
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["exaone-moe"],
    rope: Rope::Mode(RopeMode::Neox),
    memory: Memory::Kv,
    hparams,
    graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    hp.swa_layers = k.swa_layers(hp.n_layer, 4)?;
    hp.n_swa = k.u32_required("attention.sliding_window")?;
    let e = &mut hp.ext;
    e.n_ff_shexp = k.u32("expert_shared_feed_forward_length", 0) as usize;
    e.n_layer_dense_lead = k.u32("leading_dense_block_count", 0) as usize;
    hp.n_ff_exp = k.u32_required("expert_feed_forward_length")? as usize;
    e.gating = match k.u32_required("expert_gating_func")? {
        0 | 1 => Gating::Softmax,
        2 => Gating::Sigmoid,
        3 => Gating::SoftmaxWeight,
        g => return Err(format!("expert_gating_func {g} is not supported yet")),
    };
    hp.expert_weights_scale = k.f32("expert_weights_scale", 0.0);
    hp.expert_weights_norm = k.bool("expert_weights_norm", false);
    if hp.n_rot != hp.head_k {
        return Err(format!(
            "rope.dimension_count {} must equal the head size {}",
            hp.n_rot, hp.head_k
        ));
    }
    Ok(())
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let e = &hp.ext;
    let n_embd = hp.n_embd as i64;
    let kq_scale = 1.0 / (hp.head_k as f32).sqrt();
    let rope_freqs = b.weight_opt("rope_freqs.weight", &[hp.n_rot as i64 / 2])?;
    let n_ff_shexp = if e.n_ff_shexp > 0 {
        e.n_ff_shexp
    } else {
        hp.n_ff_exp
    };
    let (tok_embd, mut inp) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let nq = (hp.head_k * hp.n_head[il]) as i64;
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let wo = b.lw(il, "attn_output.weight", &[nq, n_embd])?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;

        let cur = b.rms_norm(inp, Some(attn_norm), hp.eps_rms);
        let (q, k, v) = b.qkv(il, cur)?;
        let (mut q, mut k) = b.qk_norm(il, q, k)?;
        // (with the graph's base frequency: upstream reads no per-layer one here)
        if hp.swa_layers[il] {
            (q, k) = b.rope_qk(q, k, rope_freqs, false);
        }
        let cur = b.attn(il, q, k, v, wo, None, kq_scale);
        b.cb_output(cur, "attn_out", Some(il));
        let ffn_inp = b.residual(il, cur, inp);
        let x = b.rms_norm(ffn_inp, Some(ffn_norm), hp.eps_rms);
        let plain = Ffn {
            scaled: false,
            ..Ffn::SWIGLU
        };
        let name = format!("blk.{il}.ffn_gate_inp.weight");
        // (upstream's loader: dense for the leading layers, experts after)
        let cur = if !b.has_else_metadata(&name, il >= e.n_layer_dense_lead) {
            b.ffn_layer(il, x, plain)?
        } else {
            let moe = Moe {
                gating: e.gating,
                norm_w: hp.expert_weights_norm,
                scale_w: hp.expert_weights_scale,
                probs_bias: true,
                exp_scales: false,
                ..Moe::SOFTMAX
            };
            b.moe_shared_layer(il, x, hp.n_ff_exp, moe, n_ff_shexp, plain)?
        };
        inp = b.layer_out(il, cur, ffn_inp);
    }
    b.rms_output(inp, tok_embd, false)
}
