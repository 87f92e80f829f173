//! `grok` (upstream's src/models/grok.cpp; Grok-1/2): scaled embeddings, RMS norms around
//! both blocks (`attn_output_norm` after attention, `layer_output_norm` or
//! `post_ffw_norm` after the FFN), NeoX rotary embeddings, attention of scale 1 (the flash
//! attention path upstream takes on the CPU: its `attn_out_scale` soft-cap applies only
//! without flash attention), softmax-routed GELU experts with normalised weights plus, when
//! the layer has one, a dense GELU FFN averaged in by sqrt(2)/2, scaled (and optionally
//! soft-capped) logits.

use super::super::builder::{BuildError, Builder, Ffn, Moe, Outputs};
use super::super::params::ArchParams;
use super::super::{GluKind, Operand, RopeMode};
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["grok"],
    rope: Rope::Mode(RopeMode::Neox),
    memory: Memory::Kv,
    hparams,
    graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    if hp.n_expert == 0 {
        return Err("grok model cannot have zero experts".into());
    }
    // upstream's defaults for old files, then the keys
    hp.yarn_beta_fast = k.f32("rope.scaling.yarn_beta_fast", 8.0);
    hp.yarn_beta_slow = k.f32("rope.scaling.yarn_beta_slow", hp.yarn_beta_slow);
    hp.yarn_ext_factor = k.f32("rope.scaling.yarn_ext_factor", hp.yarn_ext_factor);
    hp.yarn_attn_factor = k.f32("rope.scaling.yarn_attn_factor", hp.yarn_attn_factor);
    hp.final_logit_softcap = k.f32("final_logit_softcapping", 0.0);
    let n_ff = hp.n_ff.first().copied().unwrap_or(0);
    hp.n_ff_exp = match k.u32("expert_feed_forward_length", 0) as usize {
        0 => n_ff,
        v => v,
    };
    Ok(())
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let keys = Keys {
        model: b.model,
        arch: &b.model.arch,
    };
    let logit_scale = keys.f32("logit_scale", 0.577_350_269_189_625_7_f64 as f32);
    let embedding_scale = keys.f32("embedding_scale", 78.383_671_769_061_69_f64 as f32);
    let n_embd = hp.n_embd as i64;
    let head = hp.head_k;
    if hp.head_v != head || hp.n_rot != head {
        return Err(BuildError::Invalid(format!(
            "n_rot {} and head sizes {}/{} must agree",
            hp.n_rot, hp.head_k, hp.head_v
        )));
    }
    let gelu = Ffn {
        act: GluKind::Geglu,
        bias: false,
        scaled: false,
    };
    let moe = Moe {
        scale_w: hp.expert_weights_scale,
        exp_scales: false,
        act: GluKind::Geglu,
        ..Moe::SOFTMAX
    };
    let (tok_embd, mut inp) = b.inp_embd()?;
    if embedding_scale != 0.0 {
        inp = b.scale(inp, embedding_scale);
    }
    for il in 0..hp.n_layer {
        let nq = (head * hp.n_head[il]) as i64;
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let wo = b.lw(il, "attn_output.weight", &[nq, n_embd])?;
        let wo_b = b.lw_opt(il, "attn_output.bias", &[n_embd])?;
        let attn_out_norm = b.lw(il, "attn_output_norm.weight", &[n_embd])?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;
        let post_norm = match b.lw_opt(il, "layer_output_norm.weight", &[n_embd])? {
            Some(w) => w,
            None => b.lw(il, "post_ffw_norm.weight", &[n_embd])?,
        };

        let cur = b.rms_norm(inp, Some(attn_norm), hp.eps_rms);
        let (q, k, v) = b.qkv(il, cur)?;
        let (q, k) = b.rope_qk(q, k, None, false);
        let mut cur = b.attn(il, q, k, v, wo, wo_b, 1.0);
        let mut res = inp;
        if il == hp.n_layer - 1 {
            cur = b.get_rows_out(cur);
            res = b.get_rows_out(res);
        }
        let cur = b.rms_norm(cur, Some(attn_out_norm), hp.eps_rms);
        let ffn_inp = b.add(cur, Operand::Node(res));
        let x = b.rms_norm(ffn_inp, Some(ffn_norm), hp.eps_rms);
        let moe_out = b.moe_layer(il, x, hp.n_ff_exp, moe)?;
        let has_dense = b.has(&format!("blk.{il}.ffn_up.weight"));
        let cur = if has_dense {
            let ffn_out = b.ffn_layer(il, x, gelu)?;
            let sum = b.add(ffn_out, Operand::Node(moe_out));
            b.scale(sum, (2f64.sqrt() / 2.0) as f32)
        } else {
            moe_out
        };
        let cur = b.rms_norm(cur, Some(post_norm), hp.eps_rms);
        inp = b.layer_out(il, cur, ffn_inp);
    }
    let mut out = b.rms_output(inp, tok_embd, false)?;
    out.logits = b.scale(out.logits, logit_scale);
    let cap = hp.final_logit_softcap;
    if cap != 0.0 {
        let l = b.scale(out.logits, 1.0 / cap);
        let l = b.tanh(l);
        out.logits = b.scale(l, cap);
    }
    Ok(out)
}
