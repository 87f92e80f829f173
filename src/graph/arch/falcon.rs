//! `falcon` (upstream's src/models/falcon.cpp): a parallel block — attention and a GELU FFN
//! without gate both read the layer's LayerNorm (Falcon-40B: attention reads a second one,
//! `attn_norm_2`), their outputs and the input summed —, a fused QKV without bias, NeoX
//! rotary embeddings, multi-query K/V heads, a tied or own output.

use super::super::builder::{Act, BuildError, Builder, Need, Outputs};
use super::super::{Operand, RopeMode};
use super::def::{no_hparams, ArchDef, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["falcon"],
    rope: Rope::Mode(RopeMode::Neox),
    memory: Memory::Kv,
    hparams: no_hparams,
    graph,
};

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let n_embd = hp.n_embd as i64;
    if hp.head_k != hp.head_v || hp.n_rot != hp.head_k {
        return Err(BuildError::Invalid(format!(
            "n_rot {} and head sizes {}/{} must agree",
            hp.n_rot, hp.head_k, hp.head_v
        )));
    }
    let kq_scale = 1.0 / (hp.head_v as f32).sqrt();
    let (tok_embd, mut inp) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let n_qkv = n_embd + 2 * hp.n_embd_k_gqa(il) as i64;
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let attn_norm_b = b.lw(il, "attn_norm.bias", &[n_embd])?;
        let attn_norm_2 = b.lw_opt(il, "attn_norm_2.weight", &[n_embd])?;
        let attn_norm_2_b = b.lw_opt(il, "attn_norm_2.bias", &[n_embd])?;
        b.lw(il, "attn_qkv.weight", &[n_embd, n_qkv])?;
        let wo = b.lw(il, "attn_output.weight", &[n_embd, n_embd])?;

        let mut x = b.layer_norm(inp, Some(attn_norm), Some(attn_norm_b), hp.eps_norm);
        let cur = match attn_norm_2 {
            Some(w) => b.layer_norm(inp, Some(w), attn_norm_2_b, hp.eps_norm),
            None => x,
        };
        let (q, k, v) = b.qkv(il, cur)?;
        let (q, k) = b.rope_qk(q, k, None, false);
        let mut attn_out = b.attn(il, q, k, v, wo, None, kq_scale);
        if il == hp.n_layer - 1 {
            attn_out = b.get_rows_out(attn_out);
            inp = b.get_rows_out(inp);
            x = b.get_rows_out(x);
        }
        // the FFN reads the attention's norm, not the residual
        let cur = b.ffn_seq(il, x, Act::Gelu, Need::Never, false)?;
        let cur = b.add(cur, Operand::Node(attn_out));
        inp = b.add(cur, Operand::Node(inp));
        inp = b.cvec(inp, il);
    }
    b.ln_output(inp, tok_embd, Need::Required)
}
