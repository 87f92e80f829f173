//! `seed_oss` (upstream's src/models/seed-oss.cpp): llama's structure with NeoX rotary
//! embeddings, the FFN's input normed by `post_attention_norm`, no `ffn_norm`.

use super::super::builder::{BuildError, Builder, Ffn, Outputs};
use super::super::RopeMode;
use super::def::{no_hparams, ArchDef, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["seed_oss"],
    rope: Rope::Mode(RopeMode::Neox),
    memory: Memory::Kv,
    hparams: no_hparams,
    graph,
};

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let n_embd = hp.n_embd as i64;
    let kq_scale = b.kq_scale();
    let (tok_embd, mut inp) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let nq = (hp.head_k * hp.n_head[il]) as i64;
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let wo = b.lw(il, "attn_output.weight", &[nq, n_embd])?;
        let post_norm = b.lw(il, "post_attention_norm.weight", &[n_embd])?;

        let cur = b.rms_norm(inp, Some(attn_norm), hp.eps_rms);
        let (q, k, v) = b.qkv(il, cur)?;
        let (q, k) = b.rope_qk(q, k, None, false);
        let cur = b.attn(il, q, k, v, wo, None, kq_scale);
        b.cb_output(cur, "attn_out", Some(il));
        let ffn_inp = b.residual(il, cur, inp);
        let cur = b.rms_norm(ffn_inp, Some(post_norm), hp.eps_rms);
        let ffn = Ffn {
            scaled: false,
            ..Ffn::SWIGLU
        };
        let cur = b.ffn_layer(il, cur, ffn)?;
        inp = b.layer_out(il, cur, ffn_inp);
    }
    b.rms_output(inp, tok_embd, false)
}
