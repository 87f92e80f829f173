//! `exaone4` (upstream's src/models/exaone4.cpp): no pre-norms; per-head RMS norms of Q and
//! K, post-attention and post-FFN norms, NeoX rotary embeddings (with `rope_freqs`). The
//! 32B (64 layers) slides a 4096-token window on 3 of every 4 layers and rotates only
//! those; the other sizes use full attention and rotate every layer.

use super::super::builder::{BuildError, Builder, Ffn, Outputs};
use super::super::params::ArchParams;
use super::super::{Operand, RopeMode};
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["exaone4"],
    rope: Rope::Mode(RopeMode::Neox),
    memory: Memory::Kv,
    hparams,
    graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    if hp.n_layer == 64 {
        hp.n_swa = k.u32("attention.sliding_window", 4096);
        hp.swa_layers = k.swa_layers(hp.n_layer, 4)?;
        hp.rope_freq_base_swa = k.f32("rope.freq_base_swa", hp.rope_freq_base);
        hp.rope_freq_scale_swa = hp.rope_freq_scale;
    }
    Ok(())
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let n_embd = hp.n_embd as i64;
    let kq_scale = 1.0 / (hp.head_k as f32).sqrt();
    let rope_freqs = b.weight_opt("rope_freqs.weight", &[hp.n_rot as i64 / 2])?;
    let (tok_embd, mut inp) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let use_rope = hp.n_swa == 0 || hp.swa_layers[il];
        let wo = b.lw(il, "attn_output.weight", &[n_embd, n_embd])?;
        let post_attn = b.lw(il, "post_attention_norm.weight", &[n_embd])?;
        let post_ffw = b.lw(il, "post_ffw_norm.weight", &[n_embd])?;

        let (q, k, v) = b.qkv(il, inp)?;
        let (mut q, mut k) = b.qk_norm(il, q, k)?;
        if use_rope {
            (q, k) = b.rope_qk(q, k, rope_freqs, hp.swa_layers[il]);
        }
        let mut cur = b.attn(il, q, k, v, wo, None, kq_scale);
        let mut res = inp;
        if il == hp.n_layer - 1 {
            cur = b.get_rows_out(cur);
            res = b.get_rows_out(res);
        }
        let cur = b.rms_norm(cur, Some(post_attn), hp.eps_rms);
        let ffn_inp = b.add(cur, Operand::Node(res));
        let ffn = Ffn {
            scaled: false,
            ..Ffn::SWIGLU
        };
        let cur = b.ffn_layer(il, ffn_inp, ffn)?;
        let cur = b.rms_norm(cur, Some(post_ffw), hp.eps_rms);
        inp = b.layer_out(il, cur, ffn_inp);
    }
    b.rms_output(inp, tok_embd, false)
}
