//! `phi2` (upstream's src/models/phi2.cpp): a parallel block — attention and a GELU FFN
//! without gate both read the layer's LayerNorm, summed with the input —, NeoX rotary
//! embeddings over the first `rope.dimension_count` values of each head, Q scaled by
//! 1/sqrt(head) before attention (which then scales by 1), an output bias.

use super::super::builder::{Act, BuildError, Builder, Need, Outputs};
use super::super::{Operand, RopeMode};
use super::def::{no_hparams, ArchDef, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["phi2"],
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
    let (_, mut inp) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let attn_norm_b = b.lw(il, "attn_norm.bias", &[n_embd])?;
        let wo = b.lw(il, "attn_output.weight", &[n_embd, n_embd])?;
        let wo_b = b.lw(il, "attn_output.bias", &[n_embd])?;

        let mut x = b.layer_norm(inp, Some(attn_norm), Some(attn_norm_b), hp.eps_norm);
        let (q, k, v) = b.qkv(il, x)?;
        let (q, k) = b.rope_qk(q, k, None, false);
        let q = b.scale(q, 1.0 / (hp.head_k as f32).sqrt());
        let mut attn_out = b.attn(il, q, k, v, wo, Some(wo_b), 1.0);
        if il == hp.n_layer - 1 {
            attn_out = b.get_rows_out(attn_out);
            inp = b.get_rows_out(inp);
            x = b.get_rows_out(x);
        }
        let ffn_out = b.ffn_seq(il, x, Act::Gelu, Need::Required, false)?;
        let cur = b.add(attn_out, Operand::Node(ffn_out));
        inp = b.add(cur, Operand::Node(inp));
        inp = b.cvec(inp, il);
    }
    let norm = b.weight("output_norm.weight", &[n_embd])?;
    let norm_b = b.weight("output_norm.bias", &[n_embd])?;
    let output = b.weight("output.weight", &[n_embd, hp.n_vocab as i64])?;
    let output_b = b.weight("output.bias", &[hp.n_vocab as i64])?;
    let embd = b.layer_norm(inp, Some(norm), Some(norm_b), hp.eps_norm);
    let logits = b.linear(output, Some(output_b), embd);
    Ok(Outputs { logits, embd })
}
