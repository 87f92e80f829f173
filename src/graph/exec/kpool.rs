//! GLM5-Next's k-pool indexer cache ([`Op::KpoolIndexSet`]): the rows upstream's
//! `llama_memory_hybrid_idx` keeps, so that its state files are byte for byte upstream's.

use super::*;

impl CpuExecutor {
    /// [`Op::KpoolIndexSet`]: each token's `[key | gate | 0]` row, then the pools upstream's
    /// micro-batch pools again (its `kpool_build_state`): every pool holding a position of
    /// the micro-batch, and those an edit made stale; none when a cell of the one stream
    /// holds several sequences (upstream's `cache_safe` false). A micro-batch that pools
    /// nothing pools its first token's cell with itself, as upstream's placeholder pool.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn kpool_index_set(
        &mut self,
        g: &Graph,
        node: &Node,
        model: &Model,
        kv: &mut KvCache,
        inp: &Inputs,
        (k, gate): (NodeId, NodeId),
        ape: WeightId,
        layer: usize,
        kpool: usize,
    ) -> Result<(), ExecError> {
        let nodes = &g.nodes;
        let (kn, gn) = (&nodes[k], &nodes[gate]);
        let head = kn.ne0;
        let width = 3 * head;
        if kv.layers[layer].n_embd_k != width || gn.ne0 != head || kpool == 0 {
            return Err(ExecError::UnsupportedOp {
                backend: "CPU",
                op: node.name.to_string(),
                why: format!(
                    "the indexer cache rows are {} values, not 3 x {head}",
                    kv.layers[layer].n_embd_k
                ),
            });
        }
        self.load_vec(model, &g.weights[ape.0])?;
        let mut row = vec![0.0f32; width];
        for t in 0..kn.ne1 {
            row[..head].copy_from_slice(&self.arena[kn.offset + t * head..][..head]);
            row[head..2 * head].copy_from_slice(&self.arena[gn.offset + t * head..][..head]);
            kv.layers[layer].k.set_row(inp.slots[t] as usize, &row);
        }
        if kv.pools_shared() {
            return Ok(());
        }
        // the pools to pool: (member rows) in upstream's order, sequence by sequence
        let mut pools: Vec<Vec<u32>> = Vec::new();
        for seq in 0..kv.n_seq_max() {
            let cells = kv.seq_cells_by_pos(seq);
            let Some(&(pos_min, _)) = cells.first() else {
                continue;
            };
            let stale = kv.pools_stale[seq];
            let mut j = 0;
            while j + kpool <= cells.len() {
                let p0 = cells[j].0;
                let whole = (p0 - pos_min) % kpool as i32 == 0
                    && (1..kpool).all(|d| cells[j + d].0 == p0 + d as i32);
                if !whole {
                    j += 1;
                    continue;
                }
                let end = p0 + kpool as i32;
                let touched = stale != crate::kv_cache::POOLS_CLEAN && end > stale
                    || (0..kn.ne1).any(|t| inp.seq[t] == seq && (p0..end).contains(&inp.pos[t]));
                if touched {
                    pools.push(cells[j..j + kpool].iter().map(|c| c.1).collect());
                }
                j += kpool;
            }
        }
        if pools.is_empty() && kn.ne1 > 0 {
            // upstream's placeholder: the first token's cell (the lowest of its position)
            let first = kv
                .seq_cells_by_pos(inp.seq[0])
                .into_iter()
                .find(|c| c.0 == inp.pos[0])
                .map_or(inp.slots[0], |c| c.1);
            pools.push(vec![first; kpool]);
        }
        let mut rows = vec![vec![0.0f32; width]; kpool];
        let mut pooled = vec![0.0f32; head];
        let mut logits = Vec::new();
        let l = &mut kv.layers[layer];
        for members in &pools {
            for (r, &m) in rows.iter_mut().zip(members) {
                l.k.get_row(m as usize, r);
            }
            let refs: Vec<&[f32]> = rows.iter().map(|r| r.as_slice()).collect();
            ops::kpool_pooled(&refs, &self.wvec, head, &mut logits, &mut pooled);
            // the pooled key lives in the last member's row
            let rep = members[kpool - 1] as usize;
            l.k.set_row_part(rep, width, 2 * head, &pooled);
        }
        Ok(())
    }
}
