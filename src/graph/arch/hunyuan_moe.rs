//! `hunyuan-moe` (upstream's src/models/hunyuan-moe.cpp): llama's attention with NeoX
//! rotary embeddings (`rope_freqs` when present) and per-head q/k RMS norms *after* the
//! rotation, then in every layer a shared FFN (`expert_shared_feed_forward_length` rows,
//! else `feed_forward_length`) plus softmax-routed experts with normalised weights.

use super::super::blocks::{PreNormAttn, QkNorm};
use super::super::builder::{BuildError, Builder, Ffn, Moe, Outputs};
use super::super::params::ArchParams;
use super::super::{Operand, RopeMode};
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["hunyuan-moe"],
    rope: Rope::Mode(RopeMode::Neox),
    memory: Memory::Kv,
    hparams,
    graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    hp.n_ff_exp = k.u32_required("expert_feed_forward_length")? as usize;
    hp.ext.n_ff_shexp = k.u32("expert_shared_feed_forward_length", 0) as usize;
    if hp.n_expert == 0 || hp.n_expert_used == 0 {
        return Err("expert_count and expert_used_count must be > 0".into());
    }
    Ok(())
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let n_embd = hp.n_embd as i64;
    let head = hp.head_k;
    let kq_scale = 1.0 / (head as f32).sqrt();
    let rope_freqs = b.weight_opt("rope_freqs.weight", &[hp.n_rot as i64 / 2])?;
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
    let attn = PreNormAttn {
        rope_freqs: rope_freqs,
        kq_scale,
        qk_norm: QkNorm::AfterRope,
        out_bias: true,
    };
    for il in 0..hp.n_layer {
        let ffn_inp = b.pre_norm_attn(il, inp, attn)?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;
        let x = b.rms_norm(ffn_inp, Some(ffn_norm), hp.eps_rms);
        let n_ff_shexp = match hp.ext.n_ff_shexp {
            0 => hp.n_ff[il],
            n => n,
        };
        let shared = b.ffn_named(il, x, "_shexp", n_ff_shexp, plain)?;
        let routed = b.moe_layer(il, x, hp.n_ff_exp, moe)?;
        let cur = b.add(routed, Operand::Node(shared));
        inp = b.layer_out(il, cur, ffn_inp);
    }
    b.rms_output(inp, tok_embd, false)
}
