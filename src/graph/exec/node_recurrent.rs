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
                channel0,
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
                    let r = &mut r[*channel0 * (*d_conv - 1)..];
                    ops::ssm_conv_step(r, x, &self.wvec, *d_conv, d);
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
            Op::HcPre { x, w, n } => {
                let hc = nodes[*w].ne0;
                let (dst, [x, w]) = carve(
                    &mut self.arena,
                    dst_r,
                    [range(&nodes[*x]), range(&nodes[*w])],
                );
                for ((d, x), w) in dst
                    .chunks_exact_mut(*n)
                    .zip(x.chunks_exact(*n * hc))
                    .zip(w.chunks_exact(hc))
                {
                    for (i, d) in d.iter_mut().enumerate() {
                        let mut sum = 0.0f32;
                        for (h, &wv) in w.iter().enumerate() {
                            sum = x[h * *n + i].mul_add(wv, sum);
                        }
                        *d = sum;
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
            Op::HcPost { x, res, post, comb } => {
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
            op => return Err(not_this_family(op, "recurrent")),
        }
        Ok(())
    }
}
