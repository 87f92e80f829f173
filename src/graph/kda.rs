//! Kimi's delta attention (KDA), the linear-attention layer of the Kimi-Linear family as
//! upstream's kimi-k3.cpp, bailingmoe3.cpp and glm5-next.cpp build it: Q, K and V each
//! projected and convolved (SSM_CONV, SiLU) over its own third of the layer's conv state
//! row, a decay gate per value (not per head, as the Qwen delta nets), L2-normed Q and K,
//! GATED_DELTA_NET over the sequence's state, a per-head RMS norm times the sigmoid of an
//! output gate, the output projection. Every product here is a plain MUL_MAT (upstream
//! passes no per-tensor scales and no LoRA to these projections).

use super::builder::{BuildError, Builder};
use super::{GdnShape, NodeId, Op, Operand, WeightId};

/// How an architecture computes the decay gate from `f = ssm_f_a x` (or
/// `ssm_f_b ssm_f_a x`) `+ ssm_dt.bias` and the per-head `A = ssm_a`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum KdaDecay {
    /// Ling/Ring (bailingmoe3): full-rank `ssm_f_a`, `lower_bound * sigmoid(f * A)`.
    Bailing { lower_bound: f32 },
    /// Kimi (kimi-k3, glm5-next): low-rank `ssm_f_a`/`ssm_f_b`; with a lower bound
    /// `lower_bound * sigmoid(-(f * A))`, without one `softplus(f) * A`.
    Kimi { lower_bound: Option<f32> },
}

/// Where the output gate comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KdaOutGate {
    /// One full-rank projection of this name (`ssm_g_a`: bailingmoe3, `ssm_g`: kimi-k3).
    Full(&'static str),
    /// The low-rank pair `ssm_g_b ssm_g_a` (glm5-next, kimi-linear).
    LowRank,
}

/// One architecture's KDA choices.
#[derive(Clone, Copy, Debug)]
pub struct Kda {
    /// Values per head (`kda.head_dim`); the heads are the model's `n_head` of layer 0.
    pub head_dim: usize,
    pub d_conv: usize,
    pub decay: KdaDecay,
    pub out_gate: KdaOutGate,
    /// The epsilon of Q's and K's L2 norms (the RMS epsilon, or glm5-next's 1e-6).
    pub l2_eps: f32,
}

impl Builder<'_> {
    /// The KDA layer `il` on the normed input `cur`.
    pub fn kda_layer(&mut self, il: usize, cur: NodeId, kda: Kda) -> Result<NodeId, BuildError> {
        let hp = self.hp;
        let n_embd = hp.n_embd as i64;
        let (hd, nh) = (kda.head_dim, hp.n_head.first().copied().unwrap_or(0));
        if hd == 0 || nh == 0 || kda.d_conv == 0 {
            return Err(BuildError::Invalid(format!(
                "KDA layer {il}: kda.head_dim {hd}, head_count {nh} and ssm.conv_kernel {} must be > 0",
                kda.d_conv
            )));
        }
        let d_inner = (hd * nh) as i64;
        let dc = kda.d_conv as i64;
        let mut qkv = [0; 3];
        for (i, p) in ["q", "k", "v"].into_iter().enumerate() {
            let w = self.lw(il, &format!("attn_{p}.weight"), &[n_embd, d_inner])?;
            let conv = self.lw(il, &format!("ssm_conv1d_{p}.weight"), &[dc, 1, d_inner])?;
            // (upstream's loaders create the projections' biases too, its graphs add none)
            self.declare_unread(&format!("blk.{il}.attn_{p}.bias"), &[d_inner]);
            let x = self.mul_mat_raw(w, cur);
            let x = self.ssm_conv_at(il, x, conv, kda.d_conv, i * hd * nh * (kda.d_conv - 1));
            qkv[i] = self.silu(x);
        }
        let dt_b = self.lw(il, "ssm_dt.bias", &[d_inner])?;
        let gate = match kda.decay {
            KdaDecay::Bailing { lower_bound } => {
                let f_a = self.lw(il, "ssm_f_a.weight", &[n_embd, d_inner])?;
                let a = self.lw(il, "ssm_a", &[1, nh as i64])?;
                let f = self.mul_mat_raw(f_a, cur);
                let f = self.add(f, Operand::Weight(dt_b));
                let f = self.mul_per_head(f, a, hd);
                let f = self.sigmoid(f);
                self.scale(f, lower_bound)
            }
            KdaDecay::Kimi { lower_bound } => {
                let f_a = self.lw(il, "ssm_f_a.weight", &[n_embd, hd as i64])?;
                let f_b = self.lw(il, "ssm_f_b.weight", &[hd as i64, d_inner])?;
                let a = self.lw(il, "ssm_a", &[nh as i64])?;
                let f = self.mul_mat_raw(f_a, cur);
                let f = self.mul_mat_raw(f_b, f);
                let f = self.add(f, Operand::Weight(dt_b));
                match lower_bound {
                    Some(lb) => {
                        let f = self.mul_per_head(f, a, hd);
                        let f = self.scale(f, -1.0);
                        let f = self.sigmoid(f);
                        self.scale(f, lb)
                    }
                    None => {
                        let f = self.softplus(f);
                        self.mul_per_head(f, a, hd)
                    }
                }
            }
        };
        let wb = self.lw(il, "ssm_beta.weight", &[n_embd, nh as i64])?;
        let beta = self.mul_mat_raw(wb, cur);
        let beta = self.sigmoid(beta);
        let [q, k, v] = qkv;
        let q = self.l2_norm_heads(q, hd, kda.l2_eps);
        let k = self.l2_norm_heads(k, hd, kda.l2_eps);
        let shape = GdnShape {
            s_v: hd,
            h_v: nh,
            h_k: nh,
            kda: true,
        };
        let o = self.gated_delta_net(il, q, k, v, gate, beta, shape);
        let g = match kda.out_gate {
            KdaOutGate::Full(name) => {
                let w = self.lw(il, &format!("{name}.weight"), &[n_embd, d_inner])?;
                self.mul_mat_raw(w, cur)
            }
            KdaOutGate::LowRank => {
                let wa = self.lw(il, "ssm_g_a.weight", &[n_embd, hd as i64])?;
                let wb = self.lw(il, "ssm_g_b.weight", &[hd as i64, d_inner])?;
                let g = self.mul_mat_raw(wa, cur);
                self.mul_mat_raw(wb, g)
            }
        };
        let norm = self.lw(il, "ssm_norm.weight", &[hd as i64])?;
        let wo = self.lw(il, "attn_output.weight", &[d_inner, n_embd])?;
        let o = self.head_rms_norm(o, hd, norm, hp.eps_rms);
        let g = self.sigmoid(g);
        let o = self.mul(o, Operand::Node(g));
        Ok(self.mul_mat_raw(wo, o))
    }

    /// MUL by one weight value per head of `head_dim` values (ggml's broadcast of `[1,
    /// n_head]` over `[head_dim, n_head, T]`).
    pub fn mul_per_head(&mut self, x: NodeId, w: WeightId, head_dim: usize) -> NodeId {
        let (n0, n1) = (self.ne0(x), self.ne1(x));
        let op = Op::MulRep {
            a: x,
            b: w,
            rep: head_dim,
        };
        self.push("mul", op, n0, n1)
    }
}
