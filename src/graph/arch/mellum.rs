//! `mellum` (upstream's src/models/mellum.cpp): qwen3-moe's block — RMS norms, per-head RMS
//! norms of Q and K before NeoX rotary embeddings, a softmax-routed mixture of experts
//! (weights normalised, the experts' per-tensor scales when present) on every layer —
//! with sliding-window layers when the file gives a window (`load_swa_pattern`, period
//! 4), which rotate with the global base, scale 1 and no YaRN.

use super::super::builder::{BuildError, Builder, Moe, Outputs};
use super::super::params::{ArchParams, RopeScaling};
use super::super::{Operand, RopeMode};
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["mellum"],
    rope: Rope::Mode(RopeMode::Neox),
    memory: Memory::Kv,
    hparams,
    graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    if hp.n_expert == 0 || hp.n_expert_used == 0 {
        return Err("n_expert and n_expert_used must be > 0 for Mellum".into());
    }
    hp.n_ff_exp = k.u32_required("expert_feed_forward_length")? as usize;
    hp.n_swa = k.u32("attention.sliding_window", 0);
    if hp.n_swa > 0 {
        hp.swa_layers = k.swa_layers(hp.n_layer, 4)?;
        // upstream's graph rotates the sliding-window layers with the global base, freq
        // scale 1, ext_factor 0, attn_factor 1; the engine's SWA rope keeps the context's
        // ext/attn factors, so a YaRN-scaled file is refused rather than rotated otherwise
        hp.rope_freq_base_swa = hp.rope_freq_base;
        hp.rope_freq_scale_swa = 1.0;
        if hp.rope_scaling == RopeScaling::Yarn {
            return Err("yarn rope scaling with sliding-window layers is not supported yet".into());
        }
    }
    Ok(())
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let n_embd = hp.n_embd as i64;
    let head = hp.head_k;
    let n_ff_exp = if hp.n_ff_exp > 0 {
        hp.n_ff_exp
    } else {
        hp.n_ff[0] / hp.n_expert_used
    };
    let kq_scale = 1.0 / (hp.head_v as f32).sqrt();
    let (_, mut inp) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let nq = (head * hp.n_head[il]) as i64;
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let wo = b.lw(il, "attn_output.weight", &[nq, n_embd])?;
        let wo_b = b.lw_opt(il, "attn_output.bias", &[n_embd])?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;

        let cur = b.rms_norm(inp, Some(attn_norm), hp.eps_rms);
        let (q, k, v) = b.qkv(il, cur)?;
        let (q, k) = b.qk_norm(il, q, k)?;
        let (q, k) = b.rope_qk(q, k, None, hp.swa_layers[il]);
        let mut cur = b.attn(il, q, k, v, wo, wo_b, kq_scale);
        if il == hp.n_layer - 1 {
            cur = b.get_rows_out(cur);
            inp = b.get_rows_out(inp);
        }
        let ffn_inp = b.add(cur, Operand::Node(inp));
        let cur = b.rms_norm(ffn_inp, Some(ffn_norm), hp.eps_rms);
        let moe = Moe {
            scale_w: hp.expert_weights_scale,
            ..Moe::SOFTMAX
        };
        let cur = b.moe_layer(il, cur, n_ff_exp, moe)?;
        inp = b.layer_out(il, cur, ffn_inp);
    }
    let n_vocab = hp.n_vocab as i64;
    let norm = b.weight("output_norm.weight", &[n_embd])?;
    let output = b.weight("output.weight", &[n_embd, n_vocab])?;
    let embd = b.rms_norm(inp, Some(norm), hp.eps_rms);
    let logits = b.mul_mat(output, embd);
    Ok(Outputs { logits, embd })
}
