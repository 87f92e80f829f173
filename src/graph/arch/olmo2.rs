//! `olmo2` (upstream's src/models/olmo2.cpp; also OLMo 3): no pre-norms; RMS norms of the
//! whole Q and K projections (not per head), post-attention and post-FFN norms, NeoX rotary
//! embeddings, and, when the file gives a sliding window, sliding-window layers (3 of every
//! 4) whose rotation skips the rope scaling.

use super::super::builder::{BuildError, Builder, Ffn, Outputs};
use super::super::params::ArchParams;
use super::super::{Operand, RopeMode};
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["olmo2"],
    rope: Rope::Mode(RopeMode::Neox),
    memory: Memory::Kv,
    hparams,
    graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    hp.n_swa = k.u32("attention.sliding_window", 0);
    if hp.n_swa > 0 {
        hp.swa_layers = k.swa_layers(hp.n_layer, 4)?;
        hp.rope_freq_base_swa = k.f32("rope.freq_base_swa", hp.rope_freq_base);
        // upstream: the sliding-window layers rotate with freq_scale 1, ext_factor 0 and
        // attn_factor 1 (no yarn); the engine's SWA rope keeps the context's ext/attn
        // factors, so a yarn-scaled olmo3 is refused rather than rotated differently
        hp.rope_freq_scale_swa = 1.0;
        if hp.rope_scaling == super::super::params::RopeScaling::Yarn {
            return Err("yarn rope scaling with sliding-window layers is not supported yet".into());
        }
    }
    Ok(())
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let n_embd = hp.n_embd as i64;
    let kq_scale = 1.0 / (hp.head_v as f32).sqrt();
    let (_, mut inp) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let nq = (hp.head_k * hp.n_head[il]) as i64;
        let nk = hp.n_embd_k_gqa(il) as i64;
        let q_norm = b.lw(il, "attn_q_norm.weight", &[nq])?;
        let k_norm = b.lw(il, "attn_k_norm.weight", &[nk])?;
        let wo = b.lw(il, "attn_output.weight", &[nq, n_embd])?;
        let post_attn = b.lw(il, "post_attention_norm.weight", &[n_embd])?;
        let post_ffw = b.lw(il, "post_ffw_norm.weight", &[n_embd])?;

        let (q, k, v) = b.qkv(il, inp)?;
        let q = b.rms_norm(q, Some(q_norm), hp.eps_rms);
        let k = b.rms_norm(k, Some(k_norm), hp.eps_rms);
        let (q, k) = b.rope_qk(q, k, None, hp.swa_layers[il]);
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
    let norm = b.weight("output_norm.weight", &[n_embd])?;
    let output = b.weight("output.weight", &[n_embd, hp.n_vocab as i64])?;
    let embd = b.rms_norm(inp, Some(norm), hp.eps_rms);
    let logits = b.mul_mat(output, embd);
    Ok(Outputs { logits, embd })
}
