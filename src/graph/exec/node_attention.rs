//! Attention: head views, rotary embedding, KV rows, flash attention and the
//! sparse-attention indexer.

use super::*;

impl CpuExecutor {
    /// Computes one node of this family into the arena (its sources are there).
    pub(super) fn node_attention(
        &mut self,
        g: &Graph,
        node: &Node,
        model: &Model,
        kv: &mut KvCache,
        inp: &Inputs,
    ) -> Result<(), ExecError> {
        let nodes = &g.nodes;
        let dst_r = range(node);
        let (ne0, ne1) = (node.ne0, node.ne1);
        match &node.op {
            Op::ViewHeads {
                src,
                stride,
                offset,
                len,
            } => {
                let (dst, [x]) = carve(&mut self.arena, dst_r, [range(&nodes[*src])]);
                for (d, r) in dst.chunks_exact_mut(*len).zip(x.chunks_exact(*stride)) {
                    d.copy_from_slice(&r[*offset..offset + len]);
                }
            }
            Op::ConcatHeads { a, b, n_head } => {
                let (an, bn) = (&nodes[*a], &nodes[*b]);
                let (la, lb) = (an.ne0 / n_head, bn.ne0 / n_head);
                let (dst, [xa, xb]) = carve(&mut self.arena, dst_r, [range(an), range(bn)]);
                for ((d, ra), rb) in dst
                    .chunks_exact_mut(la + lb)
                    .zip(xa.chunks_exact(la))
                    .zip(xb.chunks_exact(lb))
                {
                    d[..la].copy_from_slice(ra);
                    d[la..].copy_from_slice(rb);
                }
            }
            Op::Rope {
                src,
                head_dim,
                params,
                freq_factors,
            } => {
                let ff = match freq_factors {
                    Some(w) => {
                        self.load_vec(model, &g.weights[w.0])?;
                        true
                    }
                    None => false,
                };
                let n_threads = self.pool.n_threads();
                if self.rope_caches.len() < n_threads {
                    self.rope_caches.resize_with(n_threads, Default::default);
                }
                for c in &mut self.rope_caches {
                    c.get_mut()
                        .unwrap_or_else(|e| e.into_inner())
                        .resize(params.n_rot, 0.0);
                }
                let (caches, wvec) = (&self.rope_caches, &self.wvec[..]);
                let (dst, [x]) = carve(&mut self.arena, dst_r, [range(&nodes[*src])]);
                dst.copy_from_slice(x);
                kernel_api::for_row_runs(&self.pool, dst, ne0, &|first, dst, thread| {
                    let mut cache = caches[thread].lock().unwrap_or_else(|e| e.into_inner());
                    for (i, row) in dst.chunks_exact_mut(ne0).enumerate() {
                        let pos = inp.pos[first + i] as f32;
                        ops::rope_cache(params, pos, ff.then_some(wvec), &mut cache);
                        ops::rope_apply(params, &cache, *head_dim, row);
                    }
                });
            }
            Op::SetRows { src, layer, v } => {
                let s = &nodes[*src];
                let x = &self.arena[s.offset..s.offset + s.len()];
                let l = &mut kv.layers[*layer];
                let buf = if *v { &mut l.v } else { &mut l.k };
                for (t, row) in x.chunks_exact(s.ne0).enumerate() {
                    buf.set_row(inp.slots[t] as usize, row);
                }
            }
            Op::FlashAttnExt {
                q,
                layer,
                n_head,
                n_head_kv,
                dk,
                dv,
                scale,
                softcap,
                n_swa,
                v_in_k,
                sinks,
                max_bias,
                sel,
                ..
            } => {
                // sparse attention: the cells each token's indexer selected, sorted
                if let Some(sn) = sel {
                    let sn = &nodes[*sn];
                    let vals = &self.arena[sn.offset..sn.offset + sn.len()];
                    self.sel_rows.resize_with(sn.ne1, Vec::new);
                    for (set, row) in self.sel_rows.iter_mut().zip(vals.chunks_exact(sn.ne0)) {
                        set.clear();
                        set.extend(row.iter().filter(|&&r| r >= 0.0).map(|&r| r as u32));
                        set.sort_unstable();
                    }
                }
                let sinks = match sinks {
                    Some(w) => {
                        self.load_vec(model, &g.weights[w.0])?;
                        Some(std::mem::take(&mut self.wvec))
                    }
                    None => None,
                };
                self.flash_attn(
                    nodes,
                    node,
                    kv,
                    inp,
                    *q,
                    *layer,
                    *n_head,
                    *n_head_kv,
                    *dk,
                    *dv,
                    *scale,
                    *softcap,
                    *n_swa,
                    *v_in_k,
                    sinks.as_deref(),
                    *max_bias,
                    sel.is_some(),
                );
                if let Some(v) = sinks {
                    self.wvec = v;
                }
            }
            Op::LightningIndexer {
                q,
                w,
                layer,
                head,
                k,
                ..
            } => {
                let (qn, wn) = (&nodes[*q], &nodes[*w]);
                let n_head = wn.ne0;
                let (dst, [qs, ws]) = carve(&mut self.arena, dst_r, [range(qn), range(wn)]);
                let l = &kv.layers[*layer];
                let keys = KvLayerRows {
                    buf: &l.k,
                    width: l.n_embd_k,
                    cast_f16: false,
                };
                dst.fill(-1.0);
                let (scores, idx, krow) =
                    (&mut self.ix_scores, &mut self.topk_i32, &mut self.ix_krow);
                for t in 0..ne1 {
                    // upstream's view of the stream: its used cells padded (get_n_kv)
                    let rows = kv.rows_of(inp.seq[t]);
                    let n_kv = ops::upstream_n_kv(rows.end - rows.start, kv.size());
                    let view = rows.start..rows.start + n_kv;
                    let visible = |j: u32| {
                        j < rows.end && kv.visible(j, inp.seq[t], inp.pos[t], inp.causal, 0)
                    };
                    ops::indexer_scores(
                        &qs[t * qn.ne0..(t + 1) * qn.ne0],
                        &ws[t * n_head..(t + 1) * n_head],
                        *head,
                        &keys,
                        view.clone(),
                        &visible,
                        krow,
                        scores,
                    );
                    ops::top_k_set(scores, (*k).min(n_kv as usize), idx);
                    for (d, &i) in dst[t * k..(t + 1) * k].iter_mut().zip(idx.iter()) {
                        *d = (view.start + i as u32) as f32;
                    }
                }
            }
            op => return Err(not_this_family(op, "attention")),
        }
        Ok(())
    }
}
impl CpuExecutor {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn flash_attn(
        &mut self,
        nodes: &[Node],
        node: &Node,
        kv: &KvCache,
        inp: &Inputs,
        q: NodeId,
        layer: usize,
        n_head: usize,
        n_head_kv: usize,
        dk: usize,
        dv: usize,
        scale: f32,
        softcap: f32,
        n_swa: u32,
        v_in_k: bool,
        sinks: Option<&[f32]>,
        max_bias: f32,
        sparse: bool,
    ) {
        let l = &kv.layers[layer];
        let n_threads = self.pool.n_threads();
        // one set per pool thread, and one for the split-KV path's partials
        if self.attn_scratch.len() < n_threads + 1 {
            self.attn_scratch.resize_with(n_threads + 1, || {
                std::sync::Mutex::new(ops::AttnScratch::default())
            });
        }
        let shape = ops::AttnShape {
            n_head,
            n_head_kv,
            dk,
            dv,
            scale,
            softcap,
            max_bias,
            n_cells_max: kv.size(),
            flash_attn: inp.flash_attn,
        };
        let qn = &nodes[q];
        let n_tokens = qn.ne1;
        let (dst, [qs]) = carve(&mut self.arena, range(node), [range(qn)]);
        // each token attends to the used rows of its sequence's stream
        let rows = |t: usize| kv.rows_of(inp.seq[t]);
        // sparse attention: only the cells in the token's selection (`sel_rows`, sorted)
        let sel_rows = &self.sel_rows;
        let ask = |t: usize, j: u32| {
            kv.visible(j, inp.seq[t], inp.pos[t], inp.causal, n_swa)
                && (!sparse || sel_rows[t].binary_search(&j).is_ok())
        };
        // (the masks kept for a run are the dense ones)
        let mask = (n_tokens >= MASK_MIN_TOKENS && !sparse)
            .then(|| AttnMask::of_run(&mut self.attn_masks, n_swa, n_tokens, &rows, &ask));
        let visible_row = |t: usize, first: u32, out: &mut [bool]| match mask {
            Some(m) => m.fill_row(t, first, out),
            None => {
                for (j, o) in (first..).zip(out.iter_mut()) {
                    *o = ask(t, j);
                }
            }
        };
        // ALiBi: upstream's mask value of a cell, -|p0 - p1| (F16 for flash attention, whose
        // mask is cast to F16; F32 without)
        let fa = inp.flash_attn;
        let alibi_row = |t: usize, first: u32, out: &mut [f32]| {
            let p0 = inp.pos[t];
            for (j, o) in (first..).zip(out.iter_mut()) {
                let d = -((p0 - kv.row_pos(j)).abs() as f32);
                *o = if fa {
                    half::f16::from_f32(d).to_f32()
                } else {
                    d
                };
            }
        };
        let attn = ops::Attn {
            shape,
            q: qs,
            n_tokens,
            rows: &rows,
            visible_row: &visible_row,
            k: &KvLayerRows {
                buf: &l.k,
                width: l.n_embd_k,
                cast_f16: inp.flash_attn,
            },
            // MLA's compressed cache: V is the start of each K row
            v: &KvLayerRows {
                buf: if v_in_k { &l.k } else { &l.v },
                width: if v_in_k { l.n_embd_k } else { l.n_embd_v },
                cast_f16: inp.flash_attn,
            },
            sinks,
            alibi: (max_bias > 0.0).then_some(&alibi_row),
        };
        ops::flash_attn(&attn, dst, &self.pool, &self.attn_scratch);
    }
}
