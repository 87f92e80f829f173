//! Layer blocks that many architectures share as upstream copied them from llama: the
//! pre-norm attention block and the residual add that keeps only the output rows on the
//! last layer. An architecture file calls these instead of repeating the same dozen lines,
//! and spells out only where it differs.

use super::builder::{BuildError, Builder};
use super::{NodeId, Operand, WeightId};

/// Where a pre-norm attention block applies the per-head Q/K RMS norms
/// (`attn_q_norm` / `attn_k_norm`) relative to RoPE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QkNorm {
    /// No Q/K norms.
    None,
    /// Normalise, then rotate (qwen3, dots1).
    BeforeRope,
    /// Rotate, then normalise (hunyuan).
    AfterRope,
}

/// The parts of llama's attention block that differ between the architectures that copy it.
#[derive(Clone, Copy, Debug)]
pub struct PreNormAttn {
    /// `rope_freqs` frequency factors, when the model has them.
    pub rope_freqs: Option<WeightId>,
    /// The scale of QK^T.
    pub kq_scale: f32,
    pub qk_norm: QkNorm,
    /// Whether `attn_output.bias` is read when present (upstream passes `wo_b` or nullptr).
    pub out_bias: bool,
}

impl Builder<'_> {
    /// llama's attention block: RMS norm with `attn_norm`, Q/K/V, the Q/K norms where
    /// `a` says, RoPE, attention with `attn_output`, plus the residual `inp`. Returns the
    /// FFN's input (`ffn_inp` in upstream's files).
    pub fn pre_norm_attn(
        &mut self,
        il: usize,
        inp: NodeId,
        a: PreNormAttn,
    ) -> Result<NodeId, BuildError> {
        let hp = self.hp;
        let n_embd = hp.n_embd as i64;
        let nq = (hp.head_k * hp.n_head[il]) as i64;
        let attn_norm = self.lw(il, "attn_norm.weight", &[n_embd])?;
        let wo = self.lw(il, "attn_output.weight", &[nq, n_embd])?;
        let wo_b = if a.out_bias {
            self.lw_opt(il, "attn_output.bias", &[n_embd])?
        } else {
            None
        };
        let cur = self.rms_norm(inp, Some(attn_norm), hp.eps_rms);
        self.cb_norm(cur, "attn_norm", Some(il));
        let (q, k, v) = self.qkv(il, cur)?;
        let (q, k) = match a.qk_norm {
            QkNorm::BeforeRope => self.qk_norm(il, q, k)?,
            _ => (q, k),
        };
        let (q, k) = self.rope_qk(q, k, a.rope_freqs, false);
        let (q, k) = match a.qk_norm {
            QkNorm::AfterRope => self.qk_norm(il, q, k)?,
            _ => (q, k),
        };
        let cur = self.attn(il, q, k, v, wo, wo_b, a.kq_scale);
        Ok(self.residual(il, cur, inp))
    }

    /// `cur + res`; on the last layer both first keep only the rows whose outputs are
    /// wanted (upstream's `inp_out_ids`), so the layers after compute only those.
    pub fn residual(&mut self, il: usize, cur: NodeId, res: NodeId) -> NodeId {
        let (cur, res) = if il == self.hp.n_layer - 1 {
            (self.get_rows_out(cur), self.get_rows_out(res))
        } else {
            (cur, res)
        };
        let ffn_inp = self.add(cur, Operand::Node(res));
        self.cb(ffn_inp, "ffn_inp", Some(il));
        ffn_inp
    }
}
