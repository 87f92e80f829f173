//! `kimi-k3` (upstream's src/models/kimi-k3.cpp; Kimi-K3): a hybrid of Kimi's delta
//! attention (the layers whose `head_count_kv` is 0: see `graph/kda.rs`, low-rank decay
//! `lower_bound * sigmoid(-(f * A))` or `softplus(f) * A` without a bound, one full-rank
//! output gate `ssm_g`) and DeepSeek's latent attention without rotary embeddings (the
//! rope part of Q and K is concatenated unrotated; absorbed `attn_k_b`/`attn_v_b`, one
//! compressed K-only cache row per token) with an optional per-value output gate
//! (`attn_gate`); cross-layer residual attention (`attn_res.block_size`: every block's raw
//! input is banked, and each attention, FFN and the output read a softmax-weighted mix of
//! the banked inputs and the current stream, scored by `*_res_score`); SiTU activations
//! everywhere; `leading_dense_block_count` dense layers, then routed experts in a latent
//! width (`ffn_routed_down`, RMS norm, `ffn_routed_up`) routed by the full-width input,
//! plus shared experts. Every product is a plain MUL_MAT (no per-tensor scales, as upstream).

use super::super::builder::{BuildError, Builder, Ffn, Moe, MoeWeights, Outputs};
use super::super::kda::{Kda, KdaDecay, KdaOutGate};
use super::super::params::ArchParams;
use super::super::{GluKind, NodeId, Op, Operand, WeightId};
use super::bailingmoe3::{gating, hybrid_layers, mla_hparams};
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["kimi-k3"],
    rope: Rope::None,
    memory: Memory::HybridLatent,
    hparams,
    graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    let required_f32 = |s: &str| {
        k.f32_opt(s)
            .ok_or_else(|| format!("key not found in model: {}", k.key(s)))
    };
    hp.n_ff_exp = k.u32("expert_feed_forward_length", 0) as usize;
    hp.expert_weights_scale = k.f32("expert_weights_scale", 0.0);
    hp.expert_weights_norm = k.bool("expert_weights_norm", false);
    if hp.n_ff_exp == 0 {
        return Err("expert_feed_forward_length must be > 0".into());
    }
    let situ = (
        required_f32("activation.situ_beta")?,
        required_f32("activation.situ_linear_beta")?,
    );
    let e = &mut hp.ext;
    mla_hparams(k, e)?;
    e.ssm.d_conv = k.u32_required("ssm.conv_kernel")? as usize;
    e.kda_head = k.u32_required("kda.head_dim")? as usize;
    // (upstream's default is -inf: the softplus decay)
    e.kda_lower_bound = k
        .f32_opt("kda.gate_lower_bound")
        .filter(|&v| v > f32::NEG_INFINITY);
    e.n_expert_shared = k.u32_required("expert_shared_count")? as usize;
    e.n_layer_dense_lead = k.u32("leading_dense_block_count", 0) as usize;
    e.gating = gating(k.u32_required("expert_gating_func")?)?;
    e.n_expert_latent = k.u32("expert_latent_length", 0) as usize;
    e.attn_res_block = k.u32_required("attn_res.block_size")? as usize;
    e.situ = situ;
    e.n_ff_shexp = hp.n_ff_exp * e.n_expert_shared.max(1);
    hybrid_layers(hp)
}

/// The banked residual checkpoints of the cross-layer residual attention (upstream's
/// `resi_stack`): each one `[n_embd, T]`, and all of them side by side.
struct ResStack {
    each: Vec<NodeId>,
    joined: Option<NodeId>,
}

impl ResStack {
    fn push(&mut self, b: &mut Builder, x: NodeId) {
        self.joined = Some(match self.joined {
            Some(j) => b.concat_heads(j, x, 1),
            None => x,
        });
        self.each.push(x);
    }

    /// `res_mix`: the current stream `cur` mixed with the checkpoints by the softmax of
    /// their scores (`sum(rms_norm(x) * score)` each; the sum itself takes the raw values).
    fn mix(&self, b: &mut Builder, cur: NodeId, score: WeightId) -> NodeId {
        let Some(joined) = self.joined else {
            return cur;
        };
        let eps = b.hp.eps_rms;
        let n_embd = b.hp.n_embd;
        let mut scores: Option<NodeId> = None;
        for &x in self.each.iter().chain([&cur]) {
            let s = b.rms_norm(x, None, eps);
            let s = b.mul(s, Operand::Weight(score));
            let t = b.ne1(s);
            let s = b.push("sum_rows", Op::SumRows { src: s }, 1, t);
            scores = Some(match scores {
                Some(all) => b.concat_heads(all, s, 1),
                None => s,
            });
        }
        let scores = scores.expect("the current stream is scored");
        let (n, t) = (b.ne0(scores), b.ne1(scores));
        let probs = b.push("res_probs", Op::SoftMax { src: scores }, n, t);
        let n_ckpt = self.each.len();
        let p_src = b.view(probs, 0, n_ckpt);
        let p_cur = b.view(probs, n_ckpt, 1);
        let op = Op::HcPre {
            x: joined,
            w: p_src,
            n: n_embd,
            gated: false,
            scale: 1.0,
        };
        let out = b.push("dsv4_hc_pre", op, n_embd, t);
        let cur = b.mul(cur, Operand::Node(p_cur));
        b.add(out, Operand::Node(cur))
    }
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let e = &hp.ext;
    let n_embd = hp.n_embd as i64;
    let kda = Kda {
        head_dim: e.kda_head,
        d_conv: e.ssm.d_conv,
        decay: KdaDecay::Kimi {
            lower_bound: e.kda_lower_bound,
        },
        out_gate: KdaOutGate::Full("ssm_g"),
        l2_eps: hp.eps_rms,
    };
    let situ = GluKind::Situ(e.situ.0, e.situ.1);
    let ffn = Ffn {
        act: situ,
        bias: false,
        scaled: false,
    };
    let bs = e.attn_res_block;
    let mut stack = ResStack {
        each: Vec::new(),
        joined: None,
    };
    let (_, mut inp) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;
        let scores = if bs > 0 {
            Some((
                b.lw(il, "attn_res_score.weight", &[n_embd])?,
                b.lw(il, "ffn_res_score.weight", &[n_embd])?,
            ))
        } else {
            None
        };
        let mut cur = inp;
        let mut banked = false;
        if let Some((attn_score, _)) = scores {
            cur = stack.mix(b, inp, attn_score);
            if il % bs == 0 {
                // the layer's raw input, not the mix
                stack.push(b, inp);
                banked = true;
            }
        }
        let cur = b.rms_norm(cur, Some(attn_norm), hp.eps_rms);
        let cur = if hp.is_recurrent(il) {
            b.kda_layer(il, cur, kda)?
        } else {
            gated_mla_nope(b, il, cur, false)?
        };
        // a banked layer restarts the stream from the attention output alone
        let prefix = if banked {
            cur
        } else {
            b.add(inp, Operand::Node(cur))
        };
        let cur = match scores {
            Some((_, ffn_score)) => stack.mix(b, prefix, ffn_score),
            None => prefix,
        };
        let x = b.rms_norm(cur, Some(ffn_norm), hp.eps_rms);
        let out = if il < e.n_layer_dense_lead {
            b.ffn_layer(il, x, ffn)?
        } else {
            latent_moe(b, il, x, situ, ffn)?
        };
        let cur = b.add(prefix, Operand::Node(out));
        inp = b.cvec(cur, il);
    }
    let mut cur = inp;
    if bs > 0 {
        let score = b.weight("output_res_score.weight", &[n_embd])?;
        cur = stack.mix(b, cur, score);
    }
    let cur = b.get_rows_out(cur);
    let norm = b.weight("output_norm.weight", &[n_embd])?;
    let output = b.weight("output.weight", &[n_embd, hp.n_vocab as i64])?;
    let embd = b.rms_norm(cur, Some(norm), hp.eps_rms);
    let logits = b.mul_mat_raw(output, embd);
    Ok(Outputs { logits, embd })
}

/// The rope-less latent attention of layer `il` with its optional per-value output gate;
/// `scaled_wo`: the output projection as `build_attn` applies it (`build_lora_mm` with
/// `attn_output.scale`: kimi-linear), else a plain MUL_MAT after the gate (kimi-k3).
pub fn gated_mla_nope(
    b: &mut Builder,
    il: usize,
    cur: NodeId,
    scaled_wo: bool,
) -> Result<NodeId, BuildError> {
    let hp = b.hp;
    let e = &hp.ext;
    let n_embd = hp.n_embd as i64;
    let n_head = hp.n_head[il];
    let nh = n_head as i64;
    let (n_rot, kv_lora) = (hp.n_rot, e.n_lora_kv);
    let (head_k, head_v) = (e.head_k_mla, e.head_v_mla);
    let nope = head_k - n_rot;
    let q_a_norm = if e.n_lora_q > 0 {
        b.lw_opt(il, "attn_q_a_norm.weight", &[e.n_lora_q as i64])?
    } else {
        None
    };
    let q = match q_a_norm {
        Some(q_a_norm) => {
            let lq = e.n_lora_q as i64;
            let wq_a = b.lw(il, "attn_q_a.weight", &[n_embd, lq])?;
            let wq_b = b.lw(il, "attn_q_b.weight", &[lq, nh * head_k as i64])?;
            let q = b.mul_mat_raw(wq_a, cur);
            let q = b.rms_norm(q, Some(q_a_norm), hp.eps_rms);
            b.mul_mat_raw(wq_b, q)
        }
        None => {
            let wq = b.lw(il, "attn_q.weight", &[n_embd, nh * head_k as i64])?;
            b.mul_mat_raw(wq, cur)
        }
    };
    let wkv_a = b.lw(
        il,
        "attn_kv_a_mqa.weight",
        &[n_embd, (kv_lora + n_rot) as i64],
    )?;
    let kv_a_norm = b.lw(il, "attn_kv_a_norm.weight", &[kv_lora as i64])?;
    if b.lw_opt(
        il,
        "attn_kv_b.weight",
        &[kv_lora as i64, nh * (nope + head_v) as i64],
    )?
    .is_some()
    {
        // upstream runs such a file as plain multi-head attention over a full KV cache
        return Err(BuildError::Invalid(format!(
            "blk.{il}.attn_kv_b.weight: files with the undecomposed MLA projection are not supported yet (attn_k_b/attn_v_b needed)"
        )));
    }
    let wk_b = b.lw(il, "attn_k_b.weight", &[nope as i64, kv_lora as i64, nh])?;
    let wv_b = b.lw(il, "attn_v_b.weight", &[kv_lora as i64, head_v as i64, nh])?;
    let w_gate = b.lw_opt(il, "attn_gate.weight", &[n_embd, nh * head_v as i64])?;
    let wo = b.lw(il, "attn_output.weight", &[nh * head_v as i64, n_embd])?;

    let q_nope = b.view_heads(q, head_k, 0, nope);
    let q_pe = b.view_heads(q, head_k, nope, n_rot);
    let kv_all = b.mul_mat_raw(wkv_a, cur);
    let kv = b.view(kv_all, 0, kv_lora);
    let k_pe = b.view(kv_all, kv_lora, n_rot);
    let kv = b.rms_norm(kv, Some(kv_a_norm), hp.eps_rms);
    let q_nope = b.mul_mat_heads(wk_b, q_nope, n_head);
    let q = b.concat_heads(q_nope, q_pe, n_head);
    let k = b.concat_heads(kv, k_pe, 1);
    let kq_scale = 1.0 / (head_k as f32).sqrt();
    let mut out = b.attn_latent_heads(il, q, k, wv_b, kq_scale, None);
    if let Some(w_gate) = w_gate {
        let g = b.mul_mat_raw(w_gate, cur);
        let g = b.sigmoid(g);
        out = b.mul(out, Operand::Node(g));
    }
    Ok(if scaled_wo {
        b.mul_mat(wo, out)
    } else {
        b.mul_mat_raw(wo, out)
    })
}

/// The routed experts in the latent width (routed by the full-width input) plus the
/// shared experts on the full-width input.
fn latent_moe(
    b: &mut Builder,
    il: usize,
    x: NodeId,
    act: GluKind,
    shared: Ffn,
) -> Result<NodeId, BuildError> {
    let hp = b.hp;
    let e = &hp.ext;
    let n_embd = hp.n_embd as i64;
    let n_exp = hp.n_expert as i64;
    let latent = if e.n_expert_latent > 0 {
        e.n_expert_latent as i64
    } else {
        n_embd
    };
    let n_ff = hp.n_ff_exp as i64;
    let gate_inp = b.lw(il, "ffn_gate_inp.weight", &[n_embd, n_exp])?;
    let probs_b = b.lw(il, "exp_probs_b.bias", &[n_exp])?;
    let up = b.lw(il, "ffn_up_exps.weight", &[latent, n_ff, n_exp])?;
    let gate = b.lw(il, "ffn_gate_exps.weight", &[latent, n_ff, n_exp])?;
    let down = b.lw(il, "ffn_down_exps.weight", &[n_ff, latent, n_exp])?;
    let (routed_down, routed_up, routed_norm) = if e.n_expert_latent > 0 {
        (
            Some(b.lw(il, "ffn_routed_down.weight", &[n_embd, latent])?),
            Some(b.lw(il, "ffn_routed_up.weight", &[latent, n_embd])?),
            b.lw_opt(il, "ffn_routed_norm.weight", &[latent])?,
        )
    } else {
        (None, None, None)
    };
    let routed_in = match routed_down {
        Some(w) => b.mul_mat_raw(w, x),
        None => x,
    };
    let logits = b.mul_mat_raw(gate_inp, x);
    let w = MoeWeights {
        gate_inp,
        gate_inp_b: None,
        exp_b: None,
        probs_b: Some(probs_b),
        up: Some(up),
        gate: Some(gate),
        gate_up: None,
        down,
    };
    let m = Moe {
        gating: e.gating,
        norm_w: hp.expert_weights_norm,
        scale_w: hp.expert_weights_scale,
        probs_bias: true,
        exp_scales: false,
        groups: (e.n_expert_groups, e.n_group_used),
        act,
        biases: false,
    };
    let mut out = b.moe_ffn_logits(routed_in, logits, w, hp.n_expert_used, m, false);
    if let Some(norm) = routed_norm {
        out = b.rms_norm(out, Some(norm), hp.eps_rms);
    }
    if let Some(w) = routed_up {
        out = b.mul_mat_raw(w, out);
    }
    let n_ff_sh = e.n_ff_shexp as i64;
    if b.lw_opt(il, "ffn_gate_shexp.weight", &[n_embd, n_ff_sh])?
        .is_some()
    {
        let sh = b.ffn_named(il, x, "_shexp", e.n_ff_shexp, shared)?;
        out = b.add(out, Operand::Node(sh));
    }
    Ok(out)
}
