//! `falcon-h1` (upstream's src/models/falcon-h1.cpp, Falcon-H1): every layer runs attention
//! (NEOX rotary embeddings, Q/K/V biases, no output bias) and a Mamba-2 mixer side by side
//! on the same RMS-normed input; their sum joins the residual, then a SiLU-gated FFN with
//! biases. Memory: every layer keeps both KV rows and recurrent states (upstream's hybrid
//! memory with both layer filters always true).

use super::super::builder::{BuildError, Builder, Ffn, Outputs};
use super::super::params::ArchParams;
use super::super::{Operand, RopeMode};
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["falcon-h1"],
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
    hp.ext.ssm = ssm;
    hp.ext.recurrent_layers = vec![true; hp.n_layer];
    hp.ext.recurrent_with_attn = true;
    Ok(())
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let n_embd = hp.n_embd as i64;
    // upstream's scale is of the V head size; the file's K and V heads agree
    if hp.head_k != hp.head_v {
        return Err(BuildError::Invalid(format!(
            "head sizes {}/{} must agree",
            hp.head_k, hp.head_v
        )));
    }
    let kq_scale = b.kq_scale();
    let (tok_embd, mut inp) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        // upstream's tensor name has no ".weight" here
        let ffn_norm = b.lw(il, "ffn_norm", &[n_embd])?;
        let nq = (hp.head_k * hp.n_head[il]) as i64;
        let wo = b.lw(il, "attn_output.weight", &[nq, n_embd])?;
        let cur = b.rms_norm(inp, Some(attn_norm), hp.eps_rms);
        let (q, k, v) = b.qkv(il, cur)?;
        let (q, k) = b.rope_qk(q, k, None, false);
        // upstream passes no output bias to build_attn, whatever the file holds
        let attn_out = b.attn(il, q, k, v, wo, None, kq_scale);
        let ssm_out = b.mamba2_layer(il, cur)?;
        let cur = b.add(attn_out, Operand::Node(ssm_out));
        let mut res = b.add(cur, Operand::Node(inp));
        if il == hp.n_layer - 1 {
            res = b.get_rows_out(res);
        }
        let x = b.rms_norm(res, Some(ffn_norm), hp.eps_rms);
        let ffn = Ffn {
            bias: true,
            scaled: false,
            ..Ffn::SWIGLU
        };
        let out = b.ffn_layer(il, x, ffn)?;
        let out = b.add(out, Operand::Node(res));
        inp = b.cvec(out, il);
    }
    b.rms_output(inp, tok_embd, false)
}
