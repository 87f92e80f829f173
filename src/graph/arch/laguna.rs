//! `laguna` (upstream's src/models/laguna.cpp; poolside's Laguna): per-head RMS norms of Q
//! and K before NeoX rotation — YaRN-capable on full-attention layers, plain rotation on
//! sliding-window ones (their own rotary width `rope.dimension_count_swa`, base, scale 1,
//! no YaRN) — per-layer head counts, the attention output gated by softplus(`attn_gate`·x)
//! per head or per element (the gate tensor's width says which) before the output
//! projection, `leading_dense_block_count` dense layers, then sigmoid-routed (by default)
//! experts with the required `exp_probs_b` selection bias plus one shared expert.

use super::super::builder::{BuildError, Builder, Ffn, Gating, Moe, Outputs};
use super::super::params::ArchParams;
use super::super::{Op, Operand, RopeMode};
use super::def::{gating_or, swa_pattern, ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["laguna"],
    rope: Rope::Mode(RopeMode::Neox),
    memory: Memory::Kv,
    hparams,
    graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    hp.n_ff_exp = k.u32_required("expert_feed_forward_length")? as usize;
    hp.expert_weights_scale = k.f32("expert_weights_scale", 0.0);
    hp.expert_weights_norm = k.bool("expert_weights_norm", false);
    let e = &mut hp.ext;
    e.n_layer_dense_lead = k.u32_required("leading_dense_block_count")? as usize;
    e.gating = gating_or(k, Gating::Sigmoid)?;
    e.n_expert_shared = k.u32("expert_shared_count", 1) as usize;
    e.n_ff_shexp = k.u32("expert_shared_feed_forward_length", 0) as usize;
    if e.n_ff_shexp == 0 {
        e.n_ff_shexp = hp.n_ff_exp * e.n_expert_shared;
    }
    hp.n_swa = k.u32("attention.sliding_window", 0);
    if hp.n_swa > 0 {
        hp.swa_layers = swa_pattern(k, hp.n_layer, 4, true)?;
        hp.rope_freq_base_swa = k.f32("rope.freq_base_swa", hp.rope_freq_base);
        hp.rope_freq_scale_swa = 1.0;
        // (the rotary width of sliding-window layers, read again by the graph)
        let n_rot_swa = k.u32("rope.dimension_count_swa", hp.n_rot as u32) as usize;
        if n_rot_swa > hp.head_k {
            return Err(format!(
                "rope.dimension_count_swa {n_rot_swa} exceeds the head size {}",
                hp.head_k
            ));
        }
    }
    if hp.head_k != hp.head_v {
        return Err(format!("head sizes {}/{} must agree", hp.head_k, hp.head_v));
    }
    Ok(())
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let e = &hp.ext;
    let n_embd = hp.n_embd as i64;
    let n_exp = hp.n_expert as i64;
    let head = hp.head_k;
    let kq_scale = 1.0 / (head as f32).sqrt();
    let key = format!("{}.rope.dimension_count_swa", b.model.arch);
    let n_rot_swa = b.model.meta.get_u32(&key).map_or(hp.n_rot, |v| v as usize);
    let n_ctx_train = hp.n_ctx_train;
    let plain = Ffn {
        scaled: false,
        ..Ffn::SWIGLU
    };
    let (tok_embd, mut inp) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let nh = hp.n_head[il];
        let nq = (head * nh) as i64;
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let gate_name = format!("blk.{il}.attn_gate.weight");
        // per head or per element, by the file's gate width (upstream aborts on others)
        let gate_width = match b.model.tensors.index_of(&gate_name) {
            Some(i) => b.model.tensors.at(i).read().layout.ne[1],
            None => nh as i64,
        };
        if gate_width != nh as i64 && gate_width != nq {
            return Err(BuildError::BadShape {
                name: gate_name,
                got: vec![n_embd, gate_width],
                want: vec![n_embd, nh as i64],
            });
        }
        let w_gate = b.weight(&gate_name, &[n_embd, gate_width])?;
        let wo = b.lw(il, "attn_output.weight", &[nq, n_embd])?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;

        let x = b.rms_norm(inp, Some(attn_norm), hp.eps_rms);
        let (q, k, v) = b.qkv(il, x)?;
        let gate = b.mul_mat_lora(w_gate, x);
        let (q, k) = b.qk_norm(il, q, k)?;
        let swa = hp.swa_layers[il];
        let mut rope = b.rope_params(swa);
        if swa {
            // plain rotation: no YaRN ramp, no magnitude scaling
            rope.n_rot = n_rot_swa;
            rope.n_ctx_orig = n_ctx_train;
            rope.ext_factor = 0.0;
            rope.attn_factor = 1.0;
            rope.beta_fast = 0.0;
            rope.beta_slow = 0.0;
        }
        let q = b.rope_with(q, head, rope, None);
        let k = b.rope_with(k, head, rope, None);
        let kqv = b.attn_kqv(il, q, k, v, kq_scale, None);
        let gate = b.softplus(gate);
        let gate = if gate_width == nh as i64 {
            let t = b.ne1(gate);
            b.push(
                "repeat",
                Op::RepeatEach { src: gate, n: head },
                nq as usize,
                t,
            )
        } else {
            gate
        };
        let gated = b.mul(kqv, Operand::Node(gate));
        let cur = b.mul_mat(wo, gated);
        let ffn_inp = b.residual(il, cur, inp);
        let x = b.rms_norm(ffn_inp, Some(ffn_norm), hp.eps_rms);
        let cur = if il >= e.n_layer_dense_lead {
            // upstream requires the selection bias here
            b.lw(il, "exp_probs_b.bias", &[n_exp])?;
            let moe = Moe {
                gating: e.gating,
                norm_w: hp.expert_weights_norm,
                scale_w: hp.expert_weights_scale,
                probs_bias: true,
                exp_scales: false,
                ..Moe::SOFTMAX
            };
            b.moe_shared_layer(il, x, hp.n_ff_exp, moe, e.n_ff_shexp, plain)?
        } else {
            b.ffn_layer(il, x, plain)?
        };
        inp = b.layer_out(il, cur, ffn_inp);
    }
    let norm = b.weight("output_norm.weight", &[n_embd])?;
    let output = b.output_weight(tok_embd)?;
    let embd = b.rms_norm(inp, Some(norm), hp.eps_rms);
    let logits = b.mul_mat_lora(output, embd);
    Ok(Outputs { logits, embd })
}
