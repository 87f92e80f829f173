//! `glm4` (upstream's src/models/glm4.cpp): RMS pre-norms and post-attention/post-FFN
//! norms, a fused `ffn_up` of 2·n_ff rows split into gate and up halves (SWIGLU),
//! rotary embeddings: NORM, or, when the file gives M-RoPE sections (GLM-4V), M-RoPE,
//! whose text path (equal t/h/w positions) is NEOX. Files with MTP layers
//! (`nextn_predict_layers`) keep them unused, as upstream's decode does.

use super::super::builder::{BuildError, Builder, Outputs};
use super::super::params::ArchParams;
use super::super::{GluKind, Op, Operand, RopeMode};
use super::def::{check_mrope_text, ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["glm4"],
    rope: Rope::Mode(RopeMode::Norm),
    memory: Memory::Kv,
    hparams,
    graph,
};

fn uses_mrope(sections: [i32; 4]) -> bool {
    sections[0] > 0 && sections[1] > 0
}

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    if uses_mrope(k.model.hparams.rope_sections) {
        check_mrope_text(k, hp, 8)?;
    }
    Ok(())
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let n_embd = hp.n_embd as i64;
    let head = hp.head_k;
    let mode = if uses_mrope(b.model.hparams.rope_sections) {
        RopeMode::Neox
    } else {
        RopeMode::Norm
    };
    let kq_scale = 1.0 / (hp.head_v as f32).sqrt();
    let (tok_embd, mut inp) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let nq = (head * hp.n_head[il]) as i64;
        let n_ff = hp.n_ff[il] as i64;
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let wo = b.lw(il, "attn_output.weight", &[nq, n_embd])?;
        let post_attn = b.lw(il, "post_attention_norm.weight", &[n_embd])?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;
        let up = b.lw(il, "ffn_up.weight", &[n_embd, 2 * n_ff])?;
        let down = b.lw(il, "ffn_down.weight", &[n_ff, n_embd])?;
        let post_ffw = b.lw(il, "post_ffw_norm.weight", &[n_embd])?;

        let cur = b.rms_norm(inp, Some(attn_norm), hp.eps_rms);
        let (q, k, v) = b.qkv(il, cur)?;
        let q = b.rope(q, head, mode, None, false);
        let k = b.rope(k, head, mode, None, false);
        let mut cur = b.attn(il, q, k, v, wo, None, kq_scale);
        let mut res = inp;
        if il == hp.n_layer - 1 {
            cur = b.get_rows_out(cur);
            res = b.get_rows_out(res);
        }
        let cur = b.rms_norm(cur, Some(post_attn), hp.eps_rms);
        let ffn_inp = b.add(cur, Operand::Node(res));
        let x = b.rms_norm(ffn_inp, Some(ffn_norm), hp.eps_rms);
        // ggml_swiglu of the fused projection: silu(first half) * second half; upstream's
        // build_ffn gets no per-tensor scales here
        let gu = b.mul_mat_raw(up, x);
        let gate = b.view(gu, 0, n_ff as usize);
        let upv = b.view(gu, n_ff as usize, n_ff as usize);
        let t = b.ne1(gate);
        let h = b.push(
            "glu",
            Op::Glu {
                gate,
                up: upv,
                kind: GluKind::Swiglu,
            },
            n_ff as usize,
            t,
        );
        let cur = b.mul_mat_raw(down, h);
        let cur = b.rms_norm(cur, Some(post_ffw), hp.eps_rms);
        inp = b.layer_out(il, cur, ffn_inp);
    }
    b.rms_output(inp, tok_embd, false)
}
