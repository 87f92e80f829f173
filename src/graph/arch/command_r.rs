//! `command-r` (upstream's src/models/command-r.cpp): LayerNorms without bias, a parallel
//! residual (attention and FFN both read the layer's normed input; their outputs and the
//! input are summed), NORM rotary embeddings, logits multiplied by `logit_scale`, output
//! tied to the token embeddings. The 35B+ per-head q/k LayerNorms (`attn_q_norm`, 64+
//! layers) are refused: the engine has no per-head LayerNorm with a 2-D weight yet.

use super::super::builder::{BuildError, Builder, Ffn, Outputs};
use super::super::{Operand, RopeMode};
use super::def::{no_hparams, ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["command-r"],
    rope: Rope::Mode(RopeMode::Norm),
    memory: Memory::Kv,
    hparams: no_hparams,
    graph,
};

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    graph_with(b, false)
}

/// The graph of command-r and, with `sliding` (rotation on the sliding-window layers only,
/// with `rope_freqs`), of cohere2.
pub fn graph_with(b: &mut Builder, sliding: bool) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let keys = Keys {
        model: b.model,
        arch: &b.model.arch,
    };
    let logit_scale = keys.f32("logit_scale", 0.0);
    if !sliding && hp.n_layer >= 64 {
        return Err(BuildError::Invalid(
            "per-head q/k LayerNorms (attn_q_norm/attn_k_norm, 64+ layers) are not supported yet"
                .into(),
        ));
    }
    let n_embd = hp.n_embd as i64;
    let kq_scale = 1.0 / (hp.head_v as f32).sqrt();
    let rope_freqs = if sliding {
        b.weight_opt("rope_freqs.weight", &[hp.n_rot as i64 / 2])?
    } else {
        None
    };
    let (tok_embd, mut inp) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let wo = b.lw(il, "attn_output.weight", &[n_embd, n_embd])?;
        let wo_b = b.lw_opt(il, "attn_output.bias", &[n_embd])?;

        let mut x = b.layer_norm(inp, Some(attn_norm), None, hp.eps_norm);
        let (q, k, v) = b.qkv(il, x)?;
        let (q, k) = if !sliding {
            b.rope_qk(q, k, None, false)
        } else if hp.swa_layers[il] {
            b.rope_qk(q, k, rope_freqs, true)
        } else {
            (q, k)
        };
        let mut attn_out = b.attn(il, q, k, v, wo, wo_b, kq_scale);
        if il == hp.n_layer - 1 {
            attn_out = b.get_rows_out(attn_out);
            inp = b.get_rows_out(inp);
            x = b.get_rows_out(x);
        }
        // upstream's cohere2 passes the FFN's per-tensor scales, command-r does not
        let ffn = Ffn {
            scaled: sliding,
            ..Ffn::SWIGLU
        };
        let cur = b.ffn_layer(il, x, ffn)?;
        let cur = b.add(cur, Operand::Node(inp));
        inp = b.add(cur, Operand::Node(attn_out));
        inp = b.cvec(inp, il);
    }
    let norm = b.weight("output_norm.weight", &[n_embd])?;
    let embd = b.layer_norm(inp, Some(norm), None, hp.eps_norm);
    let mut logits = b.mul_mat(tok_embd, embd);
    if logit_scale != 0.0 {
        logits = b.scale(logits, logit_scale);
    }
    Ok(Outputs { logits, embd })
}
