//! Hyper-connections (DeepSeek-V4's and HY-V4's): `hc` residual streams per token, side by
//! side in one row (`[n_embd * hc, T]`, upstream's `[n_embd, hc, T]`). Each block reads a
//! weighted sum of the streams and writes its output back into every stream.

use super::{BuildError, Builder};
use crate::graph::{HcMixKind, NodeId, Op, Operand, WeightId};

impl Builder<'_> {
    /// The control vector of layer `il` added to each of the `hc` streams (upstream's
    /// `build_cvec` on `[n_embd, hc, T]` broadcasts it); the streams unchanged without one.
    pub fn cvec_streams(&mut self, streams: NodeId, il: usize, hc: usize) -> NodeId {
        let has = self
            .adapters
            .cvec
            .as_ref()
            .and_then(|c| c.tensor_for(il))
            .is_some();
        if !has {
            return streams;
        }
        let n = self.hp.n_embd;
        let mut out: Option<NodeId> = None;
        for s in 0..hc {
            let x = self.view(streams, s * n, n);
            let x = self.cvec(x, il);
            out = Some(match out {
                Some(o) => self.concat_heads(o, x, 1),
                None => x,
            });
        }
        out.expect("hc streams")
    }

    /// Every stream starts as the token's embedding (`ggml_repeat_4d` of `[n_embd, 1, T]`).
    pub fn hc_expand(&mut self, x: NodeId, hc: usize) -> NodeId {
        let n = self.ne0(x);
        self.repeat_heads(x, n, hc)
    }

    /// The streams' mixes for one block: RMS_NORM of the streams' concatenation (no
    /// weight), MUL_MAT by `w_fn`, then the weights `kind` makes from them (see
    /// [`Op::HcMix`]: `[pre | post | comb]`, `[pre | post]` or `[pre]` per token).
    pub fn hc_mix(
        &mut self,
        streams: NodeId,
        w: [WeightId; 3],
        hc: usize,
        eps: f32,
        kind: HcMixKind,
    ) -> NodeId {
        let [w_fn, scale, base] = w;
        let flat = self.rms_norm(streams, None, self.hp.eps_rms);
        let mixes = self.mul_mat_raw(w_fn, flat);
        let t = self.ne1(mixes);
        let (name, n_out) = match kind {
            HcMixKind::Manifold { .. } => ("dsv4_hc_comb", (2 + hc) * hc),
            HcMixKind::Independent { .. } => ("hc_mix", 2 * hc),
            HcMixKind::Head => ("hc_head_mix", hc),
        };
        let op = Op::HcMix {
            mixes,
            scale,
            base,
            hc,
            eps,
            kind,
        };
        self.push(name, op, n_out, t)
    }

    /// The streams' sum weighted per token by `w` (`[hc, T]`, values `0..hc` of its rows),
    /// as upstream's unfused loop builds it: per stream a MUL by its weight, summed by ADDs
    /// in stream order (HY-V4's reduce, DeepSeek-V4's output head).
    pub fn hc_reduce(&mut self, streams: NodeId, w: NodeId, hc: usize) -> NodeId {
        let n = self.ne0(streams) / hc;
        let mut acc: Option<NodeId> = None;
        for h in 0..hc {
            let x = self.view(streams, h * n, n);
            let wh = self.view(w, h, 1);
            let cur = self.mul(x, Operand::Node(wh));
            acc = Some(match acc {
                Some(a) => self.add(a, Operand::Node(cur)),
                None => cur,
            });
        }
        acc.expect("hc > 0")
    }

    /// HY-V4's post step (no comb): every stream `s` becomes `res[s] + x * post[s]` (MUL,
    /// ADD, then the streams concatenated again).
    pub fn hc_post_independent(
        &mut self,
        x: NodeId,
        streams: NodeId,
        post: NodeId,
        hc: usize,
    ) -> NodeId {
        let n = self.ne0(x);
        let mut out: Option<NodeId> = None;
        for s in 0..hc {
            let res = self.view(streams, s * n, n);
            let p = self.view(post, s, 1);
            let xp = self.mul(x, Operand::Node(p));
            let cur = self.add(res, Operand::Node(xp));
            out = Some(match out {
                Some(o) => self.concat_heads(o, cur, 1),
                None => cur,
            });
        }
        out.expect("hc > 0")
    }

    /// The output head (`output_hc_{fn,base,scale}`): the streams' sum weighted by `pre =
    /// sigmoid(mixes * scale + base) + eps` of their RMS-normed concatenation.
    pub fn hc_head(&mut self, streams: NodeId, hc: usize, eps: f32) -> Result<NodeId, BuildError> {
        let n_embd = self.hp.n_embd as i64;
        let w_fn = self.weight("output_hc_fn.weight", &[hc as i64 * n_embd, hc as i64])?;
        let base = self.weight("output_hc_base.weight", &[hc as i64])?;
        let scale = self.weight("output_hc_scale.weight", &[1])?;
        let pre = self.hc_mix(streams, [w_fn, scale, base], hc, eps, HcMixKind::Head);
        Ok(self.hc_reduce(streams, pre, hc))
    }

    /// DeepSeek-V4's block input (`build_hc_pre` with `blk.<il>.hc_<which>_*`): the
    /// streams' `[pre | post | comb]` mixes ([`HcMixKind::Manifold`], the model's Sinkhorn
    /// iterations), the block's input as the `pre`-weighted sum (DSV4_HC_PRE), and the `post`
    /// weights and `comb` matrix [`Builder::hc_post_manifold`] writes back with.
    pub fn hc_pre_manifold(
        &mut self,
        il: usize,
        streams: NodeId,
        which: &str,
        hc: usize,
    ) -> Result<(NodeId, NodeId, NodeId), BuildError> {
        let e = &self.hp.ext;
        let (eps, iters) = (e.hc_eps, e.hc_sinkhorn_iters);
        let n_embd = self.hp.n_embd;
        let mix = ((2 + hc) * hc) as i64;
        let w_fn = self.lw(
            il,
            &format!("hc_{which}_fn.weight"),
            &[(hc * n_embd) as i64, mix],
        )?;
        let base = self.lw(il, &format!("hc_{which}_base.weight"), &[mix])?;
        let scale = self.lw(il, &format!("hc_{which}_scale.weight"), &[3])?;
        let kind = HcMixKind::Manifold { iters };
        let split = self.hc_mix(streams, [w_fn, scale, base], hc, eps, kind);
        let t = self.ne1(split);
        let pre = self.view(split, 0, hc);
        let post = self.view(split, hc, hc);
        let comb = self.view(split, 2 * hc, hc * hc);
        let op = Op::HcPre {
            x: streams,
            w: pre,
            n: n_embd,
            gated: false,
            scale: 1.0,
        };
        let cur = self.push("dsv4_hc_pre", op, n_embd, t);
        Ok((cur, post, comb))
    }

    /// DSV4_HC_POST: every stream becomes `x * post[dst] + sum_src stream[src] * comb[dst,
    /// src]`.
    pub fn hc_post_manifold(
        &mut self,
        x: NodeId,
        streams: NodeId,
        post: NodeId,
        comb: NodeId,
    ) -> NodeId {
        let (n0, t) = (self.ne0(streams), self.ne1(streams));
        let op = Op::HcPost {
            x,
            res: streams,
            post,
            comb: Some(comb),
        };
        self.push("dsv4_hc_post", op, n0, t)
    }
}
