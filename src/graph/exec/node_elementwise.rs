//! Norms, binary and unary element-wise ops, row sums and repeats.

use super::*;

impl CpuExecutor {
    /// Computes one node of this family into the arena (its sources are there).
    pub(super) fn node_elementwise(
        &mut self,
        g: &Graph,
        node: &Node,
        model: &Model,
        inp: &Inputs,
    ) -> Result<(), ExecError> {
        let nodes = &g.nodes;
        let dst_r = range(node);
        let ne0 = node.ne0;
        match &node.op {
            Op::RmsNorm { src, eps } | Op::Norm { src, eps } => {
                let rms = matches!(node.op, Op::RmsNorm { .. });
                let (dst, [s]) = carve(&mut self.arena, dst_r, [range(&nodes[*src])]);
                kernel_api::for_row_runs(&self.pool, dst, ne0, &|first, dst, _| {
                    let s = &s[first * ne0..];
                    for (d, x) in dst.chunks_exact_mut(ne0).zip(s.chunks_exact(ne0)) {
                        if rms {
                            ops::rms_norm_row(x, *eps, d);
                        } else {
                            ops::norm_row(x, *eps, d);
                        }
                    }
                });
            }
            Op::Mul { a, b } | Op::Add { a, b } | Op::Div { a, b } => {
                let kind = match node.op {
                    Op::Mul { .. } => 0,
                    Op::Add { .. } => 1,
                    _ => 2,
                };
                let f = |x: f32, y: f32| match kind {
                    0 => x * y,
                    1 => x + y,
                    _ => x / y,
                };
                match b {
                    Operand::Weight(w) => {
                        self.load_vec(model, &g.weights[w.0])?;
                        let (w, wl) = (&self.wvec[..], self.wvec.len());
                        let (dst, [s]) = carve(&mut self.arena, dst_r, [range(&nodes[*a])]);
                        kernel_api::for_row_runs(&self.pool, dst, wl, &|first, dst, _| {
                            let s = &s[first * wl..];
                            for (d, x) in dst.chunks_exact_mut(wl).zip(s.chunks_exact(wl)) {
                                for ((d, &x), &y) in d.iter_mut().zip(x).zip(w) {
                                    *d = f(x, y);
                                }
                            }
                        });
                    }
                    Operand::Node(bn) => {
                        let bl = nodes[*bn].ne0;
                        let (dst, [s, o]) = carve(
                            &mut self.arena,
                            dst_r,
                            [range(&nodes[*a]), range(&nodes[*bn])],
                        );
                        let same = o.len() == s.len();
                        if bl == 1 && ne0 > 1 {
                            // one value per row ([1, T]): broadcast along the row
                            for ((d, x), &y) in
                                dst.chunks_exact_mut(ne0).zip(s.chunks_exact(ne0)).zip(o)
                            {
                                for (d, &x) in d.iter_mut().zip(x) {
                                    *d = f(x, y);
                                }
                            }
                            return Ok(());
                        }
                        kernel_api::for_row_runs(&self.pool, dst, bl, &|first, dst, _| {
                            let at = first * bl;
                            if same {
                                let (s, o) = (&s[at..at + dst.len()], &o[at..at + dst.len()]);
                                for ((d, &x), &y) in dst.iter_mut().zip(s).zip(o) {
                                    *d = f(x, y);
                                }
                            } else {
                                let s = &s[at..];
                                for (d, x) in dst.chunks_exact_mut(bl).zip(s.chunks_exact(bl)) {
                                    for ((d, &x), &y) in d.iter_mut().zip(x).zip(o) {
                                        *d = f(x, y);
                                    }
                                }
                            }
                        });
                    }
                }
            }
            Op::Scale { src, s } => {
                let (dst, [x]) = carve(&mut self.arena, dst_r, [range(&nodes[*src])]);
                for (d, &v) in dst.iter_mut().zip(x) {
                    *d = v * s;
                }
            }
            Op::Tanh { src } => {
                let (dst, [x]) = carve(&mut self.arena, dst_r, [range(&nodes[*src])]);
                for (d, &v) in dst.iter_mut().zip(x) {
                    *d = v.tanh();
                }
            }
            Op::Gelu { src } => {
                let (dst, [x]) = carve(&mut self.arena, dst_r, [range(&nodes[*src])]);
                for (d, &v) in dst.iter_mut().zip(x) {
                    *d = ops::gelu(v);
                }
            }
            Op::Relu { src } => {
                let (dst, [x]) = carve(&mut self.arena, dst_r, [range(&nodes[*src])]);
                for (d, &v) in dst.iter_mut().zip(x) {
                    // ggml_vec_relu_f32: `(x > 0.f) ? x : 0.f`
                    *d = if v > 0.0 { v } else { 0.0 };
                }
            }
            Op::Repeat { src, n } => {
                let len = nodes[*src].ne0;
                let (dst, [x]) = carve(&mut self.arena, dst_r, [range(&nodes[*src])]);
                for (d, r) in dst.chunks_exact_mut(len * n).zip(x.chunks_exact(len)) {
                    for c in d.chunks_exact_mut(len) {
                        c.copy_from_slice(r);
                    }
                }
            }
            Op::RepeatEach { src, n } => {
                let (dst, [x]) = carve(&mut self.arena, dst_r, [range(&nodes[*src])]);
                for (d, &v) in dst.chunks_exact_mut(*n).zip(x) {
                    d.fill(v);
                }
            }
            Op::Sqr { src } => {
                let (dst, [x]) = carve(&mut self.arena, dst_r, [range(&nodes[*src])]);
                for (d, &v) in dst.iter_mut().zip(x) {
                    *d = v * v;
                }
            }
            Op::Clamp { src, min, max } => {
                let (dst, [x]) = carve(&mut self.arena, dst_r, [range(&nodes[*src])]);
                for (d, &v) in dst.iter_mut().zip(x) {
                    // ggml_compute_forward_clamp_f32: MAX(MIN(x, max), min)
                    let m = if v < *max { v } else { *max };
                    *d = if m > *min { m } else { *min };
                }
            }
            Op::Hadamard {
                src,
                n,
                dense,
                one_row,
            } => {
                let (dst, [x]) = carve(&mut self.arena, dst_r, [range(&nodes[*src])]);
                if *dense {
                    ops::hadamard_rows_dense(x, dst, *n, *one_row);
                } else {
                    dst.copy_from_slice(x);
                    ops::hadamard_rows(dst, *n);
                }
            }
            Op::AttnTempScale {
                src,
                floor_scale,
                scale,
                offset,
            } => {
                let (dst, [x]) = carve(&mut self.arena, dst_r, [range(&nodes[*src])]);
                for (t, (d, x)) in dst
                    .chunks_exact_mut(ne0)
                    .zip(x.chunks_exact(ne0))
                    .enumerate()
                {
                    // computed in double then rounded, as upstream's set_input
                    let pos = inp.pos[t] as f32;
                    let f = (((((pos + offset) / floor_scale).floor()) as f64 + 1.0).ln()
                        * *scale as f64
                        + 1.0) as f32;
                    for (d, &v) in d.iter_mut().zip(x) {
                        *d = v * f;
                    }
                }
            }
            Op::Silu { src } => {
                let (dst, [x]) = carve(&mut self.arena, dst_r, [range(&nodes[*src])]);
                kernel_api::for_row_runs(&self.pool, dst, ne0, &|first, dst, _| {
                    let at = first * ne0;
                    ops::silu_rows(dst, &x[at..at + dst.len()], None, ne0);
                });
            }
            Op::AddId { src, b, ids } => {
                self.load_vec(model, &g.weights[b.0])?;
                let (sn, idn) = (&nodes[*src], &nodes[*ids]);
                let n_used = idn.ne0;
                let wv = &self.wvec;
                let (dst, [x, id]) = carve(&mut self.arena, dst_r, [range(sn), range(idn)]);
                for (r, (d, xr)) in dst
                    .chunks_exact_mut(ne0)
                    .zip(x.chunks_exact(ne0))
                    .enumerate()
                {
                    let e = id[(r / n_used) * n_used + r % n_used] as usize;
                    for ((d, &xv), &bv) in d.iter_mut().zip(xr).zip(&wv[e * ne0..(e + 1) * ne0]) {
                        *d = xv + bv;
                    }
                }
            }
            Op::Sigmoid { src } => {
                let (dst, [x]) = carve(&mut self.arena, dst_r, [range(&nodes[*src])]);
                for (d, &v) in dst.iter_mut().zip(x) {
                    *d = 1.0 / (1.0 + (-v).exp());
                }
            }
            Op::MulRep { a, b, rep } => {
                self.load_vec(model, &g.weights[b.0])?;
                let w = &self.wvec;
                let (dst, [x]) = carve(&mut self.arena, dst_r, [range(&nodes[*a])]);
                for (d, x) in dst.chunks_exact_mut(ne0).zip(x.chunks_exact(ne0)) {
                    for (i, (d, &v)) in d.iter_mut().zip(x).enumerate() {
                        *d = v * w[(i / rep) % w.len()];
                    }
                }
            }
            Op::Sqrt { src } => {
                let (dst, [x]) = carve(&mut self.arena, dst_r, [range(&nodes[*src])]);
                for (d, &v) in dst.iter_mut().zip(x) {
                    *d = v.sqrt();
                }
            }
            Op::Abs { src } => {
                let (dst, [x]) = carve(&mut self.arena, dst_r, [range(&nodes[*src])]);
                for (d, &v) in dst.iter_mut().zip(x) {
                    *d = v.abs();
                }
            }
            Op::Sgn { src } => {
                // ggml_vec_sgn_f32: 1 above 0, -1 below, 0 otherwise (NaN too)
                let (dst, [x]) = carve(&mut self.arena, dst_r, [range(&nodes[*src])]);
                for (d, &v) in dst.iter_mut().zip(x) {
                    *d = if v > 0.0 {
                        1.0
                    } else if v < 0.0 {
                        -1.0
                    } else {
                        0.0
                    };
                }
            }
            Op::Softplus { src } => {
                let (dst, [x]) = carve(&mut self.arena, dst_r, [range(&nodes[*src])]);
                for (d, &v) in dst.iter_mut().zip(x) {
                    *d = ops::softplus(v);
                }
            }
            Op::RepeatHeads { src, head_dim, n } => {
                let (dst, [x]) = carve(&mut self.arena, dst_r, [range(&nodes[*src])]);
                for (d, head) in dst
                    .chunks_exact_mut(*head_dim * *n)
                    .zip(x.chunks_exact(*head_dim))
                {
                    for copy in d.chunks_exact_mut(*head_dim) {
                        copy.copy_from_slice(head);
                    }
                }
            }
            Op::SoftMax { src } => {
                let (dst, [x]) = carve(&mut self.arena, dst_r, [range(&nodes[*src])]);
                dst.copy_from_slice(x);
                for row in dst.chunks_exact_mut(ne0) {
                    ops::soft_max_row(row, 1.0);
                }
            }
            Op::SumRows { src } => {
                let n = nodes[*src].ne0;
                let (dst, [x]) = carve(&mut self.arena, dst_r, [range(&nodes[*src])]);
                for (d, r) in dst.iter_mut().zip(x.chunks_exact(n)) {
                    *d = r.iter().map(|&v| v as f64).sum::<f64>() as f32;
                }
            }
            Op::DivSumRows { src } => {
                let (dst, [x]) = carve(&mut self.arena, dst_r, [range(&nodes[*src])]);
                for (d, r) in dst.chunks_exact_mut(ne0).zip(x.chunks_exact(ne0)) {
                    // clamped to the smallest normal F16, as upstream (no division by zero)
                    let sum: f32 = r.iter().sum::<f32>().max(6.103515625e-5);
                    for (d, &v) in d.iter_mut().zip(r) {
                        *d = v / sum;
                    }
                }
            }
            op => return Err(not_this_family(op, "elementwise")),
        }
        Ok(())
    }
}
