//! Matrix products: dense, per head, gated (GLU) and the mixture-of-experts routing ops.

use super::*;

impl CpuExecutor {
    /// Computes one node of this family into the arena (its sources are there).
    pub(super) fn node_matmul(
        &mut self,
        g: &Graph,
        node: &Node,
        model: &Model,
    ) -> Result<(), ExecError> {
        let nodes = &g.nodes;
        let dst_r = range(node);
        let (ne0, ne1) = (node.ne0, node.ne1);
        match &node.op {
            Op::MulMatHeads { w, x, n_head } => {
                let wr = &g.weights[w.0];
                let (k, n) = (wr.ne[0] as usize, wr.ne[1] as usize);
                let xn = &nodes[*x];
                let m = xn.ne1;
                let st = model.tensors.at(wr.tensor).read();
                let ty = st.layout.ggml_type;
                let WeightBytes::Whole(b) = weight_bytes(&st, &wr.name)? else {
                    return Err(ExecError::UnsupportedOp {
                        backend: "CPU",
                        op: "MUL_MAT (per head)".into(),
                        why: format!("'{}' is split by rows over devices", wr.name),
                    });
                };
                let head_bytes = ty.row_size(k as i64).unwrap_or(0) as usize * n;
                // each head's inputs gathered into rows of k, its products written into
                // its n columns of the result
                let mut xh = std::mem::take(&mut self.tmp);
                xh.resize(k * m, 0.0);
                for h in 0..*n_head {
                    {
                        let xs = &self.arena[xn.offset..xn.offset + xn.len()];
                        for (d, r) in xh.chunks_exact_mut(k).zip(xs.chunks_exact(k * n_head)) {
                            d.copy_from_slice(&r[h * k..(h + 1) * k]);
                        }
                    }
                    let (dst, []) = carve(&mut self.arena, dst_r, []);
                    kernel_api::mul_mat(
                        ty,
                        &b[h * head_bytes..(h + 1) * head_bytes],
                        n,
                        k,
                        &xh,
                        m,
                        dst,
                        n * n_head,
                        h * n,
                        &self.pool,
                        &mut self.mat,
                    );
                }
                self.tmp = xh;
            }
            Op::GroupMask {
                src,
                n_groups,
                n_group_used,
            } => {
                let (dst, [x]) = carve(&mut self.arena, dst_r, [range(&nodes[*src])]);
                dst.copy_from_slice(x);
                let per = ne0 / n_groups;
                let mut scores: Vec<(usize, f32)> = Vec::with_capacity(*n_groups);
                for row in dst.chunks_exact_mut(ne0) {
                    scores.clear();
                    for (gi, grp) in row.chunks_exact(per).enumerate() {
                        // the sum of the group's two best scores
                        let (mut b0, mut b1) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
                        for &v in grp {
                            if v > b0 {
                                b1 = b0;
                                b0 = v;
                            } else if v > b1 {
                                b1 = v;
                            }
                        }
                        scores.push((gi, if per > 1 { b0 + b1 } else { b0 }));
                    }
                    scores.sort_by(|a, b| b.1.total_cmp(&a.1));
                    for &(gi, _) in &scores[*n_group_used.min(n_groups)..] {
                        row[gi * per..(gi + 1) * per].fill(f32::NEG_INFINITY);
                    }
                }
            }
            Op::Glu { gate, up, kind } => {
                let (dst, [gt, u]) = carve(
                    &mut self.arena,
                    dst_r,
                    [range(&nodes[*gate]), range(&nodes[*up])],
                );
                kernel_api::for_row_runs(&self.pool, dst, ne0, &|first, dst, _| {
                    let at = first * ne0..first * ne0 + dst.len();
                    let (gt, u) = (&gt[at.clone()], &u[at]);
                    match kind {
                        GluKind::Swiglu => ops::silu_rows(dst, gt, Some(u), ne0),
                        GluKind::SwigluOai => {
                            let (alpha, limit) = (1.702f32, 7.0f32);
                            for ((d, &g), &u) in dst.iter_mut().zip(gt).zip(u) {
                                let x = g.min(limit);
                                let y = u.clamp(-limit, limit);
                                *d = x / (1.0 + (alpha * -x).exp()) * (y + 1.0);
                            }
                        }
                        GluKind::Geglu => {
                            for ((d, &x), &y) in dst.iter_mut().zip(gt).zip(u) {
                                *d = ops::gelu(x) * y;
                            }
                        }
                        GluKind::Reglu => {
                            for ((d, &x), &y) in dst.iter_mut().zip(gt).zip(u) {
                                *d = if x > 0.0 { x * y } else { 0.0 };
                            }
                        }
                        GluKind::SwigluLimit(l) => {
                            ops::silu_rows(dst, gt, None, ne0);
                            for (d, &y) in dst.iter_mut().zip(u) {
                                *d = d.min(*l) * y.clamp(-*l, *l);
                            }
                        }
                        GluKind::SwigluClamp(l) => {
                            for ((d, &g), &y) in dst.iter_mut().zip(gt).zip(u) {
                                let g = g.min(*l);
                                *d = g / (1.0 + (-g).exp()) * y.clamp(-*l, *l);
                            }
                        }
                        GluKind::Situ(beta, lb) => {
                            let sigmoid = |v: f32| 1.0 / (1.0 + (-v).exp());
                            for ((d, &g), &y) in dst.iter_mut().zip(gt).zip(u) {
                                let a = (g * (1.0 / beta)).tanh() * beta * sigmoid(g);
                                let y = if *lb > 0.0 {
                                    (y * (1.0 / lb)).tanh() * lb
                                } else {
                                    y
                                };
                                *d = a * y;
                            }
                        }
                    }
                });
            }
            Op::MulMat { w, x } => {
                let wr = &g.weights[w.0];
                let k = wr.ne[0] as usize;
                let n = wr.ne[1] as usize;
                let m = nodes[*x].ne1;
                let st = model.tensors.at(wr.tensor).read();
                let ty = st.layout.ggml_type;
                if let Some(rp) = crate::model::derived::repacked(model, &st) {
                    let (dst, [xs]) = carve(&mut self.arena, dst_r, [range(&nodes[*x])]);
                    kernel_api::mul_mat_repacked(rp, xs, m, dst, &self.pool, &mut self.mat);
                    return Ok(());
                }
                let bytes = weight_bytes(&st, &wr.name)?;
                let (dst, [xs]) = carve(&mut self.arena, dst_r, [range(&nodes[*x])]);
                match bytes {
                    WeightBytes::Whole(b) => kernel_api::mul_mat(
                        ty,
                        &b,
                        n,
                        k,
                        xs,
                        m,
                        dst,
                        n,
                        0,
                        &self.pool,
                        &mut self.mat,
                    ),
                    WeightBytes::Pieces(pieces) => {
                        // one product per device's piece, into its rows of the result
                        for (first, count, b) in pieces {
                            kernel_api::mul_mat(
                                ty,
                                b,
                                count,
                                k,
                                xs,
                                m,
                                dst,
                                n,
                                first,
                                &self.pool,
                                &mut self.mat,
                            );
                        }
                    }
                }
            }
            Op::MulMatId {
                w,
                x,
                ids,
                n_used,
                scale,
            } => {
                let has_scale = match scale {
                    Some(s) => {
                        self.load_vec(model, &g.weights[s.0])?;
                        true
                    }
                    None => false,
                };
                self.mul_mat_id(g, node, model, *w, *x, *ids, *n_used, has_scale)?;
            }
            Op::MulMatIdAdapter { t, x, ids, n_used } => {
                // an expert weight's LoRA factor: rank-sized products, one row at a time
                let at = &g.adapter_tensors[*t];
                let (k, n, n_exp) = (at.ne[0] as usize, at.ne[1] as usize, at.ne[2] as usize);
                let expert_bytes = at.ggml_type.row_size(k as i64).unwrap_or(0) as usize * n;
                let (xn, idn) = (&nodes[*x], &nodes[*ids]);
                let (t_count, broadcast) = (idn.ne1, xn.ne1 == idn.ne1);
                let (dst, [xs, idv]) = carve(&mut self.arena, dst_r, [range(xn), range(idn)]);
                for tok in 0..t_count {
                    for i in 0..*n_used {
                        let slot = tok * n_used + i;
                        let e = idv[slot] as usize;
                        if e >= n_exp {
                            return Err(ExecError::UnsupportedOp {
                                backend: "CPU",
                                op: "MUL_MAT_ID".to_string(),
                                why: format!("expert {e} of {n_exp} in LoRA factor '{}'", at.name),
                            });
                        }
                        let xrow = if broadcast { tok } else { slot };
                        kernel_api::mul_mat(
                            at.ggml_type,
                            &at.bytes[e * expert_bytes..(e + 1) * expert_bytes],
                            n,
                            k,
                            &xs[xrow * k..(xrow + 1) * k],
                            1,
                            &mut dst[slot * n..(slot + 1) * n],
                            n,
                            0,
                            &self.pool,
                            &mut self.mat,
                        );
                    }
                }
            }
            Op::TopK { src, k } => {
                let sn = &nodes[*src];
                let (dst, [x]) = carve(&mut self.arena, dst_r, [range(sn)]);
                let idx = &mut self.topk;
                for t in 0..ne1 {
                    let row = &x[t * sn.ne0..(t + 1) * sn.ne0];
                    idx.clear();
                    idx.extend(0..sn.ne0);
                    idx.sort_by(|&a, &b| row[b].total_cmp(&row[a]));
                    for i in 0..*k {
                        dst[t * k + i] = idx[i] as f32;
                    }
                }
            }
            Op::GetRowsIds { src, ids } => {
                let sn = &nodes[*src];
                let (dst, [x, id]) =
                    carve(&mut self.arena, dst_r, [range(sn), range(&nodes[*ids])]);
                for t in 0..ne1 {
                    for i in 0..ne0 {
                        let e = id[t * ne0 + i] as usize;
                        dst[t * ne0 + i] = x[t * sn.ne0 + e];
                    }
                }
            }
            Op::MulSlots {
                src,
                weights,
                n_used,
            } => {
                let n = nodes[*src].ne0;
                let (dst, [x, w]) = carve(
                    &mut self.arena,
                    dst_r,
                    [range(&nodes[*src]), range(&nodes[*weights])],
                );
                for (slot, d) in dst.chunks_exact_mut(n).enumerate() {
                    let (t, wi) = (slot / n_used, w[slot]);
                    for (d, &v) in d.iter_mut().zip(&x[t * n..(t + 1) * n]) {
                        *d = v * wi;
                    }
                }
            }
            Op::SumSlots { src, n_used } => {
                let (dst, [x]) = carve(&mut self.arena, dst_r, [range(&nodes[*src])]);
                for (t, d) in dst.chunks_exact_mut(ne0).enumerate() {
                    for i in 0..*n_used {
                        let row = &x[(t * n_used + i) * ne0..(t * n_used + i + 1) * ne0];
                        if i == 0 {
                            d.copy_from_slice(row);
                        } else {
                            for (d, &v) in d.iter_mut().zip(row) {
                                *d += v;
                            }
                        }
                    }
                }
            }
            Op::WeightedSum {
                src,
                weights,
                n_used,
            } => {
                let (dst, [x, w]) = carve(
                    &mut self.arena,
                    dst_r,
                    [range(&nodes[*src]), range(&nodes[*weights])],
                );
                for t in 0..ne1 {
                    let d = &mut dst[t * ne0..(t + 1) * ne0];
                    for i in 0..*n_used {
                        let wi = w[t * n_used + i];
                        let row = &x[(t * n_used + i) * ne0..(t * n_used + i + 1) * ne0];
                        if i == 0 {
                            for (d, &v) in d.iter_mut().zip(row) {
                                *d = v * wi;
                            }
                        } else {
                            for (d, &v) in d.iter_mut().zip(row) {
                                *d += v * wi;
                            }
                        }
                    }
                }
            }
            op => return Err(not_this_family(op, "matmul")),
        }
        Ok(())
    }
}
impl CpuExecutor {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn mul_mat_id(
        &mut self,
        g: &Graph,
        node: &Node,
        model: &Model,
        w: WeightId,
        x: NodeId,
        ids: NodeId,
        n_used: usize,
        scaled: bool,
    ) -> Result<(), ExecError> {
        let nodes = &g.nodes;
        let wr = &g.weights[w.0];
        let (k, n, n_exp) = (wr.ne[0] as usize, wr.ne[1] as usize, wr.ne[2] as usize);
        let xn = &nodes[x];
        let t_count = nodes[ids].ne1;
        let broadcast = xn.ne1 == t_count;
        let st = model.tensors.at(wr.tensor).read();
        let ty = st.layout.ggml_type;
        let use_gather = st.host_bytes().is_none();
        if use_gather {
            // row-split experts: gather the whole tensor (slow path)
            self.gather.resize(st.layout.nbytes as usize, 0);
            st.read_into(&mut self.gather)
                .map_err(|_| ExecError::NotOnHost(wr.name.clone()))?;
        }
        let gather = std::mem::take(&mut self.gather);
        let bytes: &[u8] = match st.host_bytes() {
            Some(b) => b,
            None => &gather[..],
        };
        let expert_bytes = ty.row_size(k as i64).unwrap_or(0) as usize * n;
        self.expert_rows.resize(n_exp, Vec::new());
        for e in &mut self.expert_rows {
            e.clear();
        }
        {
            let idv = &self.arena[nodes[ids].offset..nodes[ids].offset + nodes[ids].len()];
            for t in 0..t_count {
                for i in 0..n_used {
                    let e = idv[t * n_used + i] as usize;
                    let xrow = if broadcast { t } else { t * n_used + i };
                    self.expert_rows[e].push((xrow, t * n_used + i));
                }
            }
        }
        if kernel_api::mul_mat_id_takes(ty, n, k, &self.expert_rows) {
            // all experts in one parallel job, each activation row converted once
            let experts = kernel_api::Experts {
                t: ty,
                bytes,
                n_rows: n,
                k,
                expert_bytes,
            };
            let scales = scaled.then_some(&self.wvec[..]);
            let (dst, [xs]) = carve(&mut self.arena, range(node), [range(xn)]);
            kernel_api::mul_mat_id(
                &experts,
                xs,
                &self.expert_rows,
                scales,
                dst,
                &self.pool,
                &mut self.mat,
            );
            drop(st);
            self.gather = gather;
            return Ok(());
        }
        for e in 0..n_exp {
            let rows = std::mem::take(&mut self.expert_rows[e]);
            if rows.is_empty() {
                self.expert_rows[e] = rows;
                continue;
            }
            self.tmp.resize(rows.len() * k, 0.0);
            {
                let xs = &self.arena[xn.offset..xn.offset + xn.len()];
                for (r, &(xrow, _)) in rows.iter().enumerate() {
                    self.tmp[r * k..(r + 1) * k].copy_from_slice(&xs[xrow * k..(xrow + 1) * k]);
                }
            }
            self.tmp2.resize(rows.len() * n, 0.0);
            kernel_api::mul_mat(
                ty,
                &bytes[e * expert_bytes..(e + 1) * expert_bytes],
                n,
                k,
                &self.tmp,
                rows.len(),
                &mut self.tmp2,
                n,
                0,
                &self.pool,
                &mut self.mat,
            );
            let dst = &mut self.arena[node.offset..node.offset + node.len()];
            let s = if scaled { self.wvec[e] } else { 1.0 };
            for (r, &(_, drow)) in rows.iter().enumerate() {
                let out = &mut dst[drow * n..(drow + 1) * n];
                out.copy_from_slice(&self.tmp2[r * n..(r + 1) * n]);
                if scaled {
                    for v in out.iter_mut() {
                        *v *= s;
                    }
                }
            }
            self.expert_rows[e] = rows;
        }
        drop(st);
        self.gather = gather;
        Ok(())
    }
}
