//! `hunyuan-dense` (upstream's src/models/hunyuan-vl.cpp, which it shares): llama's
//! structure with NeoX rotary embeddings (`rope_freqs` when present; the base scaled by
//! `rope.scaling.alpha`^(d/(d-2)) when the file gives one), then per-head RMS norms of Q
//! and K after the rotation.

use super::super::builder::{BuildError, Builder, Ffn, Outputs};
use super::super::params::ArchParams;
use super::super::{Operand, RopeMode};
use super::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["hunyuan-dense"],
    rope: Rope::Mode(RopeMode::Neox),
    memory: Memory::Kv,
    hparams,
    graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    let alpha = k.f32("rope.scaling.alpha", 0.0);
    if alpha > 0.0 {
        let dim = hp.head_k as f32;
        hp.rope_freq_base *= alpha.powf(dim / (dim - 2.0));
    }
    Ok(())
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let n_embd = hp.n_embd as i64;
    let kq_scale = 1.0 / (hp.head_v as f32).sqrt();
    let rope_freqs = b.weight_opt("rope_freqs.weight", &[hp.n_rot as i64 / 2])?;
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
        let (q, k) = b.qk_norm(il, q, k)?;
        let mut cur = b.attn(il, q, k, v, wo, wo_b, kq_scale);
        let mut res = inp;
        if il == hp.n_layer - 1 {
            cur = b.get_rows_out(cur);
            res = b.get_rows_out(res);
        }
        let ffn_inp = b.add(cur, Operand::Node(res));
        let cur = b.rms_norm(ffn_inp, Some(ffn_norm), hp.eps_rms);
        let ffn = Ffn {
            scaled: false,
            ..Ffn::SWIGLU
        };
        let cur = b.ffn_layer(il, cur, ffn)?;
        inp = b.add(cur, Operand::Node(ffn_inp));
    }
    b.rms_output(inp, tok_embd, false)
}
