//! The CUDA executor: runs a [`Graph`] on one CUDA device with the kernels of
//! [`crate::kernels::cuda`], over a device arena laid out as the CPU executor's (the graph's
//! arena plan), with the KV cache on the device.
//!
//! Hybrid: a node whose weights live in host memory (the token table, layers left on the CPU,
//! experts kept on the CPU by `tensor_buft_overrides`), and the few ops without a kernel
//! (Hadamard rotations, attention temperature), run on the CPU executor over its host arena.
//! Activations cross where a node's source was last computed on the other side: each node
//! knows whether its values are current on the device and on the host, and a source is
//! copied (its arena range, to the same offsets) only when the side computing a reader lacks
//! it. So the graph splits by the device each weight lives on, as upstream's scheduler does.
//!
//! The KV cache of every layer lives on the device (also for layers whose weights stay on the
//! CPU: their attention runs on the GPU). The host cache keeps the cells' metadata (positions,
//! sequences: the masks are built from it on the host) but not the rows: state save/load and
//! K-shift of a context on CUDA are not supported yet.
//!
//! Reproducible: every kernel sums in one fixed order, so the same inputs give the same logits
//! on every run.

use std::sync::Arc;

use super::backend::{ExecError, Executor, Inputs};
use super::exec::{check_weight, range, trace_enabled, trace_node, CpuExecutor};
use super::*;
use crate::device::cuda::{CudaBuffer, CudaDevice, KernelArg};
use crate::gguf::GgmlType;
use crate::kernels::cpu::ops;
use crate::kernels::cuda::{self as kcuda, CudaKernels};
use crate::kv_cache::{KvBuffer, KvCache};
use crate::model::tensors::TensorState;
use crate::model::Model;
use crate::storage::TensorData;

/// Opt-in switch: contexts on models with CUDA weights compute on the GPU only when this is 1
/// (until the GPU checks have passed, the default stays the CPU executor's clear refusal).
pub const CUDA_COMPUTE_ENV: &str = "LLAMA_HOTSWAP_CUDA_COMPUTE";

/// Whether [`CUDA_COMPUTE_ENV`] is set to 1.
pub fn cuda_compute_enabled() -> bool {
    std::env::var(CUDA_COMPUTE_ENV).is_ok_and(|v| v == "1")
}

fn dev_err(e: impl std::fmt::Display) -> ExecError {
    ExecError::Device(e.to_string())
}

/// A device buffer that grows to the largest size asked for.
#[derive(Debug, Default)]
struct Grow(Option<CudaBuffer>);

impl Grow {
    fn ensure(&mut self, device: &Arc<CudaDevice>, bytes: usize) -> Result<u64, ExecError> {
        let bytes = bytes.max(4);
        if self.0.as_ref().map_or(true, |b| b.len() < bytes) {
            self.0 = None;
            self.0 = Some(device.alloc(bytes + bytes / 4).map_err(dev_err)?);
        }
        Ok(self.0.as_ref().expect("just allocated").device_ptr())
    }

    fn upload(&mut self, device: &Arc<CudaDevice>, bytes: &[u8]) -> Result<u64, ExecError> {
        let ptr = self.ensure(device, bytes.len())?;
        let buf = self.0.as_mut().expect("ensured");
        buf.write(0, bytes).map_err(dev_err)?;
        Ok(ptr)
    }
}

/// One layer's K or V rows on the device.
#[derive(Debug)]
struct KvRows {
    buf: CudaBuffer,
    f16: bool,
}

/// A run's attention mask of one window on the device.
#[derive(Debug, Default)]
struct DevMask {
    n_swa: u32,
    lo: u32,
    width: u32,
    buf: Grow,
    valid: bool,
}

/// A run's RoPE table of one parameter set on the device.
#[derive(Debug, Default)]
struct DevRope {
    key: Vec<u32>,
    buf: Grow,
    valid: bool,
}

/// Where a node runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Gpu,
    Cpu,
}

/// The CUDA executor (see the module doc).
#[derive(Debug)]
pub struct CudaExecutor {
    device: Arc<CudaDevice>,
    label: &'static str,
    kernels: CudaKernels,
    /// Host-side nodes and the host copy of values (same arena plan).
    cpu: CpuExecutor,
    arena: Grow,
    tokens: Grow,
    out_rows: Grow,
    slots: Grow,
    /// The quantized activations of a MUL_MAT on Q4_0/Q4_1/Q8_0 weights.
    xq: Grow,
    kv: Vec<(KvRows, KvRows)>,
    masks: Vec<DevMask>,
    ropes: Vec<DevRope>,
    on_dev: Vec<bool>,
    on_host: Vec<bool>,
    bytes: Vec<u8>,
    floats: Vec<f32>,
    /// A device copy of the token table for a tied output projection (upstream duplicates
    /// it onto the output layer's device likewise): (tensor, model generation, type, bytes).
    tied: Option<(usize, u64, GgmlType, CudaBuffer)>,
}

/// The tensor a tied output projection reads.
const TIED_TABLE: &str = "token_embd.weight";

impl CudaExecutor {
    /// An executor on `device` (its kernels compiled or read from the PTX cache, and loaded).
    pub fn new(device: Arc<CudaDevice>, index: usize) -> Result<CudaExecutor, String> {
        crate::device::cuda::compute_available()?;
        let kernels = CudaKernels::load(&device)?;
        let label: &'static str = Box::leak(format!("CUDA{index}").into_boxed_str());
        Ok(CudaExecutor {
            device,
            label,
            kernels,
            cpu: CpuExecutor::default(),
            arena: Grow::default(),
            tokens: Grow::default(),
            out_rows: Grow::default(),
            slots: Grow::default(),
            xq: Grow::default(),
            kv: Vec::new(),
            masks: Vec::new(),
            ropes: Vec::new(),
            on_dev: Vec::new(),
            on_host: Vec::new(),
            bytes: Vec::new(),
            floats: Vec::new(),
            tied: None,
        })
    }

    /// The device address of a weight on this executor's device, with its type; None when
    /// the weight is not on it.
    fn weight_ptr(&self, st: &TensorState) -> Option<(u64, GgmlType)> {
        match &st.data {
            TensorData::Device(a) => {
                let b = a.cuda_buffer()?;
                Arc::ptr_eq(b.device(), &self.device).then(|| (b.device_ptr(), st.layout.ggml_type))
            }
            _ => None,
        }
    }

    /// Uploads the token table for a MUL_MAT that reads it (a tied output) when the table
    /// lives in host memory, once per model generation (a hot-swap re-uploads it).
    fn prepare_tied(&mut self, g: &Graph, model: &Model) -> Result<(), ExecError> {
        let generation = model.generation.load(std::sync::atomic::Ordering::Acquire);
        for node in &g.nodes {
            let Op::MulMat { w, .. } = &node.op else {
                continue;
            };
            let wr = &g.weights[w.0];
            if wr.name != TIED_TABLE {
                continue;
            }
            let st = model.tensors.at(wr.tensor).read();
            if self.weight_ptr(&st).is_some() || !kcuda::supports(st.layout.ggml_type) {
                continue;
            }
            if self.tied.as_ref().is_some_and(|t| {
                t.0 == wr.tensor && t.1 == generation && t.2 == st.layout.ggml_type
            }) {
                continue;
            }
            self.tied = None;
            let mut raw = vec![0u8; st.layout.nbytes as usize];
            st.read_into(&mut raw)
                .map_err(|e| ExecError::Device(format!("reading {}: {e}", wr.name)))?;
            let mut buf = self.device.alloc(raw.len()).map_err(dev_err)?;
            buf.write(0, &raw).map_err(dev_err)?;
            self.tied = Some((wr.tensor, generation, st.layout.ggml_type, buf));
        }
        Ok(())
    }

    /// The tied copy of a MUL_MAT's weight, when there is one.
    fn tied_of(&self, g: &Graph, op: &Op) -> Option<(u64, GgmlType)> {
        let Op::MulMat { w, .. } = op else {
            return None;
        };
        let t = self.tied.as_ref()?;
        (g.weights[w.0].tensor == t.0).then(|| (t.3.device_ptr(), t.2))
    }

    /// Where node `node` runs: on the GPU when every weight it reads is on this device (and
    /// the op has a kernel), on the CPU when every weight is in host memory.
    fn side(&self, g: &Graph, node: &Node, model: &Model) -> Result<Side, ExecError> {
        if self.tied_of(g, &node.op).is_some() {
            return Ok(Side::Gpu);
        }
        let (mut dev, mut host) = (0, 0);
        for w in node.op.weights() {
            let wr = &g.weights[w.0];
            let st = model.tensors.at(wr.tensor).read();
            if self.weight_ptr(&st).is_some() && kcuda::supports(st.layout.ggml_type) {
                dev += 1;
            } else if check_weight(&st, &wr.name).is_ok() {
                host += 1;
            } else {
                return Err(ExecError::UnsupportedType {
                    name: wr.name.clone(),
                    ty: st.layout.ggml_type,
                    backend: self.label,
                });
            }
        }
        // ops of the newer architectures without a CUDA kernel yet (MLA's compressed cache,
        // attention sinks): refused on the GPU, the rest run on the CPU
        if let Op::FlashAttnExt {
            v_in_k,
            sinks,
            max_bias,
            sel,
            ..
        } = &node.op
        {
            if *v_in_k || sinks.is_some() || *max_bias > 0.0 || sel.is_some() {
                return Err(ExecError::UnsupportedOp {
                    backend: self.label,
                    op: node.name.to_string(),
                    why: "attention over a compressed (MLA) cache, with sinks, with ALiBi or over a sparse selection has no CUDA kernel yet".into(),
                });
            }
        }
        if let Op::KpoolIndexSet { .. } = &node.op {
            return Err(ExecError::UnsupportedOp {
                backend: self.label,
                op: node.name.to_string(),
                why: "GLM5-Next's k-pool indexer cache has no CUDA kernel yet".into(),
            });
        }
        if let Op::RopeBack { .. }
        | Op::Dsv4StateSet { .. }
        | Op::Dsv4Compress { .. }
        | Op::FlashAttnComp { .. }
        | Op::Dsv4LidTopK { .. } = &node.op
        {
            return Err(ExecError::UnsupportedOp {
                backend: self.label,
                op: node.name.to_string(),
                why: "DeepSeek-V4's compressed attention has no CUDA kernel yet".into(),
            });
        }
        if let Op::LightningIndexer { .. } | Op::MsaSelect { .. } = &node.op {
            return Err(ExecError::UnsupportedOp {
                backend: self.label,
                op: node.name.to_string(),
                why: "the sparse attention's lightning indexer has no CUDA kernel yet".into(),
            });
        }
        let kernel = match &node.op {
            Op::Hadamard { .. } | Op::AttnTempScale { .. } | Op::InputEmbd => false,
            // adapters' factors stay in host memory: their products run on the CPU
            Op::MulMatAdapter { .. } | Op::MulMatIdAdapter { .. } => false,
            Op::GetRowsAdapter { .. } | Op::AddAdapter { .. } => false,
            Op::MulRep { .. } | Op::SsmConv { .. } | Op::SsmScan { .. } => false,
            Op::Softplus { .. } | Op::RepeatHeads { .. } | Op::GatedDeltaNet { .. } => false,
            Op::LightningAttn { .. } => false,
            Op::Sqrt { .. } | Op::Abs { .. } | Op::Sgn { .. } | Op::GetRowsNgram { .. } => false,
            Op::SumRows { .. } | Op::HcPre { .. } | Op::HcMix { .. } | Op::HcPost { .. } => false,
            Op::Gelu { .. }
            | Op::Relu { .. }
            | Op::Sqr { .. }
            | Op::Clamp { .. }
            | Op::Div { .. }
            | Op::Repeat { .. }
            | Op::RepeatEach { .. }
            | Op::GetRowsPos { .. } => false,
            Op::Sigmoid { .. }
            | Op::ViewHeads { .. }
            | Op::ConcatHeads { .. }
            | Op::MulMatHeads { .. }
            | Op::GroupMask { .. }
            | Op::AddId { .. }
            | Op::MulSlots { .. }
            | Op::SumSlots { .. }
            | Op::Glu {
                kind:
                    GluKind::SwigluOai
                    | GluKind::SwigluLimit(_)
                    | GluKind::Situ(..)
                    | GluKind::Reglu
                    | GluKind::SwigluClamp(_),
                ..
            } => false,
            Op::TopK { src, .. } => g.nodes[*src].ne0 <= 1024,
            // one value per row broadcast along the row: no CUDA kernel yet
            Op::Mul {
                a,
                b: Operand::Node(bn),
            } => !(g.nodes[*bn].ne0 == 1 && g.nodes[*a].ne0 > 1),
            Op::MulMat { x, .. } | Op::MulMatId { x, .. } => g.nodes[*x].ne0 % 32 == 0,
            _ => true,
        };
        let gpu_only = matches!(node.op, Op::SetRows { .. } | Op::FlashAttnExt { .. });
        match (dev, host) {
            (0, 0) if gpu_only || kernel => Ok(Side::Gpu),
            (0, 0) => Ok(Side::Cpu),
            (_, 0) if kernel => Ok(Side::Gpu),
            (0, _) => Ok(Side::Cpu),
            _ => Err(ExecError::UnsupportedOp {
                backend: self.label,
                op: node.name.to_string(),
                why: "its weights are split between host memory and the GPU, or it has no CUDA kernel for weights on the GPU".into(),
            }),
        }
    }

    /// The device KV rows, (re)made when the cache's shape changed.
    fn ensure_kv(&mut self, kv: &KvCache) -> Result<(), ExecError> {
        let same =
            self.kv.len() == kv.layers.len()
                && self.kv.iter().zip(&kv.layers).all(|((k, v), l)| {
                    k.buf.len() == kv_bytes(&l.k) && v.buf.len() == kv_bytes(&l.v)
                });
        if same {
            return Ok(());
        }
        self.kv.clear();
        for (il, l) in kv.layers.iter().enumerate() {
            let mut rows = Vec::with_capacity(2);
            for b in [&l.k, &l.v] {
                let f16 = match b {
                    KvBuffer::F32(_) => false,
                    KvBuffer::F16(_) => true,
                    KvBuffer::Packed { ty, .. } => {
                        return Err(ExecError::UnsupportedOp {
                            backend: self.label,
                            op: format!("the KV cache of layer {il}"),
                            why: format!("a {ty} cache has no CUDA kernels yet (F16 and F32 do)"),
                        })
                    }
                };
                let buf = self.device.alloc(kv_bytes(b)).map_err(dev_err)?;
                rows.push(KvRows { buf, f16 });
            }
            let v = rows.pop().expect("two");
            let k = rows.pop().expect("two");
            self.kv.push((k, v));
        }
        Ok(())
    }

    fn arena_ptr(&self, g: &Graph, n: NodeId) -> u64 {
        self.arena.0.as_ref().expect("arena allocated").device_ptr() + 4 * g.nodes[n].offset as u64
    }

    /// Makes node `n`'s values current on the device.
    fn to_device(&mut self, g: &Graph, n: NodeId) -> Result<(), ExecError> {
        if self.on_dev[n] {
            return Ok(());
        }
        let (at, len) = range(&g.nodes[n]);
        let buf = self.arena.0.as_mut().expect("arena allocated");
        buf.write(4 * at, kcuda::f32_bytes(&self.cpu.arena[at..at + len]))
            .map_err(dev_err)?;
        self.on_dev[n] = true;
        Ok(())
    }

    /// Makes node `n`'s values current in the host arena.
    fn to_host(&mut self, g: &Graph, n: NodeId) -> Result<(), ExecError> {
        if self.on_host[n] {
            return Ok(());
        }
        let (at, len) = range(&g.nodes[n]);
        let buf = self.arena.0.as_ref().expect("arena allocated");
        buf.read(
            4 * at,
            kcuda::f32_bytes_mut(&mut self.cpu.arena[at..at + len]),
        )
        .map_err(dev_err)?;
        self.on_host[n] = true;
        Ok(())
    }

    fn launch(
        &self,
        name: &'static str,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        args: &[KernelArg],
    ) -> Result<(), ExecError> {
        self.kernels
            .launch(name, grid, block, args)
            .map_err(ExecError::Device)
    }

    /// The mask of window `n_swa` for this run on the device: (address, first row, width).
    fn mask(
        &mut self,
        kv: &KvCache,
        inp: &Inputs,
        n_tokens: usize,
        n_swa: u32,
    ) -> Result<(u64, u32, u32), ExecError> {
        if let Some(m) = self.masks.iter().find(|m| m.valid && m.n_swa == n_swa) {
            return Ok((
                m.buf.0.as_ref().expect("uploaded").device_ptr(),
                m.lo,
                m.width,
            ));
        }
        let (lo, hi) = (0..n_tokens).fold((u32::MAX, 0u32), |(lo, hi), t| {
            let r = kv.rows_of(inp.seq[t]);
            (lo.min(r.start), hi.max(r.end))
        });
        let lo = lo.min(hi);
        let width = hi - lo;
        self.bytes.clear();
        for t in 0..n_tokens {
            self.bytes.extend(
                (lo..hi).map(|j| kv.visible(j, inp.seq[t], inp.pos[t], inp.causal, n_swa) as u8),
            );
        }
        let at = match self.masks.iter().position(|m| !m.valid) {
            Some(at) => at,
            None => {
                self.masks.push(DevMask::default());
                self.masks.len() - 1
            }
        };
        let device = Arc::clone(&self.device);
        let m = &mut self.masks[at];
        let ptr = m.buf.upload(&device, &self.bytes)?;
        (m.n_swa, m.lo, m.width, m.valid) = (n_swa, lo, width, true);
        Ok((ptr, lo, width))
    }

    /// The RoPE table (cos, sin per pair, per token) of this node's parameters for this run,
    /// computed on the host as the CPU executor computes it.
    fn rope_table(
        &mut self,
        g: &Graph,
        model: &Model,
        inp: &Inputs,
        n_tokens: usize,
        params: &RopeParams,
        freq_factors: Option<WeightId>,
    ) -> Result<u64, ExecError> {
        let key = vec![
            params.n_rot as u32,
            match params.mode {
                RopeMode::Norm => 0,
                RopeMode::Neox => 2,
                // the sections shape the host-computed table
                RopeMode::Mrope {
                    sections: [a, b, c, d],
                } => 8 + (a << 8) + (b << 14) + (c << 20) + (d << 26),
            },
            params.n_ctx_orig,
            params.freq_base.to_bits(),
            params.freq_scale.to_bits(),
            params.ext_factor.to_bits(),
            params.attn_factor.to_bits(),
            params.beta_fast.to_bits(),
            params.beta_slow.to_bits(),
            freq_factors.map_or(u32::MAX, |w| w.0 as u32),
        ];
        if let Some(r) = self.ropes.iter().find(|r| r.valid && r.key == key) {
            return Ok(r.buf.0.as_ref().expect("uploaded").device_ptr());
        }
        let ff: Option<Vec<f32>> = match freq_factors {
            Some(w) => {
                let wr = &g.weights[w.0];
                let st = model.tensors.at(wr.tensor).read();
                let mut raw = vec![0u8; st.layout.nbytes as usize];
                st.read_into(&mut raw)
                    .map_err(|e| ExecError::Device(format!("reading {}: {e}", wr.name)))?;
                let mut v = vec![0.0f32; (wr.ne[0] * wr.ne[1]) as usize];
                super::kernel_api::dequantize_row(st.layout.ggml_type, &raw, &mut v);
                Some(v)
            }
            None => None,
        };
        let n_rot = params.n_rot;
        self.floats.clear();
        self.floats.resize(n_tokens * n_rot, 0.0);
        for t in 0..n_tokens {
            ops::rope_cache(
                params,
                inp.pos[t] as f32,
                ff.as_deref(),
                &mut self.floats[t * n_rot..(t + 1) * n_rot],
            );
        }
        let at = match self.ropes.iter().position(|r| !r.valid) {
            Some(at) => at,
            None => {
                self.ropes.push(DevRope::default());
                self.ropes.len() - 1
            }
        };
        let device = Arc::clone(&self.device);
        let r = &mut self.ropes[at];
        let ptr = r.buf.upload(&device, kcuda::f32_bytes(&self.floats))?;
        (r.key, r.valid) = (key, true);
        Ok(ptr)
    }

    /// A weight on this device: (address, type, bytes per row of ne0).
    fn dev_weight(
        &self,
        g: &Graph,
        model: &Model,
        w: WeightId,
    ) -> Result<(u64, GgmlType, u64), ExecError> {
        let wr = &g.weights[w.0];
        if let Some(t) = self.tied.as_ref().filter(|t| t.0 == wr.tensor) {
            return Ok((t.3.device_ptr(), t.2, t.2.row_size(wr.ne[0]).unwrap_or(0)));
        }
        let st = model.tensors.at(wr.tensor).read();
        let (ptr, ty) = self
            .weight_ptr(&st)
            .ok_or_else(|| ExecError::UnsupportedOp {
                backend: self.label,
                op: wr.name.clone(),
                why: "the weight is not on this device".into(),
            })?;
        let row = ty.row_size(wr.ne[0]).unwrap_or(0);
        Ok((ptr, ty, row))
    }

    #[allow(clippy::too_many_lines)]
    fn gpu_node(
        &mut self,
        g: &Graph,
        i: NodeId,
        model: &Model,
        kv: &KvCache,
        inp: &Inputs,
    ) -> Result<(), ExecError> {
        use KernelArg::{Ptr, F32, I32};
        let node = &g.nodes[i];
        let (ne0, ne1) = (node.ne0, node.ne1);
        let n = (ne0 * ne1) as i64;
        let dst = self.arena_ptr(g, i);
        let blocks = |n: i64| (((n + 255) / 256) as u32, 1, 1);
        let base = self.arena_ptr(g, 0) - 4 * g.nodes[0].offset as u64;
        let a = |s: NodeId| base + 4 * g.nodes[s].offset as u64;
        match &node.op {
            Op::Sigmoid { .. }
            | Op::ViewHeads { .. }
            | Op::ConcatHeads { .. }
            | Op::MulMatHeads { .. }
            | Op::GroupMask { .. }
            | Op::MulSlots { .. }
            | Op::SumSlots { .. }
            | Op::AddId { .. }
            | Op::MulRep { .. }
            | Op::SsmConv { .. }
            | Op::SsmScan { .. }
            | Op::LightningIndexer { .. }
            | Op::MsaSelect { .. }
            | Op::RopeBack { .. }
            | Op::Dsv4StateSet { .. }
            | Op::KpoolIndexSet { .. }
            | Op::Dsv4Compress { .. }
            | Op::FlashAttnComp { .. }
            | Op::Dsv4LidTopK { .. }
            | Op::Softplus { .. }
            | Op::Sqrt { .. }
            | Op::Abs { .. }
            | Op::Sgn { .. }
            | Op::GetRowsNgram { .. }
            | Op::SumRows { .. }
            | Op::HcPre { .. }
            | Op::HcMix { .. }
            | Op::HcPost { .. }
            | Op::RepeatHeads { .. }
            | Op::GatedDeltaNet { .. }
            | Op::LightningAttn { .. } => {
                // `side` sends these to the CPU
                return Err(ExecError::UnsupportedOp {
                    backend: self.label,
                    op: node.name.to_string(),
                    why: "no CUDA kernel yet".into(),
                });
            }
            Op::GetRowsTokens { table } => {
                let (w, ty, row) = self.dev_weight(g, model, *table)?;
                let device = Arc::clone(&self.device);
                let ids = self.tokens.upload(&device, kcuda::i32_bytes(inp.tokens))?;
                self.launch(
                    "k_get_rows",
                    (ne1 as u32, 1, 1),
                    (256, 1, 1),
                    &[
                        Ptr(w),
                        I32(ty.id() as i32),
                        Ptr(row),
                        Ptr(ids),
                        Ptr(dst),
                        I32(ne0 as i32),
                    ],
                )?;
            }
            Op::View { src, offset } => {
                let sn = &g.nodes[*src];
                self.launch(
                    "k_copy_rows",
                    (ne1 as u32, 1, 1),
                    (256, 1, 1),
                    &[
                        Ptr(a(*src)),
                        I32(sn.ne0 as i32),
                        I32(*offset as i32),
                        Ptr(0),
                        Ptr(dst),
                        I32(ne0 as i32),
                    ],
                )?;
            }
            Op::GetRowsOut { src } => {
                let rows: Vec<i32> = inp.out_ids.iter().map(|&t| t as i32).collect();
                let device = Arc::clone(&self.device);
                let rp = self.out_rows.upload(&device, kcuda::i32_bytes(&rows))?;
                self.launch(
                    "k_copy_rows",
                    (ne1 as u32, 1, 1),
                    (256, 1, 1),
                    &[
                        Ptr(a(*src)),
                        I32(ne0 as i32),
                        I32(0),
                        Ptr(rp),
                        Ptr(dst),
                        I32(ne0 as i32),
                    ],
                )?;
            }
            Op::RmsNorm { src, eps } | Op::Norm { src, eps } => {
                let rms = matches!(node.op, Op::RmsNorm { .. }) as i32;
                self.launch(
                    "k_norm",
                    (ne1 as u32, 1, 1),
                    (256, 1, 1),
                    &[Ptr(a(*src)), Ptr(dst), I32(ne0 as i32), F32(*eps), I32(rms)],
                )?;
            }
            Op::Mul { a: x, b } | Op::Add { a: x, b } => {
                let op = matches!(node.op, Op::Mul { .. }) as i32;
                let (bp, bty, blen) = match b {
                    // the same shape: elementwise; else the first row of b, broadcast
                    Operand::Node(bn) if g.nodes[*bn].len() == n as usize => (a(*bn), 0, n as i32),
                    Operand::Node(bn) => (a(*bn), 0, g.nodes[*bn].ne0 as i32),
                    Operand::Weight(w) => {
                        let (p, ty, _) = self.dev_weight(g, model, *w)?;
                        let wr = &g.weights[w.0];
                        (
                            p,
                            ty.id() as i32,
                            (wr.ne[0] * wr.ne[1] * wr.ne[2] * wr.ne[3]) as i32,
                        )
                    }
                };
                self.launch(
                    "k_binary",
                    blocks(n),
                    (256, 1, 1),
                    &[
                        Ptr(a(*x)),
                        Ptr(bp),
                        I32(bty),
                        I32(blen),
                        Ptr(dst),
                        Ptr(n as u64),
                        I32(op),
                    ],
                )?;
            }
            Op::Scale { src, s } => self.launch(
                "k_unary",
                blocks(n),
                (256, 1, 1),
                &[Ptr(a(*src)), Ptr(dst), Ptr(n as u64), I32(0), F32(*s)],
            )?,
            Op::Silu { src } => self.launch(
                "k_unary",
                blocks(n),
                (256, 1, 1),
                &[Ptr(a(*src)), Ptr(dst), Ptr(n as u64), I32(1), F32(0.0)],
            )?,
            Op::Tanh { src } => self.launch(
                "k_unary",
                blocks(n),
                (256, 1, 1),
                &[Ptr(a(*src)), Ptr(dst), Ptr(n as u64), I32(2), F32(0.0)],
            )?,
            Op::Glu { gate, up, kind } => {
                let k = match kind {
                    GluKind::Swiglu => 0,
                    GluKind::Geglu => 1,
                    GluKind::SwigluOai
                    | GluKind::SwigluLimit(_)
                    | GluKind::Situ(..)
                    | GluKind::Reglu
                    | GluKind::SwigluClamp(_) => {
                        return Err(ExecError::UnsupportedOp {
                            backend: self.label,
                            op: format!("GLU ({kind:?})"),
                            why: "no CUDA kernel yet".into(),
                        })
                    }
                };
                self.launch(
                    "k_glu",
                    blocks(n),
                    (256, 1, 1),
                    &[Ptr(a(*gate)), Ptr(a(*up)), Ptr(dst), Ptr(n as u64), I32(k)],
                )?;
            }
            Op::MulMat { w, x } => {
                let xn = &g.nodes[*x];
                self.mul_mat(g, model, *w, a(*x), (xn.ne0, xn.ne1), dst, ne1, None)?;
            }
            Op::MulMatId {
                w,
                x,
                ids,
                n_used,
                scale,
            } => {
                let xn = &g.nodes[*x];
                let t_count = g.nodes[*ids].ne1;
                let scale_ptr = match scale {
                    Some(s) => {
                        let (p, ty, _) = self.dev_weight(g, model, *s)?;
                        if ty != GgmlType::F32 {
                            return Err(ExecError::UnsupportedOp {
                                backend: self.label,
                                op: "MUL_MAT_ID".into(),
                                why: format!("expert scales of type {ty}"),
                            });
                        }
                        p
                    }
                    None => 0,
                };
                let id = (a(*ids), *n_used, xn.ne1 == t_count, scale_ptr);
                self.mul_mat(g, model, *w, a(*x), (xn.ne0, xn.ne1), dst, ne1, Some(id))?;
            }
            Op::Rope {
                src,
                head_dim,
                params,
                freq_factors,
            } => {
                let table = self.rope_table(g, model, inp, ne1, params, *freq_factors)?;
                let mode = match params.mode {
                    RopeMode::Norm => 0,
                    // M-RoPE's text path pairs as NEOX (its table holds the sections)
                    RopeMode::Neox | RopeMode::Mrope { .. } => 2,
                };
                self.launch(
                    "k_rope",
                    (ne1 as u32, 1, 1),
                    (128, 1, 1),
                    &[
                        Ptr(a(*src)),
                        Ptr(dst),
                        Ptr(table),
                        I32(params.n_rot as i32),
                        I32(*head_dim as i32),
                        I32(ne0 as i32),
                        I32(mode),
                    ],
                )?;
            }
            Op::SetRows { src, layer, v } => {
                let sn = &g.nodes[*src];
                let slots: Vec<i32> = inp.slots.iter().map(|&s| s as i32).collect();
                let device = Arc::clone(&self.device);
                let sp = self.slots.upload(&device, kcuda::i32_bytes(&slots))?;
                let rows = if *v {
                    &self.kv[*layer].1
                } else {
                    &self.kv[*layer].0
                };
                self.launch(
                    "k_set_rows",
                    (sn.ne1 as u32, 1, 1),
                    (256, 1, 1),
                    &[
                        Ptr(a(*src)),
                        I32(sn.ne0 as i32),
                        Ptr(sp),
                        Ptr(rows.buf.device_ptr()),
                        I32(rows.f16 as i32),
                    ],
                )?;
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
                if *dk > 256 || *dv > 256 || *n_head_kv == 0 || n_head % n_head_kv != 0 {
                    return Err(ExecError::UnsupportedOp {
                        backend: self.label,
                        op: "FLASH_ATTN_EXT".into(),
                        why: format!("head sizes {dk}/{dv}, {n_head}/{n_head_kv} heads"),
                    });
                }
                let n_tokens = g.nodes[*q].ne1;
                let (mp, lo, width) = self.mask(kv, inp, n_tokens, *n_swa)?;
                let l = &kv.layers[*layer];
                let (k, v) = &self.kv[*layer];
                // the CPU engine's (upstream's) roundings: with flash attention an F32 cache is
                // cast to F16; below a tile of queries the one-row kernel takes Q in F16 and
                // accumulates V in F16 (the tiled kernel keeps Q and the sums in f32); without
                // it, matrix products with Q and the probabilities in the cache's type
                let flags = match (inp.flash_attn, n_tokens < ops::TILE_Q) {
                    (false, _) => 8,
                    (true, false) => 2,
                    (true, true) => 1 | 2 | 4,
                };
                self.launch(
                    "k_flash_attn",
                    (*n_head as u32, n_tokens as u32, 1),
                    (32, 1, 1),
                    &[
                        Ptr(a(*q)),
                        Ptr(k.buf.device_ptr()),
                        Ptr(v.buf.device_ptr()),
                        I32(k.f16 as i32),
                        I32(v.f16 as i32),
                        Ptr(mp),
                        I32(lo as i32),
                        I32(width as i32),
                        Ptr(dst),
                        I32(*n_head as i32),
                        I32(*n_head_kv as i32),
                        I32(*dk as i32),
                        I32(*dv as i32),
                        I32(l.n_embd_k as i32),
                        I32(l.n_embd_v as i32),
                        F32(*scale),
                        F32(*softcap),
                        I32(flags),
                    ],
                )?;
            }
            Op::SoftMax { src } => self.launch(
                "k_soft_max",
                (ne1.div_ceil(64) as u32, 1, 1),
                (64, 1, 1),
                &[Ptr(a(*src)), Ptr(dst), I32(ne0 as i32), I32(ne1 as i32)],
            )?,
            Op::TopK { src, k } => self.launch(
                "k_top_k",
                (ne1.div_ceil(64) as u32, 1, 1),
                (64, 1, 1),
                &[
                    Ptr(a(*src)),
                    Ptr(dst),
                    I32(g.nodes[*src].ne0 as i32),
                    I32(*k as i32),
                    I32(ne1 as i32),
                ],
            )?,
            Op::GetRowsIds { src, ids } => self.launch(
                "k_get_rows_ids",
                blocks(n),
                (256, 1, 1),
                &[
                    Ptr(a(*src)),
                    I32(g.nodes[*src].ne0 as i32),
                    Ptr(a(*ids)),
                    Ptr(dst),
                    I32(ne0 as i32),
                    I32(ne1 as i32),
                ],
            )?,
            Op::DivSumRows { src } => self.launch(
                "k_div_sum_rows",
                (ne1.div_ceil(64) as u32, 1, 1),
                (64, 1, 1),
                &[Ptr(a(*src)), Ptr(dst), I32(ne0 as i32), I32(ne1 as i32)],
            )?,
            Op::WeightedSum {
                src,
                weights,
                n_used,
            } => self.launch(
                "k_weighted_sum",
                blocks(n),
                (256, 1, 1),
                &[
                    Ptr(a(*src)),
                    Ptr(a(*weights)),
                    Ptr(dst),
                    I32(ne0 as i32),
                    I32(*n_used as i32),
                    I32(ne1 as i32),
                ],
            )?,
            Op::InputEmbd
            | Op::Hadamard { .. }
            | Op::AttnTempScale { .. }
            | Op::MulMatAdapter { .. }
            | Op::MulMatIdAdapter { .. }
            | Op::GetRowsAdapter { .. }
            | Op::AddAdapter { .. }
            | Op::Gelu { .. }
            | Op::Relu { .. }
            | Op::Sqr { .. }
            | Op::Clamp { .. }
            | Op::Div { .. }
            | Op::Repeat { .. }
            | Op::RepeatEach { .. }
            | Op::GetRowsPos { .. } => {
                return Err(ExecError::UnsupportedOp {
                    backend: self.label,
                    op: node.name.to_string(),
                    why: "no CUDA kernel (runs on the CPU)".into(),
                })
            }
        }
        Ok(())
    }

    /// MUL_MAT (ids None) or MUL_MAT_ID (ids: (ids node, n_used, x broadcast, scale or 0)):
    /// f32 activations `x` of `(k, m)` (m rows of k), one warp per weight row and 8 (token or
    /// slot) rows. For quantized weights the activations are first quantized to Q8_0, Q8_1 or
    /// Q8_K, the same bytes as the CPU engine's vec_dot type, and dotted per block in
    /// integers, so both executors see the same rounding.
    #[allow(clippy::too_many_arguments)]
    fn mul_mat(
        &mut self,
        g: &Graph,
        model: &Model,
        w: WeightId,
        x: u64,
        (k, m): (usize, usize),
        dst: u64,
        n_pairs: usize,
        ids: Option<(u64, usize, bool, u64)>,
    ) -> Result<(), ExecError> {
        use KernelArg::{Ptr, I32};
        let (wp, ty, row_bytes) = self.dev_weight(g, model, w)?;
        let n_rows = g.weights[w.0].ne[1] as usize;
        if !kcuda::supports(ty) {
            return Err(ExecError::UnsupportedType {
                name: g.weights[w.0].name.clone(),
                ty,
                backend: self.label,
            });
        }
        let (idp, n_used, bcast, scale) = ids.unwrap_or((0, 1, false, 0));
        let expert_bytes = row_bytes * n_rows as u64;
        let xq = match kcuda::activation_blocks(ty) {
            Some((kind, values, block_bytes)) => {
                let n_blocks = m * (k / values);
                let device = Arc::clone(&self.device);
                let xq = self.xq.ensure(&device, n_blocks * block_bytes)?;
                self.launch(
                    "k_quantize_q8",
                    (n_blocks.div_ceil(128) as u32, 1, 1),
                    (128, 1, 1),
                    &[Ptr(x), Ptr(xq), Ptr(n_blocks as u64), I32(kind)],
                )?;
                xq
            }
            None => 0,
        };
        self.launch(
            "k_mul_mat",
            (n_rows.div_ceil(4) as u32, n_pairs.div_ceil(8) as u32, 1),
            (32, 4, 1),
            &[
                Ptr(wp),
                I32(ty.id() as i32),
                Ptr(row_bytes),
                Ptr(expert_bytes),
                I32(n_rows as i32),
                I32(k as i32),
                Ptr(x),
                Ptr(xq),
                Ptr(dst),
                I32(n_pairs as i32),
                Ptr(idp),
                I32(n_used as i32),
                I32(bcast as i32),
                Ptr(scale),
            ],
        )
    }
}

/// Bytes of one layer's K or V rows on the device.
fn kv_bytes(b: &KvBuffer) -> usize {
    match b {
        KvBuffer::F32(v) => 4 * v.len(),
        KvBuffer::F16(v) => 2 * v.len(),
        KvBuffer::Packed { data, .. } => data.len(),
    }
}

impl Executor for CudaExecutor {
    fn name(&self) -> &'static str {
        self.label
    }

    fn supports_weight(&self, st: &TensorState, name: &str) -> Result<(), ExecError> {
        if self.weight_ptr(st).is_some() {
            return if kcuda::supports(st.layout.ggml_type) {
                Ok(())
            } else {
                Err(ExecError::UnsupportedType {
                    name: name.to_string(),
                    ty: st.layout.ggml_type,
                    backend: self.label,
                })
            };
        }
        check_weight(st, name).map_err(|e| match e {
            ExecError::NotOnHost(n) => ExecError::UnsupportedOp {
                backend: self.label,
                op: format!("tensor '{n}'"),
                why: "it lives on another CUDA device or is split by rows across GPUs (one GPU per context for now)".into(),
            },
            e => e,
        })
    }

    fn supports_op(&self, g: &Graph, op: &Op, model: &Model) -> bool {
        let node = Node {
            op: op.clone(),
            ne0: 0,
            ne1: 0,
            offset: 0,
            name: "op",
            shown: Default::default(),
        };
        self.side(g, &node, model).is_ok()
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
        self.cpu.begin_run(g);
        let device = Arc::clone(&self.device);
        self.arena.ensure(&device, 4 * g.arena_len)?;
        self.ensure_kv(kv)?;
        self.prepare_tied(g, model)?;
        for m in &mut self.masks {
            m.valid = false;
        }
        for r in &mut self.ropes {
            r.valid = false;
        }
        let n = g.nodes.len();
        self.on_dev.clear();
        self.on_dev.resize(n, false);
        self.on_host.clear();
        self.on_host.resize(n, false);
        let trace = trace_enabled();
        for (i, node) in g.nodes.iter().enumerate() {
            if i % 16 == 0 && abort() {
                return Err(ExecError::Aborted);
            }
            match self.side(g, node, model)? {
                Side::Gpu => {
                    for s in node.op.sources() {
                        self.to_device(g, s)?;
                    }
                    self.gpu_node(g, i, model, kv, inp)?;
                    self.on_dev[i] = true;
                    self.on_host[i] = false;
                }
                Side::Cpu => {
                    for s in node.op.sources() {
                        self.to_host(g, s)?;
                    }
                    self.cpu.node(g, node, model, kv, inp)?;
                    self.on_host[i] = true;
                    self.on_dev[i] = false;
                }
            }
            if trace {
                self.to_host(g, i)?;
                let (at, len) = range(node);
                trace_node(self.label, i, node, &self.cpu.arena[at..at + len]);
            }
        }
        // a kernel's fault shows here, not at a later decode
        self.device.synchronize().map_err(dev_err)
    }

    fn output(&mut self, g: &Graph, node: NodeId) -> Result<&[f32], ExecError> {
        self.to_host(g, node)?;
        let (at, len) = range(&g.nodes[node]);
        Ok(&self.cpu.arena[at..at + len])
    }
}

/// The executor for a context on `model`: None when no weight lives on a CUDA device (the CPU
/// executor runs it) or when CUDA compute is not switched on ([`CUDA_COMPUTE_ENV`]; the CPU
/// executor then refuses the model with its clear line); an error when the CUDA executor
/// cannot be made (no NVRTC, weights on several GPUs, ...).
pub fn executor_for(model: &Model) -> Result<Option<CudaExecutor>, String> {
    if !cuda_compute_enabled() {
        return Ok(None);
    }
    let mut found: Option<(usize, Arc<CudaDevice>)> = None;
    for t in model.tensors.iter() {
        let st = t.read();
        let allocs: Vec<&crate::device::DeviceAllocation> = match &st.data {
            TensorData::Device(a) => vec![a],
            TensorData::RowSplit { pieces, .. } => pieces.iter().map(|p| &p.alloc).collect(),
            _ => Vec::new(),
        };
        for a in allocs {
            let Some(b) = a.cuda_buffer() else { continue };
            match &found {
                Some((_, d)) if !Arc::ptr_eq(d, b.device()) => {
                    return Err(format!(
                        "tensor '{}' is on a second CUDA device: the CUDA executor runs one GPU per context for now",
                        t.name
                    ))
                }
                Some(_) => {}
                None => found = Some((a.device_index(), Arc::clone(b.device()))),
            }
        }
    }
    let Some((_, device)) = found else {
        return Ok(None);
    };
    let ordinal = device.info().ordinal as usize;
    CudaExecutor::new(device, ordinal).map(Some)
}
