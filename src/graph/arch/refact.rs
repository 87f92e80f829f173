//! `refact` (upstream's src/models/refact.cpp): llama's RMS-normed block without rotary
//! embeddings but with ALiBi (a fixed maximum bias of 8); Q/K/V biases when present, the
//! output projection's and the FFN's biases never read (upstream passes none). With experts
//! (`expert_count` > 0) upstream loads `ffn_*_exps` but its graph still calls the dense
//! `build_ffn`, whose tensors are then absent: the FFN is the SiLU of its normed input.
//! That is mirrored (the expert tensors are checked, not used).

use super::super::builder::{Act, BuildError, Builder, Ffn, Outputs};
use super::super::params::ArchParams;
use super::super::Operand;
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["refact"],
    rope: Rope::None,
    memory: Memory::Kv,
    hparams,
    graph,
};

fn hparams(_: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    hp.ext.max_alibi_bias = 8.0;
    Ok(())
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let n_embd = hp.n_embd as i64;
    let kq_scale = 1.0 / (hp.head_v as f32).sqrt();
    let (tok_embd, mut inp) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let nq = (hp.head_k * hp.n_head[il]) as i64;
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let wo = b.lw(il, "attn_output.weight", &[nq, n_embd])?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;

        let cur = b.rms_norm(inp, Some(attn_norm), hp.eps_rms);
        let (q, k, v) = b.qkv(il, cur)?;
        let mut cur = b.attn(il, q, k, v, wo, None, kq_scale);
        if il == hp.n_layer - 1 {
            cur = b.get_rows_out(cur);
            inp = b.get_rows_out(inp);
        }
        let ffn_inp = b.add(cur, Operand::Node(inp));
        let cur = b.rms_norm(ffn_inp, Some(ffn_norm), hp.eps_rms);
        let cur = if hp.n_expert == 0 {
            let ffn = Ffn {
                bias: false,
                scaled: false,
                ..Ffn::SWIGLU
            };
            b.ffn_layer(il, cur, ffn)?
        } else {
            let (n_ff, n_exp) = (hp.n_ff[il] as i64, hp.n_expert as i64);
            b.lw(il, "ffn_gate_inp.weight", &[n_embd, n_exp])?;
            b.lw_opt(il, "ffn_gate_exps.weight", &[n_embd, n_ff, n_exp])?;
            b.lw(il, "ffn_down_exps.weight", &[n_ff, n_embd, n_exp])?;
            b.lw(il, "ffn_up_exps.weight", &[n_embd, n_ff, n_exp])?;
            b.act(cur, Act::Silu)
        };
        inp = b.layer_out(il, cur, ffn_inp);
    }
    b.rms_output(inp, tok_embd, false)
}
