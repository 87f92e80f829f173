//! `qwen2moe` (upstream's src/models/qwen2moe.cpp; Qwen1.5-MoE, Qwen2-57B-A14B): qwen2's
//! attention (q/k/v biases, NeoX rotary embeddings), then in every layer softmax-routed
//! experts with unnormalised weights plus one shared expert whose output is scaled per
//! token by a sigmoid gate (`ffn_gate_inp_shexp`, computed as upstream does: silu(g) / g).

use super::super::blocks::{PreNormAttn, QkNorm};
use super::super::builder::{BuildError, Builder, Ffn, Moe, Outputs};
use super::super::params::ArchParams;
use super::super::{Operand, RopeMode};
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["qwen2moe"],
    rope: Rope::Mode(RopeMode::Neox),
    memory: Memory::Kv,
    hparams,
    graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    if hp.n_expert == 0 || hp.n_expert_used == 0 {
        return Err("expert_count and expert_used_count must be > 0".into());
    }
    let n_ff = hp.n_ff.first().copied().unwrap_or(0);
    hp.n_ff_exp = match k.u32("expert_feed_forward_length", 0) as usize {
        0 => n_ff / hp.n_expert_used,
        v => v,
    };
    hp.ext.n_ff_shexp = match k.u32("expert_shared_feed_forward_length", 0) as usize {
        0 => n_ff,
        v => v,
    };
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
        norm_w: false,
        scale_w: hp.expert_weights_scale,
        exp_scales: false,
        ..Moe::SOFTMAX
    };
    let (tok_embd, mut inp) = b.inp_embd()?;
    let attn = PreNormAttn {
        rope_freqs: None,
        kq_scale,
        qk_norm: QkNorm::None,
        out_bias: true,
    };
    for il in 0..hp.n_layer {
        let ffn_inp = b.pre_norm_attn(il, inp, attn)?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;
        let gate_inp_shexp = b.lw(il, "ffn_gate_inp_shexp.weight", &[n_embd])?;
        let x = b.rms_norm(ffn_inp, Some(ffn_norm), hp.eps_rms);
        let moe_out = b.moe_layer(il, x, hp.n_ff_exp, moe)?;
        // the shared expert, gated per token: sigmoid as silu(g) / g
        let g = b.mul_mat_raw(gate_inp_shexp, x);
        let silu = b.silu(g);
        let gate = b.div(silu, g);
        let shexp = b.ffn_named(il, x, "_shexp", hp.ext.n_ff_shexp, plain)?;
        let shexp = b.mul(shexp, Operand::Node(gate));
        let cur = b.add(moe_out, Operand::Node(shexp));
        inp = b.layer_out(il, cur, ffn_inp);
    }
    b.rms_output(inp, tok_embd, false)
}
