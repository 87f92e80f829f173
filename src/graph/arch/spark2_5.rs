//! `spark2_5` (upstream's src/models/spark2-5.cpp): llama's RMS-normed block with
//! sliding-window layers (`attention.sliding_window` and its per-layer pattern, both
//! required; their rotation uses `rope.freq_base_swa`), NeoX rotary embeddings, an
//! attention output gated per head before the output projection (the sigmoid of
//! `attn_gate`·x, no scale), a GELU-gated FFN without scales, an output without scale.

use super::super::builder::{BuildError, Builder, Ffn, Outputs};
use super::super::params::ArchParams;
use super::super::{GluKind, Op, Operand, RopeMode};
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["spark2_5"],
    rope: Rope::Mode(RopeMode::Neox),
    memory: Memory::Kv,
    hparams,
    graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    hp.n_swa = k.u32_required("attention.sliding_window")?;
    // upstream's get_arr of the pattern is required
    if k.model
        .meta
        .get_array(&k.key("attention.sliding_window_pattern"))
        .is_none()
    {
        return Err(format!(
            "key not found in model: {}",
            k.key("attention.sliding_window_pattern")
        ));
    }
    hp.swa_layers = k.swa_layers(hp.n_layer, 0)?;
    hp.rope_freq_base_swa = k.f32("rope.freq_base_swa", hp.rope_freq_base);
    hp.rope_freq_scale_swa = hp.rope_freq_scale;
    // per-layer head and rotary sizes (the *_swa keys) must match the full layers' here
    let n_rot_swa = k.u32("rope.dimension_count_swa", hp.n_rot as u32) as usize;
    let head_k_swa = k.u32("attention.key_length_swa", hp.head_k as u32) as usize;
    let head_v_swa = k.u32("attention.value_length_swa", hp.head_v as u32) as usize;
    if hp.swa_layers.iter().any(|&s| s)
        && (n_rot_swa != hp.n_rot || head_k_swa != hp.head_k || head_v_swa != hp.head_v)
    {
        return Err(
            "sliding-window layers with other head or rotary sizes are not supported yet".into(),
        );
    }
    Ok(())
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let n_embd = hp.n_embd as i64;
    let head = hp.head_k;
    if hp.head_v != head {
        return Err(BuildError::Invalid(format!(
            "head sizes {}/{} must agree",
            hp.head_k, hp.head_v
        )));
    }
    let kq_scale = 1.0 / (head as f32).sqrt();
    let (tok_embd, mut inp) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let nh = hp.n_head[il];
        let nq = (head * nh) as i64;
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let w_gate = b.lw(il, "attn_gate.weight", &[n_embd, nh as i64])?;
        let wo = b.lw(il, "attn_output.weight", &[nq, n_embd])?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;

        let x = b.rms_norm(inp, Some(attn_norm), hp.eps_rms);
        let (q, k, v) = b.qkv(il, x)?;
        let (q, k) = b.rope_qk(q, k, None, hp.swa_layers[il]);
        let kqv = b.attn_kqv(il, q, k, v, kq_scale, None);
        // the per-head gate, broadcast over each head's values
        let gate = b.mul_mat_raw(w_gate, x);
        let t = b.ne1(gate);
        let gate = b.push("sigmoid", Op::Sigmoid { src: gate }, nh, t);
        let gate = b.push(
            "repeat",
            Op::RepeatEach { src: gate, n: head },
            nh * head,
            t,
        );
        let gated = b.mul(kqv, Operand::Node(gate));
        let cur = b.mul_mat(wo, gated);
        let ffn_inp = b.residual(il, cur, inp);
        let cur = b.rms_norm(ffn_inp, Some(ffn_norm), hp.eps_rms);
        let ffn = Ffn {
            act: GluKind::Geglu,
            bias: false,
            scaled: false,
        };
        let cur = b.ffn_layer(il, cur, ffn)?;
        inp = b.layer_out(il, cur, ffn_inp);
    }
    let norm = b.weight("output_norm.weight", &[n_embd])?;
    let output = b.output_weight(tok_embd)?;
    let embd = b.rms_norm(inp, Some(norm), hp.eps_rms);
    let logits = b.mul_mat_raw(output, embd);
    Ok(Outputs { logits, embd })
}
