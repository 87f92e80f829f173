//! `gemma` (upstream's src/models/gemma.cpp): embeddings scaled by sqrt(n_embd), Q scaled
//! by 1/sqrt(head size) before an unscaled attention, a GELU-gated FFN, and an output that
//! is always the token embeddings (upstream duplicates `token_embd`; `output.weight` unused).

use super::super::builder::{BuildError, Builder, Ffn, Outputs};
use super::super::{GluKind, Operand, RopeMode};
use super::def::{no_hparams, ArchDef, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["gemma"],
    rope: Rope::Mode(RopeMode::Neox),
    memory: Memory::Kv,
    hparams: no_hparams,
    graph,
};

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let n_embd = hp.n_embd as i64;
    let (tok_embd, inp) = b.inp_embd()?;
    let mut inp = b.scale(inp, (hp.n_embd as f32).sqrt());
    let q_scale = 1.0 / (hp.head_v as f32).sqrt();
    for il in 0..hp.n_layer {
        let nq = (hp.head_k * hp.n_head[il]) as i64;
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let wo = b.lw(il, "attn_output.weight", &[nq, n_embd])?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;

        let cur = b.rms_norm(inp, Some(attn_norm), hp.eps_rms);
        let (q, k, v) = b.qkv(il, cur)?;
        let (q, k) = b.rope_qk(q, k, None, false);
        let q = b.scale(q, q_scale);
        let mut cur = b.attn(il, q, k, v, wo, None, 1.0);
        if il == hp.n_layer - 1 {
            cur = b.get_rows_out(cur);
            inp = b.get_rows_out(inp);
        }
        let sa_out = b.add(cur, Operand::Node(inp));
        let cur = b.rms_norm(sa_out, Some(ffn_norm), hp.eps_rms);
        let ffn = Ffn {
            act: GluKind::Geglu,
            bias: false,
            scaled: false,
        };
        let cur = b.ffn_layer(il, cur, ffn)?;
        inp = b.add(cur, Operand::Node(sa_out));
        inp = b.cvec(inp, il);
    }
    let norm = b.weight("output_norm.weight", &[n_embd])?;
    let embd = b.rms_norm(inp, Some(norm), hp.eps_rms);
    let logits = b.mul_mat(tok_embd, embd);
    Ok(Outputs { logits, embd })
}
