//! `jamba` (upstream's src/models/jamba.cpp): RMS-normed layers that run either a Mamba-1
//! mixer (layers whose `head_count_kv` is 0; with the dt/B/C norms when the file has them)
//! or attention without rotary embeddings, then a SiLU-gated FFN or a softmax-routed
//! mixture of experts. Memory: KV rows for the attention layers, recurrent states for the
//! others.

use super::super::builder::{BuildError, Builder, Ffn, Moe, Outputs};
use super::super::params::ArchParams;
use super::super::Operand;
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["jamba"],
    rope: Rope::None,
    memory: Memory::Hybrid,
    hparams,
    graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    hp.ext.ssm = k.ssm()?;
    hp.ext.recurrent_layers = (0..hp.n_layer).map(|il| hp.n_head_kv[il] == 0).collect();
    Ok(())
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let n_embd = hp.n_embd as i64;
    let head = hp.head_v;
    let kq_scale = 1.0 / (head as f32).sqrt();
    let (tok_embd, mut inp) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;
        let cur = b.rms_norm(inp, Some(attn_norm), hp.eps_rms);
        let mut cur = if hp.is_recurrent(il) {
            b.mamba_layer(il, cur)?
        } else {
            let nq = (hp.head_k * hp.n_head[il]) as i64;
            let wo = b.lw(il, "attn_output.weight", &[nq, n_embd])?;
            let (q, k, v) = b.qkv(il, cur)?;
            b.attn(il, q, k, v, wo, None, kq_scale)
        };
        let mut res = inp;
        if il == hp.n_layer - 1 {
            cur = b.get_rows_out(cur);
            res = b.get_rows_out(res);
        }
        let ffn_inp = b.add(res, Operand::Node(cur));
        let x = b.rms_norm(ffn_inp, Some(ffn_norm), hp.eps_rms);
        let gate_inp = b.lw_opt(il, "ffn_gate_inp.weight", &[n_embd, hp.n_expert as i64])?;
        let cur = if gate_inp.is_none() {
            let ffn = Ffn {
                scaled: false,
                ..Ffn::SWIGLU
            };
            b.ffn_layer(il, x, ffn)?
        } else {
            let moe = Moe {
                norm_w: false,
                scale_w: hp.expert_weights_scale,
                exp_scales: false,
                ..Moe::SOFTMAX
            };
            b.moe_layer(il, x, hp.n_ff[il], moe)?
        };
        inp = b.add(ffn_inp, Operand::Node(cur));
        inp = b.cvec(inp, il);
    }
    b.rms_output(inp, tok_embd, false)
}
