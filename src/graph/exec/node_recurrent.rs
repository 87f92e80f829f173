//! Recurrent layers (SSM_CONV, SSM_SCAN, gated delta net, KDA) and hyper-connections.

use super::*;

impl CpuExecutor {
    /// Computes one node of this family into the arena (its sources are there).
    pub(super) fn node_recurrent(
        &mut self,
        g: &Graph,
        node: &Node,
        model: &Model,
        kv: &mut KvCache,
        inp: &Inputs,
    ) -> Result<(), ExecError> {
        let nodes = &g.nodes;
        let dst_r = range(node);
        let ne0 = node.ne0;
        match &node.op {
            Op::SsmConv {
                x,
                w,
                layer,
                d_conv,
                row0,
                dilation,
            } => {
                self.load_vec(model, &g.weights[w.0])?;
                let rs = recurrent_memory(kv, node)?;
                let cells = token_cells(rs, inp, node)?;
                let l = &mut rs.layers[*layer];
                let (dst, [x]) = carve(&mut self.arena, dst_r, [range(&nodes[*x])]);
                for (t, (d, x)) in dst
                    .chunks_exact_mut(ne0)
                    .zip(x.chunks_exact(ne0))
                    .enumerate()
                {
                    let (r, _) = l.rows_mut(cells[t]);
                    let r = &mut r[*row0..];
                    if *dilation == 1 {
                        ops::ssm_conv_step(r, x, &self.wvec, *d_conv, d);
                    } else {
                        ops::ssm_conv_step_dilated(r, x, &self.wvec, *d_conv, *dilation, d);
                    }
                }
            }
            Op::SsmScan {
                x,
                dt,
                b,
                c,
                a,
                layer,
                shape,
            } => {
                self.load_vec(model, &g.weights[a.0])?;
                let rs = recurrent_memory(kv, node)?;
                let cells = token_cells(rs, inp, node)?;
                let l = &mut rs.layers[*layer];
                let (n_dt, n_bc) = (nodes[*dt].ne0, nodes[*b].ne0);
                let (dst, [x, dt, b, c]) = carve(
                    &mut self.arena,
                    dst_r,
                    [
                        range(&nodes[*x]),
                        range(&nodes[*dt]),
                        range(&nodes[*b]),
                        range(&nodes[*c]),
                    ],
                );
                for (t, y) in dst.chunks_exact_mut(ne0).enumerate() {
                    let (_, st) = l.rows_mut(cells[t]);
                    ops::ssm_scan_step(
                        *shape,
                        st,
                        &x[t * ne0..(t + 1) * ne0],
                        &dt[t * n_dt..(t + 1) * n_dt],
                        &self.wvec,
                        &b[t * n_bc..(t + 1) * n_bc],
                        &c[t * n_bc..(t + 1) * n_bc],
                        y,
                    );
                }
            }
            Op::GatedDeltaNet {
                q,
                k,
                v,
                g,
                beta,
                layer,
                shape,
            } => {
                let rs = recurrent_memory(kv, node)?;
                let cells = token_cells(rs, inp, node)?;
                let l = &mut rs.layers[*layer];
                let (n, hv, hk) = (shape.s_v, shape.h_v, shape.h_k);
                let ng = if shape.kda { n } else { 1 };
                let mut delta = vec![0f32; n];
                let (dst, [q, k, v, g, beta]) = carve(
                    &mut self.arena,
                    dst_r,
                    [
                        range(&nodes[*q]),
                        range(&nodes[*k]),
                        range(&nodes[*v]),
                        range(&nodes[*g]),
                        range(&nodes[*beta]),
                    ],
                );
                for (t, out) in dst.chunks_exact_mut(ne0).enumerate() {
                    let (_, st) = l.rows_mut(cells[t]);
                    for h in 0..hv {
                        let hq = (t * hk + h % hk) * n;
                        let hvo = (t * hv + h) * n;
                        let go = (t * hv + h) * ng;
                        ops::gated_delta_net_step(
                            &mut st[h * n * n..(h + 1) * n * n],
                            &q[hq..hq + n],
                            &k[hq..hq + n],
                            &v[hvo..hvo + n],
                            &g[go..go + ng],
                            beta[t * hv + h],
                            &mut delta,
                            &mut out[h * n..(h + 1) * n],
                        );
                    }
                }
            }
            Op::LightningAttn {
                qkv,
                layer,
                head,
                slope_scale,
            } => {
                let rs = recurrent_memory(kv, node)?;
                let cells = token_cells(rs, inp, node)?;
                let l = &mut rs.layers[*layer];
                let n = *head;
                let n_head = ne0 / n;
                let decays: Vec<f32> = ops::lightning_slopes(n_head)
                    .into_iter()
                    .map(|s| (-(s * *slope_scale)).exp())
                    .collect();
                let (dst, [qkv]) = carve(&mut self.arena, dst_r, [range(&nodes[*qkv])]);
                for (t, (out, x)) in dst
                    .chunks_exact_mut(ne0)
                    .zip(qkv.chunks_exact(3 * ne0))
                    .enumerate()
                {
                    let (_, st) = l.rows_mut(cells[t]);
                    for (h, &decay) in decays.iter().enumerate() {
                        let x = &x[h * 3 * n..(h + 1) * 3 * n];
                        ops::lightning_attn_step(
                            &mut st[h * n * n..(h + 1) * n * n],
                            &x[..n],
                            &x[n..2 * n],
                            &x[2 * n..],
                            decay,
                            &mut out[h * n..(h + 1) * n],
                        );
                    }
                }
            }
            Op::HcPre {
                x,
                w,
                n,
                gated,
                scale,
            } => {
                let n = *n;
                let hc = if *gated {
                    nodes[*x].ne0 / n
                } else {
                    nodes[*w].ne0
                };
                let w_len = if *gated { n * hc } else { hc };
                let (dst, [x, w]) = carve(
                    &mut self.arena,
                    dst_r,
                    [range(&nodes[*x]), range(&nodes[*w])],
                );
                for ((d, x), w) in dst
                    .chunks_exact_mut(n)
                    .zip(x.chunks_exact(n * hc))
                    .zip(w.chunks_exact(w_len))
                {
                    for (i, d) in d.iter_mut().enumerate() {
                        let mut sum = 0.0f32;
                        for h in 0..hc {
                            let wv = if *gated {
                                1.0 / (1.0 + (-w[h * n + i]).exp())
                            } else {
                                w[h]
                            };
                            sum = x[h * n + i].mul_add(wv, sum);
                        }
                        *d = if *gated { *scale * sum } else { sum };
                    }
                }
            }
            Op::HcMix {
                mixes,
                scale,
                base,
                hc,
                eps,
                kind,
            } => {
                let hc = *hc;
                self.load_vec(model, &g.weights[scale.0])?;
                let s = std::mem::take(&mut self.wvec);
                self.load_vec(model, &g.weights[base.0])?;
                let base = &self.wvec;
                let n_mix = nodes[*mixes].ne0;
                let n_out = ne0;
                let (dst, [m]) = carve(&mut self.arena, dst_r, [range(&nodes[*mixes])]);
                for (d, m) in dst.chunks_exact_mut(n_out).zip(m.chunks_exact(n_mix)) {
                    ops::hc_mix(m, &s, base, hc, *eps, *kind, d);
                }
            }
            Op::HcPost {
                x,
                res,
                post,
                comb: None,
            } => {
                // the identity comb: each stream keeps its own residual
                let n = nodes[*x].ne0;
                let hc = nodes[*post].ne0;
                let (dst, [x, r, p]) = carve(
                    &mut self.arena,
                    dst_r,
                    [range(&nodes[*x]), range(&nodes[*res]), range(&nodes[*post])],
                );
                for (t, d) in dst.chunks_exact_mut(n * hc).enumerate() {
                    let (x, r) = (&x[t * n..(t + 1) * n], &r[t * n * hc..(t + 1) * n * hc]);
                    let p = &p[t * hc..(t + 1) * hc];
                    for (dst_s, d) in d.chunks_exact_mut(n).enumerate() {
                        for (i, d) in d.iter_mut().enumerate() {
                            *d = x[i].mul_add(p[dst_s], r[dst_s * n + i]);
                        }
                    }
                }
            }
            Op::HcPost {
                x,
                res,
                post,
                comb: Some(comb),
            } => {
                let n = nodes[*x].ne0;
                let hc = nodes[*post].ne0;
                let (dst, [x, r, p, c]) = carve(
                    &mut self.arena,
                    dst_r,
                    [
                        range(&nodes[*x]),
                        range(&nodes[*res]),
                        range(&nodes[*post]),
                        range(&nodes[*comb]),
                    ],
                );
                for (t, d) in dst.chunks_exact_mut(n * hc).enumerate() {
                    let (x, r) = (&x[t * n..(t + 1) * n], &r[t * n * hc..(t + 1) * n * hc]);
                    let (p, c) = (&p[t * hc..(t + 1) * hc], &c[t * hc * hc..(t + 1) * hc * hc]);
                    for (dst_s, d) in d.chunks_exact_mut(n).enumerate() {
                        for (i, d) in d.iter_mut().enumerate() {
                            let mut sum = x[i] * p[dst_s];
                            for src in 0..hc {
                                sum = r[src * n + i].mul_add(c[dst_s + hc * src], sum);
                            }
                            *d = sum;
                        }
                    }
                }
            }
            Op::GetRowsNgram { table, hash } => {
                let w = &g.weights[table.0];
                let st = model.tensors.at(w.tensor).read();
                let ty = st.layout.ggml_type;
                let row_bytes = ty.row_size(w.ne[0]).unwrap_or(0) as usize;
                let n_rows = w.ne[1] as u64;
                let WeightBytes::Whole(bytes) = weight_bytes(&st, &w.name)? else {
                    return Err(ExecError::UnsupportedOp {
                        backend: "CPU",
                        op: "GET_ROWS (PLE n-grams)".into(),
                        why: format!("'{}' is split by rows over devices", w.name),
                    });
                };
                let (hd, n_heads, n_prev) = (hash.head_dim, hash.n_heads(), hash.ngram - 1);
                let stand_in = hash.stand_in();
                let n_tokens = node.ne1;
                // the cells (position, row) of each sequence of the micro-batch, which are
                // already stored; an embedding's predecessors go by the micro-batch's order
                let mut seq_cells: Vec<Option<Vec<(i32, u32)>>> = vec![None; kv.n_seq_max()];
                let mut order: Vec<Vec<usize>> = vec![Vec::new(); kv.n_seq_max()];
                for t in 0..n_tokens {
                    let s = inp.seq[t];
                    if seq_cells[s].is_none() {
                        seq_cells[s] = Some(kv.seq_cells_by_pos(s));
                    }
                    order[s].push(t);
                }
                let mut rows = vec![0u64; n_heads];
                let mut prev = vec![0i64; n_prev];
                let (dst, []) = carve(&mut self.arena, dst_r, []);
                for (t, out) in dst.chunks_exact_mut(ne0).enumerate() {
                    let tok = inp.tokens.get(t).map_or(stand_in, |&id| id as i64);
                    let seq = inp.seq[t];
                    let cells = seq_cells[seq].as_deref().unwrap_or(&[]);
                    let ord = &order[seq];
                    let at = ord.iter().position(|&u| u == t).unwrap_or(0);
                    for (j, p) in prev.iter_mut().enumerate() {
                        let d = (n_prev - j) as i64;
                        let want = if inp.tokens.is_empty() {
                            let k = at as i64 - d;
                            if k >= 0 {
                                inp.pos[ord[k as usize]] as i64
                            } else {
                                inp.pos[ord[0]] as i64 + k
                            }
                        } else {
                            inp.pos[t] as i64 - d
                        };
                        // upstream's seq_pos_tok_le: the last cell at or before `want`
                        let n = cells.partition_point(|&(cp, _)| (cp as i64) <= want);
                        *p = if want < 0 || n == 0 {
                            -1
                        } else {
                            kv.row_tok(cells[n - 1].1) as i64
                        };
                    }
                    hash.rows(tok, &prev, &mut rows);
                    for (o, &row) in out.chunks_exact_mut(hd).zip(&rows) {
                        if row >= n_rows {
                            return Err(ExecError::UnsupportedOp {
                                backend: "CPU",
                                op: "GET_ROWS (PLE n-grams)".into(),
                                why: format!("row {row} past the {n_rows} of '{}'", w.name),
                            });
                        }
                        let row = row as usize;
                        kernel_api::dequantize_row(
                            ty,
                            &bytes[row * row_bytes..(row + 1) * row_bytes],
                            o,
                        );
                    }
                }
            }
            op => return Err(not_this_family(op, "recurrent")),
        }
        Ok(())
    }
}
