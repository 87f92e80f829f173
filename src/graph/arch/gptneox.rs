//! `gptneox` (upstream's src/models/gptneox.cpp): LayerNorms with biases, a fused QKV with
//! bias, NeoX rotary embeddings over `rope.dimension_count` values of each head, a GELU FFN
//! without gate, and either a parallel residual (`use_parallel_residual`: `x + attn(ln1 x) +
//! ffn(ln2 x)`) or the sequential one.

use super::super::builder::{Act, BuildError, Builder, Need, Outputs};
use super::super::params::ArchParams;
use super::super::{Operand, RopeMode};
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["gptneox"],
    rope: Rope::Mode(RopeMode::Neox),
    memory: Memory::Kv,
    hparams,
    graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    // upstream's get_key(LLM_KV_USE_PARALLEL_RESIDUAL) is required
    let key = k.key("use_parallel_residual");
    hp.ext.parallel_residual = k
        .model
        .meta
        .get_bool(&key)
        .ok_or_else(|| format!("key not found in model: {key}"))?;
    Ok(())
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let par_res = hp.ext.parallel_residual;
    let n_embd = hp.n_embd as i64;
    let kq_scale = 1.0 / (hp.head_v as f32).sqrt();
    let (_, mut inp) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let n_qkv = n_embd + 2 * hp.n_embd_k_gqa(il) as i64;
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let attn_norm_b = b.lw(il, "attn_norm.bias", &[n_embd])?;
        b.lw(il, "attn_qkv.weight", &[n_embd, n_qkv])?;
        b.lw(il, "attn_qkv.bias", &[n_qkv])?;
        let wo = b.lw(il, "attn_output.weight", &[n_embd, n_embd])?;
        let wo_b = b.lw(il, "attn_output.bias", &[n_embd])?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;
        let ffn_norm_b = b.lw(il, "ffn_norm.bias", &[n_embd])?;

        let cur = b.layer_norm(inp, Some(attn_norm), Some(attn_norm_b), hp.eps_norm);
        let (q, k, v) = b.qkv(il, cur)?;
        let (q, k) = b.rope_qk(q, k, None, false);
        let mut attn_out = b.attn(il, q, k, v, wo, Some(wo_b), kq_scale);
        if il == hp.n_layer - 1 {
            attn_out = b.get_rows_out(attn_out);
            inp = b.get_rows_out(inp);
        }
        if par_res {
            let cur = b.layer_norm(inp, Some(ffn_norm), Some(ffn_norm_b), hp.eps_norm);
            let cur = b.ffn_seq(il, cur, Act::Gelu, Need::Required, false)?;
            let cur = b.add(cur, Operand::Node(inp));
            inp = b.add(cur, Operand::Node(attn_out));
        } else {
            let ffn_inp = b.add(attn_out, Operand::Node(inp));
            let cur = b.layer_norm(ffn_inp, Some(ffn_norm), Some(ffn_norm_b), hp.eps_norm);
            let cur = b.ffn_seq(il, cur, Act::Gelu, Need::Required, false)?;
            inp = b.add(cur, Operand::Node(ffn_inp));
        }
        inp = b.cvec(inp, il);
    }
    let norm = b.weight("output_norm.weight", &[n_embd])?;
    let norm_b = b.weight("output_norm.bias", &[n_embd])?;
    let output = b.weight("output.weight", &[n_embd, hp.n_vocab as i64])?;
    let embd = b.layer_norm(inp, Some(norm), Some(norm_b), hp.eps_norm);
    let logits = b.mul_mat(output, embd);
    Ok(Outputs { logits, embd })
}
