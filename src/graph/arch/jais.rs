//! `jais` (upstream's src/models/jais.cpp): pre-LayerNorms with biases, a fused QKV with
//! bias, no rotary embedding but ALiBi (`attention.max_alibi_bias`), scores scaled by
//! 1/head (not its square root), a SiLU-gated FFN with biases, its own output.

use super::super::builder::{BuildError, Builder, Ffn, Outputs};
use super::super::params::ArchParams;
use super::super::Operand;
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["jais"],
    rope: Rope::None,
    memory: Memory::Kv,
    hparams,
    graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    hp.ext.max_alibi_bias = k.f32("attention.max_alibi_bias", 0.0);
    Ok(())
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let n_embd = hp.n_embd as i64;
    if hp.head_k != hp.head_v {
        return Err(BuildError::Invalid(format!(
            "head sizes {}/{} must agree",
            hp.head_k, hp.head_v
        )));
    }
    let kq_scale = 1.0 / hp.head_v as f32;
    let (_, mut inp) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let n_ff = hp.n_ff[il] as i64;
        let n_qkv = n_embd + 2 * hp.n_embd_k_gqa(il) as i64;
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let attn_norm_b = b.lw(il, "attn_norm.bias", &[n_embd])?;
        b.lw(il, "attn_qkv.weight", &[n_embd, n_qkv])?;
        b.lw(il, "attn_qkv.bias", &[n_qkv])?;
        let wo = b.lw(il, "attn_output.weight", &[n_embd, n_embd])?;
        let wo_b = b.lw(il, "attn_output.bias", &[n_embd])?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;
        let ffn_norm_b = b.lw(il, "ffn_norm.bias", &[n_embd])?;
        for (name, n) in [
            ("ffn_up.bias", n_ff),
            ("ffn_gate.bias", n_ff),
            ("ffn_down.bias", n_embd),
        ] {
            b.lw(il, name, &[n])?;
        }

        let cur = b.layer_norm(inp, Some(attn_norm), Some(attn_norm_b), hp.eps_norm);
        let (q, k, v) = b.qkv(il, cur)?;
        let mut cur = b.attn(il, q, k, v, wo, Some(wo_b), kq_scale);
        if il == hp.n_layer - 1 {
            cur = b.get_rows_out(cur);
            inp = b.get_rows_out(inp);
        }
        let ffn_inp = b.add(cur, Operand::Node(inp));
        let cur = b.layer_norm(ffn_inp, Some(ffn_norm), Some(ffn_norm_b), hp.eps_norm);
        let ffn = Ffn {
            bias: true,
            scaled: false,
            ..Ffn::SWIGLU
        };
        let cur = b.ffn_layer(il, cur, ffn)?;
        inp = b.layer_out(il, cur, ffn_inp);
    }
    let norm = b.weight("output_norm.weight", &[n_embd])?;
    let norm_b = b.weight("output_norm.bias", &[n_embd])?;
    let output = b.weight("output.weight", &[n_embd, hp.n_vocab as i64])?;
    let embd = b.layer_norm(inp, Some(norm), Some(norm_b), hp.eps_norm);
    let logits = b.mul_mat(output, embd);
    Ok(Outputs { logits, embd })
}
