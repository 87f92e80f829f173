//! `hrm_text` (upstream's src/models/hrm-text.cpp; HRM-Text): two stacks of
//! `hrm.layers_per_stack` layers over the same tokens, run alternately — per high cycle,
//! `hrm.l_cycles` passes of the low stack on zH + zL (zL starting at `hrm.z_l_init`), then
//! one of the high stack on zH + zL — every pass with its own KV cache slots
//! (`block_count` = layers × h_cycles × (l_cycles + 1)) but the stack's weights (blocks
//! `0..lps` low, `lps..2·lps` high). A layer: weightless RMS norm, sigmoid-gated attention
//! (NeoX), residual, weightless RMS norm, SwiGLU FFN, residual; each pass ends with a
//! weightless RMS norm. No final norm: the logits are the last high pass's output
//! projected.

use super::super::builder::{BuildError, Builder, Ffn, Outputs};
use super::super::params::ArchParams;
use super::super::{NodeId, Operand, RopeMode};
use super::def::{ArchDef, Keys, Memory, Rope};
use crate::model::Model;

pub static DEF: ArchDef = ArchDef {
    names: &["hrm_text"],
    rope: Rope::Mode(RopeMode::Neox),
    memory: Memory::Kv,
    hparams,
    graph,
};

/// The stacks' shape: layers per stack, high cycles, low cycles per high one.
fn shape(k: &Keys) -> Result<(usize, usize, usize), String> {
    let lps = k.u32_required("hrm.layers_per_stack")? as usize;
    let h = k.u32_required("hrm.h_cycles")? as usize;
    let l = k.u32_required("hrm.l_cycles")? as usize;
    if lps == 0 || h == 0 || l == 0 {
        return Err("hrm.layers_per_stack, hrm.h_cycles and hrm.l_cycles must be > 0".into());
    }
    Ok((lps, h, l))
}

/// The physical block whose weights layer slot `slot` holds (upstream's `load_arch_tensors`
/// aliases every later pass's slots to the first low and high passes' blocks).
pub fn block_of_slot(model: &Model, slot: usize) -> Option<usize> {
    let keys = Keys {
        model,
        arch: &model.arch,
    };
    let (lps, _, l_cycles) = shape(&keys).ok()?;
    let pass = (slot / lps) % (l_cycles + 1);
    let high = if pass == l_cycles { lps } else { 0 };
    Some(high + slot % lps)
}

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    let (lps, h, l) = shape(k)?;
    if hp.n_layer != lps * h * (l + 1) {
        return Err(format!(
            "block_count {} must be layers_per_stack × h_cycles × (l_cycles + 1) = {}",
            hp.n_layer,
            lps * h * (l + 1)
        ));
    }
    let uniform = |v: &[usize]| v.iter().all(|&x| x == v[0]);
    if !uniform(&hp.n_head) || !uniform(&hp.n_head_kv) || !uniform(&hp.n_ff) {
        return Err("per-layer head counts or FFN sizes are not supported".into());
    }
    if hp.head_k != hp.head_v {
        return Err(format!("head sizes {}/{} must agree", hp.head_k, hp.head_v));
    }
    Ok(())
}

/// Q, K and V of slot `s` with block `bid`'s weights and biases: upstream loads the
/// per-tensor scales by slot (`blk.<s>.attn_q.scale`, ...), the weights by block.
fn qkv(
    b: &mut Builder,
    s: usize,
    bid: usize,
    x: NodeId,
) -> Result<(NodeId, NodeId, NodeId), BuildError> {
    let hp = b.hp;
    let n_embd = hp.n_embd as i64;
    let sizes = [
        ("attn_q", hp.head_k * hp.n_head[bid]),
        ("attn_k", hp.n_embd_k_gqa(bid)),
        ("attn_v", hp.n_embd_v_gqa(bid)),
    ];
    let fused = format!("blk.{bid}.attn_qkv.weight");
    if b.has(&fused) {
        return Err(BuildError::Invalid(
            "hrm_text with a fused attn_qkv is not supported yet".into(),
        ));
    }
    let mut out = [0; 3];
    for (o, (name, n)) in out.iter_mut().zip(sizes) {
        let w = b.lw(bid, &format!("{name}.weight"), &[n_embd, n as i64])?;
        let bias = b.lw_opt(bid, &format!("{name}.bias"), &[n as i64])?;
        let scale = b.lw_opt(s, &format!("{name}.scale"), &[1])?;
        let y = b.mul_mat_scaled(w, x, scale);
        *o = match bias {
            Some(bias) => b.add(y, Operand::Weight(bias)),
            None => y,
        };
    }
    Ok((out[0], out[1], out[2]))
}

/// One pass of a stack: its `lps` layers (weights of blocks `blk_base..`, KV slots
/// `slot_base..`), then the weightless final norm.
fn stack(
    b: &mut Builder,
    mut cur: NodeId,
    lps: usize,
    slot_base: usize,
    blk_base: usize,
) -> Result<NodeId, BuildError> {
    let hp = b.hp;
    let n_embd = hp.n_embd as i64;
    let kq_scale = 1.0 / (hp.head_k as f32).sqrt();
    let plain = Ffn {
        scaled: false,
        ..Ffn::SWIGLU
    };
    for il in 0..lps {
        let (s, bid) = (slot_base + il, blk_base + il);
        let nq = (hp.head_k * hp.n_head[bid]) as i64;
        let w_gate = b.lw(bid, "attn_gate.weight", &[n_embd, nq])?;
        let wo = b.lw(bid, "attn_output.weight", &[nq, n_embd])?;

        let res = cur;
        let x = b.rms_norm(cur, None, hp.eps_rms);
        let gate = b.mul_mat_lora(w_gate, x);
        let (q, k, v) = qkv(b, s, bid, x)?;
        let (q, k) = b.rope_qk(q, k, None, false);
        let kqv = b.attn_kqv(s, q, k, v, kq_scale, None);
        let gate = b.sigmoid(gate);
        let gated = b.mul(kqv, Operand::Node(gate));
        let wo_s = b.lw_opt(s, "attn_output.scale", &[1])?;
        let attn = b.mul_mat_scaled(wo, gated, wo_s);
        let res = b.add(attn, Operand::Node(res));
        let x = b.rms_norm(res, None, hp.eps_rms);
        let ffn = b.ffn_layer(bid, x, plain)?;
        cur = b.add(ffn, Operand::Node(res));
        cur = b.cvec(cur, s);
    }
    Ok(b.rms_norm(cur, None, hp.eps_rms))
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let hp = b.hp;
    let n_embd = hp.n_embd as i64;
    let keys = Keys {
        model: b.model,
        arch: &b.model.arch,
    };
    let (lps, h_cycles, l_cycles) = shape(&keys).map_err(BuildError::Invalid)?;
    let embedding_scale = keys.f32("embedding_scale", 0.0);
    let z_l_init = b.weight("hrm.z_l_init", &[n_embd])?;
    let (tok_embd, mut z_h) = b.inp_embd()?;
    if embedding_scale != 0.0 {
        z_h = b.scale(z_h, embedding_scale);
    }
    let mut z_l: Option<NodeId> = None;
    for h in 0..h_cycles {
        for l in 0..l_cycles {
            let slot_base = (h * (l_cycles + 1) + l) * lps;
            let x = match z_l {
                None => b.add(z_h, Operand::Weight(z_l_init)),
                Some(z) => b.add(z_h, Operand::Node(z)),
            };
            z_l = Some(stack(b, x, lps, slot_base, 0)?);
        }
        let slot_base = (h * (l_cycles + 1) + l_cycles) * lps;
        let z = z_l.expect("l_cycles > 0: the low stack ran");
        let x = b.add(z_h, Operand::Node(z));
        z_h = stack(b, x, lps, slot_base, lps)?;
    }
    let embd = b.get_rows_out(z_h);
    let output = b.output_weight(tok_embd)?;
    let logits = b.mul_mat(output, embd);
    Ok(Outputs { logits, embd })
}
