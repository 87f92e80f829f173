//! The ggml-rpc executor: runs the layers whose weights live on an `rpc-server` there, and
//! the rest on the CPU executor, as upstream's scheduler splits a graph between backends.
//!
//! Each node runs where its weights live (a node without weights where the node before it
//! ran, as the scheduler's expansion of assigned nodes does). A run of consecutive nodes on
//! one remote device is one split: its nodes become ggml tensors with ggml's op numbers and
//! `op_params` at the pinned commit ([`ggml`]), and are sent as one GRAPH_COMPUTE. Node
//! values live in a remote buffer laid out as the CPU executor's arena (the graph's arena
//! plan, up to the last offset a remote node uses); a value crosses (SET_TENSOR /
//! GET_TENSOR of its arena range) only when a node on the other side reads it. The KV rows of
//! a layer whose attention runs remotely live in buffers on that server (the host cache keeps
//! the cells' metadata, from which the KQ mask is built each run). Per run and remote, one
//! buffer carries the micro-batch's inputs: positions, KV slots, output rows, token ids and
//! the KQ masks.
//!
//! Attention on a remote device is ggml's FLASH_ATTN_EXT over the cache as stored (F16 by
//! default) with flash attention on; without it, upstream's op sequence (KQ, SOFT_MAX, V
//! transposed as upstream's cache holds it, V·KQ, CONT), its intermediates in a scratch past
//! the arena's nodes. MUL_MAT_ID (experts on a server) is sent with its
//! expert ids as ggml's I32 tensor, written over the ids node's range of the remote arena
//! (the routing itself, top-k and the weighted sum, runs on the CPU); per-expert scales as
//! upstream's build_lora_mm_id applies them (GET_ROWS of the scales by the ids into a scratch
//! range past the arena's nodes, then MUL in place). Not sent (a node with such weights fails
//! with a message; a node without weights runs on the CPU): M-RoPE, recurrent states,
//! attention with sinks, ALiBi, a compressed (MLA) cache or sparse selection, and the rarer
//! ops of [`Op`]. The K-shift reaches the remote K rows through [`Executor::sync_k_rows`]
//! (read, rotated on the host, written back); state save/load through [`Executor::sync_kv`]
//! (every remote row read into the host cache before, written back after a load).

use std::sync::Arc;

use super::backend::{ExecError, Executor, Inputs};
use super::exec::{check_weight, range, CpuExecutor};
use super::*;
use crate::device::rpc::wire::{RpcTensor, FLAG_COMPUTE, FLAG_OUTPUT, GGML_TYPE_F32};
use crate::device::rpc::{RemoteBuffer, RpcServer};
use crate::kernels::cuda::{f32_bytes, f32_bytes_mut};
use crate::kv_cache::{KvBuffer, KvCache};
use crate::model::tensors::TensorState;
use crate::model::Model;
use crate::storage::TensorData;

/// ggml's enums at the pinned commit (ggml.h), the values this executor sends.
pub mod ggml {
    /// `enum ggml_op`.
    pub const OP_NONE: u32 = 0;
    pub const OP_ADD: u32 = 2;
    pub const OP_MUL: u32 = 7;
    pub const OP_DIV: u32 = 8;
    pub const OP_SQR: u32 = 9;
    pub const OP_NORM: u32 = 24;
    pub const OP_RMS_NORM: u32 = 25;
    pub const OP_MUL_MAT: u32 = 29;
    pub const OP_MUL_MAT_ID: u32 = 30;
    pub const OP_SCALE: u32 = 32;
    pub const OP_CPY: u32 = 34;
    pub const OP_CONT: u32 = 35;
    pub const OP_GET_ROWS: u32 = 40;
    pub const OP_SET_ROWS: u32 = 42;
    pub const OP_SOFT_MAX: u32 = 46;
    pub const OP_ROPE: u32 = 48;
    pub const OP_FLASH_ATTN_EXT: u32 = 74;
    pub const OP_UNARY: u32 = 91;
    pub const OP_GLU: u32 = 100;
    /// `enum ggml_unary_op`.
    pub const UNARY_TANH: i32 = 4;
    pub const UNARY_RELU: i32 = 6;
    pub const UNARY_SIGMOID: i32 = 7;
    pub const UNARY_GELU: i32 = 8;
    pub const UNARY_SILU: i32 = 10;
    /// `enum ggml_glu_op`.
    pub const GLU_GEGLU: i32 = 1;
    pub const GLU_SWIGLU: i32 = 2;
    /// `enum ggml_type` values beside the weights' own.
    pub const TYPE_F16: u32 = 1;
    pub const TYPE_I32: u32 = 26;
    pub const TYPE_I64: u32 = 27;
    /// `GGML_PREC_F32`: upstream's flash attention accumulates in F32.
    pub const PREC_F32: i32 = 10;
    /// `GGML_ROPE_TYPE_NEOX`.
    pub const ROPE_NEOX: i32 = 2;
}

/// Where a node runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Cpu,
    Remote(usize),
}

/// One device of one server that this executor computes on.
#[derive(Debug)]
struct Remote {
    server: Arc<RpcServer>,
    device: u32,
    label: String,
    arena: Option<RemoteBuffer>,
    inputs: Option<RemoteBuffer>,
    /// Per layer, the K and V rows when the layer's attention runs here.
    kv: Vec<Option<[RemoteBuffer; 2]>>,
    /// Byte offset in the arena buffer, past the graph's nodes, of this run's scratch (the
    /// gathered per-expert scales of a MUL_MAT_ID).
    scratch_at: u64,
}

/// Where the micro-batch's inputs sit in a remote input buffer (byte offsets).
#[derive(Debug, Default, Clone)]
struct InputLayout {
    pos: u64,
    slots: u64,
    out_ids: u64,
    tokens: u64,
    /// (n_swa, offset) of each mask, all `[n_kv, T]` F16.
    masks: Vec<(u32, u64)>,
    n_kv: u32,
    len: u64,
}

/// The ggml-rpc executor (see the module doc).
#[derive(Debug, Default)]
pub struct RpcExecutor {
    cpu: CpuExecutor,
    remotes: Vec<Remote>,
    on_host: Vec<bool>,
    /// Per node, a bit per remote holding its current values.
    on_remote: Vec<u64>,
    /// Per node, a bit per remote holding its values as I32 expert ids (MUL_MAT_ID).
    ids_on_remote: Vec<u64>,
    /// The host cache's rows are the truth (a state was loaded): a layer's KV buffers made on
    /// a server after that get the host rows instead of zeros.
    kv_from_host: bool,
    /// This run's inputs, and which remotes have them.
    input_bytes: Vec<u8>,
    input_layout: InputLayout,
    inputs_sent: Vec<bool>,
}

fn rpc_err(r: &Remote, e: impl std::fmt::Display) -> ExecError {
    ExecError::Device(format!("{}: {e}", r.label))
}

fn unsupported(label: &str, node: &Node, why: impl Into<String>) -> ExecError {
    ExecError::UnsupportedOp {
        backend: "RPC",
        op: format!("{} on {label}", node.name),
        why: why.into(),
    }
}

/// `ne` and `nb` as the wire's 32-bit fields; None when a value does not fit.
fn wire_dims(ne: [u64; 4], nb: [u64; 4]) -> Option<([u32; 4], [u32; 4])> {
    let mut a = [0u32; 4];
    let mut b = [0u32; 4];
    for i in 0..4 {
        a[i] = u32::try_from(ne[i]).ok()?;
        b[i] = u32::try_from(nb[i]).ok()?;
    }
    Some((a, b))
}

/// The K or V cache of a layer as ggml sees it: (type, bytes per row).
fn kv_format(b: &KvBuffer, width: usize) -> (u32, u64) {
    match b {
        KvBuffer::F32(_) => (GGML_TYPE_F32, 4 * width as u64),
        KvBuffer::F16(_) => (ggml::TYPE_F16, 2 * width as u64),
        KvBuffer::Packed { ty, row_bytes, .. } => (ty.id(), *row_bytes as u64),
    }
}

fn kv_bytes(b: &KvBuffer) -> u64 {
    match b {
        KvBuffer::F32(v) => 4 * v.len() as u64,
        KvBuffer::F16(v) => 2 * v.len() as u64,
        KvBuffer::Packed { data, .. } => data.len() as u64,
    }
}

/// Whether the remote side can compute `op` (the weights aside).
fn remote_op(op: &Op) -> Result<(), &'static str> {
    match op {
        Op::GetRowsTokens { .. }
        | Op::GetRowsOut { .. }
        | Op::View { .. }
        | Op::ViewHeads { .. }
        | Op::RmsNorm { .. }
        | Op::Norm { .. }
        | Op::Mul { .. }
        | Op::Add { .. }
        | Op::Div { .. }
        | Op::Scale { .. }
        | Op::Tanh { .. }
        | Op::Gelu { .. }
        | Op::Relu { .. }
        | Op::Sqr { .. }
        | Op::Silu { .. }
        | Op::Sigmoid { .. }
        | Op::MulMat { .. }
        | Op::SetRows { .. }
        | Op::SoftMax { .. }
        | Op::MulMatId { .. } => Ok(()),
        // the other kinds (OAI, REGLU, limits, clamps) have op_params of their own: not sent
        Op::Glu {
            kind: GluKind::Swiglu | GluKind::Geglu,
            ..
        } => Ok(()),
        Op::Rope { params, .. } => match params.mode {
            RopeMode::Norm | RopeMode::Neox => Ok(()),
            RopeMode::Mrope { .. } => Err("M-RoPE is not sent to rpc-servers yet"),
        },
        Op::FlashAttnExt {
            v_in_k,
            sinks,
            max_bias,
            sel,
            ..
        } => {
            if *v_in_k || sinks.is_some() || *max_bias != 0.0 || sel.is_some() {
                Err("attention over a compressed cache, with sinks, ALiBi or a sparse selection is not sent to rpc-servers yet")
            } else {
                Ok(())
            }
        }
        _ => Err("this op is not sent to rpc-servers yet"),
    }
}

/// Whether the op reads or writes a layer's KV rows (it must run where they live).
fn uses_kv(op: &Op) -> Option<usize> {
    match op {
        Op::SetRows { layer, .. } | Op::FlashAttnExt { layer, .. } => Some(*layer),
        Op::LightningIndexer { layer, .. } => Some(*layer),
        Op::Dsv4StateSet { layer, .. } | Op::FlashAttnComp { layer, .. } => Some(*layer),
        Op::KpoolIndexSet { layer, .. } => Some(*layer),
        Op::Dsv4Compress { dst_layer, .. } => Some(*dst_layer),
        Op::Dsv4LidTopK { layer, .. } => Some(*layer),
        _ => None,
    }
}

/// The tensors of one split as they are built.
struct SplitGraph {
    tensors: Vec<RpcTensor>,
    nodes: Vec<u64>,
    next_id: u64,
    /// Arena node → wire id, for the nodes already described.
    ids: std::collections::HashMap<NodeId, u64>,
}

impl SplitGraph {
    fn fresh(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    fn push(&mut self, t: RpcTensor) -> u64 {
        let id = t.id;
        self.tensors.push(t);
        id
    }
}

impl RpcExecutor {
    /// The remote index of a device, added on first sight.
    fn remote_of(&mut self, buf: &RemoteBuffer) -> usize {
        if let Some(i) = self
            .remotes
            .iter()
            .position(|r| Arc::ptr_eq(&r.server, buf.server()) && r.device == buf.device())
        {
            return i;
        }
        self.remotes.push(Remote {
            server: Arc::clone(buf.server()),
            device: buf.device(),
            label: format!(
                "rpc-server {} device {}",
                buf.server().endpoint(),
                buf.device()
            ),
            arena: None,
            inputs: None,
            kv: Vec::new(),
            scratch_at: 0,
        });
        self.remotes.len() - 1
    }

    /// Where every node of `g` runs (see the module doc).
    fn sides(&mut self, g: &Graph, model: &Model) -> Result<Vec<Side>, ExecError> {
        let mut sides = Vec::with_capacity(g.nodes.len());
        let mut prev = Side::Cpu;
        for node in &g.nodes {
            let mut side: Option<Side> = None;
            for w in node.op.weights() {
                let wr = &g.weights[w.0];
                let st = model.tensors.at(wr.tensor).read();
                let here = match &st.data {
                    TensorData::Device(a) if a.rpc_buffer().is_some() => {
                        Side::Remote(self.remote_of(a.rpc_buffer().expect("checked")))
                    }
                    _ => {
                        check_weight(&st, &wr.name)?;
                        Side::Cpu
                    }
                };
                if side.is_some_and(|s| s != here) {
                    return Err(unsupported(
                        "two devices",
                        node,
                        format!(
                            "its weights live on different devices ('{}' among them)",
                            wr.name
                        ),
                    ));
                }
                side = Some(here);
            }
            let weighted = side.is_some();
            let mut side = side.unwrap_or(prev);
            if let Side::Remote(r) = side {
                if let Err(why) = remote_op(&node.op) {
                    if weighted || uses_kv(&node.op).is_some() {
                        return Err(unsupported(&self.remotes[r].label, node, why));
                    }
                    side = Side::Cpu;
                } else {
                    prev = side;
                }
            } else {
                prev = side;
            }
            sides.push(side);
        }
        Ok(sides)
    }

    /// Every layer's K and V buffers on every remote, with the remote and the layer.
    fn remote_kv(&self) -> impl Iterator<Item = (&Remote, usize, &[RemoteBuffer; 2])> {
        self.remotes.iter().flat_map(|r| {
            (r.kv.iter().enumerate()).filter_map(move |(il, b)| b.as_ref().map(|b| (r, il, b)))
        })
    }

    /// Makes node `n`'s values current in the host arena.
    fn to_host(&mut self, g: &Graph, n: NodeId) -> Result<(), ExecError> {
        if self.on_host[n] || g.nodes[n].is_empty() {
            return Ok(());
        }
        if self.on_remote[n] == 0 {
            return Err(ExecError::Device(format!(
                "node '{}' was read before it was computed",
                g.nodes[n].name
            )));
        }
        let r = self.on_remote[n].trailing_zeros() as usize;
        let (at, len) = range(&g.nodes[n]);
        let remote = &self.remotes[r];
        let buf = remote.arena.as_ref().expect("a remote node has the arena");
        buf.read(
            4 * at as u64,
            f32_bytes_mut(&mut self.cpu.arena[at..at + len]),
        )
        .map_err(|e| rpc_err(remote, e))?;
        self.on_host[n] = true;
        Ok(())
    }

    /// Makes node `n`'s values current in remote `r`'s arena.
    fn to_remote(&mut self, g: &Graph, n: NodeId, r: usize) -> Result<(), ExecError> {
        if self.on_remote[n] & (1 << r) != 0 || g.nodes[n].is_empty() {
            return Ok(());
        }
        self.to_host(g, n)?;
        let (at, len) = range(&g.nodes[n]);
        let remote = &self.remotes[r];
        let buf = remote.arena.as_ref().expect("arena allocated");
        buf.write(4 * at as u64, f32_bytes(&self.cpu.arena[at..at + len]))
            .map_err(|e| rpc_err(remote, e))?;
        self.on_remote[n] |= 1 << r;
        self.ids_on_remote[n] &= !(1 << r);
        Ok(())
    }

    /// The micro-batch's inputs as bytes, built once per run.
    fn build_inputs(&mut self, g: &Graph, kv: &KvCache, inp: &Inputs) {
        let t = inp.pos.len();
        let mut b = Vec::new();
        let mut lay = InputLayout::default();
        let align = |b: &mut Vec<u8>| b.resize(b.len().div_ceil(32) * 32, 0);
        lay.pos = b.len() as u64;
        inp.pos
            .iter()
            .for_each(|p| b.extend_from_slice(&p.to_le_bytes()));
        align(&mut b);
        lay.slots = b.len() as u64;
        for i in 0..t {
            let s = inp.slots.get(i).map_or(0i64, |&s| i64::from(s));
            b.extend_from_slice(&s.to_le_bytes());
        }
        align(&mut b);
        lay.out_ids = b.len() as u64;
        inp.out_ids
            .iter()
            .for_each(|&o| b.extend_from_slice(&(o as i32).to_le_bytes()));
        align(&mut b);
        lay.tokens = b.len() as u64;
        for i in 0..t {
            let tok = inp.tokens.get(i).copied().unwrap_or(0);
            b.extend_from_slice(&tok.to_le_bytes());
        }
        align(&mut b);
        // the KQ masks over rows 0..n_kv: 0 where the token sees the cell, -inf elsewhere
        // upstream's view: the used cells padded to 256 (get_n_kv); the padding is masked,
        // but without flash attention the products' length decides ggml's summation order
        let used = (0..t)
            .map(|i| kv.rows_of(inp.seq[i]).end)
            .max()
            .unwrap_or(0)
            .max(1);
        // (a sequence in a later stream: every stream's rows up to its cells, one view)
        let n_kv = if used <= kv.size() {
            crate::kernels::cpu::ops::upstream_n_kv(used, kv.size())
        } else {
            used
        };
        lay.n_kv = n_kv;
        let mut windows: Vec<u32> = Vec::new();
        for node in &g.nodes {
            if let Op::FlashAttnExt { n_swa, .. } = node.op {
                if !windows.contains(&n_swa) {
                    windows.push(n_swa);
                }
            }
        }
        for n_swa in windows {
            lay.masks.push((n_swa, b.len() as u64));
            for i in 0..t {
                for j in 0..n_kv {
                    let seen = kv.visible(j, inp.seq[i], inp.pos[i], inp.causal, n_swa);
                    let v: u16 = if seen { 0 } else { 0xFC00 };
                    b.extend_from_slice(&v.to_le_bytes());
                }
            }
            align(&mut b);
        }
        lay.len = b.len().max(32) as u64;
        self.input_bytes = b;
        self.input_layout = lay;
    }

    /// Remote `r`'s arena (at least `bytes`) and this run's inputs there.
    fn prepare_remote(&mut self, r: usize, arena_bytes: u64) -> Result<(), ExecError> {
        let remote = &mut self.remotes[r];
        if remote
            .arena
            .as_ref()
            .map_or(true, |b| b.len() < arena_bytes)
        {
            remote.arena = None;
            let size = arena_bytes.max(4) + arena_bytes / 4;
            let buf = remote
                .server
                .alloc(remote.device, size)
                .map_err(|e| rpc_err(remote, e))?;
            remote.arena = Some(buf);
        }
        if !self.inputs_sent[r] {
            let len = self.input_layout.len;
            if remote.inputs.as_ref().map_or(true, |b| b.len() < len) {
                remote.inputs = None;
                let buf = remote
                    .server
                    .alloc(remote.device, len + len / 4)
                    .map_err(|e| rpc_err(remote, e))?;
                remote.inputs = Some(buf);
            }
            let buf = remote.inputs.as_ref().expect("allocated");
            if !self.input_bytes.is_empty() {
                buf.write(0, &self.input_bytes)
                    .map_err(|e| rpc_err(remote, e))?;
            }
            self.inputs_sent[r] = true;
        }
        Ok(())
    }

    /// Layer `il`'s K and V rows on remote `r`, allocated (zeroed) on first use or when the
    /// cache changed size.
    fn ensure_kv(&mut self, kv: &KvCache, il: usize, r: usize) -> Result<(), ExecError> {
        let layer = kv
            .layers
            .get(il)
            .ok_or_else(|| ExecError::Device(format!("the KV cache has no layer {il}")))?;
        let want = [kv_bytes(&layer.k), kv_bytes(&layer.v)];
        let remote = &mut self.remotes[r];
        if remote.kv.len() <= il {
            remote.kv.resize_with(il + 1, || None);
        }
        let same = remote.kv[il]
            .as_ref()
            .is_some_and(|[k, v]| k.len() == want[0].max(1) && v.len() == want[1].max(1));
        if same {
            return Ok(());
        }
        remote.kv[il] = None;
        let mut bufs = Vec::with_capacity(2);
        for (bytes, (host, width)) in want
            .into_iter()
            .zip([(&layer.k, layer.n_embd_k), (&layer.v, layer.n_embd_v)])
        {
            let b = remote
                .server
                .alloc(remote.device, bytes.max(1))
                .map_err(|e| rpc_err(remote, e))?;
            if self.kv_from_host && bytes > 0 {
                let row = kv_row_bytes(host, width as u64) as usize;
                let mut rows = Vec::with_capacity(bytes as usize);
                host.append_row_bytes(0, bytes as usize / row.max(1), width, &mut rows);
                b.write(0, &rows).map_err(|e| rpc_err(remote, e))?;
            } else {
                b.clear(0).map_err(|e| rpc_err(remote, e))?;
            }
            bufs.push(b);
        }
        let v = bufs.pop().expect("two");
        let k = bufs.pop().expect("two");
        remote.kv[il] = Some([k, v]);
        Ok(())
    }

    /// Runs nodes `span` on remote `r` as one GRAPH_COMPUTE.
    #[allow(clippy::too_many_arguments)]
    fn run_split(
        &mut self,
        g: &Graph,
        model: &Model,
        kv: &KvCache,
        inp: &Inputs,
        r: usize,
        span: std::ops::Range<usize>,
        readers_after: &[usize],
    ) -> Result<(), ExecError> {
        for i in span.clone() {
            if let Some(il) = uses_kv(&g.nodes[i].op) {
                self.ensure_kv(kv, il, r)?;
            }
            let ids = match g.nodes[i].op {
                Op::MulMatId { ids, .. } => Some(ids),
                _ => None,
            };
            for s in g.nodes[i].op.sources() {
                if Some(s) == ids {
                    if span.contains(&s) {
                        return Err(unsupported(
                            &self.remotes[r].label,
                            &g.nodes[i],
                            "expert ids computed on the server",
                        ));
                    }
                    self.ids_to_remote(g, s, r)?;
                } else if !span.contains(&s) {
                    self.to_remote(g, s, r)?;
                }
            }
        }
        let mut sg = SplitGraph {
            tensors: Vec::new(),
            nodes: Vec::new(),
            next_id: 1 << 40,
            ids: Default::default(),
        };
        for i in span.clone() {
            let id = self.encode(g, model, kv, inp, r, &mut sg, i)?;
            let t = sg.tensors.iter_mut().find(|t| t.id == id).expect("encoded");
            t.flags |= FLAG_COMPUTE;
            if readers_after[i] >= span.end || Some(i) == g.logits || Some(i) == g.embd {
                t.flags |= FLAG_OUTPUT;
            }
            sg.nodes.push(id);
        }
        // ggml's use counts: how many nodes of the graph read each node
        let mut uses: std::collections::HashMap<u64, i32> = Default::default();
        for t in &sg.tensors {
            if sg.nodes.contains(&t.id) {
                for &s in t.src.iter().filter(|&&s| s != 0) {
                    *uses.entry(s).or_default() += 1;
                }
            }
        }
        for t in &mut sg.tensors {
            t.use_count = uses.get(&t.id).copied().unwrap_or(0);
        }
        let remote = &self.remotes[r];
        remote
            .server
            .lock()
            .graph_compute(remote.device, &sg.nodes, &sg.tensors)
            .map_err(|e| rpc_err(remote, e))?;
        for i in span {
            self.on_host[i] = false;
            self.on_remote[i] = 1 << r;
            self.ids_on_remote[i] = 0;
        }
        Ok(())
    }

    /// Makes node `n`'s values (expert ids, integers held as f32) current in remote `r`'s
    /// arena as ggml's I32, over the node's own range (4 bytes a value either way).
    fn ids_to_remote(&mut self, g: &Graph, n: NodeId, r: usize) -> Result<(), ExecError> {
        if self.ids_on_remote[n] & (1 << r) != 0 {
            return Ok(());
        }
        self.to_host(g, n)?;
        let (at, len) = range(&g.nodes[n]);
        let bytes: Vec<u8> = self.cpu.arena[at..at + len]
            .iter()
            .flat_map(|&v| (v as i32).to_le_bytes())
            .collect();
        let remote = &self.remotes[r];
        let buf = remote.arena.as_ref().expect("arena allocated");
        buf.write(4 * at as u64, &bytes)
            .map_err(|e| rpc_err(remote, e))?;
        self.ids_on_remote[n] |= 1 << r;
        self.on_remote[n] &= !(1 << r);
        Ok(())
    }

    /// The arena tensor of node `n` on remote `r` with the given shape (contiguous F32).
    fn arena_tensor(
        &self,
        g: &Graph,
        r: usize,
        id: u64,
        n: NodeId,
        ne: [u64; 4],
    ) -> Result<RpcTensor, ExecError> {
        let remote = &self.remotes[r];
        let buf = remote.arena.as_ref().expect("arena allocated");
        let nb = [4, 4 * ne[0], 4 * ne[0] * ne[1], 4 * ne[0] * ne[1] * ne[2]];
        let (ne, nb) = wire_dims(ne, nb).ok_or_else(|| {
            ExecError::Device(format!(
                "{}: node '{}' is too large for the wire's 32-bit sizes",
                remote.label, g.nodes[n].name
            ))
        })?;
        Ok(RpcTensor {
            id,
            ty: GGML_TYPE_F32,
            buffer: buf.id(),
            ne,
            nb,
            data: buf.base() + 4 * g.nodes[n].offset as u64,
            ..RpcTensor::default()
        }
        .with_name(g.nodes[n].name))
    }

    /// The wire id of node `n` as a source: the node itself when this split computed it, a
    /// leaf over its arena range otherwise.
    fn source(
        &self,
        g: &Graph,
        r: usize,
        sg: &mut SplitGraph,
        n: NodeId,
    ) -> Result<u64, ExecError> {
        if let Some(&id) = sg.ids.get(&n) {
            return Ok(id);
        }
        let node = &g.nodes[n];
        let t = self.arena_tensor(
            g,
            r,
            n as u64 + 1,
            n,
            [node.ne0 as u64, node.ne1 as u64, 1, 1],
        )?;
        let id = sg.push(t);
        sg.ids.insert(n, id);
        Ok(id)
    }

    /// A view of node `n`'s arena range with another shape (and byte offset): a leaf naming
    /// the node as its view source.
    fn view(
        &self,
        g: &Graph,
        r: usize,
        sg: &mut SplitGraph,
        n: NodeId,
        ne: [u64; 4],
        nb: [u64; 4],
        offs: u64,
    ) -> Result<u64, ExecError> {
        let src = self.source(g, r, sg, n)?;
        let id = sg.fresh();
        let mut t = self.arena_tensor(g, r, id, n, ne)?;
        let remote = &self.remotes[r];
        let (_, nb) = wire_dims(ne, nb)
            .ok_or_else(|| ExecError::Device(format!("{}: a view is too large", remote.label)))?;
        t.nb = nb;
        t.data += offs;
        t.view_src = src;
        t.view_offs = offs;
        Ok(sg.push(t))
    }

    /// Node `n` as a source seen as `[ne0, ne1]` when it holds that many values in another
    /// shape (a reshape, as upstream's graph views it); as it is otherwise (a broadcast operand).
    fn shaped(
        &self,
        g: &Graph,
        r: usize,
        sg: &mut SplitGraph,
        n: NodeId,
        ne0: u64,
        ne1: u64,
    ) -> Result<u64, ExecError> {
        let sn = &g.nodes[n];
        let (a0, a1) = (sn.ne0 as u64, sn.ne1 as u64);
        if (a0, a1) == (ne0, ne1) || a0 * a1 != ne0 * ne1 {
            return self.source(g, r, sg, n);
        }
        let nb = [4, 4 * ne0, 4 * ne0 * ne1, 4 * ne0 * ne1];
        self.view(g, r, sg, n, [ne0, ne1, 1, 1], nb, 0)
    }

    /// A weight on remote `r` as a leaf.
    fn weight(
        &self,
        g: &Graph,
        model: &Model,
        r: usize,
        sg: &mut SplitGraph,
        w: WeightId,
    ) -> Result<u64, ExecError> {
        let wr = &g.weights[w.0];
        let st = model.tensors.at(wr.tensor).read();
        let remote = &self.remotes[r];
        let buf = match &st.data {
            TensorData::Device(a) => a.rpc_buffer(),
            _ => None,
        }
        .filter(|b| Arc::ptr_eq(b.server(), &remote.server) && b.device() == remote.device)
        .ok_or_else(|| ExecError::Device(format!("'{}' is not on {}", wr.name, remote.label)))?;
        let ty = st.layout.ggml_type;
        let ne = st.layout.ne.map(|v| v as u64);
        let nb0 = ty.type_size();
        let nb1 = ty.row_size(ne[0] as i64).unwrap_or(0);
        let nb = [nb0, nb1, nb1 * ne[1], nb1 * ne[1] * ne[2]];
        let (ne, nb) = wire_dims(ne, nb).ok_or_else(|| {
            ExecError::Device(format!(
                "'{}' is too large for the wire's 32-bit sizes",
                wr.name
            ))
        })?;
        let id = sg.fresh();
        Ok(sg.push(
            RpcTensor {
                id,
                ty: ty.id(),
                buffer: buf.id(),
                ne,
                nb,
                data: buf.base(),
                ..RpcTensor::default()
            }
            .with_name(&wr.name),
        ))
    }

    /// An input of this run on remote `r`: `count` values of `ty` (`size` bytes each) at
    /// `offset`, shaped `[ne0, ne1]`.
    fn input(
        &self,
        r: usize,
        sg: &mut SplitGraph,
        ty: u32,
        size: u64,
        offset: u64,
        ne: [u32; 2],
    ) -> u64 {
        let buf = self.remotes[r].inputs.as_ref().expect("inputs sent");
        let id = sg.fresh();
        let (n0, n1) = (u64::from(ne[0]), u64::from(ne[1]));
        sg.push(RpcTensor {
            id,
            ty,
            buffer: buf.id(),
            ne: [ne[0], ne[1], 1, 1],
            nb: [
                size as u32,
                (size * n0) as u32,
                (size * n0 * n1) as u32,
                (size * n0 * n1) as u32,
            ],
            data: buf.base() + offset,
            ..RpcTensor::default()
        })
    }

    /// Operand `b` of a binary op: a node, or an F32 weight.
    fn operand(
        &self,
        g: &Graph,
        model: &Model,
        r: usize,
        sg: &mut SplitGraph,
        b: &Operand,
        node: &Node,
    ) -> Result<u64, ExecError> {
        match b {
            Operand::Node(n) => self.source(g, r, sg, *n),
            Operand::Weight(w) => {
                let ty = model
                    .tensors
                    .at(g.weights[w.0].tensor)
                    .read()
                    .layout
                    .ggml_type;
                if ty != crate::gguf::GgmlType::F32 {
                    return Err(unsupported(
                        &self.remotes[r].label,
                        node,
                        format!("a {ty} operand of an element-wise op"),
                    ));
                }
                self.weight(g, model, r, sg, *w)
            }
        }
    }

    /// GET_ROWS of the per-expert scales `sw` (`[n_expert]`, F32, on remote `r`) by the
    /// `n` expert ids of node `ids` (I32 in the arena), into the scratch: `[1, n]`; its wire
    /// id, a compute node the caller lists.
    #[allow(clippy::too_many_arguments)]
    fn expert_scales(
        &self,
        g: &Graph,
        model: &Model,
        r: usize,
        sg: &mut SplitGraph,
        sw: WeightId,
        ids: NodeId,
        n: u64,
    ) -> Result<u64, ExecError> {
        let w = self.weight(g, model, r, sg, sw)?;
        let wt = sg
            .tensors
            .iter()
            .find(|t| t.id == w)
            .expect("pushed")
            .clone();
        let n_exp = wt.ne[0];
        let rows = sg.fresh();
        sg.push(RpcTensor {
            id: rows,
            ne: [1, n_exp, 1, 1],
            nb: [4, 4, 4 * n_exp, 4 * n_exp],
            view_src: w,
            ..wt
        });
        let flat = sg.fresh();
        let mut ft = self.arena_tensor(g, r, flat, ids, [n, 1, 1, 1])?;
        ft.ty = ggml::TYPE_I32;
        sg.push(ft);
        let remote = &self.remotes[r];
        let buf = remote.arena.as_ref().expect("arena allocated");
        let id = sg.fresh();
        let (ne, nb) = wire_dims([1, n, 1, 1], [4, 4, 4 * n, 4 * n]).ok_or_else(|| {
            ExecError::Device(format!("{}: expert scales too large", remote.label))
        })?;
        let mut src = [0u64; 10];
        src[0] = rows;
        src[1] = flat;
        Ok(sg.push(RpcTensor {
            id,
            ty: GGML_TYPE_F32,
            buffer: buf.id(),
            ne,
            nb,
            data: buf.base() + remote.scratch_at,
            op: ggml::OP_GET_ROWS,
            src,
            flags: FLAG_COMPUTE,
            ..RpcTensor::default()
        }))
    }

    /// The scratch of attention without flash attention on node `node` (a FLASH_ATTN_EXT)
    /// over `n_kv` cells: byte offsets of KQ, of V made contiguous and of KQV, and the end.
    fn soft_max_attn_scratch(&self, kv: &KvCache, node: &Node, n_kv: u64) -> (u64, u64, u64, u64) {
        let Op::FlashAttnExt {
            layer,
            n_head,
            n_head_kv,
            dv,
            ..
        } = node.op
        else {
            return (0, 0, 0, 0);
        };
        let (nh, nkv, dv, t) = (n_head as u64, n_head_kv as u64, dv as u64, node.ne1 as u64);
        let l = &kv.layers[layer];
        let (ty, _) = kv_format(&l.v, l.n_embd_v);
        let kq = 0;
        let v = (kq + 4 * n_kv * t * nh).next_multiple_of(64);
        // V transposed as upstream's cache holds it without flash attention: rows of the
        // cache's size per value
        let kqv =
            (v + kv_type_size(ty, &l.v) * u64::from(kv.size()) * dv * nkv).next_multiple_of(64);
        (kq, v, kqv, kqv + 4 * dv * t * nh)
    }

    /// Upstream's attention without flash attention on remote `r`, from the FLASH_ATTN_EXT
    /// sources `fa` (q view, K view, V view, mask): appends KQ = K·Q (F32 precision), the
    /// soft-cap when set (scale, tanh, scale), SOFT_MAX with the mask, scale and no ALiBi,
    /// V made contiguous as [n_kv, dv, heads], KQV = V·KQ, all in the scratch; returns the
    /// sources of the final CONT: KQV permuted to [dv, heads, T].
    #[allow(clippy::too_many_arguments)]
    fn soft_max_attn(
        &self,
        kv: &KvCache,
        r: usize,
        sg: &mut SplitGraph,
        node: &Node,
        fa: [u64; 10],
        scale: f32,
        softcap: f32,
    ) -> Result<[u64; 10], ExecError> {
        let Op::FlashAttnExt {
            n_head,
            n_head_kv,
            dv,
            ..
        } = node.op
        else {
            unreachable!("a FLASH_ATTN_EXT node")
        };
        let remote = &self.remotes[r];
        let buf = remote.arena.as_ref().expect("arena allocated");
        let n_kv = u64::from(self.input_layout.n_kv);
        let (nh, nkv, dv, t) = (n_head as u64, n_head_kv as u64, dv as u64, node.ne1 as u64);
        let (kq_at, v_at, kqv_at, _) = self.soft_max_attn_scratch(kv, node, n_kv);
        let base = buf.base() + remote.scratch_at;
        let f = |v: f32| v.to_bits() as i32;
        let too_large = || {
            ExecError::Device(format!(
                "{}: attention too large for the wire",
                remote.label
            ))
        };
        let push = |sg: &mut SplitGraph,
                    ty: u32,
                    ts: u64,
                    ne: [u64; 4],
                    at: u64,
                    op: u32,
                    src: &[u64],
                    params: &[i32]|
         -> Result<u64, ExecError> {
            let nb = [
                ts,
                ts * ne[0],
                ts * ne[0] * ne[1],
                ts * ne[0] * ne[1] * ne[2],
            ];
            let (ne, nb) = wire_dims(ne, nb).ok_or_else(too_large)?;
            let id = sg.fresh();
            let mut t = RpcTensor {
                id,
                ty,
                buffer: buf.id(),
                ne,
                nb,
                data: base + at,
                op,
                flags: FLAG_COMPUTE,
                ..RpcTensor::default()
            };
            t.src[..src.len()].copy_from_slice(src);
            t.op_params[..params.len()].copy_from_slice(params);
            sg.push(t);
            sg.nodes.push(id);
            Ok(id)
        };
        let kq_ne = [n_kv, t, nh, 1];
        let kq_step = |sg: &mut SplitGraph, op: u32, src: &[u64], params: &[i32]| {
            push(sg, GGML_TYPE_F32, 4, kq_ne, kq_at, op, src, params)
        };
        let mut kq = kq_step(sg, ggml::OP_MUL_MAT, &[fa[1], fa[0]], &[ggml::PREC_F32])?;
        if softcap != 0.0 {
            // upstream's soft-cap: scale down, tanh, scale up
            for (op, p) in [
                (ggml::OP_SCALE, [f(1.0 / softcap), f(0.0)]),
                (ggml::OP_UNARY, [ggml::UNARY_TANH, 0]),
                (ggml::OP_SCALE, [f(softcap), f(0.0)]),
            ] {
                kq = kq_step(sg, op, &[kq], &p)?;
            }
        }
        let kq = kq_step(sg, ggml::OP_SOFT_MAX, &[kq, fa[3]], &[f(scale), f(0.0)])?;
        // V's view [dv, n_kv, heads] transposed to [n_kv, dv, heads] and copied (CPY) into
        // the layout upstream's transposed cache has (rows of the cache's size per value), so
        // that the product reads it with upstream's strides and takes ggml's same path
        let vt = sg
            .tensors
            .iter()
            .find(|x| x.id == fa[2])
            .expect("pushed")
            .clone();
        let vty = vt.ty;
        let tid = sg.fresh();
        sg.push(RpcTensor {
            id: tid,
            ne: [vt.ne[1], vt.ne[0], vt.ne[2], vt.ne[3]],
            nb: [vt.nb[1], vt.nb[0], vt.nb[2], vt.nb[3]],
            view_src: vt.id,
            ..vt
        });
        let el = u64::from(vt.nb[0]);
        let rows = u64::from(kv.size());
        let strided =
            |id: u64, op: u32, src: [u64; 10], view_src: u64| -> Result<RpcTensor, ExecError> {
                let (ne, nb) = wire_dims(
                    [n_kv, dv, nkv, 1],
                    [el, el * rows, el * rows * dv, el * rows * dv * nkv],
                )
                .ok_or_else(too_large)?;
                Ok(RpcTensor {
                    id,
                    ty: vty,
                    buffer: buf.id(),
                    ne,
                    nb,
                    data: base + v_at,
                    op,
                    src,
                    view_src,
                    flags: if op == ggml::OP_NONE { 0 } else { FLAG_COMPUTE },
                    ..RpcTensor::default()
                })
            };
        let dst = sg.fresh();
        sg.push(strided(dst, ggml::OP_NONE, [0; 10], 0)?);
        let vc = sg.fresh();
        let mut cs = [0u64; 10];
        cs[0] = tid;
        cs[1] = dst;
        sg.push(strided(vc, ggml::OP_CPY, cs, dst)?);
        sg.nodes.push(vc);
        let kqv = push(
            sg,
            GGML_TYPE_F32,
            4,
            [dv, t, nh, 1],
            kqv_at,
            ggml::OP_MUL_MAT,
            &[vc, kq],
            &[],
        )?;
        // permuted to [dv, heads, T] (a view)
        let kt = sg
            .tensors
            .iter()
            .find(|x| x.id == kqv)
            .expect("pushed")
            .clone();
        let pid = sg.fresh();
        sg.push(RpcTensor {
            id: pid,
            op: ggml::OP_NONE,
            src: [0; 10],
            flags: 0,
            ne: [kt.ne[0], kt.ne[2], kt.ne[1], 1],
            nb: [kt.nb[0], kt.nb[2], kt.nb[1], kt.nb[3]],
            view_src: kqv,
            ..kt
        });
        let mut out = [0u64; 10];
        out[0] = pid;
        Ok(out)
    }

    /// Describes node `i` (and the views it needs) in `sg`; returns its wire id.
    #[allow(clippy::too_many_arguments)]
    fn encode(
        &self,
        g: &Graph,
        model: &Model,
        kv: &KvCache,
        inp: &Inputs,
        r: usize,
        sg: &mut SplitGraph,
        i: NodeId,
    ) -> Result<u64, ExecError> {
        let node = &g.nodes[i];
        let (ne0, ne1) = (node.ne0 as u64, node.ne1 as u64);
        let lay = self.input_layout.clone();
        let t_u32 = inp.pos.len() as u32;
        let mut shape = [ne0, ne1, 1, 1];
        let mut params = [0i32; 16];
        let mut src = [0u64; 10];
        let f = |v: f32| v.to_bits() as i32;
        let op = match &node.op {
            Op::GetRowsTokens { table } => {
                src[0] = self.weight(g, model, r, sg, *table)?;
                src[1] = self.input(r, sg, ggml::TYPE_I32, 4, lay.tokens, [t_u32, 1]);
                ggml::OP_GET_ROWS
            }
            Op::GetRowsOut { src: s } => {
                src[0] = self.source(g, r, sg, *s)?;
                let n_out = inp.out_ids.len() as u32;
                src[1] = self.input(r, sg, ggml::TYPE_I32, 4, lay.out_ids, [n_out, 1]);
                ggml::OP_GET_ROWS
            }
            Op::View { src: s, offset } => {
                let sn = &g.nodes[*s];
                src[0] = self.view(
                    g,
                    r,
                    sg,
                    *s,
                    [ne0, ne1, 1, 1],
                    [
                        4,
                        4 * sn.ne0 as u64,
                        4 * (sn.ne0 * sn.ne1) as u64,
                        4 * (sn.ne0 * sn.ne1) as u64,
                    ],
                    4 * *offset as u64,
                )?;
                ggml::OP_CONT
            }
            Op::ViewHeads {
                src: s,
                stride,
                offset,
                len,
            } => {
                let sn = &g.nodes[*s];
                let n_head = (sn.ne0 / stride) as u64;
                shape = [*len as u64, n_head, ne1, 1];
                let row = 4 * sn.ne0 as u64;
                src[0] = self.view(
                    g,
                    r,
                    sg,
                    *s,
                    shape,
                    [4, 4 * *stride as u64, row, row * ne1],
                    4 * *offset as u64,
                )?;
                ggml::OP_CONT
            }
            Op::RmsNorm { src: s, eps } | Op::Norm { src: s, eps } => {
                // per-head norms (q/k norms) see their source as [head_dim, heads * T]
                src[0] = self.shaped(g, r, sg, *s, ne0, ne1)?;
                params[0] = f(*eps);
                if matches!(node.op, Op::RmsNorm { .. }) {
                    ggml::OP_RMS_NORM
                } else {
                    ggml::OP_NORM
                }
            }
            Op::Mul { a, b } | Op::Add { a, b } | Op::Div { a, b } => {
                src[0] = self.shaped(g, r, sg, *a, ne0, ne1)?;
                src[1] = match b {
                    Operand::Node(n) => self.shaped(g, r, sg, *n, ne0, ne1)?,
                    Operand::Weight(_) => self.operand(g, model, r, sg, b, node)?,
                };
                match node.op {
                    Op::Mul { .. } => ggml::OP_MUL,
                    Op::Add { .. } => ggml::OP_ADD,
                    _ => ggml::OP_DIV,
                }
            }
            Op::Scale { src: s, s: k } => {
                src[0] = self.source(g, r, sg, *s)?;
                params[0] = f(*k);
                params[1] = f(0.0);
                ggml::OP_SCALE
            }
            Op::SoftMax { src: s } => {
                src[0] = self.source(g, r, sg, *s)?;
                params[0] = f(1.0);
                params[1] = f(0.0);
                ggml::OP_SOFT_MAX
            }
            Op::Sqr { src: s } => {
                src[0] = self.source(g, r, sg, *s)?;
                ggml::OP_SQR
            }
            Op::Tanh { src: s }
            | Op::Gelu { src: s }
            | Op::Relu { src: s }
            | Op::Silu { src: s }
            | Op::Sigmoid { src: s } => {
                src[0] = self.source(g, r, sg, *s)?;
                params[0] = match node.op {
                    Op::Tanh { .. } => ggml::UNARY_TANH,
                    Op::Gelu { .. } => ggml::UNARY_GELU,
                    Op::Relu { .. } => ggml::UNARY_RELU,
                    Op::Silu { .. } => ggml::UNARY_SILU,
                    _ => ggml::UNARY_SIGMOID,
                };
                ggml::OP_UNARY
            }
            Op::Glu { gate, up, kind } => {
                src[0] = self.source(g, r, sg, *gate)?;
                src[1] = self.source(g, r, sg, *up)?;
                params[0] = match kind {
                    GluKind::Geglu => ggml::GLU_GEGLU,
                    GluKind::Swiglu => ggml::GLU_SWIGLU,
                    _ => {
                        return Err(unsupported(
                            &self.remotes[r].label,
                            node,
                            "this GLU kind is not sent to rpc-servers yet",
                        ))
                    }
                };
                ggml::OP_GLU
            }
            Op::MulMat { w, x } => {
                src[0] = self.weight(g, model, r, sg, *w)?;
                src[1] = self.source(g, r, sg, *x)?;
                ggml::OP_MUL_MAT
            }
            Op::MulMatId {
                w,
                x,
                ids,
                n_used,
                scale,
            } => {
                // ggml_mul_mat_id(as [k, n, n_expert], b [k, 1 or n_used, T], ids [n_used, T])
                // -> [n, n_used, T]: the arena's [n, n_used * T] as laid out
                let (xn, idn) = (&g.nodes[*x], &g.nodes[*ids]);
                let (k, t, nu) = (xn.ne0 as u64, idn.ne1 as u64, *n_used as u64);
                let xb = if xn.ne1 == idn.ne1 { 1 } else { nu };
                src[0] = self.weight(g, model, r, sg, *w)?;
                src[1] = self.view(
                    g,
                    r,
                    sg,
                    *x,
                    [k, xb, t, 1],
                    [4, 4 * k, 4 * k * xb, 4 * k * xb * t],
                    0,
                )?;
                let id = sg.fresh();
                let mut it = self.arena_tensor(g, r, id, *ids, [nu, t, 1, 1])?;
                it.ty = ggml::TYPE_I32;
                let ids_t = sg.push(it);
                src[2] = ids_t;
                shape = [ne0, nu, t, 1];
                match scale {
                    None => ggml::OP_MUL_MAT_ID,
                    Some(sw) => {
                        // upstream's build_lora_mm_id: res * get_rows(scales, ids), the
                        // product in place over the MUL_MAT_ID's result
                        let mm = sg.fresh();
                        let mut mt = self.arena_tensor(g, r, mm, i, shape)?;
                        mt.op = ggml::OP_MUL_MAT_ID;
                        mt.src = src;
                        mt.flags |= FLAG_COMPUTE;
                        sg.push(mt);
                        sg.nodes.push(mm);
                        let gathered = self.expert_scales(g, model, r, sg, *sw, *ids, nu * t)?;
                        sg.nodes.push(gathered);
                        let sv = sg.fresh();
                        let mut v = sg
                            .tensors
                            .iter()
                            .find(|t| t.id == gathered)
                            .expect("pushed")
                            .clone();
                        v.id = sv;
                        v.op = ggml::OP_NONE;
                        v.src = [0; 10];
                        v.flags = 0;
                        v.ne = [1, nu as u32, t as u32, 1];
                        v.nb = [4, 4, 4 * nu as u32, 4 * (nu * t) as u32];
                        v.view_src = gathered;
                        sg.push(v);
                        src = [0; 10];
                        src[0] = mm;
                        src[1] = sv;
                        ggml::OP_MUL
                    }
                }
            }
            Op::Rope {
                src: s,
                head_dim,
                params: p,
                freq_factors,
            } => {
                let hd = *head_dim as u64;
                shape = [hd, ne0 / hd, ne1, 1];
                src[0] = self.view(g, r, sg, *s, shape, [4, 4 * hd, 4 * ne0, 4 * ne0 * ne1], 0)?;
                src[1] = self.input(r, sg, ggml::TYPE_I32, 4, lay.pos, [t_u32, 1]);
                if let Some(ff) = freq_factors {
                    src[2] = self.weight(g, model, r, sg, *ff)?;
                }
                params[1] = p.n_rot as i32;
                params[2] = match p.mode {
                    RopeMode::Neox => ggml::ROPE_NEOX,
                    _ => 0,
                };
                params[4] = p.n_ctx_orig as i32;
                params[5] = f(p.freq_base);
                params[6] = f(p.freq_scale);
                params[7] = f(p.ext_factor);
                params[8] = f(p.attn_factor);
                params[9] = f(p.beta_fast);
                params[10] = f(p.beta_slow);
                ggml::OP_ROPE
            }
            Op::SetRows { src: s, layer, v } => {
                let l = &kv.layers[*layer];
                let (b, width) = if *v {
                    (&l.v, l.n_embd_v)
                } else {
                    (&l.k, l.n_embd_k)
                };
                let (ty, row) = kv_format(b, width);
                let rows = kv_bytes(b) / row.max(1);
                let buf = &self.remotes[r].kv[*layer].as_ref().expect("ensured")[usize::from(*v)];
                let cache_id = sg.fresh();
                let (ne, nb) = wire_dims(
                    [width as u64, rows, 1, 1],
                    [kv_type_size(ty, b), row, row * rows, row * rows],
                )
                .ok_or_else(|| {
                    ExecError::Device("the KV cache is too large for the wire".into())
                })?;
                let cache = RpcTensor {
                    id: cache_id,
                    ty,
                    buffer: buf.id(),
                    ne,
                    nb,
                    data: buf.base(),
                    ..RpcTensor::default()
                };
                sg.push(cache.clone());
                src[0] = self.source(g, r, sg, *s)?;
                src[1] = self.input(r, sg, ggml::TYPE_I64, 8, lay.slots, [t_u32, 1]);
                src[2] = cache_id;
                let id = sg.fresh();
                return Ok(sg.push(RpcTensor {
                    id,
                    op: ggml::OP_SET_ROWS,
                    src,
                    view_src: cache_id,
                    ..cache
                }));
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
                ..
            } => {
                let (nh, nkv, dk, dv) = (*n_head as u64, *n_head_kv as u64, *dk as u64, *dv as u64);
                let t = ne1;
                src[0] = self.view(
                    g,
                    r,
                    sg,
                    *q,
                    [dk, t, nh, 1],
                    [4, 4 * dk * nh, 4 * dk, 4 * dk * nh * t],
                    0,
                )?;
                let l = &kv.layers[*layer];
                let n_kv = u64::from(lay.n_kv);
                for (k, (b, width, d)) in [(&l.k, l.n_embd_k, dk), (&l.v, l.n_embd_v, dv)]
                    .into_iter()
                    .enumerate()
                {
                    let (ty, row) = kv_format(b, width);
                    let buf = &self.remotes[r].kv[*layer].as_ref().expect("ensured")[k];
                    let head = kv_row_bytes(b, d);
                    let (ne, nb) = wire_dims(
                        [d, n_kv, nkv, 1],
                        [kv_type_size(ty, b), row, head, row * n_kv],
                    )
                    .ok_or_else(|| {
                        ExecError::Device("the KV cache is too large for the wire".into())
                    })?;
                    let id = sg.fresh();
                    src[1 + k] = sg.push(RpcTensor {
                        id,
                        ty,
                        buffer: buf.id(),
                        ne,
                        nb,
                        data: buf.base(),
                        ..RpcTensor::default()
                    });
                }
                let mask_at = lay
                    .masks
                    .iter()
                    .find(|m| m.0 == *n_swa)
                    .map(|m| m.1)
                    .expect("a mask per window");
                src[3] = self.input(r, sg, ggml::TYPE_F16, 2, mask_at, [lay.n_kv, t_u32]);
                if !inp.flash_attn {
                    // upstream's graph without flash attention (build_attn_mha): KQ, soft-max
                    // with the mask, V (made [n_kv, dv] by CONT of its transpose) times KQ,
                    // the heads permuted back and made contiguous into this node
                    src = self.soft_max_attn(kv, r, sg, node, src, *scale, *softcap)?;
                    let perm = src[0];
                    let pt = sg
                        .tensors
                        .iter()
                        .find(|x| x.id == perm)
                        .expect("pushed")
                        .clone();
                    let mut t = self.arena_tensor(g, r, i as u64 + 1, i, [ne0, ne1, 1, 1])?;
                    t.op = ggml::OP_CONT;
                    t.src = [0; 10];
                    t.src[0] = pt.id;
                    let id = sg.push(t);
                    sg.ids.insert(i, id);
                    return Ok(id);
                }
                shape = [dv, nh, t, 1];
                params[0] = f(*scale);
                params[1] = f(0.0);
                params[2] = f(*softcap);
                params[3] = ggml::PREC_F32;
                params[4] = lay.n_kv as i32;
                ggml::OP_FLASH_ATTN_EXT
            }
            other => {
                return Err(unsupported(
                    &self.remotes[r].label,
                    node,
                    format!("{} is not sent to rpc-servers yet", other.ggml_op().0),
                ))
            }
        };
        let mut t = self.arena_tensor(g, r, i as u64 + 1, i, shape)?;
        t.op = op;
        t.op_params = params;
        t.src = src;
        let id = sg.push(t);
        // readers see the node as `[ne0, ne1]` (upstream reshapes likewise): a view of it
        let flat = [ne0, ne1, 1, 1];
        if shape == flat {
            sg.ids.insert(i, id);
        } else {
            let vid = sg.fresh();
            let mut v = self.arena_tensor(g, r, vid, i, flat)?;
            v.view_src = id;
            sg.push(v);
            sg.ids.insert(i, vid);
        }
        Ok(id)
    }
}

/// Bytes of one element of a cache (one block for a quantized one).
fn kv_type_size(ty: u32, b: &KvBuffer) -> u64 {
    match b {
        KvBuffer::Packed { ty: t, .. } => t.type_size(),
        _ if ty == GGML_TYPE_F32 => 4,
        _ => 2,
    }
}

/// Bytes of `d` values of a cache row (one head).
fn kv_row_bytes(b: &KvBuffer, d: u64) -> u64 {
    match b {
        KvBuffer::F32(_) => 4 * d,
        KvBuffer::F16(_) => 2 * d,
        KvBuffer::Packed { ty, .. } => ty.row_size(d as i64).unwrap_or(0),
    }
}

impl Executor for RpcExecutor {
    fn name(&self) -> &'static str {
        "RPC"
    }

    /// Weights in host memory (computed on the CPU) or on an rpc-server (computed there).
    fn supports_weight(&self, st: &TensorState, name: &str) -> Result<(), ExecError> {
        match &st.data {
            TensorData::Device(a) if a.rpc_buffer().is_some() => Ok(()),
            _ => check_weight(st, name),
        }
    }

    fn supports_op(&self, g: &Graph, op: &Op, model: &Model) -> bool {
        op.weights().iter().all(|w| {
            let wr = &g.weights[w.0];
            self.supports_weight(&model.tensors.at(wr.tensor).read(), &wr.name)
                .is_ok()
        })
    }

    fn sync_kv(&mut self, kv: &mut KvCache, to_host: bool) -> Result<(), ExecError> {
        // layers whose buffers a server does not hold yet get the host rows when made
        self.kv_from_host |= !to_host;
        let mut bytes = Vec::new();
        for (remote, il, kvb) in self.remote_kv() {
            let Some(layer) = kv.layers.get_mut(il) else {
                continue;
            };
            let (nk, nv) = (layer.n_embd_k, layer.n_embd_v);
            for (buf, host, width) in [(&kvb[0], &mut layer.k, nk), (&kvb[1], &mut layer.v, nv)] {
                let row = kv_row_bytes(host, width as u64) as usize;
                let rows = kv_bytes(host) as usize / row.max(1);
                bytes.clear();
                if to_host {
                    bytes.resize(rows * row, 0);
                    buf.read(0, &mut bytes).map_err(|e| rpc_err(remote, e))?;
                    for (j, r) in bytes.chunks_exact(row).enumerate() {
                        host.set_row_bytes(j, width, r);
                    }
                } else {
                    host.append_row_bytes(0, rows, width, &mut bytes);
                    buf.write(0, &bytes).map_err(|e| rpc_err(remote, e))?;
                }
            }
        }
        Ok(())
    }

    fn copy_kv_streams(
        &mut self,
        kv: &KvCache,
        copies: &[(usize, usize)],
    ) -> Result<(), ExecError> {
        let n = u64::from(kv.size());
        let mut bytes = Vec::new();
        for (remote, il, kvb) in self.remote_kv() {
            let Some(layer) = kv.layers.get(il) else {
                continue;
            };
            for (buf, host, width) in [
                (&kvb[0], &layer.k, layer.n_embd_k),
                (&kvb[1], &layer.v, layer.n_embd_v),
            ] {
                let stream = n * kv_row_bytes(host, width as u64);
                bytes.resize(stream as usize, 0);
                for &(from, to) in copies {
                    buf.read(from as u64 * stream, &mut bytes)
                        .map_err(|e| rpc_err(remote, e))?;
                    buf.write(to as u64 * stream, &bytes)
                        .map_err(|e| rpc_err(remote, e))?;
                }
            }
        }
        Ok(())
    }

    fn sync_k_rows(
        &mut self,
        kv: &mut KvCache,
        rows: &[usize],
        to_host: bool,
    ) -> Result<(), ExecError> {
        let mut bytes = Vec::new();
        for (remote, il, [k, _]) in self.remote_kv() {
            let Some(layer) = kv.layers.get_mut(il) else {
                continue;
            };
            let width = layer.n_embd_k;
            let row = kv_row_bytes(&layer.k, width as u64);
            for &j in rows {
                bytes.clear();
                if to_host {
                    bytes.resize(row as usize, 0);
                    k.read(j as u64 * row, &mut bytes)
                        .map_err(|e| rpc_err(remote, e))?;
                    layer.k.set_row_bytes(j, width, &bytes);
                } else {
                    layer.k.append_row_bytes(j, 1, width, &mut bytes);
                    k.write(j as u64 * row, &bytes)
                        .map_err(|e| rpc_err(remote, e))?;
                }
            }
        }
        Ok(())
    }

    fn set_n_threads(&mut self, n: usize) {
        self.cpu.set_n_threads(n);
    }

    fn compute(
        &mut self,
        g: &Graph,
        model: &Model,
        kv: &mut KvCache,
        inp: &Inputs,
        abort: &mut dyn FnMut() -> bool,
    ) -> Result<(), ExecError> {
        let n = g.nodes.len();
        self.cpu.begin_run(g);
        let sides = self.sides(g, model)?;
        self.on_host.clear();
        self.on_host.resize(n, false);
        self.on_remote.clear();
        self.on_remote.resize(n, 0);
        self.ids_on_remote.clear();
        self.ids_on_remote.resize(n, 0);
        if self.remotes.len() > 64 {
            return Err(ExecError::Device(
                "more than 64 remote devices in one context".into(),
            ));
        }
        self.inputs_sent.clear();
        self.inputs_sent.resize(self.remotes.len(), false);
        // the last reader of each node, and the arena extent each remote needs
        let mut last_reader: Vec<usize> = (0..n).collect();
        let mut extent = vec![0u64; self.remotes.len()];
        for (i, node) in g.nodes.iter().enumerate() {
            for s in node.op.sources() {
                last_reader[s] = last_reader[s].max(i);
            }
            if let Side::Remote(r) = sides[i] {
                for m in node.op.sources().into_iter().chain([i]) {
                    let nd = &g.nodes[m];
                    extent[r] = extent[r].max(4 * (nd.offset + nd.len()) as u64);
                }
            }
        }
        if sides.iter().any(|s| *s != Side::Cpu) {
            self.build_inputs(g, kv, inp);
        }
        // the scratch past the nodes (one node's at a time): gathered expert scales, and the
        // intermediates of attention without flash attention
        let mut scratch = vec![0u64; self.remotes.len()];
        for (i, node) in g.nodes.iter().enumerate() {
            let Side::Remote(r) = sides[i] else { continue };
            let need = match &node.op {
                Op::MulMatId {
                    ids,
                    scale: Some(_),
                    ..
                } => 4 * g.nodes[*ids].len() as u64,
                Op::FlashAttnExt { .. } if !inp.flash_attn => {
                    self.soft_max_attn_scratch(kv, node, u64::from(self.input_layout.n_kv))
                        .3
                }
                _ => 0,
            };
            scratch[r] = scratch[r].max(need);
        }
        for (r, remote) in self.remotes.iter_mut().enumerate() {
            remote.scratch_at = extent[r].next_multiple_of(64);
            if scratch[r] > 0 {
                extent[r] = remote.scratch_at + scratch[r];
            }
        }
        let mut i = 0;
        while i < n {
            if abort() {
                return Err(ExecError::Aborted);
            }
            match sides[i] {
                Side::Cpu => {
                    for s in g.nodes[i].op.sources() {
                        self.to_host(g, s)?;
                    }
                    self.cpu.node(g, &g.nodes[i], model, kv, inp)?;
                    self.on_host[i] = true;
                    self.on_remote[i] = 0;
                    self.ids_on_remote[i] = 0;
                    i += 1;
                }
                Side::Remote(r) => {
                    let end = (i..n).find(|&j| sides[j] != sides[i]).unwrap_or(n);
                    self.prepare_remote(r, extent[r])?;
                    self.run_split(g, model, kv, inp, r, i..end, &last_reader)?;
                    i = end;
                }
            }
        }
        for out in [g.logits, g.embd].into_iter().flatten() {
            self.to_host(g, out)?;
        }
        Ok(())
    }

    fn output(&mut self, g: &Graph, node: NodeId) -> Result<&[f32], ExecError> {
        self.to_host(g, node)?;
        let (at, len) = range(&g.nodes[node]);
        Ok(&self.cpu.arena[at..at + len])
    }
}

/// An RPC executor when some weight of `model` lives on an rpc-server.
pub fn executor_for(model: &Model) -> Option<RpcExecutor> {
    model
        .tensors
        .iter()
        .any(|t| matches!(&t.read().data, TensorData::Device(a) if a.rpc_buffer().is_some()))
        .then(RpcExecutor::default)
}
