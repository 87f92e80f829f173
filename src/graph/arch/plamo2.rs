//! `plamo2` (upstream's src/models/plamo2.cpp, PLaMo-2): a hybrid of attention layers and
//! Mamba-2-style mixers (a layer without KV heads is recurrent), each between an RMS
//! pre-norm and an RMS post-norm (`post_attention_norm`), then a fused SwiGLU FFN between
//! `ffn_norm` and `post_ffw_norm`. Attention: a fused QKV, per-head RMS norms of Q and K
//! with one weight row per head, NeoX rotary embeddings, scale 1/√head_v. The mixer: the
//! input projection gives per head z then x (interleaved), SSM_CONV (no bias) + SiLU on x,
//! `ssm_x` gives B, C and dt (in that order), each RMS-normed with its own weight, `ssm_dt`
//! (+ bias) gives one dt per head, SSM_SCAN with one B/C group, + x·D, SiLU(z) gate, output
//! projection. Memory: KV rows for the attention layers, conv and SSM states for the rest.

use super::super::builder::{BuildError, Builder, Outputs};
use super::super::params::ArchParams;
use super::super::{GluKind, Op, Operand, RopeMode, ScanShape};
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["plamo2"],
    rope: Rope::Mode(RopeMode::Neox),
    memory: Memory::Hybrid,
    hparams,
    graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    hp.eps_rms = k
        .f32_opt("attention.layer_norm_rms_epsilon")
        .ok_or_else(|| {
            format!(
                "key not found in model: {}",
                k.key("attention.layer_norm_rms_epsilon")
            )
        })?;
    let mut ssm = k.ssm()?;
    ssm.n_group = k.u32_required("ssm.group_count")? as usize;
    if ssm.n_group != 0 {
        // upstream asserts n_group == 0 when it builds the graph
        return Err(format!("ssm.group_count {} must be 0", ssm.n_group));
    }
    hp.ext.ssm = ssm;
    hp.ext.recurrent_layers = (0..hp.n_layer).map(|il| hp.n_head_kv[il] == 0).collect();
    Ok(())
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let n_embd = hp.n_embd as i64;
    let (tok_embd, mut inp) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let post_attn = b.lw(il, "post_attention_norm", &[n_embd])?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;
        let post_ffw = b.lw(il, "post_ffw_norm", &[n_embd])?;
        let n_ff = hp.n_ff[il];
        let up = b.lw(il, "ffn_up.weight", &[n_embd, 2 * n_ff as i64])?;
        let down = b.lw(il, "ffn_down.weight", &[n_ff as i64, n_embd])?;

        let cur = b.rms_norm(inp, Some(attn_norm), hp.eps_rms);
        let mut cur = if hp.is_recurrent(il) {
            mamba_layer(b, il, cur)?
        } else {
            attn_layer(b, il, cur)?
        };
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
    }
    b.rms_output(inp, tok_embd, false)
}

/// `build_plamo2_attn_layer`.
fn attn_layer(b: &mut Builder, il: usize, cur: usize) -> Result<usize, BuildError> {
    let hp = b.hp;
    let n_embd = hp.n_embd as i64;
    let (head_k, head_v) = (hp.head_k, hp.head_v);
    let (nh, nkv) = (hp.n_head[il], hp.n_head_kv[il]);
    let n_qkv = (nh * head_k + nkv * head_k + nkv * head_v) as i64;
    let wqkv = b.lw(il, "attn_qkv.weight", &[n_embd, n_qkv])?;
    let q_norm = b.lw(il, "attn_q_norm.weight", &[head_k as i64, nh as i64])?;
    let k_norm = b.lw(il, "attn_k_norm.weight", &[head_k as i64, nkv as i64])?;
    let wo = b.lw(il, "attn_output.weight", &[(nh * head_v) as i64, n_embd])?;

    let qkv = b.mul_mat_raw(wqkv, cur);
    let q = b.view(qkv, 0, nh * head_k);
    let k = b.view(qkv, nh * head_k, nkv * head_k);
    let v = b.view(qkv, (nh + nkv) * head_k, nkv * head_v);
    // the norms' weights hold one row per head (a weight operand broadcasts by its length)
    let q = b.head_rms_norm(q, head_k, q_norm, hp.eps_rms);
    let k = b.head_rms_norm(k, head_k, k_norm, hp.eps_rms);
    let (q, k) = b.rope_qk(q, k, None, false);
    let kq_scale = 1.0 / (head_v as f32).sqrt();
    Ok(b.attn(il, q, k, v, wo, None, kq_scale))
}

/// `build_plamo2_mamba_layer`.
fn mamba_layer(b: &mut Builder, il: usize, cur: usize) -> Result<usize, BuildError> {
    let hp = b.hp;
    let s = hp.ext.ssm;
    let (d_inner, d_state, n_head) = (s.d_inner, s.d_state, s.dt_rank);
    if n_head == 0 || d_inner % n_head != 0 {
        return Err(BuildError::Invalid(format!(
            "ssm.inner_size {d_inner} must divide into ssm.time_step_rank {n_head} heads"
        )));
    }
    let head_dim = d_inner / n_head;
    let dt_dim = (hp.n_embd / 16).max(64);
    let n_embd = hp.n_embd as i64;
    let ssm_in = b.lw(il, "ssm_in.weight", &[n_embd, 2 * d_inner as i64])?;
    let conv_w = b.lw(il, "ssm_conv1d.weight", &[s.d_conv as i64, d_inner as i64])?;
    let ssm_x = b.lw(
        il,
        "ssm_x.weight",
        &[d_inner as i64, (dt_dim + 2 * d_state) as i64],
    )?;
    let ssm_dt = b.lw(il, "ssm_dt.weight", &[dt_dim as i64, n_head as i64])?;
    let dt_b = b.lw(il, "ssm_dt.bias", &[n_head as i64])?;
    let a = b.lw(il, "ssm_a", &[n_head as i64])?;
    let d = b.lw(il, "ssm_d", &[n_head as i64])?;
    let ssm_out = b.lw(il, "ssm_out.weight", &[d_inner as i64, n_embd])?;
    let dt_norm = b.lw(il, "ssm_dt_norm", &[dt_dim as i64])?;
    let b_norm = b.lw(il, "ssm_b_norm", &[d_state as i64])?;
    let c_norm = b.lw(il, "ssm_c_norm", &[d_state as i64])?;

    // per head: head_dim values of z, then head_dim of x
    let zx = b.mul_mat_raw(ssm_in, cur);
    let z = b.view_heads(zx, 2 * head_dim, 0, head_dim);
    let x = b.view_heads(zx, 2 * head_dim, head_dim, head_dim);
    let x = b.ssm_conv(il, x, conv_w, s.d_conv);
    let x = b.silu(x);

    let bcdt = b.mul_mat_raw(ssm_x, x);
    let bb = b.view(bcdt, 0, d_state);
    let c = b.view(bcdt, d_state, d_state);
    let dt = b.view(bcdt, 2 * d_state, dt_dim);
    let bb = b.rms_norm(bb, Some(b_norm), hp.eps_rms);
    let c = b.rms_norm(c, Some(c_norm), hp.eps_rms);
    let dt = b.rms_norm(dt, Some(dt_norm), hp.eps_rms);
    let dt = b.mul_mat_raw(ssm_dt, dt);
    let dt = b.add(dt, Operand::Weight(dt_b));
    let shape = ScanShape {
        d_state,
        head_dim,
        n_head,
        n_group: 1,
    };
    let y = b.ssm_scan(il, x, dt, bb, c, a, shape);
    let (n0, n1) = (b.ne0(x), b.ne1(x));
    let xd = b.push(
        "mul",
        Op::MulRep {
            a: x,
            b: d,
            rep: head_dim,
        },
        n0,
        n1,
    );
    let y = b.add(y, Operand::Node(xd));
    let y = b.glu(z, y, GluKind::Swiglu);
    Ok(b.mul_mat_raw(ssm_out, y))
}
