//! `paddleocr` (upstream's src/models/paddleocr.cpp, ernie4_5's loader), text path: qwen2-vl's
//! block with optional q/k/v and output biases, a dense SwiGLU FFN without scales. Its
//! M-RoPE rotates text tokens (equal t/h/w positions) as NEOX, which the engine runs;
//! sections that would reach the 4th position are refused.

use super::super::blocks::{PreNormAttn, QkNorm};
use super::super::builder::{BuildError, Builder, Ffn, Outputs};
use super::super::params::ArchParams;
use super::def::{check_mrope_text, ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["paddleocr"],
    rope: Rope::Multi(8),
    memory: Memory::Kv,
    hparams,
    graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    if hp.head_k != hp.head_v || hp.n_rot != hp.head_k {
        return Err(format!(
            "n_rot {} and head sizes {}/{} must agree",
            hp.n_rot, hp.head_k, hp.head_v
        ));
    }
    check_mrope_text(k, hp, 8)
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let n_embd = hp.n_embd as i64;
    let attn = PreNormAttn {
        rope_freqs: None,
        kq_scale: 1.0 / (hp.head_k as f32).sqrt(),
        qk_norm: QkNorm::None,
        out_bias: true,
    };
    let plain = Ffn {
        scaled: false,
        ..Ffn::SWIGLU
    };
    let (tok_embd, mut inp) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;
        let ffn_inp = b.pre_norm_attn(il, inp, attn)?;
        let x = b.rms_norm(ffn_inp, Some(ffn_norm), hp.eps_rms);
        let cur = b.ffn_layer(il, x, plain)?;
        inp = b.layer_out(il, cur, ffn_inp);
    }
    b.rms_output(inp, tok_embd, false)
}
