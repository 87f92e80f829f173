//! `gpt2` (upstream's src/models/gpt2.cpp): learned position embeddings added to the token
//! embeddings, pre-LayerNorms with biases, a fused QKV projection with bias, no rotary
//! embedding, a GELU FFN without gate (`LLM_FFN_SEQ`), the final LayerNorm and a tied or own
//! output. Its graph, with the choices in [`Classic`], is also starcoder's, bloom's and mpt's.

use super::super::builder::{Act, BuildError, Builder, Need, Outputs};
use super::super::Operand;
use super::def::{no_hparams, ArchDef, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["gpt2"],
    rope: Rope::None,
    memory: Memory::Kv,
    hparams: no_hparams,
    graph,
};

/// Where the classic pre-LayerNorm GPT graphs differ.
#[derive(Clone, Copy, Debug)]
pub struct Classic {
    /// `position_embd` added to the input: `Some(true)` required, `Some(false)` when the
    /// file has it (mpt), `None` never read (ALiBi models).
    pub pos_embd: Option<bool>,
    /// The token embeddings' LayerNorm (`token_embd_norm`, bloom).
    pub tok_norm: bool,
    /// The norms', projections' and FFN's biases are required (else taken when present).
    pub bias_required: bool,
    /// LayerNorms of the whole Q and K rows when the file has `attn_q_norm` (mpt).
    pub qk_norm: bool,
    /// The QKV projection must be the fused `attn_qkv` with its bias (else fused or
    /// separate, biases when present: upstream's `create_tensor_qkv`).
    pub fused_qkv: bool,
    /// Rotary embeddings of Q and K (the architecture's mode; starcoder2, codeshell).
    pub rope: bool,
    /// The gate-less FFN's activation (GELU; jais2: squared ReLU).
    pub act: Act,
}

impl Classic {
    /// gpt2's choices.
    pub const GPT2: Classic = Classic {
        pos_embd: Some(true),
        tok_norm: false,
        bias_required: true,
        qk_norm: false,
        fused_qkv: true,
        rope: false,
        act: Act::Gelu,
    };
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    graph_with(b, Classic::GPT2)
}

/// The classic pre-LayerNorm graph with the choices of `c`.
pub fn graph_with(b: &mut Builder, c: Classic) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let n_embd = hp.n_embd as i64;
    if hp.head_k != hp.head_v || (c.rope && hp.n_rot != hp.head_k) {
        return Err(BuildError::Invalid(format!(
            "n_rot {} and head sizes {}/{} must agree",
            hp.n_rot, hp.head_k, hp.head_v
        )));
    }
    let kq_scale = 1.0 / (hp.head_v as f32).sqrt();
    let req = c.bias_required;
    let need = if req { Need::Required } else { Need::IfPresent };
    let (tok_embd, mut inp) = b.inp_embd()?;
    if let Some(required) = c.pos_embd {
        let want = [n_embd, hp.n_ctx_train as i64];
        let pos = if required {
            Some(b.weight("position_embd.weight", &want)?)
        } else {
            b.weight_opt("position_embd.weight", &want)?
        };
        if let Some(pos) = pos {
            inp = b.add_pos_embd(inp, pos);
        }
    }
    if c.tok_norm {
        let w = b.weight("token_embd_norm.weight", &[n_embd])?;
        let bias = b.weight("token_embd_norm.bias", &[n_embd])?;
        inp = b.layer_norm(inp, Some(w), Some(bias), hp.eps_norm);
    }
    let bias = |b: &mut Builder, il: usize, name: &str, n: i64| b.lw_need(il, name, &[n], need);
    for il in 0..hp.n_layer {
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let attn_norm_b = bias(b, il, "attn_norm.bias", n_embd)?;
        let wo = b.lw(il, "attn_output.weight", &[n_embd, n_embd])?;
        let wo_b = bias(b, il, "attn_output.bias", n_embd)?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;
        let ffn_norm_b = bias(b, il, "ffn_norm.bias", n_embd)?;
        if c.fused_qkv {
            let n_qkv = n_embd + 2 * hp.n_embd_k_gqa(il) as i64;
            b.lw(il, "attn_qkv.weight", &[n_embd, n_qkv])?;
            b.lw(il, "attn_qkv.bias", &[n_qkv])?;
        }

        let cur = b.layer_norm(inp, Some(attn_norm), attn_norm_b, hp.eps_norm);
        let (mut q, mut k, v) = b.qkv(il, cur)?;
        if c.qk_norm {
            if let Some(qn) = b.lw_opt(il, "attn_q_norm.weight", &[n_embd])? {
                let qn_b = b.lw_opt(il, "attn_q_norm.bias", &[n_embd])?;
                let kn = b.lw(il, "attn_k_norm.weight", &[n_embd])?;
                let kn_b = b.lw_opt(il, "attn_k_norm.bias", &[n_embd])?;
                q = b.layer_norm(q, Some(qn), qn_b, hp.eps_norm);
                k = b.layer_norm(k, Some(kn), kn_b, hp.eps_norm);
            } else {
                // mpt's loader creates the K norm from metadata but not the Q norm (its
                // graph then norms neither)
                b.declare_unread(&format!("blk.{il}.attn_k_norm.weight"), &[n_embd]);
                b.declare_unread(&format!("blk.{il}.attn_k_norm.bias"), &[n_embd]);
            }
        }
        if c.rope {
            (q, k) = b.rope_qk(q, k, None, false);
        }
        let mut cur = b.attn(il, q, k, v, wo, wo_b, kq_scale);
        if il == hp.n_layer - 1 {
            cur = b.get_rows_out(cur);
            inp = b.get_rows_out(inp);
        }
        let ffn_inp = b.add(cur, Operand::Node(inp));
        let cur = b.layer_norm(ffn_inp, Some(ffn_norm), ffn_norm_b, hp.eps_norm);
        // upstream passes no FFN scales to build_ffn here
        let cur = b.ffn_seq(il, cur, c.act, need, false)?;
        inp = b.layer_out(il, cur, ffn_inp);
    }
    b.ln_output(inp, tok_embd, need)
}
