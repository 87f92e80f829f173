//! `qwen3` (upstream's src/models/qwen3.cpp): llama's structure with NeoX rotary
//! embeddings and per-head RMS norms of Q and K before the rotation.

use super::super::builder::{BuildError, Builder, Ffn, Moe, Outputs};
use super::super::{Operand, RopeMode};
use super::def::{no_hparams, ArchDef, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["qwen3"],
    rope: Rope::Mode(RopeMode::Neox),
    memory: Memory::Kv,
    hparams: no_hparams,
    graph,
};

/// The graph of qwen3 and, with experts, of qwen3moe.
pub fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    graph_with(b, true)
}

/// qwen3's graph, with or without the FFN's and the experts' per-tensor scales (the
/// vision-language variants qwen3vl and qwen3vlmoe pass none).
pub fn graph_with(b: &mut Builder, scaled: bool) -> Result<Outputs, BuildError> {
    let ffn = Ffn {
        scaled,
        ..Ffn::SWIGLU
    };
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
        let (q, k, v) = b.qkv(il, cur)?;
        let (q, k) = b.qk_norm(il, q, k)?;
        let (q, k) = b.rope_qk(q, k, None, false);
        let mut cur = b.attn(il, q, k, v, wo, wo_b, kq_scale);
        let mut res = inp;
        if il == hp.n_layer - 1 {
            cur = b.get_rows_out(cur);
            res = b.get_rows_out(res);
        }
        let ffn_inp = b.add(cur, Operand::Node(res));
        let cur = b.rms_norm(ffn_inp, Some(ffn_norm), hp.eps_rms);
        let cur = if hp.n_expert == 0 {
            b.ffn_layer(il, cur, ffn)?
        } else {
            let moe = Moe {
                scale_w: hp.expert_weights_scale,
                exp_scales: scaled,
                ..Moe::SOFTMAX
            };
            let n_ff = if hp.n_ff_exp > 0 {
                hp.n_ff_exp
            } else {
                hp.n_ff[il]
            };
            b.moe_layer(il, cur, n_ff, moe)?
        };
        inp = b.add(cur, Operand::Node(ffn_inp));
        inp = b.cvec(inp, il);
    }
    b.rms_output(inp, tok_embd, false)
}
