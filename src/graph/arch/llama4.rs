//! `llama4` (upstream's src/models/llama4.cpp; Llama 4 Scout/Maverick): llama's attention
//! with q/k/v biases and NORM rotary embeddings on three layers of four — chunked attention
//! there (8192-position chunks), weightless RMS norms of Q and K after the rotation — and
//! every fourth layer without RoPE, its Q scaled by the attention temperature; dense FFNs
//! with biases, and every `interleave_moe_layer_step`-th layer a mixture of experts chosen
//! by the router's logits, the input weighted by the sigmoid of the chosen logits before
//! the experts, plus a shared expert.

use super::super::builder::{BuildError, Builder, Ffn, Gating, Moe, Outputs};
use super::super::params::ArchParams;
use super::super::{Op, Operand, RopeMode};
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["llama4"],
    rope: Rope::Mode(RopeMode::Norm),
    memory: Memory::Kv,
    hparams,
    graph,
};

/// Upstream's fixed chunk and temperature settings of the chunked models.
const CHUNK: u32 = 8192;

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    if hp.n_expert == 0 {
        return Err("llama4 model cannot have zero experts".into());
    }
    hp.n_ff_exp = k.u32_required("expert_feed_forward_length")? as usize;
    hp.ext.n_moe_layer_step = k.u32_required("interleave_moe_layer_step")? as usize;
    let window = k.model.meta.get_u32(&k.key("attention.sliding_window"));
    if window == Some(0) {
        // upstream: no chunking, its last layer goes without RoPE and multiplies Q by an
        // attention temperature of scale 0, which its input setter asserts against (abort)
        return Err("attention.sliding_window = 0 (no chunked attention): upstream aborts on these files (attention temperature scale 0); not supported".into());
    }
    hp.ext.n_chunk = CHUNK;
    hp.ext.n_no_rope_layer_step = 4;
    hp.attn_temp_scale = 0.1;
    hp.ext.attn_temp_floor = CHUNK as f32;
    hp.swa_layers = k.swa_layers(hp.n_layer, 4)?;
    hp.rope_freq_base_swa = k.f32("rope.freq_base_swa", hp.rope_freq_base);
    hp.rope_freq_scale_swa = hp.rope_freq_scale;
    // 128 experts (Maverick) has no Q/K norm
    Ok(())
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let e = &hp.ext;
    let n_embd = hp.n_embd as i64;
    let head = hp.head_k;
    if hp.head_v != head || hp.n_rot != head {
        return Err(BuildError::Invalid(format!(
            "n_rot {} and head sizes {}/{} must agree",
            hp.n_rot, hp.head_k, hp.head_v
        )));
    }
    if b.n_ctx_seq > e.n_chunk {
        return Err(BuildError::Invalid(format!(
            "chunked attention over a context of {} > its {}-position chunk is not supported yet",
            b.n_ctx_seq, e.n_chunk
        )));
    }
    let use_kq_norm = hp.n_expert != 128;
    let kq_scale = 1.0 / (head as f32).sqrt();
    let dense = Ffn {
        bias: true,
        scaled: false,
        ..Ffn::SWIGLU
    };
    let plain = Ffn {
        scaled: false,
        ..Ffn::SWIGLU
    };
    let moe = Moe {
        gating: Gating::Sigmoid,
        norm_w: false,
        scale_w: hp.expert_weights_scale,
        exp_scales: false,
        ..Moe::SOFTMAX
    };
    let (tok_embd, mut inp) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let nq = (head * hp.n_head[il]) as i64;
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let wo = b.lw(il, "attn_output.weight", &[nq, n_embd])?;
        let wo_b = b.lw_opt(il, "attn_output.bias", &[n_embd])?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;
        // the first layer's, shared by all (upstream's TENSOR_DUPLICATED)
        let rope_freqs = match b.lw_opt(il, "rope_freqs.weight", &[hp.n_rot as i64 / 2])? {
            Some(f) => Some(f),
            None => b.weight_opt("rope_freqs.weight", &[hp.n_rot as i64 / 2])?,
        };
        let use_rope = (il + 1) % e.n_no_rope_layer_step != 0;
        let swa = hp.swa_layers[il];

        let cur = b.rms_norm(inp, Some(attn_norm), hp.eps_rms);
        let (mut q, mut k, v) = b.qkv(il, cur)?;
        if use_rope {
            (q, k) = b.rope_qk(q, k, rope_freqs, swa);
        } else {
            let (n0, n1) = (b.ne0(q), b.ne1(q));
            let op = Op::AttnTempScale {
                src: q,
                floor_scale: e.attn_temp_floor,
                scale: hp.attn_temp_scale,
                offset: 1.0,
            };
            q = b.push("attn_temp", op, n0, n1);
        }
        if use_rope && use_kq_norm {
            // Llama4TextL2Norm: RMS norms of each head, no weight
            q = b.head_rms_norm_plain(q, head, hp.eps_rms);
            k = b.head_rms_norm_plain(k, head, hp.eps_rms);
        }
        let cur = b.attn(il, q, k, v, wo, wo_b, kq_scale);
        b.cb_output(cur, "attn_out", Some(il));
        let ffn_inp = b.residual(il, cur, inp);
        let x = b.rms_norm(ffn_inp, Some(ffn_norm), hp.eps_rms);
        let is_moe = e.n_moe_layer_step > 0 && (il + 1) % e.n_moe_layer_step == 0;
        let cur = if is_moe {
            let moe_out = b.moe_layer_with(il, x, hp.n_ff_exp, moe, true)?;
            let shexp = b.ffn_named(il, x, "_shexp", hp.n_ff_exp, plain)?;
            b.add(moe_out, Operand::Node(shexp))
        } else {
            b.ffn_layer(il, x, dense)?
        };
        inp = b.layer_out(il, cur, ffn_inp);
    }
    b.rms_output(inp, tok_embd, false)
}
