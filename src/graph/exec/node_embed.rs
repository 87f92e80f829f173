//! Token, position and adapter table rows, input embeddings and views.

use super::*;

impl CpuExecutor {
    /// Computes one node of this family into the arena (its sources are there).
    pub(super) fn node_embed(
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
            Op::GetRowsTokens { table } => {
                let w = &g.weights[table.0];
                let st = model.tensors.at(w.tensor).read();
                let ty = st.layout.ggml_type;
                let row_bytes = ty.row_size(w.ne[0]).unwrap_or(0) as usize;
                let bytes = weight_bytes(&st, &w.name)?;
                let (dst, []) = carve(&mut self.arena, dst_r, []);
                for (t, &id) in inp.tokens.iter().enumerate() {
                    let row = id as usize;
                    let out = &mut dst[t * ne0..(t + 1) * ne0];
                    match &bytes {
                        WeightBytes::Whole(b) => kernel_api::dequantize_row(
                            ty,
                            &b[row * row_bytes..(row + 1) * row_bytes],
                            out,
                        ),
                        WeightBytes::Pieces(p) => {
                            let (first, _, b) = p
                                .iter()
                                .find(|(f, c, _)| row >= *f && row < f + c)
                                .expect("row pieces cover the tensor");
                            let r = row - first;
                            kernel_api::dequantize_row(
                                ty,
                                &b[r * row_bytes..(r + 1) * row_bytes],
                                out,
                            )
                        }
                    }
                }
            }
            Op::MulMatAdapter { t, x } => {
                let at = &g.adapter_tensors[*t];
                let (k, n) = (at.ne[0] as usize, at.ne[1] as usize);
                let m = nodes[*x].ne1;
                let (dst, [xs]) = carve(&mut self.arena, dst_r, [range(&nodes[*x])]);
                kernel_api::mul_mat(
                    at.ggml_type,
                    &at.bytes,
                    n,
                    k,
                    xs,
                    m,
                    dst,
                    n,
                    0,
                    &self.pool,
                    &mut self.mat,
                );
            }
            Op::GetRowsAdapter { t } => {
                let at = &g.adapter_tensors[*t];
                let row_bytes = at.ggml_type.row_size(at.ne[0]).unwrap_or(0) as usize;
                let (dst, []) = carve(&mut self.arena, dst_r, []);
                for (i, &id) in inp.tokens.iter().enumerate() {
                    let row = id as usize;
                    kernel_api::dequantize_row(
                        at.ggml_type,
                        &at.bytes[row * row_bytes..(row + 1) * row_bytes],
                        &mut dst[i * ne0..(i + 1) * ne0],
                    );
                }
            }
            Op::AddAdapter { a, t } => {
                let at = &g.adapter_tensors[*t];
                self.wvec.resize(ne0, 0.0);
                kernel_api::dequantize_row(at.ggml_type, &at.bytes, &mut self.wvec);
                let w = &self.wvec[..];
                let (dst, [s]) = carve(&mut self.arena, dst_r, [range(&nodes[*a])]);
                for (d, x) in dst.chunks_exact_mut(ne0).zip(s.chunks_exact(ne0)) {
                    for ((d, &x), &y) in d.iter_mut().zip(x).zip(w) {
                        *d = x + y;
                    }
                }
            }
            Op::GetRowsPos { table } => {
                let w = &g.weights[table.0];
                let st = model.tensors.at(w.tensor).read();
                let ty = st.layout.ggml_type;
                let row_bytes = ty.row_size(w.ne[0]).unwrap_or(0) as usize;
                let n_rows = w.ne[1] as usize;
                let WeightBytes::Whole(bytes) = weight_bytes(&st, &w.name)? else {
                    return Err(ExecError::UnsupportedOp {
                        backend: "CPU",
                        op: "GET_ROWS (positions)".into(),
                        why: format!("'{}' is split by rows over devices", w.name),
                    });
                };
                let (dst, []) = carve(&mut self.arena, dst_r, []);
                for (t, out) in dst.chunks_exact_mut(ne0).enumerate() {
                    // upstream's GET_ROWS asserts the row exists; a position past the table
                    // is refused here instead
                    let row = usize::try_from(inp.pos[t]).ok().filter(|&r| r < n_rows);
                    let Some(row) = row else {
                        return Err(ExecError::UnsupportedOp {
                            backend: "CPU",
                            op: "GET_ROWS (positions)".into(),
                            why: format!(
                                "position {} is outside '{}' ({n_rows} rows)",
                                inp.pos[t], w.name
                            ),
                        });
                    };
                    kernel_api::dequantize_row(
                        ty,
                        &bytes[row * row_bytes..(row + 1) * row_bytes],
                        out,
                    );
                }
            }
            Op::InputEmbd => {
                let (dst, []) = carve(&mut self.arena, dst_r, []);
                dst.copy_from_slice(&inp.embd[..dst.len()]);
            }
            Op::View { src, offset } => {
                let sn = &nodes[*src];
                let (dst, [x]) = carve(&mut self.arena, dst_r, [range(sn)]);
                for (d, r) in dst.chunks_exact_mut(ne0).zip(x.chunks_exact(sn.ne0)) {
                    d.copy_from_slice(&r[*offset..offset + ne0]);
                }
            }
            Op::GetRowsOut { src } => {
                let (dst, [s]) = carve(&mut self.arena, dst_r, [range(&nodes[*src])]);
                for (o, &t) in inp.out_ids.iter().enumerate() {
                    dst[o * ne0..(o + 1) * ne0].copy_from_slice(&s[t * ne0..(t + 1) * ne0]);
                }
            }
            op => return Err(not_this_family(op, "embed")),
        }
        Ok(())
    }
}
