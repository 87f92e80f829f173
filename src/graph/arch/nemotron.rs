//! `nemotron` (upstream's src/models/nemotron.cpp): pre-LayerNorms with biases, Q/K/V fused
//! or separate (biases when present), NeoX rotary embeddings over the first
//! `rope.dimension_count` values of each head, a squared-ReLU FFN without gate (biases when
//! present), the final LayerNorm with bias and its own output.

use super::super::builder::{Act, BuildError, Builder, Need, Outputs};
use super::super::{Operand, RopeMode};
use super::def::{no_hparams, ArchDef, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["nemotron"],
    rope: Rope::Mode(RopeMode::Neox),
    memory: Memory::Kv,
    hparams: no_hparams,
    graph,
};

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let n_embd = hp.n_embd as i64;
    if hp.head_k != hp.head_v {
        return Err(BuildError::Invalid(format!(
            "head sizes {}/{} must agree",
            hp.head_k, hp.head_v
        )));
    }
    let kq_scale = 1.0 / (hp.head_v as f32).sqrt();
    let (_, mut inp) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let attn_norm_b = b.lw(il, "attn_norm.bias", &[n_embd])?;
        let wo = b.lw(il, "attn_output.weight", &[n_embd, n_embd])?;
        let wo_b = b.lw_opt(il, "attn_output.bias", &[n_embd])?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;
        let ffn_norm_b = b.lw(il, "ffn_norm.bias", &[n_embd])?;

        let cur = b.layer_norm(inp, Some(attn_norm), Some(attn_norm_b), hp.eps_norm);
        let (q, k, v) = b.qkv(il, cur)?;
        let (q, k) = b.rope_qk(q, k, None, false);
        let mut cur = b.attn(il, q, k, v, wo, wo_b, kq_scale);
        if il == hp.n_layer - 1 {
            cur = b.get_rows_out(cur);
            inp = b.get_rows_out(inp);
        }
        let ffn_inp = b.add(cur, Operand::Node(inp));
        let cur = b.layer_norm(ffn_inp, Some(ffn_norm), Some(ffn_norm_b), hp.eps_norm);
        let cur = b.ffn_seq(il, cur, Act::ReluSqr, Need::IfPresent, false)?;
        inp = b.layer_out(il, cur, ffn_inp);
    }
    let norm = b.weight("output_norm.weight", &[n_embd])?;
    let norm_b = b.weight("output_norm.bias", &[n_embd])?;
    let output = b.weight("output.weight", &[n_embd, hp.n_vocab as i64])?;
    let embd = b.layer_norm(inp, Some(norm), Some(norm_b), hp.eps_norm);
    let logits = b.mul_mat(output, embd);
    Ok(Outputs { logits, embd })
}
