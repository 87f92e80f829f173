//! `baichuan` (upstream's src/models/baichuan.cpp): llama's structure without biases; the
//! 7B (32 layers) applies NORM rotary embeddings, the other sizes none; the 13B (40 layers)
//! uses ALiBi, which the engine refuses (no ALiBi in attention yet).

use super::super::builder::{BuildError, Builder, Ffn, Outputs};
use super::super::params::ArchParams;
use super::super::RopeMode;
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["baichuan"],
    rope: Rope::Mode(RopeMode::Norm),
    memory: Memory::Kv,
    hparams,
    graph,
};

fn hparams(_: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    if hp.n_layer == 40 {
        return Err("the 13B (40 layers) uses ALiBi, not supported by the engine yet".into());
    }
    Ok(())
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let n_embd = hp.n_embd as i64;
    let use_rope = hp.n_layer == 32;
    let kq_scale = 1.0 / (hp.head_v as f32).sqrt();
    let (_, mut inp) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let wo = b.lw(il, "attn_output.weight", &[n_embd, n_embd])?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;

        let cur = b.rms_norm(inp, Some(attn_norm), hp.eps_rms);
        let (mut q, mut k, v) = b.qkv(il, cur)?;
        if use_rope {
            (q, k) = b.rope_qk(q, k, None, false);
        }
        let cur = b.attn(il, q, k, v, wo, None, kq_scale);
        let ffn_inp = b.residual(il, cur, inp);
        let cur = b.rms_norm(ffn_inp, Some(ffn_norm), hp.eps_rms);
        let ffn = Ffn {
            scaled: false,
            ..Ffn::SWIGLU
        };
        let cur = b.ffn_layer(il, cur, ffn)?;
        inp = b.layer_out(il, cur, ffn_inp);
    }
    let norm = b.weight("output_norm.weight", &[n_embd])?;
    let output = b.weight("output.weight", &[n_embd, hp.n_vocab as i64])?;
    let embd = b.rms_norm(inp, Some(norm), hp.eps_rms);
    let logits = b.mul_mat(output, embd);
    Ok(Outputs { logits, embd })
}
