//! `cogvlm` (upstream's src/models/cogvlm.cpp): llama's RMS-normed block with two sets of
//! weights — the text ones for token batches, the vision experts (`vis_*`) for embedding
//! batches —, a fused QKV without bias or scale, NeoX rotary embeddings with ggml_rope's
//! defaults (base 10000, no scaling: upstream does not pass the model's), a SiLU-gated FFN
//! without scales. Upstream's graph selects no output rows, so with fewer outputs than
//! tokens its logits are the batch's first rows, not the output tokens' (llama-context
//! copies the first `n_outputs` rows); ours selects the output tokens' rows, as every other
//! architecture's graph: the same values where every token is an output (docs/dropin.md).

use super::super::builder::{BuildError, Builder, Outputs};
use super::super::{GluKind, Op, Operand, RopeMode, RopeParams};
use super::def::{no_hparams, ArchDef, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["cogvlm"],
    rope: Rope::Mode(RopeMode::Neox),
    memory: Memory::Kv,
    hparams: no_hparams,
    graph,
};

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
    let kq_scale = 1.0 / (hp.head_v as f32).sqrt();
    // ggml_rope(ctx, x, pos, n_embd_head, mode): ggml_rope_impl's defaults
    let rope = RopeParams {
        n_rot: head,
        mode: RopeMode::Neox,
        n_ctx_orig: 0,
        freq_base: 10000.0,
        freq_scale: 1.0,
        ext_factor: 0.0,
        attn_factor: 1.0,
        beta_fast: 32.0,
        beta_slow: 1.0,
    };
    // upstream: the text weights for a batch of tokens, the vision experts' for embeddings
    let vis = b.embd_input;
    let (tok_embd, mut inp) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let nh = hp.n_head[il];
        let nq = (head * nh) as i64;
        let nkv = hp.n_head_kv[il];
        let attn_norm = b.lw(il, "attn_norm.weight", &[n_embd])?;
        let ffn_norm = b.lw(il, "ffn_norm.weight", &[n_embd])?;
        // both sets are required, as upstream's load; the batch's kind picks one
        let n_ff = hp.n_ff[il] as i64;
        let mut sets = Vec::new();
        for names in [
            ["attn_qkv", "attn_output", "ffn_up", "ffn_gate", "ffn_down"],
            [
                "vis_attn_qkv",
                "vis_attn_output",
                "vis_up",
                "vis_gate",
                "vis_down",
            ],
        ] {
            let w = |b: &mut Builder, i: usize, want: &[i64]| {
                b.lw(il, &format!("{}.weight", names[i]), want)
            };
            sets.push((
                names[0].starts_with("vis_"),
                w(b, 0, &[n_embd, 3 * nq])?,
                w(b, 1, &[nq, n_embd])?,
                w(b, 2, &[n_embd, n_ff])?,
                w(b, 3, &[n_embd, n_ff])?,
                w(b, 4, &[n_ff, n_embd])?,
            ));
        }
        let &(_, wqkv, wo, up, gate, down) = sets.iter().find(|s| s.0 == vis).expect("both sets");

        let cur = b.rms_norm(inp, Some(attn_norm), hp.eps_rms);
        let qkv = b.mul_mat_raw(wqkv, cur);
        // views at 0, n_embd and 2*n_embd of each row
        let q = b.view(qkv, 0, head * nh);
        let k = b.view(qkv, hp.n_embd, head * nkv);
        let v = b.view(qkv, 2 * hp.n_embd, head * nkv);
        let rot = |b: &mut Builder, x| {
            let (n0, n1) = (b.ne0(x), b.ne1(x));
            let op = Op::Rope {
                src: x,
                head_dim: head,
                params: rope,
                freq_factors: None,
            };
            b.push("rope", op, n0, n1)
        };
        let q = rot(b, q);
        let k = rot(b, k);
        // `<name>.scale` applies when the file has one: the text projection's (the vision
        // experts' has none, and upstream passes none)
        let cur = b.attn(il, q, k, v, wo, None, kq_scale);
        b.cb_output(cur, "attn_out", Some(il));
        let ffn_inp = b.add(cur, Operand::Node(inp));
        let cur = b.rms_norm(ffn_inp, Some(ffn_norm), hp.eps_rms);
        let cur = b.ffn(
            cur,
            up,
            None,
            gate,
            None,
            down,
            None,
            GluKind::Swiglu,
            false,
        );
        inp = b.layer_out(il, cur, ffn_inp);
    }
    let inp = b.get_rows_out(inp);
    b.rms_output(inp, tok_embd, false)
}
