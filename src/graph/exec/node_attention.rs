//! Attention: head views, rotary embedding, KV rows, flash attention and the
//! sparse-attention indexer.

use super::*;
use crate::kernels::cpu::ops::KvRows as _;
use crate::kv_cache::KvType;

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
            Op::RopeBack {
                src,
                head_dim,
                params,
            } => {
                let mut cache = vec![0.0f32; params.n_rot];
                let (dst, [x]) = carve(&mut self.arena, dst_r, [range(&nodes[*src])]);
                dst.copy_from_slice(x);
                for (t, row) in dst.chunks_exact_mut(ne0).enumerate() {
                    ops::rope_cache_back(params, inp.pos[t] as f32, None, &mut cache);
                    ops::rope_apply(params, &cache, *head_dim, row);
                }
            }
            Op::KpoolIndexSet {
                k,
                g: gate,
                ape,
                layer,
                kpool,
            } => {
                return self.kpool_index_set(
                    g,
                    node,
                    model,
                    kv,
                    inp,
                    (*k, *gate),
                    *ape,
                    *layer,
                    *kpool,
                )
            }
            Op::Dsv4StateSet {
                kv: kvn,
                score,
                ape,
                ratio,
                layer,
            } => {
                self.load_vec(model, &g.weights[ape.0])?;
                let (kn, sn) = (&nodes[*kvn], &nodes[*score]);
                let w = kn.ne0;
                let mut row = vec![0.0f32; 2 * w];
                for t in 0..kn.ne1 {
                    let r = inp.pos[t].rem_euclid(*ratio as i32) as usize;
                    let ape_row = &self.wvec[r * w..(r + 1) * w];
                    row[..w]
                        .copy_from_slice(&self.arena[kn.offset + t * w..kn.offset + (t + 1) * w]);
                    let s = &self.arena[sn.offset + t * w..sn.offset + (t + 1) * w];
                    for ((d, &x), &a) in row[w..].iter_mut().zip(s).zip(ape_row) {
                        *d = x + a;
                    }
                    if !kv.layers[*layer]
                        .k
                        .set_row_exact(inp.slots[t] as usize, &row)
                    {
                        return Err(ExecError::UnsupportedOp {
                            backend: "CPU",
                            op: node.name.to_string(),
                            why: "DeepSeek-V4's compressor state needs an F16 or F32 cache".into(),
                        });
                    }
                }
            }
            Op::Dsv4Compress {
                norm,
                src_layer,
                dst_layer,
                ratio,
                overlap,
                head,
                eps,
                rope,
                hadamard,
                ..
            } => {
                self.load_vec(model, &g.weights[norm.0])?;
                let norm = std::mem::take(&mut self.wvec);
                let res = dsv4_compress_tokens(
                    kv,
                    inp,
                    &norm,
                    [*src_layer, *dst_layer],
                    *ratio,
                    *overlap,
                    *head,
                    *eps,
                    rope,
                    *hadamard,
                );
                self.wvec = norm;
                res.map_err(|why| ExecError::UnsupportedOp {
                    backend: "CPU",
                    op: node.name.to_string(),
                    why,
                })?;
            }
            Op::FlashAttnComp {
                q,
                layer,
                comp_layer,
                ratio,
                n_head,
                dk,
                scale,
                n_swa,
                sinks,
                sel,
                ..
            } => {
                // the indexer's picks per token, sorted
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
                self.flash_attn_comp(
                    nodes,
                    node,
                    kv,
                    inp,
                    *q,
                    [*layer, *comp_layer],
                    *ratio,
                    *n_head,
                    *dk,
                    *scale,
                    *n_swa,
                    sinks.as_deref(),
                    sel.is_some(),
                );
                if let Some(v) = sinks {
                    self.wvec = v;
                }
            }
            Op::Dsv4LidTopK {
                q,
                w,
                layer,
                ratio,
                head,
                k,
                ..
            } => {
                let (qn, wn) = (&nodes[*q], &nodes[*w]);
                let n_head = wn.ne0;
                let (dst, [qs, ws]) = carve(&mut self.arena, dst_r, [range(qn), range(wn)]);
                dst.fill(-1.0);
                let n_vis = |t: usize| (inp.pos[t].max(-1) + 1) as usize / ratio;
                let max_vis = (0..ne1).map(n_vis).max().unwrap_or(0);
                let n_view = max_vis.next_multiple_of(256).max(256);
                let l = &kv.layers[*layer];
                let keys = KvLayerRows {
                    buf: &l.k,
                    width: l.n_embd_k,
                    cast_f16: false,
                };
                let (scores, idx, krow) =
                    (&mut self.ix_scores, &mut self.topk_i32, &mut self.ix_krow);
                let mut blocks: Option<(usize, Vec<i64>)> = None;
                for t in 0..ne1 {
                    let seq = inp.seq[t];
                    if blocks.as_ref().is_none_or(|(s, _)| *s != seq) {
                        let by_pos = rows_by_pos(kv, seq, max_vis * ratio);
                        let b = (0..n_view)
                            .map(|b| {
                                if b < max_vis {
                                    by_pos[b * ratio + ratio - 1]
                                } else {
                                    -1
                                }
                            })
                            .collect();
                        blocks = Some((seq, b));
                    }
                    let rows = &blocks.as_ref().expect("just made").1;
                    let ks = BlockRows { keys: &keys, rows };
                    let nv = n_vis(t);
                    let visible = |b: u32| (b as usize) < nv && rows[b as usize] >= 0;
                    ops::indexer_scores(
                        &qs[t * qn.ne0..(t + 1) * qn.ne0],
                        &ws[t * n_head..(t + 1) * n_head],
                        *head,
                        &ks,
                        0..n_view as u32,
                        &visible,
                        krow,
                        scores,
                    );
                    ops::top_k_set(scores, (*k).min(n_view), idx);
                    for (d, &i) in dst[t * k..(t + 1) * k].iter_mut().zip(idx.iter()) {
                        *d = i as f32;
                    }
                }
            }
            Op::SetRows { src, layer, v } => {
                // MiniMax-M3's indexer keys: upstream caches them only where its sparse
                // attention runs (else it attends densely and the indexer cache stays zero,
                // which its state files hold)
                if !msa_enabled(kv, inp)
                    && nodes
                        .iter()
                        .any(|n| matches!(n.op, Op::MsaSelect { layer: l, .. } if l == *layer))
                {
                    return Ok(());
                }
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
                if sel.is_some_and(|sn| matches!(nodes[sn].op, Op::MsaSelect { .. })) {
                    if self.msa.on {
                        self.flash_attn_msa(
                            nodes, node, kv, inp, *q, *layer, *n_head, *n_head_kv, *dk, *dv,
                            *scale, *softcap,
                        );
                        return Ok(());
                    }
                }
                let sel = sel.filter(|&sn| !matches!(nodes[sn].op, Op::MsaSelect { .. }));
                // sparse attention: the cells each token's indexer selected, sorted
                if let Some(sn) = sel {
                    let sn = &nodes[sn];
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
            Op::MsaSelect {
                q,
                layer,
                head,
                block,
                top_k,
                local,
                ..
            } => self.msa_select(nodes, kv, inp, *q, *layer, *head, *block, *top_k, *local),
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
            split_kv: true,
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

/// The rows of sequence `seq` by position (-1: none), positions `0..n`.
fn rows_by_pos(kv: &KvCache, seq: usize, n: usize) -> Vec<i64> {
    let mut by_pos = vec![-1i64; n];
    let rows = kv.rows_of(seq);
    for r in rows {
        let p = kv.row_pos(r);
        if p >= 0 && (p as usize) < n && kv.visible(r, seq, p, true, 0) {
            by_pos[p as usize] = i64::from(r);
        }
    }
    by_pos
}

/// [`Op::Dsv4Compress`] of a micro-batch (see there). A block row whose token the cache no
/// longer holds reads as upstream's missing row (values 0, scores -inf).
#[allow(clippy::too_many_arguments)]
fn dsv4_compress_tokens(
    kv: &mut KvCache,
    inp: &Inputs,
    norm: &[f32],
    [src_layer, dst_layer]: [usize; 2],
    ratio: usize,
    overlap: bool,
    head: usize,
    eps: f32,
    rope: &ops::RopeParams,
    hadamard: usize,
) -> Result<(), String> {
    // state rows: [kv | score], each `w` wide (two halves with the overlap)
    let w = if overlap { 2 * head } else { head };
    let n_rows = if overlap { 2 * ratio } else { ratio };
    let (mut values, mut scores) = (vec![0.0f32; n_rows * head], vec![0.0f32; n_rows * head]);
    let mut row = vec![0.0f32; 2 * w];
    let (mut col, mut cache, mut out) = (Vec::new(), Vec::new(), vec![0.0f32; head]);
    let mut by_pos: Option<(usize, Vec<i64>)> = None;
    for t in 0..inp.pos.len() {
        let pos = inp.pos[t];
        if pos < 0 || (pos as usize + 1) % ratio != 0 {
            continue;
        }
        let seq = inp.seq[t];
        let n = pos as usize + 1;
        if by_pos
            .as_ref()
            .is_none_or(|(s, v)| *s != seq || v.len() < n)
        {
            by_pos = Some((seq, rows_by_pos(kv, seq, n)));
        }
        let table = &by_pos.as_ref().expect("just made").1;
        let start = n - ratio;
        // (source position, which half of the row) per block row, in upstream's order
        let sources = (0..n_rows).map(|i| {
            if overlap && i < ratio {
                (start as i64 - ratio as i64 + i as i64, 0)
            } else {
                let j = if overlap { i - ratio } else { i };
                (start as i64 + j as i64, if overlap { head } else { 0 })
            }
        });
        for (i, (p, half)) in sources.enumerate() {
            let (v, s) = (
                &mut values[i * head..(i + 1) * head],
                &mut scores[i * head..(i + 1) * head],
            );
            let r = if p >= 0 { table[p as usize] } else { -1 };
            if r < 0 {
                v.fill(0.0);
                s.fill(f32::NEG_INFINITY);
                continue;
            }
            if !kv.layers[src_layer].k.get_row_exact(r as usize, &mut row) {
                return Err("DeepSeek-V4's compressor state needs an F16 or F32 cache".into());
            }
            v.copy_from_slice(&row[half..half + head]);
            s.copy_from_slice(&row[w + half..w + half + head]);
        }
        ops::dsv4_compress(
            &values,
            &scores,
            head,
            norm,
            eps,
            rope,
            start as i32,
            &mut col,
            &mut cache,
            &mut out,
        );
        if hadamard > 0 {
            ops::hadamard_rows(&mut out, hadamard);
        }
        kv.layers[dst_layer].k.set_row(inp.slots[t] as usize, &out);
    }
    Ok(())
}

/// Compressed keys by block (`rows`: the cache row of each block, -1 none).
struct BlockRows<'a> {
    keys: &'a KvLayerRows<'a>,
    rows: &'a [i64],
}

impl ops::KvRows for BlockRows<'_> {
    fn read(&self, cell: usize, off: usize, dst: &mut [f32]) {
        match self.rows.get(cell) {
            Some(&r) if r >= 0 => self.keys.read(r as usize, off, dst),
            _ => dst.fill(0.0),
        }
    }
    fn half(&self, cell: usize, off: usize, len: usize) -> Option<&[half::f16]> {
        match self.rows.get(cell) {
            Some(&r) if r >= 0 => self.keys.half(r as usize, off, len),
            _ => None,
        }
    }
    fn is_f16(&self) -> bool {
        self.keys.is_f16()
    }
}

/// DeepSeek-V4's compressed keys as attention reads them: per stream of the micro-batch
/// (`streams`, local index `s`), combined cells `s * stride ..`: first the stream's raw
/// view (`raw[s]`: start row, view length), then its compressed rows by block (`comp[s]`).
struct CompRows<'a> {
    raw: KvLayerRows<'a>,
    comp: KvLayerRows<'a>,
    stride: u32,
    views: &'a [(u32, u32)],
    blocks: &'a [Vec<i64>],
}

impl CompRows<'_> {
    /// The cache row behind combined cell `cell`: (compressed, row), None for padding.
    fn at(&self, cell: usize) -> Option<(bool, usize)> {
        let (s, off) = (cell / self.stride as usize, cell % self.stride as usize);
        let (start, n_raw) = self.views[s];
        if off < n_raw as usize {
            return Some((false, start as usize + off));
        }
        let b = off - n_raw as usize;
        match self.blocks[s].get(b) {
            Some(&r) if r >= 0 => Some((true, r as usize)),
            _ => None,
        }
    }
}

impl ops::KvRows for CompRows<'_> {
    fn read(&self, cell: usize, off: usize, dst: &mut [f32]) {
        match self.at(cell) {
            Some((false, r)) => self.raw.read(r, off, dst),
            Some((true, r)) => self.comp.read(r, off, dst),
            None => dst.fill(0.0),
        }
    }
    fn half(&self, cell: usize, off: usize, len: usize) -> Option<&[half::f16]> {
        match self.at(cell) {
            Some((false, r)) => self.raw.half(r, off, len),
            Some((true, r)) => self.comp.half(r, off, len),
            None => None,
        }
    }
    fn is_f16(&self) -> bool {
        self.raw.is_f16()
    }
    fn cast_f16(&self) -> bool {
        self.raw.cast_f16()
    }
}

impl CpuExecutor {
    /// [`Op::FlashAttnComp`]: FLASH_ATTN_EXT over the raw and compressed rows (see there).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn flash_attn_comp(
        &mut self,
        nodes: &[Node],
        node: &Node,
        kv: &KvCache,
        inp: &Inputs,
        q: NodeId,
        layers: [usize; 2],
        ratio: usize,
        n_head: usize,
        dk: usize,
        scale: f32,
        n_swa: u32,
        sinks: Option<&[f32]>,
        sparse: bool,
    ) {
        let n_tokens = nodes[q].ne1;
        let sel_rows = &self.sel_rows;
        // the streams of the micro-batch's tokens, their raw views and compressed blocks
        let mut seqs: Vec<usize> = Vec::new();
        let tok_stream: Vec<usize> = (0..n_tokens)
            .map(|t| match seqs.iter().position(|&s| s == inp.seq[t]) {
                Some(i) => i,
                None => {
                    seqs.push(inp.seq[t]);
                    seqs.len() - 1
                }
            })
            .collect();
        let n_vis = |t: usize| (inp.pos[t].max(-1) + 1) as usize / ratio;
        let max_vis = (0..n_tokens).map(n_vis).max().unwrap_or(0);
        // upstream's compressed view: at least 256 rows, padded to 256
        let n_comp = max_vis.next_multiple_of(256).max(256) as u32;
        let views: Vec<(u32, u32)> = seqs
            .iter()
            .map(|&s| {
                let r = kv.rows_of(s);
                (r.start, ops::upstream_n_kv(r.end - r.start, kv.size()))
            })
            .collect();
        let blocks: Vec<Vec<i64>> = seqs
            .iter()
            .map(|&s| {
                let by_pos = rows_by_pos(kv, s, max_vis * ratio);
                (0..max_vis)
                    .map(|b| by_pos[b * ratio + ratio - 1])
                    .collect()
            })
            .collect();
        let stride = kv.size() + n_comp;
        let (raw_l, comp_l) = (&kv.layers[layers[0]], &kv.layers[layers[1]]);
        let k = CompRows {
            raw: KvLayerRows {
                buf: &raw_l.k,
                width: raw_l.n_embd_k,
                cast_f16: inp.flash_attn,
            },
            comp: KvLayerRows {
                buf: &comp_l.k,
                width: comp_l.n_embd_k,
                cast_f16: inp.flash_attn,
            },
            stride,
            views: &views,
            blocks: &blocks,
        };
        let rows = |t: usize| {
            let s = tok_stream[t];
            let base = s as u32 * stride;
            base..base + views[s].1 + n_comp
        };
        let visible_row = |t: usize, first: u32, out: &mut [bool]| {
            let s = tok_stream[t];
            let (seq, pos) = (inp.seq[t], inp.pos[t]);
            for (j, o) in (first..).zip(out.iter_mut()) {
                let off = j - s as u32 * stride;
                let (start, n_raw) = views[s];
                *o = if off < n_raw {
                    kv.visible(start + off, seq, pos, inp.causal, n_swa)
                } else {
                    let b = (off - n_raw) as usize;
                    b < n_vis(t)
                        && blocks[s].get(b).is_some_and(|&r| r >= 0)
                        && (!sparse || sel_rows[t].binary_search(&(b as u32)).is_ok())
                };
            }
        };
        let n_threads = self.pool.n_threads();
        if self.attn_scratch.len() < n_threads + 1 {
            self.attn_scratch.resize_with(n_threads + 1, || {
                std::sync::Mutex::new(ops::AttnScratch::default())
            });
        }
        let shape = ops::AttnShape {
            n_head,
            n_head_kv: 1,
            dk,
            dv: dk,
            scale,
            softcap: 0.0,
            max_bias: 0.0,
            n_cells_max: stride,
            flash_attn: inp.flash_attn,
            split_kv: true,
        };
        let (dst, [qs]) = carve(&mut self.arena, range(node), [range(&nodes[q])]);
        let attn = ops::Attn {
            shape,
            q: qs,
            n_tokens,
            rows: &rows,
            visible_row: &visible_row,
            k: &k,
            v: &k,
            sinks,
            alibi: None,
        };
        ops::flash_attn(&attn, dst, &self.pool, &self.attn_scratch);
    }
}

/// One KV head's rows of a layer's cache (values from `off`), read directly or through a
/// list of rows (MiniMax-M3's gathered cells: entry `i` is the cache row read as row `i`,
/// `u32::MAX` a masked one, never read).
struct MsaRows<'a> {
    inner: &'a dyn ops::KvRows,
    off: usize,
    list: Option<&'a [u32]>,
    /// Gathered rows of a quantized cache: GET_ROWS dequantizes them and the graph casts them
    /// to F16 before FLASH_ATTN_EXT.
    cast_f16: bool,
}

impl MsaRows<'_> {
    fn row(&self, i: usize) -> usize {
        match self.list {
            // (a masked entry's values are never used: row 0 stands in)
            Some(l) => l.get(i).copied().filter(|&r| r != u32::MAX).unwrap_or(0) as usize,
            None => i,
        }
    }
}

impl ops::KvRows for MsaRows<'_> {
    fn read(&self, cell: usize, off: usize, dst: &mut [f32]) {
        self.inner.read(self.row(cell), self.off + off, dst);
    }
    fn half(&self, cell: usize, off: usize, len: usize) -> Option<&[half::f16]> {
        self.inner.half(self.row(cell), self.off + off, len)
    }
    fn is_f16(&self) -> bool {
        self.inner.is_f16()
    }
    fn cast_f16(&self) -> bool {
        self.cast_f16
    }
    fn packed(
        &self,
        cell: usize,
        off: usize,
        len: usize,
    ) -> Option<(crate::gguf::GgmlType, &[u8])> {
        if self.cast_f16 {
            return None;
        }
        self.inner.packed(self.row(cell), self.off + off, len)
    }
}

/// Whether MiniMax-M3's sparse attention runs, as upstream decides: flash attention on and
/// one sequence per stream (else it attends densely).
fn msa_enabled(kv: &KvCache, inp: &Inputs) -> bool {
    inp.flash_attn && (kv.n_seq_max() <= 1 || kv.n_stream() > 1)
}

impl CpuExecutor {
    /// [`Op::MsaSelect`]: the blocks each (token, indexer head) selects, kept in `self.msa`.
    #[allow(clippy::too_many_arguments)]
    fn msa_select(
        &mut self,
        nodes: &[Node],
        kv: &KvCache,
        inp: &Inputs,
        q: NodeId,
        layer: usize,
        head: usize,
        block: usize,
        top_k: usize,
        local: usize,
    ) {
        let qn = &nodes[q];
        let n_tokens = qn.ne1;
        let n_head = qn.ne0 / head.max(1);
        let st = &mut self.msa;
        st.on = msa_enabled(kv, inp);
        if !st.on {
            return;
        }
        let mut streams: Vec<usize> = inp.seq[..n_tokens]
            .iter()
            .filter_map(|&s| kv.stream_of(s))
            .collect();
        streams.sort_unstable();
        streams.dedup();
        st.decode = n_tokens == streams.len();
        // upstream's position axis covers every position of every sequence
        let pos_max = (0..kv.n_seq_max())
            .map(|s| kv.seq_pos_max(s))
            .max()
            .unwrap_or(-1);
        let n_ps = ops::msa_n_pos(pos_max);
        let n_blk = n_ps / block;
        (st.block, st.n_head, st.n_blk, st.n_ps) = (block, n_head, n_blk, n_ps);
        st.k = top_k.min(n_blk);
        st.blocks.clear();
        st.slots.clear();
        st.chosen.clear();
        let qs = &self.arena[qn.offset..qn.offset + qn.len()];
        let l = &kv.layers[layer];
        let keys = KvLayerRows {
            buf: &l.k,
            width: l.n_embd_k,
            cast_f16: false,
        };
        let (scores, idx, krow) = (&mut self.ix_scores, &mut self.topk_i32, &mut self.ix_krow);
        krow.resize(head, 0.0);
        for t in 0..n_tokens {
            let (seq, pos) = (inp.seq[t], inp.pos[t]);
            // the row of each position the token sees (upstream's pos -> cell map, masked by
            // its position mask: causal, no window)
            let base = if st.decode { st.slots.len() } else { 0 };
            st.slots.truncate(base);
            st.slots.resize(base + n_ps, u32::MAX);
            for j in kv.rows_of(seq) {
                if kv.visible(j, seq, pos, true, 0) {
                    let p = kv.row_pos(j);
                    if (0..n_ps as i32).contains(&p) {
                        st.slots[base + p as usize] = j;
                    }
                }
            }
            scores.clear();
            scores.resize(n_head * n_ps, f32::NEG_INFINITY);
            let qt = &qs[t * qn.ne0..(t + 1) * qn.ne0];
            for p in 0..n_ps {
                let r = st.slots[base + p];
                if r == u32::MAX {
                    continue;
                }
                keys.read(r as usize, 0, krow);
                for h in 0..n_head {
                    scores[h * n_ps + p] = ops::msa_score_dot(krow, &qt[h * head..(h + 1) * head]);
                }
            }
            for h in 0..n_head {
                let sc = &scores[h * n_ps..(h + 1) * n_ps];
                ops::msa_blocks(sc, block, top_k, local, pos, &mut st.bs, idx);
                st.blocks.extend_from_slice(idx);
                if !st.decode {
                    let at = st.chosen.len();
                    st.chosen.resize(at + n_blk, false);
                    for &b in idx.iter() {
                        st.chosen[at + b as usize] = true;
                    }
                }
            }
        }
    }

    /// FLASH_ATTN_EXT over MiniMax-M3's selection (`self.msa`), one KV head at a time as
    /// upstream's grouped call: at decode each (token, KV head) reads its selected blocks'
    /// cells gathered in the selection's order (a quantized cache as F16, upstream's GET_ROWS
    /// and cast); otherwise the cache's cells in order, those of unselected blocks masked.
    #[allow(clippy::too_many_arguments)]
    fn flash_attn_msa(
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
    ) {
        let l = &kv.layers[layer];
        let n_threads = self.pool.n_threads();
        if self.attn_scratch.len() < n_threads + 1 {
            self.attn_scratch.resize_with(n_threads + 1, || {
                std::sync::Mutex::new(ops::AttnScratch::default())
            });
        }
        let group = n_head / n_head_kv;
        let qn = &nodes[q];
        let n_tokens = qn.ne1;
        let st = &mut self.msa;
        let quantized = |t: KvType| matches!(t, KvType::Packed(ty) if ty.block_size() > 1);
        let k_rows = KvLayerRows {
            buf: &l.k,
            width: l.n_embd_k,
            cast_f16: false,
        };
        let v_rows = KvLayerRows {
            buf: &l.v,
            width: l.n_embd_v,
            cast_f16: false,
        };
        let mut qg = std::mem::take(&mut self.tmp);
        let mut og = std::mem::take(&mut self.tmp2);
        let (dst, [qs]) = carve(&mut self.arena, range(node), [range(qn)]);
        for g in 0..n_head_kv {
            // this KV head's query heads
            qg.clear();
            for t in 0..n_tokens {
                let row = &qs[t * n_head * dk..(t + 1) * n_head * dk];
                qg.extend_from_slice(&row[g * group * dk..(g + 1) * group * dk]);
            }
            if st.decode {
                og.clear();
                og.resize(group * dv, 0.0);
                for t in 0..n_tokens {
                    let sel = &st.blocks[(t * st.n_head + g) * st.k..][..st.k];
                    let slots = &st.slots[t * st.n_ps..(t + 1) * st.n_ps];
                    st.list.clear();
                    for &b in sel {
                        let p0 = b as usize * st.block;
                        st.list.extend_from_slice(&slots[p0..p0 + st.block]);
                    }
                    let list = &st.list[..];
                    let n = list.len() as u32;
                    let shape = ops::AttnShape {
                        n_head: group,
                        n_head_kv: 1,
                        dk,
                        dv,
                        scale,
                        softcap,
                        max_bias: 0.0,
                        n_cells_max: n,
                        flash_attn: true,
                        // upstream folds (KV head, stream) onto one call's channels
                        split_kv: n_head_kv * n_tokens == 1,
                    };
                    let k = MsaRows {
                        inner: &k_rows,
                        off: g * dk,
                        list: Some(list),
                        cast_f16: quantized(kv.type_k),
                    };
                    let v = MsaRows {
                        inner: &v_rows,
                        off: g * dv,
                        list: Some(list),
                        cast_f16: quantized(kv.type_v),
                    };
                    let rows = |_: usize| 0..n;
                    let visible_row = |_: usize, first: u32, out: &mut [bool]| {
                        for (o, &r) in out.iter_mut().zip(&list[first as usize..]) {
                            *o = r != u32::MAX;
                        }
                    };
                    let attn = ops::Attn {
                        shape,
                        q: &qg[t * group * dk..(t + 1) * group * dk],
                        n_tokens: 1,
                        rows: &rows,
                        visible_row: &visible_row,
                        k: &k,
                        v: &v,
                        sinks: None,
                        alibi: None,
                    };
                    ops::flash_attn(&attn, &mut og, &self.pool, &self.attn_scratch);
                    let o = &mut dst[(t * n_head + g * group) * dv..][..group * dv];
                    o.copy_from_slice(&og);
                }
                continue;
            }
            og.clear();
            og.resize(n_tokens * group * dv, 0.0);
            let shape = ops::AttnShape {
                n_head: group,
                n_head_kv: 1,
                dk,
                dv,
                scale,
                softcap,
                max_bias: 0.0,
                n_cells_max: kv.size(),
                flash_attn: true,
                split_kv: true,
            };
            let k = MsaRows {
                inner: &k_rows,
                off: g * dk,
                list: None,
                cast_f16: false,
            };
            let v = MsaRows {
                inner: &v_rows,
                off: g * dv,
                list: None,
                cast_f16: false,
            };
            let rows = |t: usize| kv.rows_of(inp.seq[t]);
            let (chosen, n_blk, block, n_h) = (&st.chosen, st.n_blk, st.block, st.n_head);
            let visible_row = |t: usize, first: u32, out: &mut [bool]| {
                let sel = &chosen[(t * n_h + g) * n_blk..][..n_blk];
                for (j, o) in (first..).zip(out.iter_mut()) {
                    *o = kv.visible(j, inp.seq[t], inp.pos[t], inp.causal, 0) && {
                        let b = kv.row_pos(j).max(0) as usize / block;
                        sel.get(b).copied().unwrap_or(false)
                    };
                }
            };
            let attn = ops::Attn {
                shape,
                q: &qg,
                n_tokens,
                rows: &rows,
                visible_row: &visible_row,
                k: &k,
                v: &v,
                sinks: None,
                alibi: None,
            };
            ops::flash_attn(&attn, &mut og, &self.pool, &self.attn_scratch);
            for t in 0..n_tokens {
                let o = &mut dst[(t * n_head + g * group) * dv..][..group * dv];
                o.copy_from_slice(&og[t * group * dv..(t + 1) * group * dv]);
            }
        }
        self.tmp = qg;
        self.tmp2 = og;
    }
}
