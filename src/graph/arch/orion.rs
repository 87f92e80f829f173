//! `orion` (upstream's src/models/orion.cpp): llama's structure with LayerNorms (weight and
//! bias) instead of RMS norms, NeoX rotary embeddings, a SiLU-gated FFN.

use super::super::builder::{BuildError, Builder, Ffn, Outputs};
use super::super::RopeMode;
use super::def::{no_hparams, ArchDef, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["orion"],
    rope: Rope::Mode(RopeMode::Neox),
    memory: Memory::Kv,
    hparams: no_hparams,
    graph,
};

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let n_embd = hp.n_embd as i64;
    let kq_scale = 1.0 / (hp.head_v as f32).sqrt();
    let (_, mut inp) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let attn_norm_b = b.lw(il, "attn_norm.bias", &[n_embd])?;
        let wo = b.lw(il, "attn_output.weight", &[n_embd, n_embd])?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;
        let ffn_norm_b = b.lw(il, "ffn_norm.bias", &[n_embd])?;

        let cur = b.layer_norm(inp, Some(attn_norm), Some(attn_norm_b), hp.eps_norm);
        let (q, k, v) = b.qkv(il, cur)?;
        let (q, k) = b.rope_qk(q, k, None, false);
        let cur = b.attn(il, q, k, v, wo, None, kq_scale);
        let ffn_inp = b.residual(il, cur, inp);
        let cur = b.layer_norm(ffn_inp, Some(ffn_norm), Some(ffn_norm_b), hp.eps_norm);
        let ffn = Ffn {
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
