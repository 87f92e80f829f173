//! `chatglm` (upstream's src/models/chatglm.cpp): llama's RMS-normed block with NORM rotary
//! embeddings over the first `rope.dimension_count` values of each head, Q/K/V fused or
//! separate (biases when present), no output bias, and a fused SwiGLU FFN: `ffn_up` gives
//! `2 * n_ff` values per token, the SiLU of the first half times the second.

use super::super::builder::{BuildError, Builder, Outputs};
use super::super::{GluKind, Op, Operand, RopeMode};
use super::def::{no_hparams, ArchDef, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["chatglm"],
    rope: Rope::Mode(RopeMode::Norm),
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
    let (tok_embd, mut inp) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let n_ff = hp.n_ff[il];
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let wo = b.lw(il, "attn_output.weight", &[n_embd, n_embd])?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;
        let up = b.lw(il, "ffn_up.weight", &[n_embd, 2 * n_ff as i64])?;
        let down = b.lw(il, "ffn_down.weight", &[n_ff as i64, n_embd])?;

        let cur = b.rms_norm(inp, Some(attn_norm), hp.eps_rms);
        let (q, k, v) = b.qkv(il, cur)?;
        let (q, k) = b.rope_qk(q, k, None, false);
        let mut cur = b.attn(il, q, k, v, wo, None, kq_scale);
        if il == hp.n_layer - 1 {
            cur = b.get_rows_out(cur);
            inp = b.get_rows_out(inp);
        }
        let ffn_inp = b.add(cur, Operand::Node(inp));
        let cur = b.rms_norm(ffn_inp, Some(ffn_norm), hp.eps_rms);
        // build_ffn(up, LLM_FFN_SWIGLU, SEQ): MUL_MAT (no scale passed), then GLU of halves
        let both = b.mul_mat_raw(up, cur);
        let gate = b.view(both, 0, n_ff);
        let upv = b.view(both, n_ff, n_ff);
        let t = b.ne1(both);
        let op = Op::Glu {
            gate,
            up: upv,
            kind: GluKind::Swiglu,
        };
        let h = b.push("glu", op, n_ff, t);
        let cur = b.mul_mat_raw(down, h);
        inp = b.layer_out(il, cur, ffn_inp);
    }
    b.rms_output(inp, tok_embd, false)
}
