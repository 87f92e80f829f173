//! `pockettts` (upstream's src/models/pockettts.cpp): the text backbone of Pocket-TTS's flow
//! language model. Pre-LayerNorms with required biases, Q/K/V fused or separate (biases when
//! present), normal (GPT-J style) rotary embeddings over whole heads, an output projection
//! without bias, a gate-less GELU FFN without biases and a final LayerNorm with bias. It has
//! no LM head: upstream projects by the token embeddings so that a sampler can still run, and
//! so do we (an `output.weight` in the file is not read).

use super::super::builder::{Act, BuildError, Builder, Need, Outputs};
use super::super::{Operand, RopeMode};
use super::def::{no_hparams, ArchDef, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["pockettts"],
    rope: Rope::Mode(RopeMode::Norm),
    memory: Memory::Kv,
    hparams: no_hparams,
    graph,
};

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let n_embd = hp.n_embd as i64;
    if hp.head_k != hp.head_v || hp.n_rot != hp.head_k {
        return Err(BuildError::Invalid(format!(
            "n_rot {} and head sizes {}/{} must agree",
            hp.n_rot, hp.head_k, hp.head_v
        )));
    }
    let kq_scale = 1.0 / (hp.head_v as f32).sqrt();
    let (tok_embd, mut inp) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let attn_norm_b = b.lw(il, "attn_norm.bias", &[n_embd])?;
        let wo = b.lw(il, "attn_output.weight", &[n_embd, n_embd])?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;
        let ffn_norm_b = b.lw(il, "ffn_norm.bias", &[n_embd])?;

        let cur = b.layer_norm(inp, Some(attn_norm), Some(attn_norm_b), hp.eps_norm);
        let (q, k, v) = b.qkv(il, cur)?;
        let (q, k) = b.rope_qk(q, k, None, false);
        let mut cur = b.attn(il, q, k, v, wo, None, kq_scale);
        if il == hp.n_layer - 1 {
            cur = b.get_rows_out(cur);
            inp = b.get_rows_out(inp);
        }
        let ffn_inp = b.add(cur, Operand::Node(inp));
        let cur = b.layer_norm(ffn_inp, Some(ffn_norm), Some(ffn_norm_b), hp.eps_norm);
        // upstream passes no FFN biases and no FFN scales to build_ffn here
        let cur = b.ffn_seq(il, cur, Act::Gelu, Need::Never, false)?;
        inp = b.layer_out(il, cur, ffn_inp);
    }
    let norm = b.weight("output_norm.weight", &[n_embd])?;
    let norm_b = b.weight("output_norm.bias", &[n_embd])?;
    let embd = b.layer_norm(inp, Some(norm), Some(norm_b), hp.eps_norm);
    let logits = b.mul_mat(tok_embd, embd);
    b.cb_norm(embd, "result_norm", None);
    b.cb(logits, "result_output", None);
    Ok(Outputs { logits, embd })
}
