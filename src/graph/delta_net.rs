//! The linear-attention layers of the gated delta net architectures, after upstream's
//! `llm_build_delta_net_base` and the Qwen3-Next / Qwen3.5 files (`build_layer_attn_linear`):
//! input projections, SSM_CONV over the sequence's conv state, SiLU, L2-normed Q and K,
//! GATED_DELTA_NET over the sequence's state, a gated RMS norm, the output projection. On
//! the CPU upstream runs the fused GATED_DELTA_NET op for prompts and single tokens alike
//! (`fused_gdn_ar` / `fused_gdn_ch` resolve to enabled), which is what the graph builds.

use super::builder::{BuildError, Builder};
use super::{GdnShape, NodeId, Op, Operand, WeightId};

/// Where a Qwen linear-attention layer takes its projections from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QwenGdn {
    /// Qwen3.5: `attn_qkv`, `attn_gate`, `ssm_beta`, `ssm_alpha` with their per-tensor
    /// scales; Q/K heads broadcast over the V heads by the op.
    Qwen35,
    /// Qwen3-Next: `attn_qkv` + `attn_gate` or the legacy fused `ssm_in`, `ssm_ba`, no
    /// per-tensor scales; Q/K heads repeated over the V heads first.
    Qwen3Next,
    /// Qwen4-exp: Qwen3.5's projections, the normed output gated by `sigmoid(z)` (not
    /// `silu(z)`).
    Qwen4Exp,
}

impl Builder<'_> {
    /// UNARY(SOFTPLUS).
    pub fn softplus(&mut self, src: NodeId) -> NodeId {
        let (n0, n1) = (self.ne0(src), self.ne1(src));
        self.push("softplus", Op::Softplus { src }, n0, n1)
    }

    /// Each head of `head_dim` values repeated `n` times in place.
    pub fn repeat_heads(&mut self, src: NodeId, head_dim: usize, n: usize) -> NodeId {
        let (n0, n1) = (self.ne0(src), self.ne1(src));
        let op = Op::RepeatHeads { src, head_dim, n };
        self.push("repeat", op, n0 * n, n1)
    }

    /// `build_gdn_l2_norm` of every head: RMS_NORM with `eps / head_dim`, then SCALE by
    /// `1 / sqrt(head_dim)` (which also reshapes back to `[n_head*head_dim, T]`).
    pub fn l2_norm_heads(&mut self, x: NodeId, head_dim: usize, eps: f32) -> NodeId {
        let (n0, n1) = (self.ne0(x), self.ne1(x));
        let n = head_dim as f32;
        let y = self.push(
            "rms_norm",
            Op::RmsNorm {
                src: x,
                eps: eps / n,
            },
            head_dim,
            (n0 / head_dim) * n1,
        );
        self.push(
            "scale",
            Op::Scale {
                src: y,
                s: 1.0 / n.sqrt(),
            },
            n0,
            n1,
        )
    }

    /// GATED_DELTA_NET with the state of layer `il` (see [`Op::GatedDeltaNet`]).
    #[allow(clippy::too_many_arguments)]
    pub fn gated_delta_net(
        &mut self,
        il: usize,
        q: NodeId,
        k: NodeId,
        v: NodeId,
        g: NodeId,
        beta: NodeId,
        shape: GdnShape,
    ) -> NodeId {
        let (n0, n1) = (self.ne0(v), self.ne1(v));
        let op = Op::GatedDeltaNet {
            q,
            k,
            v,
            g,
            beta,
            layer: il,
            shape,
        };
        self.push("gated_delta_net", op, n0, n1)
    }

    /// MUL_MAT with the weight's per-tensor scale when `scaled` (upstream passes it for
    /// some tensors only), LoRA products either way.
    fn mm_scaled(&mut self, w: WeightId, x: NodeId, scaled: bool) -> NodeId {
        if scaled {
            self.mul_mat(w, x)
        } else {
            self.mul_mat_lora(w, x)
        }
    }

    /// The Qwen3-Next / Qwen3.5 gated delta net layer `il` on the normed input `cur`.
    pub fn qwen_gdn_layer(
        &mut self,
        il: usize,
        cur: NodeId,
        kind: QwenGdn,
    ) -> Result<NodeId, BuildError> {
        let hp = self.hp;
        let s = hp.ext.ssm;
        let n_embd = hp.n_embd as i64;
        let (hk, nk, nv) = (s.d_state, s.n_group, s.dt_rank);
        if nk == 0 || nv == 0 || nv % nk != 0 || s.d_inner % nv != 0 || s.d_inner / nv != hk {
            return Err(BuildError::Invalid(format!(
                "ssm.inner_size {} / ssm.time_step_rank {nv} must equal ssm.state_size {hk}, and ssm.group_count {nk} divide the V heads",
                s.d_inner
            )));
        }
        let hv = s.d_inner / nv;
        let r = nv / nk;
        let conv_dim = 2 * hk * nk + hv * nv;
        let scaled = kind != QwenGdn::Qwen3Next;
        let conv_w = self.lw(il, "ssm_conv1d.weight", &[s.d_conv as i64, conv_dim as i64])?;
        let dt_b = self.lw(il, "ssm_dt.bias", &[nv as i64])?;
        let a = self.lw(il, "ssm_a", &[nv as i64])?;
        let norm = self.lw(il, "ssm_norm.weight", &[hv as i64])?;
        let out_w = self.lw(il, "ssm_out.weight", &[(hv * nv) as i64, n_embd])?;
        let fused = self.lw_opt(il, "attn_qkv.weight", &[n_embd, conv_dim as i64])?;
        let (qkv, z) = match (kind, fused) {
            (QwenGdn::Qwen35 | QwenGdn::Qwen4Exp, None) => {
                return Err(BuildError::MissingTensor(format!(
                    "blk.{il}.attn_qkv.weight"
                )))
            }
            (_, Some(wqkv)) => {
                let wz = self.lw(il, "attn_gate.weight", &[n_embd, (hv * nv) as i64])?;
                if kind == QwenGdn::Qwen3Next {
                    // (upstream's loader creates the legacy fused projection beside it)
                    let qkvz = 2 * (hk * nk + hv * nv);
                    self.declare_unread(&format!("blk.{il}.ssm_in.weight"), &[n_embd, qkvz as i64]);
                }
                (
                    self.mm_scaled(wqkv, cur, scaled),
                    self.mm_scaled(wz, cur, scaled),
                )
            }
            (QwenGdn::Qwen3Next, None) => {
                // per K head: q, k, its r V heads' v, their z
                let width = 2 * hk + 2 * hv * r;
                let w = self.lw(il, "ssm_in.weight", &[n_embd, (width * nk) as i64])?;
                let mixed = self.mul_mat_lora(w, cur);
                let q = self.view_heads(mixed, width, 0, hk);
                let k = self.view_heads(mixed, width, hk, hk);
                let v = self.view_heads(mixed, width, 2 * hk, hv * r);
                let z = self.view_heads(mixed, width, 2 * hk + hv * r, hv * r);
                let qk = self.concat_heads(q, k, 1);
                (self.concat_heads(qk, v, 1), z)
            }
        };
        let (beta, alpha) = match kind {
            QwenGdn::Qwen35 | QwenGdn::Qwen4Exp => {
                let wb = self.lw(il, "ssm_beta.weight", &[n_embd, nv as i64])?;
                let wa = self.lw(il, "ssm_alpha.weight", &[n_embd, nv as i64])?;
                (self.mul_mat(wb, cur), self.mul_mat(wa, cur))
            }
            QwenGdn::Qwen3Next => {
                let w = self.lw(il, "ssm_ba.weight", &[n_embd, 2 * nv as i64])?;
                let ba = self.mul_mat_lora(w, cur);
                (
                    self.view_heads(ba, 2 * r, 0, r),
                    self.view_heads(ba, 2 * r, r, r),
                )
            }
        };
        let beta = self.sigmoid(beta);
        let alpha = self.add(alpha, Operand::Weight(dt_b));
        let alpha = self.softplus(alpha);
        let gate = self.mul(alpha, Operand::Weight(a));

        let conv = self.ssm_conv(il, qkv, conv_w, s.d_conv);
        let conv = self.silu(conv);
        let q = self.view(conv, 0, hk * nk);
        let k = self.view(conv, hk * nk, hk * nk);
        let v = self.view(conv, 2 * hk * nk, hv * nv);
        let mut q = self.l2_norm_heads(q, hk, hp.eps_rms);
        let mut k = self.l2_norm_heads(k, hk, hp.eps_rms);
        let mut h_k = nk;
        if kind == QwenGdn::Qwen3Next && r > 1 {
            q = self.repeat_heads(q, hk, r);
            k = self.repeat_heads(k, hk, r);
            h_k = nv;
        }
        let shape = GdnShape {
            s_v: hv,
            h_v: nv,
            h_k,
            kda: false,
        };
        let o = self.gated_delta_net(il, q, k, v, gate, beta, shape);
        let o = self.head_rms_norm(o, hv, norm, hp.eps_rms);
        let zs = if kind == QwenGdn::Qwen4Exp {
            self.sigmoid(z)
        } else {
            self.silu(z)
        };
        let o = self.mul(o, Operand::Node(zs));
        Ok(self.mm_scaled(out_w, o, scaled))
    }
}
