//! Decoding: a batch split into micro-batches, each run through the graph; pooling,
//! classification, rollback and the K-shift.

use super::*;

impl Context {
    /// `llama_decode` on the batch in `engine.raw`: 0 success, 1 no KV slot, 2 aborted, -1
    /// invalid batch, -3 compute failure. Failures are logged.
    pub fn decode(&self) -> i32 {
        let mut guard = self.engine();
        let e = &mut *guard;
        let n_vocab = self.hp.n_vocab as i32;
        let n_tokens = e.raw.tokens.len();
        if n_tokens > e.cparams.n_batch as usize {
            // upstream asserts (aborts the process) here
            crate::log_error!(
                "decode: n_tokens = {n_tokens} > n_batch = {}: split the batch",
                e.cparams.n_batch
            );
            return -1;
        }
        if e.raw.has_embd && e.raw.embd.len() != n_tokens * self.hp.n_embd {
            crate::log_error!(
                "decode: the batch has {} input embedding values, expected n_tokens * n_embd = {}",
                e.raw.embd.len(),
                n_tokens * self.hp.n_embd
            );
            return -1;
        }
        if self.memoryless {
            // upstream's decode without memory is its encode: positions are checked
            // against nothing kept, every token is an output
            e.kv.clear(false);
        }
        if let Err(err) = batch::validate(
            &e.raw,
            n_vocab,
            e.cparams.n_seq_max,
            e.cparams.embeddings || self.memoryless,
            &e.kv,
            self.multi_pos,
            &mut e.batch,
        ) {
            crate::log_error!("{err}");
            if !err.0.starts_with("decode:") {
                crate::log_error!("decode: failed to initialize batch");
            }
            return -1;
        }
        if (!e.cparams.causal_attn || self.memoryless) && n_tokens > e.cparams.n_ubatch as usize {
            // upstream asserts (aborts the process) here
            crate::log_error!(
                "decode: non-causal attention requires n_ubatch >= n_tokens ({} < {n_tokens})",
                e.cparams.n_ubatch
            );
            return -1;
        }
        e.embd_seq.clear();
        e.embd_seq.resize(e.cparams.n_seq_max as usize, None);
        if self.dry_run {
            // upstream's no_alloc context has buffers without memory; computing on it is
            // undefined there
            crate::log_error!(
                "decode: the model was loaded with no_alloc: it has no weights to compute with"
            );
            return -3;
        }
        if self.vocab_only {
            // upstream decodes through its encoder path and aborts the process (no backend)
            crate::log_error!(
                "decode: the model was loaded with vocab_only: it has no weights to compute with"
            );
            return -3;
        }
        // whole-stream copies of seq_cp reach the rows a backend keeps in its own memory
        if !e.kv.stream_copies.is_empty() {
            let copies = std::mem::take(&mut e.kv.stream_copies);
            if let Err(err) = e.exec.copy_kv_streams(&e.kv, &copies) {
                crate::log_error!(
                    "decode: copying a sequence's KV rows between streams failed: {err}"
                );
                return -3;
            }
        }
        // pending position shifts re-rotate the cached keys first
        if e.kv.has_shift() {
            // rows a backend keeps in its own memory (rpc-servers) come to the host cache,
            // are re-rotated there and go back
            let rows: Vec<usize> = shifted_cells(e).into_iter().map(|(j, _)| j).collect();
            if let Err(err) = e.exec.sync_k_rows(&mut e.kv, &rows, true) {
                crate::log_error!("decode: the K-shift could not read the cached keys: {err}");
                return -3;
            }
            self.apply_k_shift(e);
            if let Err(err) = e.exec.sync_k_rows(&mut e.kv, &rows, false) {
                crate::log_error!(
                    "decode: the K-shift could not write the cached keys back: {err}"
                );
                return -3;
            }
        }
        // micro-batches: consecutive runs with one stream, else equal shares of consecutive
        // sequences, each in its own stream (upstream's split_simple / split_equal)
        let n_ubatch = e.cparams.n_ubatch as usize;
        if e.kv.n_stream() == 1 {
            e.split.simple(n_tokens, n_ubatch);
        } else if let Err(err) = e.split.equal(&e.batch, n_ubatch) {
            crate::log_error!("{err}");
            crate::log_warn!("decode: failed to find a memory slot for batch of size {n_tokens}");
            return 1;
        }
        // every micro-batch must fit before any is computed (upstream's prepare): each
        // stream needs an empty cell per token going there
        let per_stream = &mut e.ub.per_stream;
        per_stream.clear();
        per_stream.resize(e.kv.n_stream(), 0);
        for &s in &e.batch.seq0 {
            let st = e.kv.stream_of(s).expect("validated sequence id");
            per_stream[st] += 1;
        }
        if e.kv.attn && (0..e.kv.n_stream()).any(|st| per_stream[st] > e.kv.n_free(st)) {
            crate::log_warn!("decode: failed to find a memory slot for batch of size {n_tokens}");
            return 1;
        }
        let n_outputs_all = e.batch.n_outputs;
        e.logits.resize(n_outputs_all * self.hp.n_vocab, 0.0);
        if e.cparams.embeddings {
            e.embd.resize(n_outputs_all * self.hp.n_embd, 0.0);
        }
        // outputs keep the batch's order whatever the micro-batches' order (upstream sorts
        // them after the last one)
        e.output_ids.clear();
        let mut row = 0;
        for &o in &e.batch.output {
            e.output_ids.push(if o { row } else { -1 });
            row += o as i32;
        }
        e.n_outputs = 0;
        let generation = self.model.generation.load(Ordering::Acquire);
        if self.graph_generation.swap(generation, Ordering::AcqRel) != generation {
            e.graph = None;
        }
        let split = std::mem::take(&mut e.split);
        let mut code = 0;
        for &u in &split.ubatches {
            code = self.process_ubatch(e, &split.idx[u.start..u.end], u.n_seqs, generation);
            if code != 0 {
                break;
            }
            // the micro-batch pooled what edits had made stale
            e.kv.pools_clean();
        }
        e.split = split;
        code
    }

    /// Computes one micro-batch: the batch's tokens `idx` (in `n_seqs` equal groups, one
    /// per stream, when the cache has several).
    pub(super) fn process_ubatch(
        &self,
        e: &mut Engine,
        idx: &[usize],
        n_seqs: usize,
        generation: u64,
    ) -> i32 {
        let n = idx.len();
        if let Some(abort) = e.abort.as_mut() {
            if abort() {
                return 2;
            }
        }
        let b = &e.batch;
        let ub = &mut e.ub;
        ub.tokens.clear();
        ub.pos.clear();
        ub.seq0.clear();
        ub.seqs.clear();
        ub.embd.clear();
        let ne = self.hp.n_embd;
        for &i in idx {
            ub.tokens.push(b.tokens[i]);
            ub.pos.push(b.pos[i]);
            ub.seq0.push(b.seq0[i]);
            ub.seqs.push(b.seqs[i]);
            if e.raw.has_embd {
                ub.embd.extend_from_slice(&e.raw.embd[i * ne..(i + 1) * ne]);
            }
        }
        ub.groups.clear();
        let per_group = n / n_seqs.max(1);
        for g in 0..n_seqs.max(1) {
            let st =
                e.kv.stream_of(ub.seq0[g * per_group])
                    .expect("validated sequence id");
            ub.groups.push((st, per_group as u32));
        }
        if e.kv.attn {
            if !e.kv.find_slot(&ub.groups, &mut e.slots) {
                crate::log_warn!("decode: failed to find a memory slot for batch of size {n}");
                return 1;
            }
            // an input embedding's cell carries the PLE hash's stand-in token (upstream's)
            let stand_in: Vec<i32>;
            let toks = match (&self.hp.ext.ple, e.raw.has_embd) {
                (_, false) => Some(&ub.tokens[..]),
                (Some(p), true) => {
                    stand_in = vec![p.stand_in() as i32; n];
                    Some(&stand_in[..])
                }
                (None, true) => None,
            };
            e.kv.apply(&e.slots, &ub.pos, &ub.seqs, toks);
        } else {
            e.slots.clear();
        }
        if let Some(rs) = e.kv.rs.as_mut() {
            // one group per first sequence, in the order of their first tokens, with the
            // position of its last token (upstream's find_slot over an equal split)
            let groups = &mut e.rs_groups;
            groups.clear();
            for t in 0..n {
                let (s0, p) = (ub.seq0[t], ub.pos[t]);
                match groups.iter_mut().find(|g| g.seq0 == s0) {
                    Some(g) => {
                        g.last_pos = p;
                        g.n_tokens += 1;
                    }
                    None => groups.push(crate::kv_cache::RsGroup {
                        seqs: ub.seqs[t],
                        seq0: s0,
                        last_pos: p,
                        n_tokens: 1,
                    }),
                }
            }
            if !rs.find_slot(groups) {
                crate::log_warn!(
                    "decode: failed to find a recurrent memory slot for batch of size {n}"
                );
                return 1;
            }
        }
        e.out_ids.clear();
        for (t, &i) in idx.iter().enumerate() {
            if b.output[i] {
                e.out_ids.push(t);
            }
        }
        let n_out = e.out_ids.len();
        let shape = GraphShape {
            n_tokens: n,
            n_outputs: n_out,
            generation,
            embd_input: e.raw.has_embd,
        };
        if e.graph.as_ref().map(|g| g.shape) != Some(shape) {
            match arch::build(
                &self.model,
                &self.hp,
                e.cparams.rope,
                shape,
                e.cparams.n_ctx_seq,
                self.kv_rot,
                &e.adapters,
            ) {
                Ok(g) => {
                    e.graph = Some(g);
                    e.n_graph_builds += 1;
                }
                Err(err) => {
                    crate::log_error!("decode: cannot build the graph: {err}");
                    self.rollback(e);
                    return -3;
                }
            }
        }
        let graph = e.graph.as_ref().expect("built above");
        let ub = &e.ub;
        let inputs = Inputs {
            tokens: &ub.tokens,
            embd: &ub.embd,
            pos: &ub.pos,
            seq: &ub.seq0,
            out_ids: &e.out_ids,
            slots: &e.slots,
            // upstream's encode always attends both ways
            causal: e.cparams.causal_attn && !self.memoryless,
            flash_attn: e.cparams.flash_attn,
        };
        let threads = if n == 1 {
            pool_capped(e.cparams.n_threads, e.pool_threads.0)
        } else {
            pool_capped(e.cparams.n_threads_batch, e.pool_threads.1)
        };
        // llama_set_n_threads takes any count: at most MAX_THREADS run
        e.exec
            .set_n_threads((threads.max(1) as usize).min(crate::kernels::cpu::MAX_THREADS));
        let abort = &mut e.abort;
        let mut poll = || abort.as_mut().is_some_and(|f| f());
        let run = match e.observer.as_deref_mut() {
            Some(obs) => {
                e.exec
                    .compute_observed(graph, &self.model, &mut e.kv, &inputs, &mut poll, obs)
            }
            None => e
                .exec
                .compute(graph, &self.model, &mut e.kv, &inputs, &mut poll),
        };
        if let Err(err) = run {
            let code = match err {
                ExecError::Aborted => 2,
                _ => -3,
            };
            if code != 2 {
                crate::log_error!("decode: {err}");
            }
            self.rollback(e);
            return code;
        }
        // copy the outputs, each to the row of its token in the batch's order
        let nv = self.hp.n_vocab;
        let ne = self.hp.n_embd;
        let embd_node = graph.embd.filter(|_| e.cparams.embeddings);
        for (node, width, is_logits) in [(graph.logits, nv, true), (embd_node, ne, false)] {
            let Some(node) = node else { continue };
            let values = match e.exec.output(graph, node) {
                Ok(v) => v,
                Err(err) => {
                    crate::log_error!("decode: {err}");
                    self.rollback(e);
                    return -3;
                }
            };
            let dst = if is_logits {
                &mut e.logits
            } else {
                &mut e.embd
            };
            for (k, &t) in e.out_ids.iter().enumerate() {
                let r = e.output_ids[idx[t]] as usize;
                dst[r * width..(r + 1) * width]
                    .copy_from_slice(&values[k * width..(k + 1) * width]);
            }
        }
        e.n_outputs += n_out;
        if e.cparams.embeddings && e.cparams.pooling_type != 0 {
            if let Err(err) = self.pool(e, idx) {
                crate::log_error!("decode: {err}");
                self.rollback(e);
                return -3;
            }
        }
        0
    }

    /// Pools the micro-batch's token embeddings per sequence, as upstream's
    /// `build_pooling`: MEAN averages the rows of the sequence's tokens in the micro-batch;
    /// CLS takes the row of its lowest position, LAST of its highest; RANK takes the LAST
    /// row (CLS with non-causal attention), then the classifier head `cls.output` when the
    /// model has one (and qwen3's softmax), and keeps `n_cls_out` values. A sequence found
    /// in a later micro-batch of the same decode is pooled again (upstream: the last wins).
    /// `idx`: the micro-batch's tokens (batch indices; every token is an output when
    /// embeddings are on, so token `i`'s row is `output_ids[i]`).
    pub(super) fn pool(&self, e: &mut Engine, idx: &[usize]) -> Result<(), String> {
        let ne = self.hp.n_embd;
        let pooling = e.cparams.pooling_type;
        let b = &e.batch;
        let mut seqs: Vec<usize> = Vec::new();
        for &t in idx {
            for s in b.seqs[t].iter() {
                if !seqs.contains(&s) {
                    seqs.push(s);
                }
            }
        }
        let output_ids = &e.output_ids;
        let row = |t: usize| {
            let r = output_ids[t] as usize;
            &e.embd[r * ne..(r + 1) * ne]
        };
        for s in seqs {
            let in_seq = idx.iter().copied().filter(|&t| b.seqs[t].test(s));
            let pooled: Vec<f32> = match pooling {
                1 => {
                    let mut sum = vec![0.0f32; ne];
                    let mut count = 0usize;
                    for t in in_seq {
                        for (a, &v) in sum.iter_mut().zip(row(t)) {
                            *a += v;
                        }
                        count += 1;
                    }
                    let div = 1.0 / count as f32;
                    sum.iter().map(|v| v * div).collect()
                }
                2..=4 => {
                    let last = pooling == 3 || (pooling == 4 && e.cparams.causal_attn);
                    let mut best: Option<(i32, usize)> = None;
                    for t in in_seq {
                        let p = b.pos[t];
                        let take = match best {
                            None => true,
                            Some((bp, _)) => (last && p >= bp) || (!last && p < bp),
                        };
                        if take {
                            best = Some((p, t));
                        }
                    }
                    let t = best.map(|(_, t)| t).expect("the sequence has a token");
                    let r = row(t).to_vec();
                    if pooling == 4 {
                        self.classify(r)?
                    } else {
                        r
                    }
                }
                other => return Err(format!("unknown pooling type {other}")),
            };
            e.embd_seq[s] = Some(pooled);
        }
        Ok(())
    }

    /// RANK's classifier head: `cls.output` (n_embd → n_cls_out, optional bias; softmax for
    /// qwen3) when the model has one; its first `n_cls_out` values are the score(s).
    pub(super) fn classify(&self, row: Vec<f32>) -> Result<Vec<f32>, String> {
        let n_out = self.hp.n_cls_out;
        let Some(w) = self.model.tensors.get("cls.output.weight") else {
            // no head: the pooled row's first n_cls_out values, as upstream copies them
            return Ok(row[..n_out.min(row.len())].to_vec());
        };
        let read = |t: &crate::model::tensors::Tensor| -> Result<Vec<f32>, String> {
            let st = t.read();
            let ne = st.layout.ne;
            let bytes = st
                .plain_bytes()
                .ok_or_else(|| format!("tensor '{}' is not in host memory", t.name))?;
            let mut v = vec![0.0f32; (ne[0] * ne[1]) as usize];
            crate::graph::kernel_api::dequantize_row(st.layout.ggml_type, &bytes, &mut v);
            Ok(v)
        };
        let wv = read(w)?;
        let ne = self.hp.n_embd;
        if wv.len() != ne * n_out {
            return Err(format!(
                "cls.output.weight has {} values, expected {ne} x {n_out}",
                wv.len()
            ));
        }
        let mut out: Vec<f32> = (0..n_out)
            .map(|o| {
                wv[o * ne..(o + 1) * ne]
                    .iter()
                    .zip(&row)
                    .map(|(a, b)| a * b)
                    .sum()
            })
            .collect();
        if let Some(bias) = self.model.tensors.get("cls.output.bias") {
            for (o, b) in out.iter_mut().zip(read(bias)?) {
                *o += b;
            }
        }
        if self.model.arch == "qwen3" {
            crate::kernels::cpu::ops::soft_max_row(&mut out, 1.0);
        }
        Ok(out)
    }

    /// After a failed micro-batch: removes its positions (and later ones) of each of its
    /// sequences from the memory, as upstream.
    pub(super) fn rollback(&self, e: &mut Engine) {
        let mut mins: Vec<(usize, i32)> = Vec::new();
        for (&s, &p) in e.ub.seq0.iter().zip(&e.ub.pos) {
            match mins.iter_mut().find(|(q, _)| *q == s) {
                Some(m) => m.1 = m.1.min(p),
                None => mins.push((s, p)),
            }
        }
        mins.sort_unstable();
        for (s, p) in mins {
            crate::log_warn!(
                "decode: removing memory module entries for seq_id = {s}, pos = [{p}, +inf)"
            );
            e.kv.seq_rm(Some(s), p, -1);
        }
    }

    /// Re-rotates the cached keys of cells whose position changed (`seq_add`/`seq_div`):
    /// ROPE by the accumulated shift, as upstream's K-shift graph.
    pub(super) fn apply_k_shift(&self, e: &mut Engine) {
        use crate::kernels::cpu::ops;
        let hp = &self.hp;
        let mode = arch::lookup(&self.model.arch)
            .map_or(crate::graph::RopeMode::Norm, |d| arch::rope_mode(d, hp));
        let mut cache = vec![0.0f32; hp.n_rot];
        let mut row = Vec::new();
        // the rope factors the graph uses (upstream's get_rope_factors)
        let factors_name = if self.model.tensors.get("rope_freqs.weight").is_some() {
            "rope_freqs.weight"
        } else if e.cparams.n_ctx_seq > hp.n_ctx_orig_yarn {
            "rope_factors_long.weight"
        } else {
            "rope_factors_short.weight"
        };
        let freq_factors: Option<Vec<f32>> = self.model.tensors.get(factors_name).and_then(|t| {
            let st = t.read();
            let b = st.plain_bytes()?;
            let mut v = vec![0.0; (st.layout.ne[0]) as usize];
            crate::graph::kernel_api::dequantize_row(st.layout.ggml_type, &b, &mut v);
            Some(v)
        });
        let shifted = shifted_cells(e);
        for il in 0..hp.n_layer {
            let swa = hp.swa_layers[il];
            let r = e.cparams.rope;
            let params = ops::RopeParams {
                n_rot: hp.n_rot,
                mode,
                n_ctx_orig: r.n_ctx_orig,
                freq_base: if swa {
                    hp.rope_freq_base_swa
                } else {
                    r.freq_base
                },
                freq_scale: if swa {
                    hp.rope_freq_scale_swa
                } else {
                    r.freq_scale
                },
                ext_factor: r.ext_factor,
                // a rotation only: upstream passes yarn_attn_factor here, which scales the
                // cached keys again at every shift when it is not 1 (not copied)
                attn_factor: 1.0,
                beta_fast: r.beta_fast,
                beta_slow: r.beta_slow,
            };
            let layer = &mut e.kv.layers[il];
            row.resize(layer.n_embd_k, 0.0);
            for &(j, shift) in &shifted {
                ops::rope_cache(&params, shift as f32, freq_factors.as_deref(), &mut cache);
                layer.k.get_row(j, &mut row);
                // a rotated (quantized) K is rotated back for the RoPE and again after, as
                // upstream's shift graph does (the rotation is its own inverse)
                if self.kv_rot.0 > 0 {
                    ops::hadamard_rows(&mut row, self.kv_rot.0);
                }
                // MLA's cached K: the rotary part follows the latent
                let off = hp.ext.k_rope_offset;
                let head = if off > 0 { hp.n_rot } else { hp.head_k };
                ops::rope_apply(&params, &cache, head, &mut row[off..]);
                if self.kv_rot.0 > 0 {
                    ops::hadamard_rows(&mut row, self.kv_rot.0);
                }
                layer.k.set_row(j, &row);
            }
        }
        // the indexer's keys (layers n_layer..): upstream's second cache has NEOX rotation
        // over the first n_rot values, applied to the cached (Hadamard-rotated, F16) rows
        // as they are
        // (a hybrid memory's indexer cache, idx_rows, is never rotated: upstream's keeps
        // ROPE_TYPE_NONE there)
        for il in hp.n_layer + hp.ext.idx_rows.len()..e.kv.layers.len() {
            let r = e.cparams.rope;
            let params = ops::RopeParams {
                n_rot: hp.n_rot,
                mode: crate::graph::RopeMode::Neox,
                n_ctx_orig: r.n_ctx_orig,
                freq_base: r.freq_base,
                freq_scale: r.freq_scale,
                ext_factor: r.ext_factor,
                attn_factor: 1.0,
                beta_fast: r.beta_fast,
                beta_slow: r.beta_slow,
            };
            let layer = &mut e.kv.layers[il];
            row.resize(layer.n_embd_k, 0.0);
            for &(j, shift) in &shifted {
                ops::rope_cache(&params, shift as f32, freq_factors.as_deref(), &mut cache);
                layer.k.get_row(j, &mut row);
                ops::rope_apply(&params, &cache, row.len(), &mut row);
                layer.k.set_row(j, &row);
            }
        }
        e.kv.reset_shift();
    }
}

/// (row, shift) of every used cell with a pending shift, over all streams.
fn shifted_cells(e: &Engine) -> Vec<(usize, i32)> {
    let size = e.kv.size();
    (0..e.kv.n_stream())
        .flat_map(|st| {
            let cells = e.kv.cells(st);
            (0..size).filter_map(move |j| {
                let shift = cells.shift(j);
                (shift != 0 && !cells.is_empty(j))
                    .then_some(((st as u32 * size + j) as usize, shift))
            })
        })
        .collect()
}
