//! Normalisations (upstream's `build_norm`): RMS and layer norms, whole rows and per
//! head.

use super::*;

impl<'m> Builder<'m> {
    /// `build_norm` with LLM_NORM_RMS: RMS_NORM then MUL by the weight (and ADD of a bias).
    pub fn rms_norm(&mut self, x: NodeId, w: Option<WeightId>, eps: f32) -> NodeId {
        let (n0, n1) = (self.ne0(x), self.ne1(x));
        let y = self.push("rms_norm", Op::RmsNorm { src: x, eps }, n0, n1);
        match w {
            Some(w) => {
                let out = self.mul(y, Operand::Weight(w));
                self.cb_norm_by_weight(out, w);
                out
            }
            None => y,
        }
    }

    /// `build_norm` with LLM_NORM: NORM, MUL by the weight, ADD of the bias.
    pub fn layer_norm(
        &mut self,
        x: NodeId,
        w: Option<WeightId>,
        b: Option<WeightId>,
        eps: f32,
    ) -> NodeId {
        let (n0, n1) = (self.ne0(x), self.ne1(x));
        let mut y = self.push("norm", Op::Norm { src: x, eps }, n0, n1);
        if let Some(w) = w {
            y = self.mul(y, Operand::Weight(w));
        }
        if let Some(b) = b {
            y = self.add(y, Operand::Weight(b));
        }
        if let Some(w) = w {
            self.cb_norm_by_weight(y, w);
        }
        y
    }

    /// RMS_NORM of each head (`head_dim` values) of a [n_head*head_dim, T] node, times the
    /// weight (broadcast over heads): qwen3's and gemma3's q/k norms.
    pub fn head_rms_norm(&mut self, x: NodeId, head_dim: usize, w: WeightId, eps: f32) -> NodeId {
        let (n0, n1) = (self.ne0(x), self.ne1(x));
        let heads = n0 / head_dim;
        // a reshape to [head_dim, heads*T] is free: the same values, rows of head_dim
        let y = self.push(
            "rms_norm",
            Op::RmsNorm { src: x, eps },
            head_dim,
            heads * n1,
        );
        let y = self.mul(y, Operand::Weight(w));
        // RESHAPE back to [n_head*head_dim, T]: same values (a weight operand broadcasts by
        // its own length, so the MUL is unaffected)
        self.nodes[y].ne0 = n0;
        self.nodes[y].ne1 = n1;
        y
    }

    /// RMS_NORM of each head (`head_dim` values) of a [n_head*head_dim, T] node, no weight
    /// (llama4's Q/K norms).
    pub fn head_rms_norm_plain(&mut self, x: NodeId, head_dim: usize, eps: f32) -> NodeId {
        let (n0, n1) = (self.ne0(x), self.ne1(x));
        let y = self.push(
            "rms_norm",
            Op::RmsNorm { src: x, eps },
            head_dim,
            (n0 / head_dim) * n1,
        );
        // the RESHAPE back to [n_head*head_dim, T] (a copy: nodes carry their own shape;
        // times 1 leaves every value as it is)
        self.push("reshape", Op::Scale { src: y, s: 1.0 }, n0, n1)
    }

    /// NORM (LayerNorm without bias) of each head (`head_dim` values) of a
    /// [n_head*head_dim, T] node, times a weight of one value per head and position
    /// (`[head_dim, n_head]`, broadcast over tokens): stablelm's per-head q/k norms.
    pub fn head_layer_norm(&mut self, x: NodeId, head_dim: usize, w: WeightId, eps: f32) -> NodeId {
        let (n0, n1) = (self.ne0(x), self.ne1(x));
        let heads = n0 / head_dim;
        // the reshape to [head_dim, heads*T] and back is free (the same values)
        let y = self.push("norm", Op::Norm { src: x, eps }, head_dim, heads * n1);
        // the weight covers a whole row of n_head*head_dim values: its chunks are tokens
        let y = self.mul(y, Operand::Weight(w));
        self.nodes[y].ne0 = n0;
        self.nodes[y].ne1 = n1;
        y
    }
}
