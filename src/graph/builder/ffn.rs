//! Feed-forward blocks, dense and mixture-of-experts (upstream's `build_ffn`,
//! `build_moe_ffn`).

use super::*;

impl<'m> Builder<'m> {
    /// `build_ffn` without a gate (`LLM_FFN_SEQ`): `down(act(up x + up_b)) + down_b`, the
    /// per-tensor scales when `scaled`, the activation divided by `act_scales` when given
    /// (mpt's AWQ `ffn.act.scales`), the biases as `bias` says.
    pub fn ffn_seq(
        &mut self,
        il: usize,
        x: NodeId,
        act: Act,
        bias: Need,
        scaled: bool,
    ) -> Result<NodeId, BuildError> {
        let n_embd = self.hp.n_embd as i64;
        let n_ff = self.hp.n_ff[il] as i64;
        let up = self.lw(il, "ffn_up.weight", &[n_embd, n_ff])?;
        let down = self.lw(il, "ffn_down.weight", &[n_ff, n_embd])?;
        let up_b = self.lw_need(il, "ffn_up.bias", &[n_ff], bias)?;
        let down_b = self.lw_need(il, "ffn_down.bias", &[n_embd], bias)?;
        let act_scales = self.lw_opt(il, "ffn.act.scales", &[n_ff])?;
        let h = self.ffn_proj(up, up_b, x, scaled);
        let mut h = self.act(h, act);
        if let Some(s) = act_scales {
            let (n0, n1) = (self.ne0(h), self.ne1(h));
            h = self.push(
                "ffn_act",
                Op::Div {
                    a: h,
                    b: Operand::Weight(s),
                },
                n0,
                n1,
            );
        }
        Ok(self.ffn_proj(down, down_b, h, scaled))
    }

    /// ADD_ID: each expert slot's row plus its expert's bias column.
    pub fn add_id(&mut self, src: NodeId, b: WeightId, ids: NodeId) -> NodeId {
        let (n0, n1) = (self.ne0(src), self.ne1(src));
        self.push("add_id", Op::AddId { src, b, ids }, n0, n1)
    }

    /// `build_ffn` with PAR gating: `down(act(gate x) * up x)` (+ biases, and the per-tensor
    /// scales when `scaled`: some architectures pass none).
    #[allow(clippy::too_many_arguments)]
    pub fn ffn(
        &mut self,
        x: NodeId,
        up: WeightId,
        up_b: Option<WeightId>,
        gate: WeightId,
        gate_b: Option<WeightId>,
        down: WeightId,
        down_b: Option<WeightId>,
        kind: GluKind,
        scaled: bool,
    ) -> NodeId {
        self.ffn_parts(x, up, up_b, gate, gate_b, down, down_b, kind, scaled)[3]
    }

    /// [`Builder::ffn`]'s nodes: up, gate, their GLU, down.
    #[allow(clippy::too_many_arguments)]
    fn ffn_parts(
        &mut self,
        x: NodeId,
        up: WeightId,
        up_b: Option<WeightId>,
        gate: WeightId,
        gate_b: Option<WeightId>,
        down: WeightId,
        down_b: Option<WeightId>,
        kind: GluKind,
        scaled: bool,
    ) -> [NodeId; 4] {
        let u = self.ffn_proj(up, up_b, x, scaled);
        let g = self.ffn_proj(gate, gate_b, x, scaled);
        let (n0, n1) = (self.ne0(g), self.ne1(g));
        let h = self.push(
            "glu",
            Op::Glu {
                gate: g,
                up: u,
                kind,
            },
            n0,
            n1,
        );
        [u, g, h, self.ffn_proj(down, down_b, h, scaled)]
    }

    /// `build_moe_ffn`: route (gating, selection bias, expert groups, top-k), weigh
    /// (normalise, scale), run the selected experts (GLU), sum.
    pub fn moe_ffn(&mut self, x: NodeId, w: MoeWeights, n_used: usize, m: Moe) -> NodeId {
        self.moe_ffn_with(x, w, n_used, m, false)
    }

    /// [`Builder::moe_ffn`], or with `weight_before` upstream's llama4 path: experts chosen
    /// by the router's logits, the input weighted per slot before the experts, and their
    /// outputs summed unweighted.
    pub fn moe_ffn_with(
        &mut self,
        x: NodeId,
        w: MoeWeights,
        n_used: usize,
        m: Moe,
        weight_before: bool,
    ) -> NodeId {
        let mut logits = self.mul_mat(w.gate_inp, x);
        if let Some(b) = w.gate_inp_b {
            logits = self.add(logits, Operand::Weight(b));
        }
        let il = self.layer_of(w.down);
        self.cb_linear(logits, "ffn_moe_logits", il);
        let route = MoeRoute {
            weight_before,
            ..MoeRoute::default()
        };
        self.moe_ffn_routed(x, logits, w, n_used, m, route)
    }

    /// [`Builder::moe_ffn_with`] routed by the given router `logits` (`[n_expert, T]`,
    /// upstream's `probs_in`: Kimi-K3 routes by the full-width input while its experts read a
    /// down-projected one); `w.gate_inp` and `w.gate_inp_b` are not read.
    pub fn moe_ffn_logits(
        &mut self,
        x: NodeId,
        logits: NodeId,
        w: MoeWeights,
        n_used: usize,
        m: Moe,
        weight_before: bool,
    ) -> NodeId {
        let route = MoeRoute {
            weight_before,
            ..MoeRoute::default()
        };
        self.moe_ffn_routed(x, logits, w, n_used, m, route)
    }

    /// [`Builder::moe_ffn`] from router logits the caller computed (upstream's `probs_in`;
    /// `w.gate_inp` is not read), with `route`'s choices.
    pub fn moe_ffn_routed(
        &mut self,
        x: NodeId,
        logits: NodeId,
        w: MoeWeights,
        n_used: usize,
        m: Moe,
        route: MoeRoute,
    ) -> NodeId {
        let weight_before = route.weight_before;
        let t = self.ne1(x);
        let n_expert = self.ne0(logits);
        let probs = match m.gating {
            Gating::Softmax => self.push("moe_probs", Op::SoftMax { src: logits }, n_expert, t),
            Gating::Sigmoid => self.push("moe_probs", Op::Sigmoid { src: logits }, n_expert, t),
            Gating::SoftmaxWeight => logits,
            Gating::SqrtSoftplus => {
                let sp = self.softplus(logits);
                self.push("moe_probs", Op::Sqrt { src: sp }, n_expert, t)
            }
        };
        // the selection bias chooses the experts; their weights stay unbiased
        let mut selection = match w.probs_b {
            Some(bias) => self.add(probs, Operand::Weight(bias)),
            None => probs,
        };
        if weight_before {
            // llama4 selects by the logits (sigmoid comes after the top-k)
            selection = logits;
        }
        if route.select_sigmoid {
            selection = self.sigmoid(logits);
        }
        let (n_groups, n_group_used) = m.groups;
        if n_groups > 1 {
            let op = Op::GroupMask {
                src: selection,
                n_groups,
                n_group_used,
            };
            selection = self.push("moe_group_mask", op, n_expert, t);
        }
        let ids = self.push(
            "moe_topk",
            Op::TopK {
                src: selection,
                k: n_used,
            },
            n_used,
            t,
        );
        let ids = if route.id_div > 1 {
            // ids are f32 here and every consumer truncates them, as ggml's F32 -> I32
            // cast does: upstream's CAST(SCALE(CAST(ids), 1/n), I32)
            self.scale(ids, 1.0 / route.id_div as f32)
        } else {
            ids
        };
        let mut wts = self.push("moe_weights", Op::GetRowsIds { src: probs, ids }, n_used, t);
        // build_moe_ffn's names (our TOP_K stands for its ARGSORT + VIEW ffn_moe_topk)
        let il = self.layer_of(w.down);
        if probs != logits {
            self.cb(probs, "ffn_moe_probs", il);
        }
        if w.probs_b.is_some() && selection != probs {
            self.cb(selection, "ffn_moe_probs_biased", il);
        }
        self.cb(ids, "ffn_moe_topk", il);
        self.cb(wts, "ffn_moe_weights", il);
        self.nodes[wts].shown.ne = Some([1, n_used, t]);
        if m.gating == Gating::SoftmaxWeight {
            wts = self.push("moe_weights_softmax", Op::SoftMax { src: wts }, n_used, t);
        }
        if m.norm_w {
            wts = self.push("moe_weights_norm", Op::DivSumRows { src: wts }, n_used, t);
            self.cb(wts, "ffn_moe_weights_norm", il);
        }
        if m.scale_w != 0.0 && m.scale_w != 1.0 {
            wts = self.scale(wts, m.scale_w);
        }
        let n_embd = self.weights[w.down.0].ne[1] as usize;
        let n_ff = self.weights[w.down.0].ne[0] as usize;
        let x = if weight_before {
            let op = Op::MulSlots {
                src: x,
                weights: wts,
                n_used,
            };
            self.push("moe_weighted", op, n_embd, n_used * t)
        } else {
            x
        };
        let n_exp = self.weights[w.down.0].ne[2];
        let scale = |b: &mut Self, e: Option<WeightId>| match (e, m.exp_scales) {
            (Some(e), true) => b.scale_of(e, n_exp),
            _ => None,
        };
        let (up_s, gate_s, down_s) = (
            scale(self, w.up.or(w.gate_up)),
            scale(self, w.gate),
            scale(self, Some(w.down)),
        );
        let mm_id = |b: &mut Self, name, e: WeightId, x: NodeId, s: Option<WeightId>| {
            let n = b.weights[e.0].ne[1] as usize;
            let op = Op::MulMatId {
                w: e,
                x,
                ids,
                n_used,
                scale: s,
            };
            let y = b.push(name, op, n, n_used * t);
            b.add_lora_id(e, x, ids, n_used, y)
        };
        let (gate, up) = match (w.gate_up, w.up, w.gate) {
            (Some(gu), _, _) => {
                let both = mm_id(self, "moe_gate_up", gu, x, up_s);
                (self.view(both, 0, n_ff), self.view(both, n_ff, n_ff))
            }
            (None, Some(u), Some(g)) => {
                let mut up = mm_id(self, "moe_up", u, x, up_s);
                if let Some((ub, _, _)) = w.exp_b {
                    up = self.add_id(up, ub, ids);
                }
                let mut gate = mm_id(self, "moe_gate", g, x, gate_s);
                if let Some((_, gb, _)) = w.exp_b {
                    gate = self.add_id(gate, gb, ids);
                }
                (gate, up)
            }
            _ => unreachable!("moe_layer gives gate_up or both gate and up"),
        };
        let par = self.push(
            "moe_glu",
            Op::Glu {
                gate,
                up,
                kind: m.act,
            },
            n_ff,
            n_used * t,
        );
        // the expert products as upstream names them unscaled (scaled: the product is
        // unnamed and the MUL by the scale, fused into ours, is ffn_moe_*_scaled)
        for (n, s, name, scaled) in [
            (gate, gate_s, "ffn_moe_gate", "ffn_moe_gate_scaled"),
            (up, up_s, "ffn_moe_up", "ffn_moe_up_scaled"),
        ] {
            if matches!(self.nodes[n].op, Op::MulMatId { .. }) {
                self.cb(n, if s.is_some() { scaled } else { name }, il);
            }
        }
        let glu = match m.act {
            GluKind::Swiglu => Some("ffn_moe_swiglu"),
            GluKind::Geglu => Some("ffn_moe_geglu"),
            GluKind::Reglu => Some("ffn_moe_reglu"),
            GluKind::SwigluOai => Some("ffn_moe_swiglu_oai"),
            _ => None,
        };
        if let Some(name) = glu {
            self.cb(par, name, il);
        }
        self.nodes[par].shown.ne = Some([n_ff, n_used, t]);
        let mut experts = mm_id(self, "moe_down", w.down, par, down_s);
        self.cb(
            experts,
            if down_s.is_some() {
                "ffn_moe_down_scaled"
            } else {
                "ffn_moe_down"
            },
            il,
        );
        if let Some((_, _, db)) = w.exp_b {
            experts = self.add_id(experts, db, ids);
        }
        if weight_before {
            let op = Op::SumSlots {
                src: experts,
                n_used,
            };
            return self.push("moe_out", op, n_embd, t);
        }
        let out = self.push(
            "moe_out",
            Op::WeightedSum {
                src: experts,
                weights: wts,
                n_used,
            },
            n_embd,
            t,
        );
        self.cb(out, "ffn_moe_out", il);
        out
    }

    /// The layer's dense FFN from its `ffn_up`, `ffn_gate`, `ffn_down` weights (and their
    /// biases when `f.bias`): upstream's `build_ffn` with PAR gating.
    pub fn ffn_layer(&mut self, il: usize, x: NodeId, f: Ffn) -> Result<NodeId, BuildError> {
        let n_ff = self.hp.n_ff[il];
        self.ffn_named(il, x, "", n_ff, f)
    }

    /// A dense FFN of `n_ff` rows from `ffn_{up,gate,down}<suffix>` (`_shexp`: shared
    /// experts).
    pub fn ffn_named(
        &mut self,
        il: usize,
        x: NodeId,
        suffix: &str,
        n_ff: usize,
        f: Ffn,
    ) -> Result<NodeId, BuildError> {
        if suffix.is_empty() {
            self.cb_norm_default(x, "ffn_norm", il);
        }
        let n_embd = self.hp.n_embd as i64;
        let n_ff = n_ff as i64;
        let up = self.lw(il, &format!("ffn_up{suffix}.weight"), &[n_embd, n_ff])?;
        let gate = self.lw(il, &format!("ffn_gate{suffix}.weight"), &[n_embd, n_ff])?;
        let down = self.lw(il, &format!("ffn_down{suffix}.weight"), &[n_ff, n_embd])?;
        let (up_b, gate_b, down_b) = if f.bias {
            (
                self.lw_opt(il, &format!("ffn_up{suffix}.bias"), &[n_ff])?,
                self.lw_opt(il, &format!("ffn_gate{suffix}.bias"), &[n_ff])?,
                self.lw_opt(il, &format!("ffn_down{suffix}.bias"), &[n_embd])?,
            )
        } else {
            (None, None, None)
        };
        let [u, g, h, d] = self.ffn_parts(x, up, up_b, gate, gate_b, down, down_b, f.act, f.scaled);
        // build_ffn's names; the architectures name the dense FFN's result ffn_out
        let il_ = Some(il);
        self.cb_ffn_proj(u, ["ffn_up", "ffn_up_b", "ffn_up_s"], il_);
        self.cb_ffn_proj(g, ["ffn_gate", "ffn_gate_b", "ffn_gate_s"], il_);
        let glu = match f.act {
            GluKind::Swiglu => Some("ffn_swiglu"),
            GluKind::Geglu => Some("ffn_geglu"),
            GluKind::Reglu => Some("ffn_reglu"),
            GluKind::SwigluOai => Some("ffn_swiglu_oai"),
            _ => None,
        };
        if let Some(name) = glu {
            self.cb(h, name, il_);
        }
        self.cb_ffn_proj(d, ["ffn_down", "", "ffn_down_s"], il_);
        if suffix.is_empty() {
            self.cb(d, "ffn_out", il_);
        }
        Ok(d)
    }

    /// The layer's mixture of experts from its `ffn_gate_inp` router and `ffn_*_exps`
    /// experts of `n_ff` rows (gate and up separate, or fused in `ffn_gate_up_exps`):
    /// upstream's `build_moe_ffn`.
    pub fn moe_layer(
        &mut self,
        il: usize,
        x: NodeId,
        n_ff: usize,
        m: Moe,
    ) -> Result<NodeId, BuildError> {
        self.moe_layer_with(il, x, n_ff, m, false)
    }

    /// [`Builder::moe_layer`] with [`Builder::moe_ffn_with`]'s `weight_before` (llama4).
    pub fn moe_layer_with(
        &mut self,
        il: usize,
        x: NodeId,
        n_ff: usize,
        m: Moe,
        weight_before: bool,
    ) -> Result<NodeId, BuildError> {
        let w = self.moe_weights(il, "exps", n_ff, self.hp.n_expert, m)?;
        Ok(self.moe_ffn_with(x, w, self.hp.n_expert_used, m, weight_before))
    }

    /// The layer's router (`ffn_gate_inp`, `[n_embd, n_expert]`), selection bias when
    /// `m.probs_bias`, and the `n_exp` experts `ffn_{up,gate,down}_<kind>` of `n_ff` rows
    /// (gate and up fused in `ffn_gate_up_<kind>` when the file has it), with their biases
    /// when `m.biases`.
    pub fn moe_weights(
        &mut self,
        il: usize,
        kind: &str,
        n_ff: usize,
        n_exp: usize,
        m: Moe,
    ) -> Result<MoeWeights, BuildError> {
        let n_embd = self.hp.n_embd as i64;
        let n_router = self.hp.n_expert as i64;
        let (n_ff, n_exp) = (n_ff as i64, n_exp as i64);
        let gate_inp = self.lw(il, "ffn_gate_inp.weight", &[n_embd, n_router])?;
        let probs_b = if m.probs_bias {
            self.lw_opt(il, "exp_probs_b.bias", &[n_router])?
        } else {
            None
        };
        let gate_up = self.lw_opt(
            il,
            &format!("ffn_gate_up_{kind}.weight"),
            &[n_embd, 2 * n_ff, n_exp],
        )?;
        let (up, gate) = match gate_up {
            Some(_) => (None, None),
            None => (
                Some(self.lw(il, &format!("ffn_up_{kind}.weight"), &[n_embd, n_ff, n_exp])?),
                Some(self.lw(
                    il,
                    &format!("ffn_gate_{kind}.weight"),
                    &[n_embd, n_ff, n_exp],
                )?),
            ),
        };
        let down = self.lw(
            il,
            &format!("ffn_down_{kind}.weight"),
            &[n_ff, n_embd, n_exp],
        )?;
        let (gate_inp_b, exp_b) = if m.biases {
            (
                Some(self.lw(il, "ffn_gate_inp.bias", &[n_router])?),
                Some((
                    self.lw(il, &format!("ffn_up_{kind}.bias"), &[n_ff, n_exp])?,
                    self.lw(il, &format!("ffn_gate_{kind}.bias"), &[n_ff, n_exp])?,
                    self.lw(il, &format!("ffn_down_{kind}.bias"), &[n_embd, n_exp])?,
                )),
            )
        } else {
            (None, None)
        };
        Ok(MoeWeights {
            gate_inp,
            gate_inp_b,
            exp_b,
            probs_b,
            up,
            gate,
            gate_up,
            down,
        })
    }

    /// The FFN of a mixture-of-experts layer with shared experts, as most MoE graphs build
    /// it: the routed experts ([`Builder::moe_layer`], `n_ff` rows each) plus the shared
    /// experts' dense FFN (`ffn_*_shexp`, `n_ff_shexp` rows, built as `shared`), summed.
    pub fn moe_shared_layer(
        &mut self,
        il: usize,
        x: NodeId,
        n_ff: usize,
        m: Moe,
        n_ff_shexp: usize,
        shared: Ffn,
    ) -> Result<NodeId, BuildError> {
        let moe_out = self.moe_layer(il, x, n_ff, m)?;
        let sh = self.ffn_named(il, x, "_shexp", n_ff_shexp, shared)?;
        Ok(self.add(moe_out, Operand::Node(sh)))
    }
}
