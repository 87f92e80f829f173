//! `llada-moe` (upstream's src/models/llada-moe.cpp): LLaDA-MoE, a diffusion language model
//! shaped as qwen3moe (per-head q/k RMS norms before NeoX rotary embeddings, softmax-routed
//! experts) with unnormalised expert weights and no expert scales, attending both ways and
//! keeping no memory (every decode is upstream's encode).

use super::super::builder::{BuildError, Builder, Moe, Outputs};
use super::super::params::ArchParams;
use super::super::{Operand, RopeMode};
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["llada-moe"],
    rope: Rope::Mode(RopeMode::Neox),
    memory: Memory::None,
    hparams,
    graph,
};

/// `expert_feed_forward_length` (0: `feed_forward_length / expert_used_count`); experts
/// are required.
pub fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    if hp.n_expert == 0 || hp.n_expert_used == 0 {
        return Err("expert_count and expert_used_count must be > 0".into());
    }
    hp.n_ff_exp = k.u32("expert_feed_forward_length", 0) as usize;
    Ok(())
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    graph_with(b, false)
}

/// The graph of llada-moe and (`norm_w`: expert weights divided by their sum, and
/// `attn_output.bias` when present) rnd1.
pub fn graph_with(b: &mut Builder, norm_w: bool) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let n_embd = hp.n_embd as i64;
    if hp.head_v != hp.head_k || hp.n_rot != hp.head_k {
        return Err(BuildError::Invalid(format!(
            "n_rot {} and head sizes {}/{} must agree",
            hp.n_rot, hp.head_k, hp.head_v
        )));
    }
    let moe = Moe {
        norm_w,
        scale_w: hp.expert_weights_scale,
        exp_scales: false,
        ..Moe::SOFTMAX
    };
    let kq_scale = b.kq_scale();
    let (tok_embd, mut inp) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let nq = (hp.head_k * hp.n_head[il]) as i64;
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let wo = b.lw(il, "attn_output.weight", &[nq, n_embd])?;
        let wo_b = if norm_w {
            b.lw_opt(il, "attn_output.bias", &[n_embd])?
        } else {
            None
        };
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;

        let cur = b.rms_norm(inp, Some(attn_norm), hp.eps_rms);
        let (q, k, v) = b.qkv(il, cur)?;
        let (q, k) = b.qk_norm(il, q, k)?;
        let (q, k) = b.rope_qk(q, k, None, false);
        let mut cur = b.attn(il, q, k, v, wo, wo_b, kq_scale);
        let mut res = inp;
        if il == hp.n_layer - 1 {
            cur = b.get_rows_out(cur);
            res = b.get_rows_out(res);
        }
        let ffn_inp = b.add(cur, Operand::Node(res));
        let cur = b.rms_norm(ffn_inp, Some(ffn_norm), hp.eps_rms);
        let n_ff = if hp.n_ff_exp > 0 {
            hp.n_ff_exp
        } else {
            hp.n_ff[il] / hp.n_expert_used
        };
        let cur = b.moe_layer(il, cur, n_ff, moe)?;
        inp = b.layer_out(il, cur, ffn_inp);
    }
    b.rms_output(inp, tok_embd, false)
}
