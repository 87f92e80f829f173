//! Low-rank gated hyper-connections (Qwen4-exp's; upstream's `build_hc_mix` and
//! `build_hc_combine` in src/models/qwen4exp.cpp): `hc` residual streams per token side by
//! side (`[n_embd * hc, T]`). A block reads the streams' mean, each value gated by a sigmoid
//! of a low-rank projection of the normed streams (DSV4_HC_PRE gated), and writes its
//! output back into every stream scaled by `2 * sigmoid(inject / hc)` (DSV4_HC_POST with the
//! identity comb). Unlike DeepSeek-V4's (`hc.rs`) there is no Sinkhorn comb and no
//! per-stream weight of the whole row.

use super::{BuildError, Builder};
use crate::graph::{NodeId, Op, Operand, WeightId};

/// The weights of one low-rank mixer (`<prefix>_{norm,down,up,inject}.weight`).
#[derive(Clone, Copy, Debug)]
pub struct HcLowRank {
    /// `[n_embd, hc]`: the grouped RMS norm's gammas (one per stream).
    pub norm: WeightId,
    /// `[n_embd * hc, rank]`, `[rank, n_embd * hc]`: the gate's projections.
    pub down: WeightId,
    pub up: WeightId,
    /// `[n_embd * hc, hc]`: the scatter weights' projection (none on the output head).
    pub inject: Option<WeightId>,
}

impl Builder<'_> {
    /// The mixer's weights named `<name>_norm.weight` ... (`inject`: whether it has one).
    pub fn hc_lowrank_weights(
        &mut self,
        name: &str,
        hc: usize,
        rank: usize,
        inject: bool,
    ) -> Result<HcLowRank, BuildError> {
        let ne = self.hp.n_embd as i64;
        let (hc, rank) = (hc as i64, rank as i64);
        let norm = self.weight(&format!("{name}_norm.weight"), &[ne, hc])?;
        let down = self.weight(&format!("{name}_down.weight"), &[ne * hc, rank])?;
        let up = self.weight(&format!("{name}_up.weight"), &[rank, ne * hc])?;
        let inject = if inject {
            Some(self.weight(&format!("{name}_inject.weight"), &[ne * hc, hc])?)
        } else {
            None
        };
        Ok(HcLowRank {
            norm,
            down,
            up,
            inject,
        })
    }

    /// RMS_NORM of each stream (`n_embd` values) times its own gammas (`w` `[n_embd, hc]`).
    pub fn hc_grouped_norm(&mut self, x: NodeId, w: WeightId) -> NodeId {
        let n = self.hp.n_embd;
        self.head_rms_norm(x, n, w, self.hp.eps_rms)
    }

    /// The block input of the streams (`build_hc_mix`), and the `[hc, T]` scatter weights'
    /// logits when the mixer has an `inject` projection.
    pub fn hc_lowrank_mix(
        &mut self,
        streams: NodeId,
        w: HcLowRank,
        hc: usize,
    ) -> (NodeId, Option<NodeId>) {
        let n = self.hp.n_embd;
        let xn = self.hc_grouped_norm(streams, w.norm);
        let lo = self.mul_mat_lora(w.down, xn);
        let lo = self.scale(lo, 1.0 / hc as f32);
        let lo = self.silu(lo);
        let gate = self.mul_mat_lora(w.up, lo);
        let t = self.ne1(xn);
        let op = Op::HcPre {
            x: xn,
            w: gate,
            n,
            gated: true,
            scale: 1.0 / hc as f32,
        };
        let mixed = self.push("dsv4_hc_pre", op, n, t);
        let inject = w.inject.map(|wi| self.mul_mat_lora(wi, xn));
        (mixed, inject)
    }

    /// The block's output back into the streams (`build_hc_combine`): each stream plus
    /// `block_out * 2 * sigmoid(inject / hc)` of its own weight.
    pub fn hc_lowrank_combine(
        &mut self,
        streams: NodeId,
        block_out: NodeId,
        inject: NodeId,
        hc: usize,
    ) -> NodeId {
        let w = self.scale(inject, 1.0 / hc as f32);
        let w = self.sigmoid(w);
        let w = self.scale(w, 2.0);
        let (n0, t) = (self.ne0(streams), self.ne1(streams));
        let op = Op::HcPost {
            x: block_out,
            res: streams,
            post: w,
            comb: None,
        };
        self.push("dsv4_hc_post", op, n0, t)
    }

    /// The streams' per-token dot products with `other`, per stream (`[hc, T]`): MUL, then
    /// SUM_ROWS over each stream's `n_embd` values.
    pub fn hc_stream_dots(&mut self, a: NodeId, b: NodeId, hc: usize) -> NodeId {
        let n = self.hp.n_embd;
        let t = self.ne1(a);
        let p = self.mul(a, Operand::Node(b));
        // a reshape to [n_embd, hc*T]: rows of one stream
        self.nodes[p].ne0 = n;
        self.nodes[p].ne1 = hc * t;
        self.push("sum_rows", Op::SumRows { src: p }, hc, t)
    }
}
