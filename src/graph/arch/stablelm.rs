//! `stablelm` (upstream's src/models/stablelm.cpp): LayerNorms with bias, NeoX rotary
//! embeddings over the first `rope.dimension_count` values of each head, a SiLU-gated FFN;
//! without `ffn_norm` the FFN reads the attention's normed input (parallel residual);
//! StableLM-2-12B's per-head q/k LayerNorms (`attn_q_norm` [head, n_head], no bias).

use super::super::builder::{BuildError, Builder, Ffn, Outputs};
use super::super::{Operand, RopeMode};
use super::def::{no_hparams, ArchDef, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["stablelm"],
    rope: Rope::Mode(RopeMode::Neox),
    memory: Memory::Kv,
    hparams: no_hparams,
    graph,
};

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let n_embd = hp.n_embd as i64;
    let kq_scale = 1.0 / (hp.head_v as f32).sqrt();
    let (_, mut inp) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let attn_norm_b = b.lw(il, "attn_norm.bias", &[n_embd])?;
        let wo = b.lw(il, "attn_output.weight", &[n_embd, n_embd])?;
        let ffn_norm = b.lw_opt(il, "ffn_norm.weight", &[n_embd])?;
        let ffn_norm_b = b.lw_opt(il, "ffn_norm.bias", &[n_embd])?;

        let mut x = b.layer_norm(inp, Some(attn_norm), Some(attn_norm_b), hp.eps_norm);
        let (mut q, mut k, v) = b.qkv(il, x)?;
        let (head, nh, nkv) = (hp.head_k, hp.n_head[il] as i64, hp.n_head_kv[il] as i64);
        if let Some(w) = b.lw_opt(il, "attn_q_norm.weight", &[head as i64, nh])? {
            q = b.head_layer_norm(q, head, w, hp.eps_norm);
        }
        if let Some(w) = b.lw_opt(il, "attn_k_norm.weight", &[head as i64, nkv])? {
            k = b.head_layer_norm(k, head, w, hp.eps_norm);
        }
        let (q, k) = b.rope_qk(q, k, None, false);
        let mut cur = b.attn(il, q, k, v, wo, None, kq_scale);
        if il == hp.n_layer - 1 {
            cur = b.get_rows_out(cur);
            inp = b.get_rows_out(inp);
            x = b.get_rows_out(x);
        }
        let ffn_inp = b.add(cur, Operand::Node(inp));
        let cur = match ffn_norm {
            Some(w) => b.layer_norm(ffn_inp, Some(w), ffn_norm_b, hp.eps_norm),
            None => x,
        };
        let ffn = Ffn {
            scaled: false,
            ..Ffn::SWIGLU
        };
        let cur = b.ffn_layer(il, cur, ffn)?;
        inp = b.layer_out(il, cur, ffn_inp);
    }
    let norm = b.weight("output_norm.weight", &[n_embd])?;
    let norm_b = b.weight("output_norm.bias", &[n_embd])?;
    let output = b.weight("output.weight", &[n_embd, hp.n_vocab as i64])?;
    let embd = b.layer_norm(inp, Some(norm), Some(norm_b), hp.eps_norm);
    let logits = b.mul_mat(output, embd);
    Ok(Outputs { logits, embd })
}
