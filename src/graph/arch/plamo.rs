//! `plamo` (upstream's src/models/plamo.cpp): a parallel residual — attention and a
//! SiLU-gated FFN both read the layer's RMS-normed input, and both outputs are added to the
//! input — with NeoX rotary embeddings over the whole head.

use super::super::builder::{BuildError, Builder, Ffn, Outputs};
use super::super::{Operand, RopeMode};
use super::def::{no_hparams, ArchDef, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["plamo"],
    rope: Rope::Mode(RopeMode::Neox),
    memory: Memory::Kv,
    hparams: no_hparams,
    graph,
};

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let n_embd = hp.n_embd as i64;
    let head = hp.head_v;
    if hp.n_rot != head {
        return Err(BuildError::Invalid(format!(
            "n_rot {} differs from the head size {head}: upstream rotates the whole head",
            hp.n_rot
        )));
    }
    let kq_scale = 1.0 / (head as f32).sqrt();
    let (_, mut inp) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let wo = b.lw(il, "attn_output.weight", &[n_embd, n_embd])?;

        let mut x = b.rms_norm(inp, Some(attn_norm), hp.eps_rms);
        let (q, k, v) = b.qkv(il, x)?;
        let (q, k) = b.rope_qk(q, k, None, false);
        let mut sa_out = b.attn(il, q, k, v, wo, None, kq_scale);
        if il == hp.n_layer - 1 {
            sa_out = b.get_rows_out(sa_out);
            x = b.get_rows_out(x);
            inp = b.get_rows_out(inp);
        }
        let ffn = Ffn {
            scaled: false,
            ..Ffn::SWIGLU
        };
        let cur = b.ffn_layer(il, x, ffn)?;
        let cur = b.add(cur, Operand::Node(sa_out));
        inp = b.add(cur, Operand::Node(inp));
        inp = b.cvec(inp, il);
    }
    let norm = b.weight("output_norm.weight", &[n_embd])?;
    let output = b.weight("output.weight", &[n_embd, hp.n_vocab as i64])?;
    let embd = b.rms_norm(inp, Some(norm), hp.eps_rms);
    let logits = b.mul_mat(output, embd);
    Ok(Outputs { logits, embd })
}
