//! `granite_swa` (upstream's src/models/granite-swa.cpp): granite's block (embedding scale,
//! residual branches scaled by `residual_scale`, logits divided by `logit_scale`, biases
//! when present) with sliding-window layers (`attention.sliding_window_pattern`, standard
//! window), per-head attention sinks (`attn_sinks`), rotation only on the layers
//! `attention.rope_pattern` marks (all when it is a number or absent; NORM, `rope_freqs` when
//! present, the global base on every layer). Dense FFN only; files with experts or a
//! deepstack mapping are refused.

use super::super::builder::{BuildError, Builder, Ffn, Outputs};
use super::super::params::ArchParams;
use super::super::{Operand, RopeMode};
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["granite_swa"],
    rope: Rope::Mode(RopeMode::Norm),
    memory: Memory::Kv,
    hparams,
    graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    hp.attention_scale = k.f32("attention.scale", 0.0);
    for key in ["logit_scale"] {
        if k.model.meta.get_f64(&k.key(key)).is_none() {
            return Err(format!("key not found in model: {}", k.key(key)));
        }
    }
    hp.n_swa = k.u32_required("attention.sliding_window")?;
    hp.swa_layers = k.swa_layers(hp.n_layer, 0)?;
    if hp.n_expert > 0 {
        return Err("granite_swa with experts is not supported yet".into());
    }
    if k.ints("deepstack_mapping")
        .is_some_and(|v| v.iter().any(|&x| x >= 0))
    {
        return Err("granite_swa with a deepstack mapping is not supported yet".into());
    }
    Ok(())
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let keys = Keys {
        model: b.model,
        arch: &b.model.arch,
    };
    let embedding_scale = keys.f32("embedding_scale", 0.0);
    let residual_scale = keys.f32("residual_scale", 0.0);
    let logit_scale = keys.f32("logit_scale", 1.0);
    // upstream's has_rope: the rope_pattern array's entry, every layer without one
    let has_rope = keys.layer_flags("attention.rope_pattern", b.hp.n_layer, true);
    let hp = b.hp;
    let n_embd = hp.n_embd as i64;
    let head = hp.head_k;
    if hp.head_v != head || hp.n_rot != head {
        return Err(BuildError::Invalid(format!(
            "n_rot {} and head sizes {}/{} must agree",
            hp.n_rot, hp.head_k, hp.head_v
        )));
    }
    let rope_freqs = b.weight_opt("rope_freqs.weight", &[hp.n_rot as i64 / 2])?;
    let kq_scale = b.kq_scale();
    let (tok_embd, mut inp) = b.inp_embd()?;
    if embedding_scale != 0.0 {
        inp = b.scale(inp, embedding_scale);
    }
    for il in 0..hp.n_layer {
        let nq = (head * hp.n_head[il]) as i64;
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let wo = b.lw(il, "attn_output.weight", &[nq, n_embd])?;
        let wo_b = b.lw_opt(il, "attn_output.bias", &[n_embd])?;
        let sinks = b.lw(il, "attn_sinks.weight", &[hp.n_head[il] as i64])?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;

        let cur = b.rms_norm(inp, Some(attn_norm), hp.eps_rms);
        let (mut q, mut k, v) = b.qkv(il, cur)?;
        if has_rope[il] {
            (q, k) = b.rope_qk(q, k, rope_freqs, false);
        }
        let mut cur = b.attn_sinks(il, q, k, v, wo, wo_b, kq_scale, Some(sinks));
        let mut res = inp;
        if il == hp.n_layer - 1 {
            cur = b.get_rows_out(cur);
            res = b.get_rows_out(res);
        }
        if residual_scale != 0.0 {
            cur = b.scale(cur, residual_scale);
        }
        let ffn_inp = b.add(cur, Operand::Node(res));
        let x = b.rms_norm(ffn_inp, Some(ffn_norm), hp.eps_rms);
        let ffn = Ffn {
            bias: true,
            scaled: false,
            ..Ffn::SWIGLU
        };
        let mut cur = b.ffn_layer(il, x, ffn)?;
        if residual_scale != 0.0 {
            cur = b.scale(cur, residual_scale);
        }
        inp = b.layer_out(il, cur, ffn_inp);
    }
    let mut out = b.rms_output(inp, tok_embd, false)?;
    out.logits = b.scale(out.logits, 1.0 / logit_scale);
    Ok(out)
}
