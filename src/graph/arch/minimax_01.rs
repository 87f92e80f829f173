//! `minimax-01` (upstream's src/models/minimax-01.cpp; MiniMax-Text-01): a hybrid of
//! lightning attention (the layers `attention.recurrent_layers` marks, else all but every
//! `full_attention_interval`-th: SiLU of one fused `attn_qkv` holding each head's Q, K and V,
//! linear attention with a per-head decay `exp(-slope_h * (1 - il/(n_layer-1) + 1e-5))` a
//! token over a `[head, head]` state per head (see `Op::LightningAttn`), an RMS norm
//! (`attn_norm_2`) over all heads times `sigmoid(attn_gate x)`, `attn_output`) and softmax
//! attention with NeoX rotary embeddings. Both residuals add the *normed* input scaled by
//! `residual_scale`; every layer's FFN is a softmax-routed mixture of experts (normalised
//! weights, no per-expert scales). Only the softmax attention's output projection takes its
//! per-tensor scale (upstream's `build_attn` with `wo_s`); the other products are plain.

use super::super::builder::{BuildError, Builder, Gating, Moe, Outputs};
use super::super::params::ArchParams;
use super::super::{GluKind, Op, Operand, RopeMode};
use super::def::{ArchDef, Keys, Memory, Rope};
use crate::model::meta::MetaArray;

pub static DEF: ArchDef = ArchDef {
    names: &["minimax-01"],
    rope: Rope::Mode(RopeMode::Neox),
    memory: Memory::Hybrid,
    hparams,
    graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    if k.f32_opt("residual_scale").is_none() {
        return Err(format!(
            "key not found in model: {}",
            k.key("residual_scale")
        ));
    }
    if hp.head_k != hp.head_v || hp.head_k == 0 {
        return Err(format!(
            "head sizes {}/{} must agree (upstream asserts it)",
            hp.head_k, hp.head_v
        ));
    }
    let key = k.key("attention.recurrent_layers");
    hp.ext.recurrent_layers = match k.model.meta.get_array(&key) {
        Some(MetaArray::Ints(_) | MetaArray::Bools(_)) => {
            k.layer_flags("attention.recurrent_layers", hp.n_layer, false)
        }
        Some(_) => return Err(format!("{key} has an unexpected array type")),
        None => {
            let interval = k.u32("full_attention_interval", 8).max(1) as usize;
            (0..hp.n_layer).map(|il| (il + 1) % interval != 0).collect()
        }
    };
    // the state row of a lightning layer: [head, head] per head (upstream's n_embd_head_la),
    // as the SSM row d_state * d_inner; no conv row
    let n_head = hp.n_head.first().copied().unwrap_or(0);
    let ssm = &mut hp.ext.ssm;
    ssm.d_conv = 0;
    ssm.d_state = hp.head_k;
    ssm.d_inner = hp.head_k * n_head;
    Ok(())
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let keys = Keys {
        model: b.model,
        arch: &b.model.arch,
    };
    let res_scale = keys.f32("residual_scale", 0.0);
    let n_embd = hp.n_embd as i64;
    let head = hp.head_k;
    let (tok_embd, mut inp) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let n_head = hp.n_head[il];
        let nq = (head * n_head) as i64;
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let wo = b.lw(il, "attn_output.weight", &[nq, n_embd])?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;
        let normed = b.rms_norm(inp, Some(attn_norm), hp.eps_rms);
        let cur = if hp.is_recurrent(il) {
            let norm_2 = b.lw(il, "attn_norm_2.weight", &[nq])?;
            let wqkv = b.lw(il, "attn_qkv.weight", &[n_embd, 3 * nq])?;
            let wg = b.lw(il, "attn_gate.weight", &[n_embd, nq])?;
            // upstream computes it in double, then rounds it to float
            let slope_scale = (1.0 - il as f64 / (hp.n_layer as f64 - 1.0) + 1e-5) as f32;
            let qkv = b.mul_mat_scaled(wqkv, normed, None);
            let qkv = b.silu(qkv);
            let t = b.ne1(qkv);
            let op = Op::LightningAttn {
                qkv,
                layer: il,
                head,
                slope_scale,
            };
            let o = b.push("lightning_attn", op, nq as usize, t);
            let o = b.rms_norm(o, Some(norm_2), hp.eps_rms);
            let g = b.mul_mat_scaled(wg, normed, None);
            let g = b.sigmoid(g);
            let o = b.mul(g, Operand::Node(o));
            b.mul_mat_scaled(wo, o, None)
        } else {
            let (q, k, v) = b.qkv(il, normed)?;
            let (q, k) = b.rope_qk(q, k, None, false);
            b.attn(il, q, k, v, wo, None, 1.0 / (head as f32).sqrt())
        };
        let res = b.scale(normed, res_scale);
        let ffn_inp = b.add(cur, Operand::Node(res));
        let x = b.rms_norm(ffn_inp, Some(ffn_norm), hp.eps_rms);
        let moe = Moe {
            gating: Gating::Softmax,
            norm_w: true,
            scale_w: hp.expert_weights_scale,
            probs_bias: false,
            exp_scales: false,
            groups: (0, 0),
            act: GluKind::Swiglu,
            biases: false,
        };
        let out = b.moe_layer(il, x, hp.n_ff[il], moe)?;
        let res = b.scale(x, res_scale);
        let cur = b.add(out, Operand::Node(res));
        inp = b.cvec(cur, il);
    }
    // row-wise from here: selecting the output rows first gives upstream's values
    let inp = b.get_rows_out(inp);
    b.rms_output(inp, tok_embd, false)
}
