//! `minicpm3` (upstream's src/models/minicpm3.cpp): multi-head latent projections computed
//! out into an ordinary KV cache — Q through a low-rank pair (`attn_q_a`, its RMS norm,
//! `attn_q_b`), K and V decompressed from a normed latent (`attn_kv_a_mqa`, `attn_kv_b`) —;
//! each head's last `n_rot` values of Q rotate (NeoX; `ggml_rope_set_offset`), K's rotary
//! part is one rotated head shared by every head; embeddings scaled by 12, each block's
//! output by 1.4/sqrt(n_layer), the logits' input by 256/n_embd; no projection scales on
//! the latent products (plain MUL_MAT upstream).

use super::super::builder::{BuildError, Builder, Ffn, Outputs};
use super::super::params::ArchParams;
use super::super::{Op, Operand, RopeMode};
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["minicpm3"],
    rope: Rope::Mode(RopeMode::Neox),
    memory: Memory::Kv,
    hparams,
    graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    hp.ext.n_lora_q = k.u32_required("attention.q_lora_rank")? as usize;
    hp.ext.n_lora_kv = k.u32_required("attention.kv_lora_rank")? as usize;
    Ok(())
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let n_ctx_seq = b.n_ctx_seq;
    let hp = b.hp;
    let n_embd = hp.n_embd as i64;
    let (head_k, head_v, rot) = (hp.head_k, hp.head_v, hp.n_rot);
    if rot > head_k {
        return Err(BuildError::Invalid(format!(
            "n_rot {rot} > head size {head_k}"
        )));
    }
    let nope = head_k - rot;
    let (q_rank, kv_rank) = (hp.ext.n_lora_q as i64, hp.ext.n_lora_kv);
    let kq_scale = 1.0 / (head_k as f32).sqrt();
    let scale_res = 1.4 / (hp.n_layer as f32).sqrt();
    let half_rot = rot as i64 / 2;
    let (tok_embd, inp) = b.inp_embd()?;
    let mut inp = b.scale(inp, 12.0);
    for il in 0..hp.n_layer {
        let nh = hp.n_head[il];
        if hp.n_head_kv[il] != nh {
            return Err(BuildError::Invalid(
                "minicpm3 needs as many K/V heads as Q heads".into(),
            ));
        }
        // upstream's get_rope_factors: long past the original context, else short
        let factors = if n_ctx_seq > hp.n_ctx_orig_yarn {
            b.weight_opt("rope_factors_long.weight", &[half_rot])?
        } else {
            b.weight_opt("rope_factors_short.weight", &[half_rot])?
        };
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let q_a_norm = b.lw(il, "attn_q_a_norm.weight", &[q_rank])?;
        let kv_a_norm = b.lw(il, "attn_kv_a_norm.weight", &[kv_rank as i64])?;
        let wq_a = b.lw(il, "attn_q_a.weight", &[n_embd, q_rank])?;
        let wq_b = b.lw(il, "attn_q_b.weight", &[q_rank, (nh * head_k) as i64])?;
        let wkv_a = b.lw(
            il,
            "attn_kv_a_mqa.weight",
            &[n_embd, (kv_rank + rot) as i64],
        )?;
        let wkv_b = b.lw(
            il,
            "attn_kv_b.weight",
            &[kv_rank as i64, (nh * (nope + head_v)) as i64],
        )?;
        let wo = b.lw(il, "attn_output.weight", &[(nh * head_v) as i64, n_embd])?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;

        let cur = b.rms_norm(inp, Some(attn_norm), hp.eps_rms);
        let q = b.mul_mat_raw(wq_a, cur);
        let q = b.rms_norm(q, Some(q_a_norm), hp.eps_rms);
        let q = b.mul_mat_raw(wq_b, q);
        let kv_pe = b.mul_mat_raw(wkv_a, cur);
        let kv_c = b.view(kv_pe, 0, kv_rank);
        let k_pe = b.view(kv_pe, kv_rank, rot);
        let kv_c = b.rms_norm(kv_c, Some(kv_a_norm), hp.eps_rms);
        let kv = b.mul_mat_raw(wkv_b, kv_c);
        let v = if nope == 0 {
            kv
        } else {
            b.view_heads(kv, nope + head_v, nope, head_v)
        };
        // Q: the first `nope` values of each head kept, the last `rot` rotated
        let k_pe = b.rope(k_pe, rot, RopeMode::Neox, factors, false);
        let t = b.ne1(k_pe);
        let k_pe = b.push("repeat", Op::Repeat { src: k_pe, n: nh }, rot * nh, t);
        let (q, k) = if nope == 0 {
            (b.rope(q, rot, RopeMode::Neox, factors, false), k_pe)
        } else {
            let q_nope = b.view_heads(q, head_k, 0, nope);
            let q_pe = b.view_heads(q, head_k, nope, rot);
            let q_pe = b.rope(q_pe, rot, RopeMode::Neox, factors, false);
            let k_nope = b.view_heads(kv, nope + head_v, 0, nope);
            (
                b.concat_heads(q_nope, q_pe, nh),
                b.concat_heads(k_nope, k_pe, nh),
            )
        };
        let mut cur = b.attn(il, q, k, v, wo, None, kq_scale);
        if il == hp.n_layer - 1 {
            cur = b.get_rows_out(cur);
            inp = b.get_rows_out(inp);
        }
        let cur = b.scale(cur, scale_res);
        let ffn_inp = b.add(cur, Operand::Node(inp));
        let cur = b.rms_norm(ffn_inp, Some(ffn_norm), hp.eps_rms);
        let ffn = Ffn {
            scaled: false,
            ..Ffn::SWIGLU
        };
        let cur = b.ffn_layer(il, cur, ffn)?;
        let cur = b.scale(cur, scale_res);
        inp = b.layer_out(il, cur, ffn_inp);
    }
    let norm = b.weight("output_norm.weight", &[n_embd])?;
    let output = b.output_weight(tok_embd)?;
    let embd = b.rms_norm(inp, Some(norm), hp.eps_rms);
    let scaled = b.scale(embd, 256.0 / hp.n_embd as f32);
    let logits = b.mul_mat(output, scaled);
    Ok(Outputs { logits, embd })
}
