//! Upstream's `cb(cur, name, il)`: the names (and 3-D shapes) a graph callback is shown
//! for the tensors upstream's graph builders name, so `llama-eval-callback` prints on our
//! library the tensor list it prints on upstream's (see `graph::shown`).

use super::*;
use crate::graph::shown::CbName;

impl<'m> Builder<'m> {
    /// Names node `n` as upstream's `cb(n, name, il)` does (the last call wins).
    pub fn cb(&mut self, n: NodeId, name: &'static str, il: Option<usize>) {
        self.nodes[n].shown.name = Some(CbName::new(name, il));
    }

    /// A `build_norm` result's nodes from the result down: the NORM / RMS_NORM, the MUL by
    /// its weight, and the ADD of its bias when there is one; `None` when `n` is no such
    /// result.
    fn norm_chain(&self, n: NodeId) -> Option<(NodeId, NodeId, Option<NodeId>)> {
        let is_norm = |m: NodeId| matches!(self.nodes[m].op, Op::RmsNorm { .. } | Op::Norm { .. });
        let mul_of_norm = |m: NodeId| match self.nodes[m].op {
            Op::Mul {
                a,
                b: Operand::Weight(_),
            } if is_norm(a) => Some(a),
            _ => None,
        };
        if let Some(norm) = mul_of_norm(n) {
            return Some((norm, n, None));
        }
        match self.nodes[n].op {
            Op::Add {
                a,
                b: Operand::Weight(_),
            } => mul_of_norm(a).map(|norm| (norm, a, Some(n))),
            _ => None,
        }
    }

    /// `cb` on a `build_norm` result: names it, and the NORM / RMS_NORM it multiplies
    /// "norm" (the MUL by the weight "norm_w" when a bias is added after it), as
    /// `build_norm` does.
    pub fn cb_norm(&mut self, n: NodeId, name: &'static str, il: Option<usize>) {
        if let Some((norm, mul, bias)) = self.norm_chain(n) {
            if bias.is_some() {
                self.cb(mul, "norm_w", il);
            }
            self.cb(norm, "norm", il);
        }
        self.cb(n, name, il);
    }

    /// A projection's nodes from its result down: the MUL by a per-tensor scale and the
    /// ADD of a bias (in either order) above its MUL_MAT.
    fn proj_chain(&self, n: NodeId) -> (Option<NodeId>, Option<NodeId>, Option<NodeId>) {
        let (mut mm, mut bias, mut scale) = (None, None, None);
        let mut at = n;
        for _ in 0..3 {
            match self.nodes[at].op {
                Op::MulMat { .. } => {
                    mm = Some(at);
                    break;
                }
                Op::Add {
                    a,
                    b: Operand::Weight(_),
                } if bias.is_none() => {
                    bias = Some(at);
                    at = a;
                }
                Op::Mul {
                    a,
                    b: Operand::Weight(_),
                } if scale.is_none() => {
                    scale = Some(at);
                    at = a;
                }
                _ => break,
            }
        }
        (mm, bias, scale)
    }

    /// `cb` on a `build_lora_mm` (+ bias) result as `build_qkv` names it: the product
    /// (its scaled value, when there is a scale: the bare MUL_MAT is then unnamed) and the
    /// biased sum all `name`; with `inner: false` (the output projections) only the result.
    pub fn cb_linear(&mut self, n: NodeId, name: &'static str, il: Option<usize>) {
        self.cb_linear_with(n, name, il, true)
    }

    fn cb_linear_with(&mut self, n: NodeId, name: &'static str, il: Option<usize>, inner: bool) {
        let (mm, bias, scale) = self.proj_chain(n);
        if let Some(mm) = mm {
            let named = inner && scale.is_none();
            self.cb(mm, if named { name } else { "" }, il);
        }
        for x in [scale, bias].into_iter().flatten() {
            self.cb(x, if inner { name } else { "" }, il);
        }
        self.cb(n, name, il);
    }

    /// `cb` on an output projection (`attn_out`, `result_output`): upstream names only the
    /// result; the product, its scaled value and the sum before it are unnamed.
    pub fn cb_output(&mut self, n: NodeId, name: &'static str, il: Option<usize>) {
        self.cb_linear_with(n, name, il, false)
    }

    /// `cb` on a `build_ffn` projection: the MUL_MAT `mm`, the biased sum `b`, the scaled
    /// value `s` (`ffn_up`, `ffn_up_b`, `ffn_up_s`; `""` leaves one unnamed).
    pub fn cb_ffn_proj(&mut self, n: NodeId, names: [&'static str; 3], il: Option<usize>) {
        let (mm, bias, scale) = self.proj_chain(n);
        for (x, name) in [mm, bias, scale].into_iter().zip(names) {
            if let Some(x) = x {
                self.cb(x, name, il);
            }
        }
    }

    /// Names `x` as a `build_norm` result called `name` when it is one and has no name yet
    /// (the norm before attention or the FFN, which most architectures call `attn_norm` /
    /// `ffn_norm`).
    pub fn cb_norm_default(&mut self, x: NodeId, name: &'static str, il: usize) {
        if self.norm_chain(x).is_some() && self.nodes[x].shown.name.is_none() {
            self.cb_norm(x, name, Some(il));
        }
    }

    /// The layer of a per-layer weight (`blk.<il>.…`).
    pub fn layer_of(&self, w: WeightId) -> Option<usize> {
        let rest = self.weights[w.0].name.strip_prefix("blk.")?;
        rest.split('.').next()?.parse().ok()
    }

    /// Names a `build_norm` result by its weight, as the architectures name these: the
    /// NORM / RMS_NORM `norm-<il>`, the result `attn_norm-<il>` / `ffn_norm-<il>` /
    /// `result_norm` for the weights of those names (others keep only `norm`).
    pub fn cb_norm_by_weight(&mut self, out: NodeId, w: WeightId) {
        let il = self.layer_of(w);
        let name = &self.weights[w.0].name;
        let cb_name = if name == "output_norm.weight" {
            Some("result_norm")
        } else if name.ends_with(".attn_norm.weight") {
            Some("attn_norm")
        } else if name.ends_with(".ffn_norm.weight") {
            Some("ffn_norm")
        } else {
            None
        };
        match cb_name {
            Some(n) => self.cb_norm(out, n, il),
            None => {
                if let Op::Mul { a, .. } = self.nodes[out].op {
                    self.cb(a, "norm", il);
                }
            }
        }
    }

    /// Shows node `n` as upstream's `[head_dim, n0 / head_dim, n1]` tensor.
    pub fn shown_heads(&mut self, n: NodeId, head_dim: usize) {
        let (n0, n1) = (self.ne0(n), self.ne1(n));
        if head_dim > 0 && n0 % head_dim == 0 {
            self.nodes[n].shown.ne = Some([head_dim, n0 / head_dim, n1]);
        }
    }

    /// Upstream RESHAPEs node `n` to `ne` and names the result `name` (shown after `n`).
    pub fn shown_reshape(
        &mut self,
        n: NodeId,
        name: &'static str,
        il: Option<usize>,
        ne: [usize; 3],
    ) {
        self.nodes[n].shown.then_reshape = Some((CbName::new(name, il), ne));
    }

    /// The end of a layer as most architectures write it: the FFN's output plus its input,
    /// the control vector, named `l_out`.
    pub fn layer_out(&mut self, il: usize, cur: NodeId, ffn_inp: NodeId) -> NodeId {
        let out = self.add(cur, Operand::Node(ffn_inp));
        let out = self.cvec(out, il);
        self.cb(out, "l_out", Some(il));
        out
    }
}
