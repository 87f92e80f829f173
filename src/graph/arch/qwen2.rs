//! `qwen2` (upstream's src/models/qwen2.cpp): llama's structure with NeoX rotary
//! embeddings, q/k/v biases, an FFN without biases or per-tensor scales, and `output.bias`.

use super::super::builder::{BuildError, Builder, Ffn, Outputs};
use super::super::{RopeMode, WeightId};
use super::def::{no_hparams, ArchDef, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["qwen2"],
    rope: Rope::Mode(RopeMode::Neox),
    memory: Memory::Kv,
    hparams: no_hparams,
    graph,
};

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let kq_scale = b.kq_scale();
    graph_with(
        b,
        Qwen2Layers {
            kq_scale,
            rope_freqs: None,
            qk_norm_after_rope: false,
            output_bias: true,
        },
    )
}

/// What the qwen2-style architectures change in qwen2's graph.
pub struct Qwen2Layers {
    pub kq_scale: f32,
    /// llama-3 frequency factors of the rotary embedding (`rope_freqs.weight`).
    pub rope_freqs: Option<WeightId>,
    /// Per-head RMS norms of Q and K after the rotation (hunyuan-dense, maincoder).
    pub qk_norm_after_rope: bool,
    /// Add `output.bias` to the logits when the file has it.
    pub output_bias: bool,
}

/// The graph of qwen2 and of the architectures built like it: qwen2vl's text path,
/// hunyuan-dense, maincoder.
pub fn graph_with(b: &mut Builder, l: Qwen2Layers) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let n_embd = hp.n_embd as i64;
    let (tok_embd, mut inp) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let nq = (hp.head_k * hp.n_head[il]) as i64;
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let wo = b.lw(il, "attn_output.weight", &[nq, n_embd])?;
        let wo_b = b.lw_opt(il, "attn_output.bias", &[n_embd])?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;

        let cur = b.rms_norm(inp, Some(attn_norm), hp.eps_rms);
        let (q, k, v) = b.qkv(il, cur)?;
        let (q, k) = b.rope_qk(q, k, l.rope_freqs, false);
        let (q, k) = if l.qk_norm_after_rope {
            b.qk_norm(il, q, k)?
        } else {
            (q, k)
        };
        let cur = b.attn(il, q, k, v, wo, wo_b, l.kq_scale);
        let ffn_inp = b.residual(il, cur, inp);
        let cur = b.rms_norm(ffn_inp, Some(ffn_norm), hp.eps_rms);
        let ffn = Ffn {
            scaled: false,
            ..Ffn::SWIGLU
        };
        let cur = b.ffn_layer(il, cur, ffn)?;
        inp = b.layer_out(il, cur, ffn_inp);
    }
    b.rms_output(inp, tok_embd, l.output_bias)
}
