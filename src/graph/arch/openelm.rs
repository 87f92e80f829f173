//! `openelm` (upstream's src/models/openelm.cpp): llama's RMS-normed block with per-layer
//! head counts and FFN sizes, a fused QKV without bias or scale (Q heads, then K, then V), per-head
//! RMS norms of Q and K, NeoX rotary embeddings, a SiLU-gated FFN, a tied or own output.

use super::super::builder::{BuildError, Builder, Ffn, Outputs};
use super::super::{Operand, RopeMode};
use super::def::{no_hparams, ArchDef, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["openelm"],
    rope: Rope::Mode(RopeMode::Neox),
    memory: Memory::Kv,
    hparams: no_hparams,
    graph,
};

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
    let kq_scale = 1.0 / (hp.head_v as f32).sqrt();
    let (tok_embd, mut inp) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let n_head_qkv = (hp.n_head[il] + 2 * hp.n_head_kv[il]) as i64;
        let nq = (head * hp.n_head[il]) as i64;
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let wqkv = b.lw(il, "attn_qkv.weight", &[n_embd, n_head_qkv * head as i64])?;
        let wo = b.lw(il, "attn_output.weight", &[nq, n_embd])?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;

        let cur = b.rms_norm(inp, Some(attn_norm), hp.eps_rms);
        // build_lora_mm without the projection's scale, then the Q, K, V heads
        let qkv = b.mul_mat_raw(wqkv, cur);
        let nkv = head * hp.n_head_kv[il];
        let q = b.view(qkv, 0, nq as usize);
        let k = b.view(qkv, nq as usize, nkv);
        let v = b.view(qkv, nq as usize + nkv, nkv);
        let (q, k) = b.qk_norm(il, q, k)?;
        let (q, k) = b.rope_qk(q, k, None, false);
        let mut cur = b.attn(il, q, k, v, wo, None, kq_scale);
        if il == hp.n_layer - 1 {
            cur = b.get_rows_out(cur);
            inp = b.get_rows_out(inp);
        }
        let ffn_inp = b.add(inp, Operand::Node(cur));
        let cur = b.rms_norm(ffn_inp, Some(ffn_norm), hp.eps_rms);
        let ffn = Ffn {
            scaled: false,
            ..Ffn::SWIGLU
        };
        let cur = b.ffn_layer(il, cur, ffn)?;
        inp = b.layer_out(il, cur, ffn_inp);
    }
    b.rms_output(inp, tok_embd, false)
}
