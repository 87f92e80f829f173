//! `arcee` (upstream's src/models/arcee.cpp): llama's RMS-normed block (NORM rotary
//! embeddings with `rope_freqs` when present) with a gate-less FFN whose activation is the
//! squared ReLU (`LLM_FFN_RELU_SQR`).

use super::super::builder::{Act, BuildError, Builder, Need, Outputs};
use super::super::{Operand, RopeMode};
use super::def::{no_hparams, ArchDef, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["arcee"],
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
    let rope_freqs = b.weight_opt("rope_freqs.weight", &[hp.n_rot as i64 / 2])?;
    let kq_scale = 1.0 / (hp.head_k as f32).sqrt();
    let (tok_embd, mut inp) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let nq = (hp.head_k * hp.n_head[il]) as i64;
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let wo = b.lw(il, "attn_output.weight", &[nq, n_embd])?;
        let wo_b = b.lw_opt(il, "attn_output.bias", &[n_embd])?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;

        let cur = b.rms_norm(inp, Some(attn_norm), hp.eps_rms);
        let (q, k, v) = b.qkv(il, cur)?;
        let (q, k) = b.rope_qk(q, k, rope_freqs, false);
        let mut cur = b.attn(il, q, k, v, wo, wo_b, kq_scale);
        if il == hp.n_layer - 1 {
            cur = b.get_rows_out(cur);
            inp = b.get_rows_out(inp);
        }
        let ffn_inp = b.add(cur, Operand::Node(inp));
        let cur = b.rms_norm(ffn_inp, Some(ffn_norm), hp.eps_rms);
        let cur = b.ffn_seq(il, cur, Act::ReluSqr, Need::Never, false)?;
        inp = b.layer_out(il, cur, ffn_inp);
    }
    b.rms_output(inp, tok_embd, false)
}
