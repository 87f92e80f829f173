//! The CPU executor: runs a [`Graph`] node by node over one arena of f32 activations.
//! Weights are read in place (mapped file, arena or virtual-GPU host memory) under each
//! tensor's read lock, with the type the tensor has now; row-split tensors are multiplied
//! piece by piece. It is one [`Executor`] of [`super::backend`].

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
    gather: Vec<u8>,
    /// Attention masks of the current run, one per sliding window (see [`AttnMask`]).
    attn_masks: Vec<AttnMask>,
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
                if !observer.observe(g, i, model, &values) {
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
        let nodes = &g.nodes;
        let dst_r = range(node);
        let (ne0, ne1) = (node.ne0, node.ne1);
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
            Op::Hadamard { src, n, dense } => {
                let (dst, [x]) = carve(&mut self.arena, dst_r, [range(&nodes[*src])]);
                if *dense {
                    ops::hadamard_rows_dense(x, dst, *n);
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
            Op::SoftMax { src } => {
                let (dst, [x]) = carve(&mut self.arena, dst_r, [range(&nodes[*src])]);
                dst.copy_from_slice(x);
                for row in dst.chunks_exact_mut(ne0) {
                    ops::soft_max_row(row, 1.0);
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
            Op::SumRows { src } => {
                let n = nodes[*src].ne0;
                let (dst, [x]) = carve(&mut self.arena, dst_r, [range(&nodes[*src])]);
                for (d, r) in dst.iter_mut().zip(x.chunks_exact(n)) {
                    *d = r.iter().map(|&v| v as f64).sum::<f64>() as f32;
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
                iters,
            } => {
                let hc = *hc;
                self.load_vec(model, &g.weights[scale.0])?;
                let s = [self.wvec[0], self.wvec[1], self.wvec[2]];
                self.load_vec(model, &g.weights[base.0])?;
                let base = &self.wvec;
                let n_mix = (2 + hc) * hc;
                let (dst, [m]) = carve(&mut self.arena, dst_r, [range(&nodes[*mixes])]);
                for (d, m) in dst.chunks_exact_mut(n_mix).zip(m.chunks_exact(n_mix)) {
                    ops::hc_mix(m, s, base, hc, *eps, *iters, d);
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
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn mul_mat_id(
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

    #[allow(clippy::too_many_arguments)]
    fn flash_attn(
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
