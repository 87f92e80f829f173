//! `llada` (upstream's src/models/llada.cpp): LLaDA, a diffusion language model shaped as
//! llama (NORM rotary embeddings, SiLU-gated FFN) that attends both ways and keeps no memory
//! (every decode is upstream's encode). Upstream loads `rope_freqs`, `attn_output.bias` and
//! the FFN biases when present but its graph uses none of them, nor the FFN's scales.

use super::super::builder::{BuildError, Builder, Ffn, Outputs};
use super::super::{Operand, RopeMode};
use super::def::{no_hparams, ArchDef, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["llada"],
    rope: Rope::Mode(RopeMode::Norm),
    memory: Memory::None,
    hparams: no_hparams,
    graph,
};

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let n_embd = hp.n_embd as i64;
    if hp.head_v != hp.head_k || hp.n_rot != hp.head_k {
        return Err(BuildError::Invalid(format!(
            "n_rot {} and head sizes {}/{} must agree",
            hp.n_rot, hp.head_k, hp.head_v
        )));
    }
    let ffn = Ffn {
        bias: false,
        scaled: false,
        ..Ffn::SWIGLU
    };
    let kq_scale = b.kq_scale();
    let (tok_embd, mut inp) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let nq = (hp.head_k * hp.n_head[il]) as i64;
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let wo = b.lw(il, "attn_output.weight", &[nq, n_embd])?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;

        let cur = b.rms_norm(inp, Some(attn_norm), hp.eps_rms);
        let (q, k, v) = b.qkv(il, cur)?;
        let (q, k) = b.rope_qk(q, k, None, false);
        let mut cur = b.attn(il, q, k, v, wo, None, kq_scale);
        let mut res = inp;
        if il == hp.n_layer - 1 {
            cur = b.get_rows_out(cur);
            res = b.get_rows_out(res);
        }
        let ffn_inp = b.add(cur, Operand::Node(res));
        let cur = b.rms_norm(ffn_inp, Some(ffn_norm), hp.eps_rms);
        let cur = b.ffn_layer(il, cur, ffn)?;
        inp = b.layer_out(il, cur, ffn_inp);
    }
    b.rms_output(inp, tok_embd, false)
}
