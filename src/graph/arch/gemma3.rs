//! `gemma3` (upstream's src/models/gemma3.cpp): embeddings scaled by sqrt(n_embd), per-head
//! q/k RMS norms, Q scaled by the attention scale (attention itself unscaled), sliding-window
//! attention on 5 of every 6 layers (their own rope base), post-attention and post-FFN norms,
//! GELU-gated FFN, optional final logit soft-capping.

use super::super::builder::{BuildError, Builder, Outputs};
use super::super::params::ArchParams;
use super::super::{GluKind, Operand, RopeMode};
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["gemma3"],
    rope: Rope::Mode(RopeMode::Neox),
    memory: Memory::Kv,
    hparams,
    graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    hp.n_swa = k.model.hparams.n_swa;
    if hp.n_swa > 0 {
        hp.swa_layers = k.swa_layers(hp.n_layer, 6)?;
    }
    hp.final_logit_softcap = k.f32("final_logit_softcapping", 0.0);
    Ok(())
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let n_embd = hp.n_embd as i64;
    let n_vocab = hp.n_vocab as i64;
    let head = hp.head_k;
    let tok_embd = b.weight("token_embd.weight", &[n_embd, n_vocab])?;
    let output_norm = b.weight("output_norm.weight", &[n_embd])?;
    let output = b
        .weight_opt("output.weight", &[n_embd, n_vocab])?
        .unwrap_or(tok_embd);
    // upstream: the 27B (62 layers) scales by 1/sqrt(n_embd / n_head), the others by
    // 1/sqrt(head size)
    let attn_scale = if hp.attention_scale != 0.0 {
        hp.attention_scale
    } else if hp.n_layer == 62 {
        1.0 / ((hp.n_embd / hp.n_head[0]) as f32).sqrt()
    } else {
        1.0 / (head as f32).sqrt()
    };
    let inp = b.get_rows_tokens(tok_embd);
    // raw input embeddings (e.g. encoded images) are not scaled, as upstream
    let mut inp = if b.embd_input {
        inp
    } else {
        b.scale(inp, (hp.n_embd as f32).sqrt())
    };
    for il in 0..hp.n_layer {
        let swa = hp.swa_layers[il];
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let qn = b.lw(il, "attn_q_norm.weight", &[head as i64])?;
        let kn = b.lw(il, "attn_k_norm.weight", &[head as i64])?;
        let nq = (head * hp.n_head[il]) as i64;
        let wo = b.lw(il, "attn_output.weight", &[nq, n_embd])?;
        let post_attn = b.lw(il, "post_attention_norm.weight", &[n_embd])?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;
        let n_ff = hp.n_ff[il] as i64;
        let up = b.lw(il, "ffn_up.weight", &[n_embd, n_ff])?;
        let gate = b.lw(il, "ffn_gate.weight", &[n_embd, n_ff])?;
        let down = b.lw(il, "ffn_down.weight", &[n_ff, n_embd])?;
        let post_ffw = b.lw(il, "post_ffw_norm.weight", &[n_embd])?;

        let cur = b.rms_norm(inp, Some(attn_norm), hp.eps_rms);
        let (q, k, v) = b.qkv(il, cur)?;
        let q = b.head_rms_norm(q, head, qn, hp.eps_rms);
        let q = b.rope(q, head, RopeMode::Neox, None, swa);
        let k = b.head_rms_norm(k, head, kn, hp.eps_rms);
        let k = b.rope(k, head, RopeMode::Neox, None, swa);
        let q = b.scale(q, attn_scale);
        let mut cur = b.attn(il, q, k, v, wo, None, 1.0);
        if il == hp.n_layer - 1 {
            cur = b.get_rows_out(cur);
            inp = b.get_rows_out(inp);
        }
        let cur = b.rms_norm(cur, Some(post_attn), hp.eps_rms);
        let sa_out = b.add(cur, Operand::Node(inp));
        let cur = b.rms_norm(sa_out, Some(ffn_norm), hp.eps_rms);
        let cur = b.ffn(cur, up, None, gate, None, down, None, GluKind::Geglu, false);
        let cur = b.rms_norm(cur, Some(post_ffw), hp.eps_rms);
        inp = b.add(cur, Operand::Node(sa_out));
        inp = b.cvec(inp, il);
    }
    let embd = b.rms_norm(inp, Some(output_norm), hp.eps_rms);
    let mut logits = b.mul_mat(output, embd);
    if hp.final_logit_softcap != 0.0 {
        let c = hp.final_logit_softcap;
        logits = b.scale(logits, 1.0 / c);
        logits = b.tanh(logits);
        logits = b.scale(logits, c);
    }
    Ok(Outputs { logits, embd })
}
