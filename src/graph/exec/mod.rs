//! The CPU executor: runs a [`Graph`] node by node over one arena of f32 activations.
//! Weights are read in place (mapped file, arena or virtual-GPU host memory) under each
//! tensor's read lock, with the type the tensor has now; row-split tensors are multiplied
//! piece by piece. It is one [`Executor`] of [`super::backend`].

mod kpool;
mod node_attention;
mod node_elementwise;
mod node_embed;
mod node_matmul;
mod node_recurrent;

pub use super::backend::{ExecError, Executor, Inputs, NodeObserver};
use super::kernel_api::{self, Scratch, ThreadPool};
use super::*;
use crate::kernels::cpu::ops;
use crate::kv_cache::{KvCache, KvLayerRows};
use crate::model::tensors::TensorState;
use crate::model::Model;
use crate::storage::TensorData;

/// The CPU executor: buffers reused across runs (no allocation per token once warmed up).
#[derive(Debug)]
pub struct CpuExecutor {
    pub arena: Vec<f32>,
    pool: ThreadPool,
    mat: Scratch,
    wvec: Vec<f32>,
    tmp: Vec<f32>,
    tmp2: Vec<f32>,
    /// RoPE's sin/cos table of one position, one per pool thread.
    rope_caches: Vec<std::sync::Mutex<Vec<f32>>>,
    expert_rows: Vec<Vec<(usize, usize)>>,
    attn_scratch: Vec<std::sync::Mutex<ops::AttnScratch>>,
    topk: Vec<usize>,
    /// The lightning indexer's scores, selection and key row; sparse attention's selected
    /// cells per token.
    ix_scores: Vec<f32>,
    topk_i32: Vec<i32>,
    ix_krow: Vec<f32>,
    sel_rows: Vec<Vec<u32>>,
    /// MiniMax-M3's block selection of the current layer ([`Op::MsaSelect`]).
    msa: MsaState,
    gather: Vec<u8>,
    /// Attention masks of the current run, one per sliding window (see [`AttnMask`]).
    attn_masks: Vec<AttnMask>,
}

/// What an [`Op::MsaSelect`] chose, for the FLASH_ATTN_EXT that reads it.
#[derive(Debug, Default)]
struct MsaState {
    /// The sparse attention runs: flash attention on, and one sequence or a stream per
    /// sequence (upstream runs dense attention otherwise).
    on: bool,
    /// One token per stream (upstream's decode graph): each (token, KV head) reads the
    /// selected blocks' cells in the selection's order; otherwise every visible cell of a
    /// selected block, in cell order (upstream's block mask).
    decode: bool,
    block: usize,
    n_head: usize,
    n_blk: usize,
    /// Blocks per (token, head).
    k: usize,
    /// Per (token, head): the selected blocks in TOP_K's order (`k` each).
    blocks: Vec<i32>,
    /// Decode: per token, the cache row of each position it sees (`u32::MAX`: none), `n_ps`
    /// each.
    slots: Vec<u32>,
    n_ps: usize,
    /// Not decode: per (token, head), whether each block is selected (`n_blk` each).
    chosen: Vec<bool>,
    bs: Vec<f32>,
    /// A (token, KV head)'s gathered rows.
    list: Vec<u32>,
}

/// Micro-batches of at least this many tokens get their attention mask computed once per run
/// (upstream builds its KQ_mask once per graph likewise): the attention kernels ask for every
/// (token, cell) pair once per KV head and layer. Single-token steps ask the cache directly.
const MASK_MIN_TOKENS: usize = 16;

/// Which cells `lo..hi` each token of the micro-batch sees (`bits[t * (hi - lo) + j - lo]`)
/// for one sliding window; cells outside `lo..hi` (other streams, unused cells) are never
/// visible. Valid for one run: the cache's cells do not change while the graph runs.
#[derive(Debug, Default)]
struct AttnMask {
    n_swa: u32,
    lo: u32,
    hi: u32,
    bits: Vec<bool>,
    valid: bool,
}

impl AttnMask {
    /// The mask of window `n_swa` for this run: one computed earlier in the run, or computed
    /// now (from `ask`, over the union of the tokens' `rows`) into a slot a past run left.
    fn of_run<'a>(
        masks: &'a mut Vec<AttnMask>,
        n_swa: u32,
        n_tokens: usize,
        rows: &dyn Fn(usize) -> std::ops::Range<u32>,
        ask: &dyn Fn(usize, u32) -> bool,
    ) -> &'a AttnMask {
        if let Some(at) = masks.iter().position(|m| m.valid && m.n_swa == n_swa) {
            return &masks[at];
        }
        let at = masks.iter().position(|m| !m.valid).unwrap_or_else(|| {
            masks.push(AttnMask::default());
            masks.len() - 1
        });
        let (lo, hi) = (0..n_tokens).fold((u32::MAX, 0), |(lo, hi), t| {
            let r = rows(t);
            (lo.min(r.start), hi.max(r.end))
        });
        let lo = lo.min(hi);
        let m = &mut masks[at];
        m.bits.clear();
        for t in 0..n_tokens {
            m.bits.extend((lo..hi).map(|j| ask(t, j)));
        }
        (m.n_swa, m.lo, m.hi, m.valid) = (n_swa, lo, hi, true);
        m
    }

    /// One cell of the mask: the reference `fill_row` is tested against.
    #[cfg(test)]
    fn visible(&self, t: usize, j: u32) -> bool {
        (self.lo..self.hi).contains(&j)
            && self.bits[t * (self.hi - self.lo) as usize + (j - self.lo) as usize]
    }

    /// `out[i]`: whether token `t` sees cell `first + i`, copied from the token's row of bits.
    fn fill_row(&self, t: usize, first: u32, out: &mut [bool]) {
        let end = first.saturating_add(out.len() as u32);
        let (a, b) = (first.max(self.lo), end.min(self.hi));
        if a >= b {
            out.fill(false);
            return;
        }
        let (skip, take) = ((a - first) as usize, (b - a) as usize);
        let row = t * (self.hi - self.lo) as usize + (a - self.lo) as usize;
        out[..skip].fill(false);
        out[skip..skip + take].copy_from_slice(&self.bits[row..row + take]);
        out[skip + take..].fill(false);
    }
}

/// `LLAMA_HOTSWAP_EXEC_TRACE=1`: every executor prints each node's sum and sum of absolute
/// values to stderr (to find the first node where two backends part).
pub(super) fn trace_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("LLAMA_HOTSWAP_EXEC_TRACE").is_ok_and(|v| v == "1"))
}

pub(super) fn trace_node(backend: &str, i: usize, node: &Node, v: &[f32]) {
    let (sum, abs) = v.iter().fold((0.0f64, 0.0f64), |(s, a), &x| {
        (s + x as f64, a + (x as f64).abs())
    });
    eprintln!(
        "trace {backend} node {i} {} [{}x{}]: sum {sum:.6e} abs {abs:.6e}",
        node.name, node.ne0, node.ne1
    );
}

/// Splits the arena into the destination range (mutable) and source ranges (shared). The
/// planner guarantees a node never shares its range with a live source; checked here.
fn carve<const N: usize>(
    arena: &mut [f32],
    dst: (usize, usize),
    srcs: [(usize, usize); N],
) -> (&mut [f32], [&[f32]; N]) {
    let (left, rest) = arena.split_at_mut(dst.0);
    let (mid, right) = rest.split_at_mut(dst.1);
    let (left, right): (&[f32], &[f32]) = (left, right);
    let end = dst.0 + dst.1;
    let srcs = srcs.map(|(o, l)| {
        if l == 0 {
            &left[..0]
        } else if o + l <= dst.0 {
            &left[o..o + l]
        } else {
            assert!(o >= end, "arena plan overlap");
            &right[o - end..o - end + l]
        }
    });
    (mid, srcs)
}

pub(super) fn range(n: &Node) -> (usize, usize) {
    (n.offset, n.len())
}

/// The recurrent memory a state op of `node` runs on.
fn recurrent_memory<'a>(
    kv: &'a mut KvCache,
    node: &Node,
) -> Result<&'a mut crate::kv_cache::RsMemory, ExecError> {
    kv.rs.as_mut().ok_or_else(|| ExecError::UnsupportedOp {
        backend: "CPU",
        op: node.name.to_string(),
        why: "the context has no recurrent memory".into(),
    })
}

/// The recurrent cell of each token's sequence (placed by the memory before the graph runs).
fn token_cells(
    rs: &crate::kv_cache::RsMemory,
    inp: &Inputs,
    node: &Node,
) -> Result<Vec<usize>, ExecError> {
    inp.seq
        .iter()
        .map(|&s| rs.cell_of(s))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| ExecError::UnsupportedOp {
            backend: "CPU",
            op: node.name.to_string(),
            why: "a sequence of the micro-batch has no recurrent cell".into(),
        })
}

/// A weight's bytes as the kernels see them.
enum WeightBytes<'a> {
    /// In place, or un-repacked when only the repacked layout holds the bytes.
    Whole(std::borrow::Cow<'a, [u8]>),
    /// Row pieces: (first row, rows, bytes).
    Pieces(Vec<(usize, usize, &'a [u8])>),
}

fn weight_bytes<'a>(st: &'a TensorState, name: &str) -> Result<WeightBytes<'a>, ExecError> {
    if let Some(b) = st.plain_bytes() {
        return Ok(WeightBytes::Whole(b));
    }
    match &st.data {
        TensorData::RowSplit { dim: 1, pieces } if st.layout.ne[2] == 1 => {
            let mut out = Vec::with_capacity(pieces.len());
            for p in pieces {
                let bytes = p
                    .alloc
                    .host_slice()
                    .ok_or_else(|| ExecError::NotOnHost(name.to_string()))?;
                out.push((p.first as usize, p.count as usize, bytes));
            }
            Ok(WeightBytes::Pieces(out))
        }
        _ => Err(ExecError::NotOnHost(name.to_string())),
    }
}

/// Whether the executor can read tensor `st` (host memory, or row pieces in host memory)
/// with a supported type.
pub fn check_weight(st: &TensorState, name: &str) -> Result<(), ExecError> {
    if !kernel_api::supports(st.layout.ggml_type) {
        return Err(ExecError::UnsupportedType {
            name: name.to_string(),
            ty: st.layout.ggml_type,
            backend: "CPU",
        });
    }
    match &st.data {
        TensorData::RowSplit { pieces, .. } => {
            if pieces.iter().all(|p| p.alloc.host_slice().is_some()) {
                Ok(())
            } else {
                Err(ExecError::NotOnHost(name.to_string()))
            }
        }
        _ if st.host_bytes().is_some() || st.plain_released => Ok(()),
        TensorData::Device(a) if a.rpc_buffer().is_some() => Err(ExecError::UnsupportedOp {
            backend: "CPU",
            op: format!("the layers with '{name}'"),
            why: format!(
                "it lives on rpc-server {}: the CPU executor cannot read it (contexts over such a model run those layers there with the RPC executor, docs/rpc.md)",
                a.rpc_buffer().map_or("?", |b| b.server().endpoint())
            ),
        }),
        _ => Err(ExecError::NotOnHost(name.to_string())),
    }
}

/// A family's node function was handed an op of another family (the dispatcher in
/// [`CpuExecutor::node`] routes each op to exactly one family; this is its failure value).
fn not_this_family(op: &Op, family: &str) -> ExecError {
    ExecError::UnsupportedOp {
        backend: "CPU",
        op: format!("{op:?}"),
        why: format!("routed to the {family} family by mistake"),
    }
}

impl Default for CpuExecutor {
    fn default() -> Self {
        CpuExecutor::new(1)
    }
}

impl Executor for CpuExecutor {
    fn name(&self) -> &'static str {
        "CPU"
    }

    fn supports_weight(&self, st: &TensorState, name: &str) -> Result<(), ExecError> {
        check_weight(st, name)
    }

    /// Every op of the vocabulary, on weights in host memory (or row pieces there).
    fn supports_op(&self, g: &Graph, op: &Op, model: &Model) -> bool {
        op.weights().iter().all(|w| {
            let w = &g.weights[w.0];
            check_weight(&model.tensors.at(w.tensor).read(), &w.name).is_ok()
        })
    }

    fn set_n_threads(&mut self, n: usize) {
        if self.pool.n_threads() != n.max(1) {
            self.pool.set_n_threads(n);
        }
    }

    fn compute(
        &mut self,
        g: &Graph,
        model: &Model,
        kv: &mut KvCache,
        inp: &Inputs,
        abort: &mut dyn FnMut() -> bool,
    ) -> Result<(), ExecError> {
        self.run(g, model, kv, inp, abort)
    }

    fn compute_observed(
        &mut self,
        g: &Graph,
        model: &Model,
        kv: &mut KvCache,
        inp: &Inputs,
        abort: &mut dyn FnMut() -> bool,
        observer: &mut dyn NodeObserver,
    ) -> Result<(), ExecError> {
        self.begin_run(g);
        for (i, node) in g.nodes.iter().enumerate() {
            if i % 16 == 0 && abort() {
                return Err(ExecError::Aborted);
            }
            let wanted = observer.wants(g, i, model);
            self.node(g, node, model, kv, inp)?;
            if wanted {
                // a node's sources are live while it is (plan_arena keeps them to their
                // last reader), so their ranges still hold their values here
                let arena = &self.arena;
                let values = |n: NodeId| {
                    let (at, len) = range(&g.nodes[n]);
                    &arena[at..at + len]
                };
                if !observer.observe(g, i, model, &values, kv) {
                    break;
                }
            }
        }
        Ok(())
    }

    fn output(&mut self, g: &Graph, node: NodeId) -> Result<&[f32], ExecError> {
        let (at, len) = range(&g.nodes[node]);
        Ok(&self.arena[at..at + len])
    }
}

impl CpuExecutor {
    pub fn new(n_threads: usize) -> CpuExecutor {
        CpuExecutor {
            arena: Vec::new(),
            pool: ThreadPool::new(n_threads),
            mat: Scratch::new(),
            wvec: Vec::new(),
            tmp: Vec::new(),
            tmp2: Vec::new(),
            rope_caches: Vec::new(),
            expert_rows: Vec::new(),
            attn_scratch: Vec::new(),
            topk: Vec::new(),
            ix_scores: Vec::new(),
            topk_i32: Vec::new(),
            ix_krow: Vec::new(),
            sel_rows: Vec::new(),
            msa: MsaState::default(),
            gather: Vec::new(),
            attn_masks: Vec::new(),
        }
    }

    /// Reads a (small) weight as f32 into `self.wvec`.
    fn load_vec(&mut self, model: &Model, w: &WeightRef) -> Result<(), ExecError> {
        let st = model.tensors.at(w.tensor).read();
        let n = (w.ne[0] * w.ne[1] * w.ne[2] * w.ne[3]) as usize;
        self.wvec.resize(n, 0.0);
        let ty = st.layout.ggml_type;
        match weight_bytes(&st, &w.name)? {
            WeightBytes::Whole(b) => kernel_api::dequantize_row(ty, &b, &mut self.wvec),
            WeightBytes::Pieces(_) => {
                self.gather.resize(st.layout.nbytes as usize, 0);
                st.read_into(&mut self.gather)
                    .map_err(|_| ExecError::NotOnHost(w.name.clone()))?;
                kernel_api::dequantize_row(ty, &self.gather, &mut self.wvec);
            }
        }
        Ok(())
    }

    /// Runs every node. `abort` is polled between nodes.
    pub fn run(
        &mut self,
        g: &Graph,
        model: &Model,
        kv: &mut KvCache,
        inp: &Inputs,
        abort: &mut dyn FnMut() -> bool,
    ) -> Result<(), ExecError> {
        self.begin_run(g);
        let trace = trace_enabled();
        for (i, node) in g.nodes.iter().enumerate() {
            if i % 16 == 0 && abort() {
                return Err(ExecError::Aborted);
            }
            self.node(g, node, model, kv, inp)?;
            if trace {
                let (at, len) = range(node);
                trace_node("CPU", i, node, &self.arena[at..at + len]);
            }
        }
        Ok(())
    }

    /// Sizes the arena for `g` and forgets the last run's attention masks.
    pub(super) fn begin_run(&mut self, g: &Graph) {
        if self.arena.len() < g.arena_len {
            self.arena.resize(g.arena_len, 0.0);
        }
        for m in &mut self.attn_masks {
            m.valid = false;
        }
    }

    /// Computes one node into the arena (its sources are there).
    pub(super) fn node(
        &mut self,
        g: &Graph,
        node: &Node,
        model: &Model,
        kv: &mut KvCache,
        inp: &Inputs,
    ) -> Result<(), ExecError> {
        match &node.op {
            Op::GetRowsTokens { .. }
            | Op::MulMatAdapter { .. }
            | Op::GetRowsAdapter { .. }
            | Op::AddAdapter { .. }
            | Op::GetRowsPos { .. }
            | Op::InputEmbd
            | Op::View { .. }
            | Op::GetRowsOut { .. } => self.node_embed(g, node, model, inp),
            Op::RmsNorm { .. }
            | Op::Norm { .. }
            | Op::Mul { .. }
            | Op::Add { .. }
            | Op::Div { .. }
            | Op::Scale { .. }
            | Op::Tanh { .. }
            | Op::Gelu { .. }
            | Op::Relu { .. }
            | Op::Repeat { .. }
            | Op::RepeatEach { .. }
            | Op::Sqr { .. }
            | Op::Clamp { .. }
            | Op::Hadamard { .. }
            | Op::AttnTempScale { .. }
            | Op::Silu { .. }
            | Op::AddId { .. }
            | Op::Sigmoid { .. }
            | Op::MulRep { .. }
            | Op::Softplus { .. }
            | Op::Sqrt { .. }
            | Op::Abs { .. }
            | Op::Sgn { .. }
            | Op::RepeatHeads { .. }
            | Op::SoftMax { .. }
            | Op::SumRows { .. }
            | Op::DivSumRows { .. } => self.node_elementwise(g, node, model, inp),
            Op::MulMatHeads { .. }
            | Op::MulMatIdAdapter { .. }
            | Op::GroupMask { .. }
            | Op::Glu { .. }
            | Op::MulMat { .. }
            | Op::MulMatId { .. }
            | Op::TopK { .. }
            | Op::GetRowsIds { .. }
            | Op::MulSlots { .. }
            | Op::SumSlots { .. }
            | Op::WeightedSum { .. } => self.node_matmul(g, node, model),
            Op::ViewHeads { .. }
            | Op::ConcatHeads { .. }
            | Op::Rope { .. }
            | Op::SetRows { .. }
            | Op::FlashAttnExt { .. }
            | Op::RopeBack { .. }
            | Op::Dsv4StateSet { .. }
            | Op::KpoolIndexSet { .. }
            | Op::Dsv4Compress { .. }
            | Op::FlashAttnComp { .. }
            | Op::Dsv4LidTopK { .. }
            | Op::LightningIndexer { .. }
            | Op::MsaSelect { .. } => self.node_attention(g, node, model, kv, inp),
            Op::SsmConv { .. }
            | Op::GetRowsNgram { .. }
            | Op::SsmScan { .. }
            | Op::GatedDeltaNet { .. }
            | Op::LightningAttn { .. }
            | Op::HcPre { .. }
            | Op::HcMix { .. }
            | Op::HcPost { .. } => self.node_recurrent(g, node, model, kv, inp),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run's mask answers as the cache would (inside the tokens' rows), never outside them,
    /// is computed once per window, and a later run recomputes it in the same slot.
    #[test]
    fn attn_mask_answers_as_asked_once_per_window_and_run() {
        let asked = std::cell::Cell::new(0usize);
        // token t sees rows 2..10 at or below its position 4 + t, and row 3 never
        let ask = |t: usize, j: u32| {
            asked.set(asked.get() + 1);
            j != 3 && j <= 4 + t as u32
        };
        let rows = |_t: usize| 2u32..10;
        let mut masks = Vec::new();
        let m = AttnMask::of_run(&mut masks, 0, 3, &rows, &ask);
        for t in 0..3 {
            for j in 0..12u32 {
                let want = (2..10).contains(&j) && j != 3 && j <= 4 + t as u32;
                assert_eq!(m.visible(t, j), want, "token {t}, row {j}");
            }
        }
        assert_eq!(asked.get(), 3 * 8);
        // a run of cells reads the same answers, inside, across and outside lo..hi
        for t in 0..3 {
            for (first, len) in [
                (0u32, 12usize),
                (2, 8),
                (5, 3),
                (0, 2),
                (9, 4),
                (11, 3),
                (4, 0),
            ] {
                let mut row = vec![true; len];
                m.fill_row(t, first, &mut row);
                let want: Vec<bool> = (first..first + len as u32)
                    .map(|j| m.visible(t, j))
                    .collect();
                assert_eq!(row, want, "token {t}, cells {first}+{len}");
            }
        }
        // the same window in the same run: no new questions
        AttnMask::of_run(&mut masks, 0, 3, &rows, &ask);
        assert_eq!(asked.get(), 3 * 8);
        // another window gets its own slot
        AttnMask::of_run(&mut masks, 4, 3, &rows, &ask);
        assert_eq!((masks.len(), asked.get()), (2, 6 * 8));
        // a new run invalidates both; the next ask recomputes into a kept slot
        for m in &mut masks {
            m.valid = false;
        }
        AttnMask::of_run(&mut masks, 4, 3, &rows, &ask);
        assert_eq!((masks.len(), asked.get()), (2, 9 * 8));
    }
}
