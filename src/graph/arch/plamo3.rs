//! `plamo3` (upstream's src/models/plamo3.cpp): RMS pre-norms and post-norms
//! (`post_attention_norm`, `post_ffw_norm`, tensors without a `.weight` suffix), a fused QKV
//! without bias or scale, per-head RMS norms of Q and K before NeoX rotary embeddings,
//! sliding-window layers when the file gives a window (`load_swa_pattern`, period 8;
//! their rotation uses `rope.freq_base_swa`), a fused SwiGLU FFN (`ffn_up` of 2·n_ff: the
//! SiLU of the first half times the second).

use super::super::builder::{BuildError, Builder, Outputs};
use super::super::params::ArchParams;
use super::super::{GluKind, Op, Operand, RopeMode};
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["plamo3"],
    rope: Rope::Mode(RopeMode::Neox),
    memory: Memory::Kv,
    hparams,
    graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    hp.n_swa = k.u32("attention.sliding_window", 0);
    if hp.n_swa > 0 {
        hp.swa_layers = k.swa_layers(hp.n_layer, 8)?;
        hp.rope_freq_base_swa = k.f32("rope.freq_base_swa", hp.rope_freq_base);
        // upstream's rope_freq_scale_train_swa defaults to the model's scale
        hp.rope_freq_scale_swa = hp.rope_freq_scale;
    }
    Ok(())
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let n_embd = hp.n_embd as i64;
    let (head_q, head_v) = (hp.head_k, hp.head_v);
    let (tok_embd, mut inp) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let (nh, nkv) = (hp.n_head[il], hp.n_head_kv[il]);
        let n_ff = hp.n_ff[il];
        let n_qkv = (nh * head_q + nkv * head_q + nkv * head_v) as i64;
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let wqkv = b.lw(il, "attn_qkv.weight", &[n_embd, n_qkv])?;
        let q_norm = b.lw(il, "attn_q_norm.weight", &[head_q as i64])?;
        let k_norm = b.lw(il, "attn_k_norm.weight", &[head_q as i64])?;
        let wo = b.lw(il, "attn_output.weight", &[(nh * head_v) as i64, n_embd])?;
        let post_attn = b.lw(il, "post_attention_norm", &[n_embd])?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;
        let post_ffw = b.lw(il, "post_ffw_norm", &[n_embd])?;
        let up = b.lw(il, "ffn_up.weight", &[n_embd, 2 * n_ff as i64])?;
        let down = b.lw(il, "ffn_down.weight", &[n_ff as i64, n_embd])?;

        let cur = b.rms_norm(inp, Some(attn_norm), hp.eps_rms);
        let qkv = b.mul_mat_raw(wqkv, cur);
        let q = b.view(qkv, 0, nh * head_q);
        let k = b.view(qkv, nh * head_q, nkv * head_q);
        let v = b.view(qkv, (nh + nkv) * head_q, nkv * head_v);
        let q = b.head_rms_norm(q, head_q, q_norm, hp.eps_rms);
        let k = b.head_rms_norm(k, head_q, k_norm, hp.eps_rms);
        let (q, k) = b.rope_qk(q, k, None, hp.swa_layers[il]);
        let kq_scale = 1.0 / (head_q as f32).sqrt();
        let mut cur = b.attn(il, q, k, v, wo, None, kq_scale);
        let mut res = inp;
        if il == hp.n_layer - 1 {
            cur = b.get_rows_out(cur);
            res = b.get_rows_out(res);
        }
        let cur = b.rms_norm(cur, Some(post_attn), hp.eps_rms);
        let res = b.add(cur, Operand::Node(res));
        let cur = b.rms_norm(res, Some(ffn_norm), hp.eps_rms);
        // build_ffn(up, LLM_FFN_SWIGLU, SEQ): MUL_MAT, then GLU of the halves
        let both = b.mul_mat_raw(up, cur);
        let gate = b.view(both, 0, n_ff);
        let upv = b.view(both, n_ff, n_ff);
        let t = b.ne1(both);
        let op = Op::Glu {
            gate,
            up: upv,
            kind: GluKind::Swiglu,
        };
        let h = b.push("glu", op, n_ff, t);
        let cur = b.mul_mat_raw(down, h);
        let cur = b.rms_norm(cur, Some(post_ffw), hp.eps_rms);
        inp = b.add(cur, Operand::Node(res));
        inp = b.cvec(inp, il);
    }
    b.rms_output(inp, tok_embd, false)
}
