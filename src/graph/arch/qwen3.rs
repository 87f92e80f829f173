//! `qwen3` (upstream's src/models/qwen3.cpp): llama's structure with NeoX rotary
//! embeddings and per-head RMS norms of Q and K before the rotation.

use super::super::blocks::{PreNormAttn, QkNorm};
use super::super::builder::{BuildError, Builder, Ffn, Moe, Outputs};
use super::super::RopeMode;
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
    let attn = PreNormAttn {
        rope_freqs: None,
        kq_scale,
        qk_norm: QkNorm::BeforeRope,
        out_bias: true,
    };
    for il in 0..hp.n_layer {
        let ffn_inp = b.pre_norm_attn(il, inp, attn)?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;
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
        inp = b.layer_out(il, cur, ffn_inp);
    }
    b.rms_output(inp, tok_embd, false)
}
