//! `smollm3` (upstream's src/models/smollm3.cpp): llama's structure where every fourth
//! layer skips the rotary embedding (NoPE layers).

use super::super::builder::{BuildError, Builder, Ffn, Outputs};
use super::super::RopeMode;
use super::def::{no_hparams, ArchDef, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["smollm3"],
    rope: Rope::Mode(RopeMode::Norm),
    memory: Memory::Kv,
    hparams: no_hparams,
    graph,
};

/// upstream's `n_no_rope_layer_step`
const NO_ROPE_STEP: usize = 4;

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let n_embd = hp.n_embd as i64;
    let kq_scale = b.kq_scale();
    let (tok_embd, mut inp) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let nq = (hp.head_k * hp.n_head[il]) as i64;
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let wo = b.lw(il, "attn_output.weight", &[nq, n_embd])?;
        let wo_b = b.lw_opt(il, "attn_output.bias", &[n_embd])?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;

        let cur = b.rms_norm(inp, Some(attn_norm), hp.eps_rms);
        let (mut q, mut k, v) = b.qkv(il, cur)?;
        if (il + 1) % NO_ROPE_STEP != 0 {
            (q, k) = b.rope_qk(q, k, None, false);
        }
        let cur = b.attn(il, q, k, v, wo, wo_b, kq_scale);
        b.cb_output(cur, "attn_out", Some(il));
        let ffn_inp = b.residual(il, cur, inp);
        let cur = b.rms_norm(ffn_inp, Some(ffn_norm), hp.eps_rms);
        let ffn = Ffn {
            bias: true,
            scaled: false,
            ..Ffn::SWIGLU
        };
        let cur = b.ffn_layer(il, cur, ffn)?;
        inp = b.layer_out(il, cur, ffn_inp);
    }
    b.rms_output(inp, tok_embd, false)
}
