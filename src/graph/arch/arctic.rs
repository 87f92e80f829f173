//! `arctic` (upstream's src/models/arctic.cpp; Snowflake Arctic): llama's attention (NORM
//! rotary embeddings), a dense residual FFN of `n_embd` rows, and in parallel a mixture of
//! softmax-routed experts with normalised weights over the layer's input normed by
//! `ffn_norm_exps`, added to the dense branch's output.

use super::super::builder::{BuildError, Builder, Ffn, Moe, Outputs};
use super::super::params::ArchParams;
use super::super::{Operand, RopeMode};
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["arctic"],
    rope: Rope::Mode(RopeMode::Norm),
    memory: Memory::Kv,
    hparams,
    graph,
};

fn hparams(_: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    if hp.n_expert == 0 || hp.n_expert_used == 0 {
        return Err("expert_count and expert_used_count must be > 0".into());
    }
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
    let plain = Ffn {
        scaled: false,
        ..Ffn::SWIGLU
    };
    let moe = Moe {
        scale_w: hp.expert_weights_scale,
        exp_scales: false,
        ..Moe::SOFTMAX
    };
    let (tok_embd, mut inp) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let nq = (head * hp.n_head[il]) as i64;
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let wo = b.lw(il, "attn_output.weight", &[nq, n_embd])?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;
        let norm_exps = b.lw(il, "ffn_norm_exps.weight", &[n_embd])?;

        let cur = b.rms_norm(inp, Some(attn_norm), hp.eps_rms);
        let (q, k, v) = b.qkv(il, cur)?;
        let (q, k) = b.rope_qk(q, k, None, false);
        let mut cur = b.attn(il, q, k, v, wo, None, kq_scale);
        let mut res = inp;
        if il == hp.n_layer - 1 {
            cur = b.get_rows_out(cur);
            res = b.get_rows_out(res);
        }
        let ffn_inp = b.add(cur, Operand::Node(res));
        let x = b.rms_norm(ffn_inp, Some(ffn_norm), hp.eps_rms);
        let dense = b.ffn_named(il, x, "", hp.n_embd, plain)?;
        let ffn_out = b.add(dense, Operand::Node(ffn_inp));
        let xe = b.rms_norm(res, Some(norm_exps), hp.eps_rms);
        let moe_out = b.moe_layer(il, xe, hp.n_ff[il], moe)?;
        inp = b.add(moe_out, Operand::Node(ffn_out));
        inp = b.cvec(inp, il);
    }
    b.rms_output(inp, tok_embd, false)
}
