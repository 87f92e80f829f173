//! `nemotron_h` (upstream's src/models/nemotron-h.cpp): RMS-normed blocks of one kind each,
//! with a residual: a Mamba-2 mixer (KV head count and FFN size 0), attention without rotary
//! embeddings (FFN size 0), or a squared-ReLU FFN without gate. Memory: KV rows for the
//! attention blocks, recurrent states for the Mamba-2 ones. `nemotron_h_moe` runs this graph
//! too (upstream's class reuses nemotron_h's); its mixture-of-experts blocks are not run
//! yet: a file with them is refused naming the router.

use super::super::builder::{Act, BuildError, Builder, Need, Outputs};
use super::super::params::ArchParams;
use super::super::Operand;
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["nemotron_h", "nemotron_h_moe"],
    rope: Rope::None,
    memory: Memory::Hybrid,
    hparams,
    graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    hp.ext.ssm = k.ssm()?;
    hp.attention_scale = k.f32("attention.scale", 0.0);
    if let Some(eps) = k.f32_opt("attention.layer_norm_rms_epsilon") {
        hp.eps_rms = eps;
    } else {
        hp.eps_rms = k.f32("attention.layer_norm_epsilon", hp.eps_rms);
    }
    hp.ext.recurrent_layers = (0..hp.n_layer)
        .map(|il| hp.n_head_kv[il] == 0 && hp.n_ff[il] == 0)
        .collect();
    Ok(())
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let n_embd = hp.n_embd as i64;
    let kq_scale = b.kq_scale();
    let (tok_embd, mut inp) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let cur = b.rms_norm(inp, Some(attn_norm), hp.eps_rms);
        let mut cur = if hp.is_recurrent(il) {
            b.mamba2_layer(il, cur)?
        } else if hp.n_ff[il] == 0 {
            let nq = (hp.head_k * hp.n_head[il]) as i64;
            let wo = b.lw(il, "attn_output.weight", &[nq, n_embd])?;
            let wo_b = b.lw_opt(il, "attn_output.bias", &[n_embd])?;
            let (q, k, v) = b.qkv(il, cur)?;
            b.attn(il, q, k, v, wo, wo_b, kq_scale)
        } else {
            let name = format!("blk.{il}.ffn_gate_inp.weight");
            // a recording build has no file: the expert count decides, as upstream's loader
            let moe = if b.record {
                hp.n_expert > 0
            } else {
                b.has(&name)
            };
            if moe {
                return Err(BuildError::Invalid(format!(
                    "{name}: nemotron_h's mixture-of-experts blocks are not supported by llama-hotswap yet"
                )));
            }
            let ffn = b.ffn_seq(il, cur, Act::ReluSqr, Need::IfPresent, true)?;
            // upstream's build_ffn_layer adds the control vector to the FFN's output, before
            // the residual; its attention and Mamba layers add none
            b.cvec(ffn, il)
        };
        let mut res = inp;
        if il == hp.n_layer - 1 {
            cur = b.get_rows_out(cur);
            res = b.get_rows_out(res);
        }
        inp = b.add(cur, Operand::Node(res));
    }
    b.rms_output(inp, tok_embd, false)
}
