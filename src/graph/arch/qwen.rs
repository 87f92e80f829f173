//! `qwen` (upstream's src/models/qwen.cpp): llama's structure with a fused `attn_qkv` (with
//! bias), NeoX rotary embeddings, and an FFN of `feed_forward_length / 2` rows.

use super::super::builder::{BuildError, Builder, Outputs};
use super::super::{GluKind, RopeMode};
use super::def::{no_hparams, ArchDef, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["qwen"],
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
        let n_ff = hp.n_ff[il] as i64 / 2;
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        // upstream requires the fused projection and its bias
        b.lw(il, "attn_qkv.weight", &[n_embd, n_embd * 3])?;
        b.lw(il, "attn_qkv.bias", &[n_embd * 3])?;
        let wo = b.lw(il, "attn_output.weight", &[n_embd, n_embd])?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;
        let up = b.lw(il, "ffn_up.weight", &[n_embd, n_ff])?;
        let gate = b.lw(il, "ffn_gate.weight", &[n_embd, n_ff])?;
        let down = b.lw(il, "ffn_down.weight", &[n_ff, n_embd])?;

        let cur = b.rms_norm(inp, Some(attn_norm), hp.eps_rms);
        let (q, k, v) = b.qkv(il, cur)?;
        let (q, k) = b.rope_qk(q, k, None, false);
        let cur = b.attn(il, q, k, v, wo, None, kq_scale);
        let ffn_inp = b.residual(il, cur, inp);
        let cur = b.rms_norm(ffn_inp, Some(ffn_norm), hp.eps_rms);
        let cur = b.ffn(
            cur,
            up,
            None,
            gate,
            None,
            down,
            None,
            GluKind::Swiglu,
            false,
        );
        inp = b.layer_out(il, cur, ffn_inp);
    }
    let norm = b.weight("output_norm.weight", &[n_embd])?;
    let output = b.weight("output.weight", &[n_embd, hp.n_vocab as i64])?;
    let embd = b.rms_norm(inp, Some(norm), hp.eps_rms);
    let logits = b.mul_mat(output, embd);
    Ok(Outputs { logits, embd })
}
