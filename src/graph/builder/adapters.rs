//! LoRA adapters and control vectors in the graph (upstream's `build_lora_mm`,
//! `build_cvec`).

use super::*;

impl<'m> Builder<'m> {
    /// Index of adapter tensor `t` in the graph's list (added once).
    pub(super) fn adapter_tensor(&mut self, t: &Arc<AdapterTensor>) -> usize {
        if let Some(i) = self.adapter_tensors.iter().position(|x| Arc::ptr_eq(x, t)) {
            return i;
        }
        self.adapter_tensors.push(Arc::clone(t));
        self.adapter_tensors.len() - 1
    }

    /// MUL_MAT by an adapter tensor (`t` is [k, n], `x` [k, m] → [n, m]).
    pub(super) fn mul_mat_adapter(&mut self, t: &Arc<AdapterTensor>, x: NodeId) -> NodeId {
        let n = t.ne[1] as usize;
        let m = self.ne1(x);
        let t = self.adapter_tensor(t);
        self.push("mul_mat", Op::MulMatAdapter { t, x }, n, m)
    }

    /// Adds each LoRA adapter's `scale · B (A x)` for weight `w` to `y` (upstream's loop in
    /// `build_lora_mm`).
    pub(super) fn add_lora(&mut self, w: WeightId, x: NodeId, y: NodeId) -> NodeId {
        self.add_lora_products(w, x, None, y)
    }

    /// Adds each LoRA adapter's `scale · B_e (A_e x)` for expert weight `w` to `y`, `e` each
    /// slot's expert among `ids` (upstream's loop in `build_lora_mm_id`).
    pub(super) fn add_lora_id(
        &mut self,
        w: WeightId,
        x: NodeId,
        ids: NodeId,
        n_used: usize,
        y: NodeId,
    ) -> NodeId {
        self.add_lora_products(w, x, Some((ids, n_used)), y)
    }

    /// The loop both share: each adapter with factors for `w` adds its scaled product, by
    /// MUL_MAT or, with `experts` (`ids`, `n_used`), by MUL_MAT_ID. A pair that cannot multiply
    /// `x` is left out and recorded in `adapter_error`, which fails the build.
    fn add_lora_products(
        &mut self,
        w: WeightId,
        x: NodeId,
        experts: Option<(NodeId, usize)>,
        mut y: NodeId,
    ) -> NodeId {
        let adapters = self.adapters;
        if adapters.loras.is_empty() {
            return y;
        }
        let name = self.weights[w.0].name.clone();
        for (lora, adapter_scale) in &adapters.loras {
            let Some(lw) = lora.weights.get(&name) else {
                continue;
            };
            if lw.a.ne[0] as usize != self.ne0(x) {
                // the tied output of a token-embedding adapter (upstream asserts here)
                self.adapter_error.get_or_insert(BuildError::Invalid(format!(
                    "the LoRA factors of '{name}' cannot multiply this input (a token-embedding adapter on a tied output)"
                )));
                continue;
            }
            let scale = lw.scale(lora.alpha, *adapter_scale);
            let bax = match experts {
                None => {
                    let ax = self.mul_mat_adapter(&lw.a, x);
                    self.mul_mat_adapter(&lw.b, ax)
                }
                Some((ids, n_used)) => {
                    let ax = self.mul_mat_id_adapter(&lw.a, x, ids, n_used);
                    self.mul_mat_id_adapter(&lw.b, ax, ids, n_used)
                }
            };
            let d = self.scale(bax, scale);
            y = self.add(y, Operand::Node(d));
        }
        y
    }

    /// MUL_MAT_ID by an expert LoRA factor (`t` is [k, n, n_expert]).
    fn mul_mat_id_adapter(
        &mut self,
        t: &Arc<AdapterTensor>,
        x: NodeId,
        ids: NodeId,
        n_used: usize,
    ) -> NodeId {
        let n = t.ne[1] as usize;
        let rows = n_used * self.ne1(ids);
        let t = self.adapter_tensor(t);
        let op = Op::MulMatIdAdapter { t, x, ids, n_used };
        self.push("mul_mat_id", op, n, rows)
    }

    /// The layer output with the control vector's direction for layer `il` added, when the
    /// context has one for it (upstream's `build_cvec`).
    pub fn cvec(&mut self, x: NodeId, il: usize) -> NodeId {
        let Some(t) = self.adapters.cvec.as_ref().and_then(|c| c.tensor_for(il)) else {
            return x;
        };
        let t = Arc::clone(t);
        let t = self.adapter_tensor(&t);
        let (n0, n1) = (self.ne0(x), self.ne1(x));
        self.push("add", Op::AddAdapter { a: x, t }, n0, n1)
    }

    /// MUL_MAT and the LoRA products, without the per-tensor scale (upstream's
    /// `build_lora_mm(w, cur)` where the architecture passes no `w_s`).
    pub fn mul_mat_lora(&mut self, w: WeightId, x: NodeId) -> NodeId {
        let y = self.mul_mat_raw(w, x);
        self.add_lora(w, x, y)
    }
}
