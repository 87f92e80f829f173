//! `gemma2` (upstream's src/models/gemma2.cpp): gemma with sliding-window attention on
//! every other layer, soft-capped attention scores and final logits, post-attention and
//! post-FFN norms, and Q scaled by 1/sqrt(head size) (27B: 1/sqrt(n_embd / n_head)).

use super::super::builder::{BuildError, Builder, Ffn, Outputs};
use super::super::params::ArchParams;
use super::super::{GluKind, Operand, RopeMode};
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["gemma2"],
    rope: Rope::Mode(RopeMode::Neox),
    memory: Memory::Kv,
    hparams,
    graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    // upstream: window 4096 unless the file says otherwise, every other layer
    hp.n_swa = k.u32("attention.sliding_window", 4096);
    hp.swa_layers = k.swa_layers(hp.n_layer, 2)?;
    hp.rope_freq_base_swa = k.f32("rope.freq_base_swa", hp.rope_freq_base);
    hp.rope_freq_scale_swa = hp.rope_freq_scale;
    hp.attn_logit_softcap = k.f32("attn_logit_softcapping", 50.0);
    hp.final_logit_softcap = k.f32("final_logit_softcapping", 30.0);
    hp.attention_scale = if hp.n_layer == 46 {
        1.0 / ((hp.n_embd / hp.n_head[0]) as f32).sqrt()
    } else {
        1.0 / (hp.head_k as f32).sqrt()
    };
    Ok(())
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let n_embd = hp.n_embd as i64;
    let (tok_embd, inp) = b.inp_embd()?;
    let mut inp = b.scale(inp, (hp.n_embd as f32).sqrt());
    for il in 0..hp.n_layer {
        let swa = hp.swa_layers[il];
        let nq = (hp.head_k * hp.n_head[il]) as i64;
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let wo = b.lw(il, "attn_output.weight", &[nq, n_embd])?;
        let post_attn = b.lw(il, "post_attention_norm.weight", &[n_embd])?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;
        let post_ffw = b.lw(il, "post_ffw_norm.weight", &[n_embd])?;

        let cur = b.rms_norm(inp, Some(attn_norm), hp.eps_rms);
        let (q, k, v) = b.qkv(il, cur)?;
        let (q, k) = b.rope_qk(q, k, None, swa);
        let q = b.scale(q, hp.attention_scale);
        let mut cur = b.attn(il, q, k, v, wo, None, 1.0);
        if il == hp.n_layer - 1 {
            cur = b.get_rows_out(cur);
            inp = b.get_rows_out(inp);
        }
        let cur = b.rms_norm(cur, Some(post_attn), hp.eps_rms);
        let sa_out = b.add(cur, Operand::Node(inp));
        let cur = b.rms_norm(sa_out, Some(ffn_norm), hp.eps_rms);
        let ffn = Ffn {
            act: GluKind::Geglu,
            bias: false,
            scaled: false,
        };
        let cur = b.ffn_layer(il, cur, ffn)?;
        let cur = b.rms_norm(cur, Some(post_ffw), hp.eps_rms);
        inp = b.add(cur, Operand::Node(sa_out));
        inp = b.cvec(inp, il);
    }
    let norm = b.weight("output_norm.weight", &[n_embd])?;
    let embd = b.rms_norm(inp, Some(norm), hp.eps_rms);
    let mut logits = b.mul_mat(tok_embd, embd);
    let c = hp.final_logit_softcap;
    logits = b.scale(logits, 1.0 / c);
    logits = b.tanh(logits);
    logits = b.scale(logits, c);
    Ok(Outputs { logits, embd })
}
