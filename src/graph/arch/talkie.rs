//! `talkie` (upstream's src/models/talkie.cpp): weightless RMS norms (of the embeddings,
//! before attention and the FFN, at the end); Q/K/V fused or separate (biases when
//! present), NeoX rotary embeddings, then per-head RMS norms of Q (times one learned value
//! per head, `attn_q_norm` `[1, n_head]`) and of K (no weight); a SiLU-gated FFN whose down
//! projection alone takes its scale; each layer adds the normed embeddings times
//! `layer_output_scale`; the logits (own output, no scale) times `logit_scale`.

use super::super::builder::{BuildError, Builder, Ffn, Outputs};
use super::super::params::ArchParams;
use super::super::{NodeId, Op, Operand, RopeMode};
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["talkie"],
    rope: Rope::Mode(RopeMode::Neox),
    memory: Memory::Kv,
    hparams,
    graph,
};

fn hparams(k: &Keys, _: &mut ArchParams) -> Result<(), String> {
    if k.f32_opt("logit_scale").is_none() {
        return Err(format!("key not found in model: {}", k.key("logit_scale")));
    }
    Ok(())
}

/// RMS_NORM of each head (`head` values) of a `[n_head*head, T]` node, no weight.
fn head_rms(b: &mut Builder, x: NodeId, head: usize, eps: f32) -> NodeId {
    let (n0, n1) = (b.ne0(x), b.ne1(x));
    let y = b.push(
        "rms_norm",
        Op::RmsNorm { src: x, eps },
        head,
        n0 / head * n1,
    );
    // RESHAPE back: the same values
    b.nodes[y].ne0 = n0;
    b.nodes[y].ne1 = n1;
    y
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let keys = Keys {
        model: b.model,
        arch: &b.model.arch,
    };
    let logit_scale = keys.f32("logit_scale", 1.0);
    let hp = b.hp;
    let n_embd = hp.n_embd as i64;
    let head = hp.head_k;
    if hp.head_v != head || hp.n_rot != head {
        return Err(BuildError::Invalid(format!(
            "n_rot {} and head sizes {}/{} must agree",
            hp.n_rot, hp.head_k, hp.head_v
        )));
    }
    let eps = hp.eps_rms;
    let kq_scale = 1.0 / (head as f32).sqrt();
    let (_, inp) = b.inp_embd()?;
    let mut inp = b.rms_norm(inp, None, eps);
    let mut skip = inp;
    for il in 0..hp.n_layer {
        let nh = hp.n_head[il];
        let nq = (head * nh) as i64;
        let wo = b.lw(il, "attn_output.weight", &[nq, n_embd])?;
        let q_norm = b.lw(il, "attn_q_norm.weight", &[1, nh as i64])?;
        let out_scale = b.lw(il, "layer_output_scale.weight", &[1])?;

        let cur = b.rms_norm(inp, None, eps);
        let (q, k, v) = b.qkv(il, cur)?;
        let (q, k) = b.rope_qk(q, k, None, false);
        let q = head_rms(b, q, head, eps);
        let (n0, n1) = (b.ne0(q), b.ne1(q));
        // MUL by [1, n_head]: each head's values times its own weight
        let op = Op::MulRep {
            a: q,
            b: q_norm,
            rep: head,
        };
        let q = b.push("mul", op, n0, n1);
        let k = head_rms(b, k, head, eps);
        let mut cur = b.attn(il, q, k, v, wo, None, kq_scale);
        let mut res = inp;
        if il == hp.n_layer - 1 {
            cur = b.get_rows_out(cur);
            res = b.get_rows_out(res);
            skip = b.get_rows_out(skip);
        }
        let ffn_inp = b.add(cur, Operand::Node(res));
        let x = b.rms_norm(ffn_inp, None, eps);
        // upstream passes the down projection's scale only
        let ffn = Ffn {
            scaled: false,
            ..Ffn::SWIGLU
        };
        let mut cur = b.ffn_layer(il, x, ffn)?;
        if let Some(s) = b.lw_opt(il, "ffn_down.scale", &[1])? {
            cur = b.mul(cur, Operand::Weight(s));
        }
        let cur = b.add(cur, Operand::Node(ffn_inp));
        let sk = b.mul(skip, Operand::Weight(out_scale));
        inp = b.add(cur, Operand::Node(sk));
        inp = b.cvec(inp, il);
    }
    let output = b.weight("output.weight", &[n_embd, hp.n_vocab as i64])?;
    let embd = b.rms_norm(inp, None, eps);
    let logits = b.mul_mat_raw(output, embd);
    let logits = b.scale(logits, logit_scale);
    Ok(Outputs { logits, embd })
}
