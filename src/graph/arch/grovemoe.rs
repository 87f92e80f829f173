//! `grovemoe` (upstream's src/models/grovemoe.cpp): qwen3-moe's attention (per-head RMS
//! norms of Q and K before NeoX rotation), then two mixtures of experts from one router:
//! the routed experts (softmax weights, selection by the sigmoid of the logits, weights
//! normalised) and, fed with their output, the chunk experts (`ffn_*_chexps`, one per
//! group of `experts_per_group` experts: the selected ids divided by the group size), whose
//! output is added times `expert_group_scale`.

use super::super::blocks::{PreNormAttn, QkNorm};
use super::super::builder::{BuildError, Builder, Gating, Moe, MoeRoute, Outputs};
use super::super::params::ArchParams;
use super::super::{Operand, RopeMode};
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["grovemoe"],
    rope: Rope::Mode(RopeMode::Neox),
    memory: Memory::Kv,
    hparams,
    graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    hp.n_ff_exp = k.u32_required("expert_feed_forward_length")? as usize;
    let n_ff_chexp = k.u32("expert_chunk_feed_forward_length", 0) as usize;
    hp.ext.n_ff_shexp = if n_ff_chexp > 0 {
        n_ff_chexp
    } else {
        hp.head_k
    };
    k.f32_opt("expert_group_scale")
        .ok_or_else(|| format!("key not found in model: {}", k.key("expert_group_scale")))?;
    let per_group = k.u32_required("experts_per_group")? as usize;
    if hp.n_expert == 0 || hp.n_expert_used == 0 || per_group == 0 {
        return Err("n_expert, n_expert_used and n_group_experts must be > 0 for GROVEMOE".into());
    }
    // (the chunk count: upstream's n_expert / n_group_experts)
    hp.ext.n_expert_shared = per_group;
    // (upstream reads no expert_weights_scale here: 0, no scaling)
    hp.expert_weights_scale = 0.0;
    if hp.ext.n_expert_groups > 1 {
        return Err("expert groups are not supported with grovemoe's chunk experts".into());
    }
    if hp.head_k != hp.head_v || hp.n_rot != hp.head_k {
        return Err(format!(
            "n_rot {} and head sizes {}/{} must agree",
            hp.n_rot, hp.head_k, hp.head_v
        ));
    }
    Ok(())
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let n_embd = hp.n_embd as i64;
    let per_group = hp.ext.n_expert_shared;
    let n_chunk = hp.n_expert / per_group;
    let key = format!("{}.expert_group_scale", b.model.arch);
    let group_scale = b.model.meta.get_f64(&key).unwrap_or(0.0) as f32;
    let n_ff_exp = if hp.n_ff_exp > 0 {
        hp.n_ff_exp
    } else {
        hp.n_ff[0] / hp.n_expert_used
    };
    let attn = PreNormAttn {
        rope_freqs: None,
        kq_scale: 1.0 / (hp.head_k as f32).sqrt(),
        qk_norm: QkNorm::BeforeRope,
        out_bias: false,
    };
    let moe = Moe {
        gating: Gating::Softmax,
        norm_w: true,
        scale_w: hp.expert_weights_scale,
        probs_bias: false,
        exp_scales: false,
        ..Moe::SOFTMAX
    };
    let select = MoeRoute {
        select_sigmoid: true,
        ..MoeRoute::default()
    };
    let chunk_route = MoeRoute {
        id_div: if n_chunk != hp.n_expert { per_group } else { 1 },
        ..select
    };
    let (tok_embd, mut inp) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;
        let ffn_inp = b.pre_norm_attn(il, inp, attn)?;
        let x = b.rms_norm(ffn_inp, Some(ffn_norm), hp.eps_rms);
        let w = b.moe_weights(il, "exps", n_ff_exp, hp.n_expert, moe)?;
        let wc = b.moe_weights(il, "chexps", hp.ext.n_ff_shexp, n_chunk, moe)?;
        let probs = b.mul_mat_lora(w.gate_inp, x);
        let routed = b.moe_ffn_routed(x, probs, w, hp.n_expert_used, moe, select);
        let n_used_chunk = hp.n_expert_used.min(n_chunk);
        let chunks = b.moe_ffn_routed(routed, probs, wc, n_used_chunk, moe, chunk_route);
        let chunks = b.scale(chunks, group_scale);
        let cur = b.add(routed, Operand::Node(chunks));
        inp = b.layer_out(il, cur, ffn_inp);
    }
    b.rms_output(inp, tok_embd, false)
}
