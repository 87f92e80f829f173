//! `dbrx` (upstream's src/models/dbrx.cpp): LayerNorms without bias, a fused QKV clamped to
//! `attention.clamp_kqv`, NeoX rotary embeddings, a LayerNorm (`attn_output_norm`) before
//! softmax-routed experts of `feed_forward_length` rows with normalised weights.

use super::super::builder::{BuildError, Builder, Moe, Outputs};
use super::super::params::ArchParams;
use super::super::RopeMode;
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["dbrx"],
    rope: Rope::Mode(RopeMode::Neox),
    memory: Memory::Kv,
    hparams,
    graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    if hp.n_expert == 0 {
        return Err("DBRX model cannot have zero experts".into());
    }
    let clamp = k
        .f32_opt("attention.clamp_kqv")
        .ok_or_else(|| format!("key not found in model: {}", k.key("attention.clamp_kqv")))?;
    hp.ext.clamp_kqv = clamp;
    Ok(())
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let n_embd = hp.n_embd as i64;
    let head = hp.head_k;
    if hp.head_v != head || hp.n_rot != head {
        return Err(BuildError::Invalid(format!(
            "n_rot {} and head sizes {}/{} must agree",
            hp.n_rot, hp.head_k, hp.head_v
        )));
    }
    let kq_scale = 1.0 / (head as f32).sqrt();
    let moe = Moe {
        scale_w: hp.expert_weights_scale,
        exp_scales: false,
        ..Moe::SOFTMAX
    };
    let (_, mut inp) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let nq = (head * hp.n_head[il]) as i64;
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let wqkv = b.lw(
            il,
            "attn_qkv.weight",
            &[
                n_embd,
                nq + (hp.n_embd_k_gqa(il) + hp.n_embd_v_gqa(il)) as i64,
            ],
        )?;
        let _ = wqkv; // the shape check; `qkv` uses it
        let wo = b.lw(il, "attn_output.weight", &[nq, n_embd])?;
        let out_norm = b.lw(il, "attn_output_norm.weight", &[n_embd])?;

        let cur = b.layer_norm(inp, Some(attn_norm), None, hp.eps_norm);
        let (q, k, v) = b.qkv(il, cur)?;
        let (q, k) = b.rope_qk(q, k, None, false);
        let cur = b.attn(il, q, k, v, wo, None, kq_scale);
        let ffn_inp = b.residual(il, cur, inp);
        let x = b.layer_norm(ffn_inp, Some(out_norm), None, hp.eps_norm);
        let cur = b.moe_layer(il, x, hp.n_ff[il], moe)?;
        inp = b.layer_out(il, cur, ffn_inp);
    }
    let norm = b.weight("output_norm.weight", &[n_embd])?;
    let output = b.weight("output.weight", &[n_embd, hp.n_vocab as i64])?;
    let embd = b.layer_norm(inp, Some(norm), None, hp.eps_norm);
    let logits = b.linear(output, None, embd);
    Ok(Outputs { logits, embd })
}
