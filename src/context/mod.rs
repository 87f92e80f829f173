//! Inference contexts: parameters as upstream resolves them, the KV cache, the decode driver
//! (batch intake, micro-batch split, slot search, graph reuse, outputs) and the results of
//! the last evaluation.

pub mod batch;
mod create;
mod decode;
#[cfg(feature = "fixtures")]
pub mod harness;
pub mod split;
pub mod state;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::graph::backend::{ExecError, Executor, Inputs};
use crate::graph::exec::CpuExecutor;
use crate::graph::params::{Adapters, ArchParams, RopeConfig, RopeOverrides};
use crate::graph::{arch, Graph, GraphShape};
use crate::kv_cache::{KvCache, KvShape, KvType, SeqSet};
use crate::model::adapter::{ControlVector, LoraAdapter};
use crate::model::Model;
use batch::{Batch, RawBatch};

/// Upstream's `GGML_PAD(n_ctx, 256)`.
const CTX_PAD: u32 = 256;

/// The caller's context parameters (`llama_context_params`, the fields the engine uses).
#[derive(Clone, Debug)]
pub struct ContextParams {
    pub n_ctx: u32,
    pub n_batch: u32,
    pub n_ubatch: u32,
    pub n_seq_max: u32,
    pub n_threads: i32,
    pub n_threads_batch: i32,
    /// `llama_pooling_type` (-1 unspecified).
    pub pooling_type: i32,
    /// `llama_attention_type` (-1 unspecified, 0 causal, 1 non-causal).
    pub attention_type: i32,
    /// `llama_flash_attn_type` (-1 auto, 0 disabled, 1 enabled): accepted; attention is
    /// always computed the flash-attention way on the CPU.
    pub flash_attn_type: i32,
    pub rope: RopeOverrides,
    /// ggml type ids of the K and V caches.
    pub type_k: u32,
    pub type_v: u32,
    pub embeddings: bool,
    pub kv_unified: bool,
    pub swa_full: bool,
}

impl Default for ContextParams {
    /// Upstream's `llama_context_default_params` (the fields kept here).
    fn default() -> Self {
        ContextParams {
            n_ctx: 512,
            n_batch: 2048,
            n_ubatch: 512,
            n_seq_max: 1,
            n_threads: 4,
            n_threads_batch: 4,
            pooling_type: -1,
            attention_type: -1,
            flash_attn_type: -1,
            rope: RopeOverrides {
                rope_scaling_type: -1,
                freq_base: 0.0,
                freq_scale: 0.0,
                yarn_ext_factor: -1.0,
                yarn_attn_factor: -1.0,
                yarn_beta_fast: -1.0,
                yarn_beta_slow: -1.0,
                yarn_orig_ctx: 0,
            },
            type_k: 1,
            type_v: 1,
            embeddings: false,
            kv_unified: false,
            swa_full: true,
        }
    }
}

/// Why a context cannot be created.
#[derive(Debug, thiserror::Error)]
pub enum ContextError {
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Unsupported(String),
}

/// Resolved parameters (`llama_cparams`).
#[derive(Clone, Debug)]
pub struct CParams {
    pub n_ctx: u32,
    pub n_ctx_seq: u32,
    pub n_batch: u32,
    pub n_ubatch: u32,
    pub n_seq_max: u32,
    pub n_threads: i32,
    pub n_threads_batch: i32,
    pub pooling_type: i32,
    pub causal_attn: bool,
    pub embeddings: bool,
    pub warmup: bool,
    pub rope: RopeConfig,
    /// `flash_attn_type` is not DISABLED (upstream resolves AUTO to enabled on the CPU).
    pub flash_attn: bool,
}

/// A micro-batch's tokens in its order, and the KV streams they go to.
#[derive(Default, Debug)]
struct UbatchData {
    tokens: Vec<i32>,
    embd: Vec<f32>,
    pos: Vec<i32>,
    seq0: Vec<usize>,
    seqs: Vec<SeqSet>,
    /// (stream, tokens) per group of consecutive tokens.
    groups: Vec<(usize, u32)>,
    /// Tokens per stream over the whole batch (the capacity check).
    per_stream: Vec<u32>,
}

/// Upstream's CPU backend with a threadpool attached: the context's count, at most the
/// pool's (`ggml_graph_compute` warns and caps), and the pool's when the count is not positive
/// (`ggml_graph_plan`).
fn pool_capped(n_threads: i32, pool: Option<i32>) -> i32 {
    match pool {
        Some(p) if n_threads <= 0 => p,
        Some(p) => n_threads.min(p),
        None => n_threads,
    }
}

/// The abort callback: polled between micro-batches and between graph nodes.
pub type AbortFn = Box<dyn FnMut() -> bool + Send>;

/// A graph observer (`llama_context_params.cb_eval`): shown the nodes as they are computed.
pub type EvalObserver = Box<dyn crate::graph::backend::NodeObserver + Send>;

/// Results and reusable state of decoding (behind the context's lock).
pub struct Engine {
    pub cparams: CParams,
    pub kv: KvCache,
    graph: Option<Graph>,
    /// The backend that runs the graphs (see [`crate::graph::backend`]).
    exec: Box<dyn Executor>,
    pub raw: RawBatch,
    batch: Batch,
    slots: Vec<u32>,
    /// The micro-batch's sequences as the recurrent memory places them.
    rs_groups: Vec<crate::kv_cache::RsGroup>,
    out_ids: Vec<usize>,
    split: split::Split,
    /// The current micro-batch's tokens, gathered from the batch (reused buffers).
    ub: UbatchData,
    /// n_outputs × n_vocab.
    pub logits: Vec<f32>,
    /// n_outputs × n_embd.
    pub embd: Vec<f32>,
    /// Batch index → output row (-1: no output).
    pub output_ids: Vec<i32>,
    /// Pooled embeddings per sequence id of the last decode (pooling ≠ NONE): n_embd
    /// values (n_cls_out for RANK); None for sequences that were not in it.
    pub embd_seq: Vec<Option<Vec<f32>>>,
    pub n_outputs: usize,
    pub abort: Option<AbortFn>,
    /// The graph observer (`cb_eval`), when the caller set one.
    pub observer: Option<EvalObserver>,
    /// Graph builds (for tests: reuse must not rebuild).
    pub n_graph_builds: u64,
    /// Tensor data of sequence states saved with `LLAMA_STATE_SEQ_FLAGS_ON_DEVICE`, per
    /// sequence id (upstream keeps them in device buffers).
    pub state_aside: std::collections::HashMap<i32, Vec<u8>>,
    /// LoRA adapters and control vector the graphs compute with (set through
    /// [`Context::set_loras`] and [`Context::set_cvec`], which drop the cached graph).
    adapters: Adapters,
    /// Thread counts of the attached ggml threadpools (single token, batch), which cap
    /// `n_threads` / `n_threads_batch` as in upstream's CPU backend.
    pool_threads: (Option<i32>, Option<i32>),
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("cparams", &self.cparams)
            .field("n_outputs", &self.n_outputs)
            .finish_non_exhaustive()
    }
}

/// An inference context.
#[derive(Debug)]
pub struct Context {
    pub model: Arc<Model>,
    pub hp: ArchParams,
    /// The model was loaded with `vocab_only`: the context has no memory (upstream's
    /// `llama_get_memory` gives NULL) and decode fails after checking the batch.
    pub vocab_only: bool,
    /// The architecture keeps no memory (upstream's `create_memory` gives nullptr: the
    /// diffusion models): every decode runs as upstream's `encode`, `llama_get_memory`
    /// gives NULL, the state holds no memory section.
    pub memoryless: bool,
    /// Hadamard rotation sizes of Q/K and V for a quantized cache (0: none).
    pub kv_rot: (usize, usize),
    /// The model was loaded with `no_alloc`: the context only reports its memory
    /// (`llama_get_memory_breakdown`); decode fails after checking the batch.
    pub dry_run: bool,
    /// Bytes of the KV cache at its full size (also for a dry run, which allocates none).
    pub kv_bytes: u64,
    /// The model rotates by multi-section positions (M-RoPE: upstream's
    /// `n_pos_per_embd() > 1`), so a batch's positions may jump forward.
    pub multi_pos: bool,
    engine: Mutex<Engine>,
    graph_generation: AtomicU64,
}

fn kv_type(id: u32, which: &str) -> Result<KvType, ContextError> {
    use crate::gguf::GgmlType;
    match id {
        0 => Ok(KvType::F32),
        1 => Ok(KvType::F16),
        other => match GgmlType::from_id(other as i32) {
            Some(t) if crate::kernels::cpu::is_kv_cache_type(t) => Ok(KvType::Packed(t)),
            t => Err(ContextError::Unsupported(format!(
                "{which} = {} is not supported by llama-hotswap's KV cache yet (f32, f16, bf16, q8_0, q4_0 and q4_1 are)",
                t.map_or("?", |t| t.name())
            ))),
        },
    }
}

/// Upstream's attention rotation for quantized caches (`attn_rot_k`, `attn_rot_v`; off with
/// `LLAMA_ATTN_ROT_DISABLE=1`, as upstream): with a quantized K and a head size that is a
/// multiple of 64, Q and K are rotated by the Walsh-Hadamard matrix of the largest power of
/// two dividing the head size; with a quantized V (head size a multiple of 64), V and the
/// attention output by the one of size 64. Orthonormal and its own inverse, it spreads
/// outliers before quantization without changing the exact result.
fn kv_rotation(hp: &ArchParams, type_k: KvType, type_v: KvType) -> (usize, usize) {
    let disabled = std::env::var("LLAMA_ATTN_ROT_DISABLE")
        .ok()
        .and_then(|v| v.trim().parse::<i32>().ok())
        .is_some_and(|v| v != 0);
    let quantized = |t: KvType| matches!(t, KvType::Packed(t) if t.block_size() > 1);
    if disabled {
        crate::log_warn!(
            "llama_kv_cache: attention rotation force disabled (LLAMA_ATTN_ROT_DISABLE)"
        );
        return (0, 0);
    }
    let rot_k = if quantized(type_k) && hp.head_k > 0 && hp.head_k % 64 == 0 {
        let mut n = 64;
        while hp.head_k % (n * 2) == 0 {
            n *= 2;
        }
        n
    } else {
        0
    };
    let rot_v = if quantized(type_v) && hp.head_v > 0 && hp.head_v % 64 == 0 {
        64
    } else {
        0
    };
    (rot_k, rot_v)
}

/// Upstream's checks of the cache types against flash attention: a quantized V cache needs
/// it (AUTO turns it on), and with flash attention a quantized type's block size must divide
/// every layer's head size.
/// Logs each tensor of the file that the architecture's graph never reads, once per model,
/// in upstream's words (its loader says so for tensors it skips, e.g. NextN/MTP layers):
/// GGUF-Tool-Suite's sweep reads these lines to leave such tensors out of its benchmarks.
fn log_unused_tensors(model: &Model, graph: &Graph) {
    if model.unused_tensors_logged.swap(true, Ordering::AcqRel) {
        return;
    }
    let mut used = vec![false; model.tensors.len()];
    for w in &graph.weights {
        if let Some(u) = used.get_mut(w.tensor) {
            *u = true;
        }
    }
    for (i, used) in used.iter().enumerate() {
        if !used {
            let t = model.tensors.at(i);
            let nbytes = t.read().layout.nbytes;
            crate::log_warn!(
                "model has unused tensor {} (size = {nbytes} bytes) -- ignoring",
                t.name
            );
        }
    }
}

fn check_kv_types(
    hp: &ArchParams,
    type_k: KvType,
    type_v: KvType,
    flash_attn_type: i32,
) -> Result<(), ContextError> {
    let quantized = |t: KvType| match t {
        KvType::Packed(t) => t.block_size() > 1,
        _ => false,
    };
    if quantized(type_v) && flash_attn_type == 0 {
        return Err(ContextError::Invalid(
            "quantized V cache requires flash_attn to be enabled".into(),
        ));
    }
    if flash_attn_type == 0 {
        return Ok(());
    }
    for (t, head, which) in [(type_k, hp.head_k, "K"), (type_v, hp.head_v, "V")] {
        if let KvType::Packed(ty) = t {
            let block = ty.block_size() as usize;
            if quantized(t) && head % block != 0 {
                return Err(ContextError::Invalid(format!(
                    "{which} cache type {} with block size {block} does not divide n_embd_head_{}={head}",
                    ty.name(),
                    which.to_lowercase()
                )));
            }
        }
    }
    Ok(())
}

impl Context {
    /// The engine state (parameters, memory, outputs).
    pub fn engine(&self) -> MutexGuard<'_, Engine> {
        self.engine.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The model generation the cached graph was built for.
    pub fn graph_generation(&self) -> u64 {
        self.graph_generation.load(Ordering::Acquire)
    }

    /// Whether the cached graph must be rebuilt before reuse (the model changed under it).
    pub fn graph_is_stale(&self) -> bool {
        self.graph_generation() != self.model.generation.load(Ordering::Acquire)
    }

    /// Drops the cached graph if it is stale; returns whether it was.
    pub fn rebuild_graph_if_stale(&self) -> bool {
        let now = self.model.generation.load(Ordering::Acquire);
        let stale = self.graph_generation.swap(now, Ordering::AcqRel) != now;
        if stale {
            self.engine().graph = None;
        }
        stale
    }

    pub fn n_vocab(&self) -> usize {
        self.hp.n_vocab
    }

    /// The thread counts of attached threadpools (None: the context's own count).
    pub fn set_pool_threads(&self, single: Option<i32>, batch: Option<i32>) {
        self.engine().pool_threads = (single, batch);
    }

    /// Upstream's `set_adapters_lora`: the adapters with a non-zero scale, in the order
    /// given; nothing changes (and the graph is kept) when they are the ones already set.
    pub fn set_loras(&self, loras: &[(Arc<LoraAdapter>, f32)]) {
        let want: Vec<(Arc<LoraAdapter>, f32)> =
            loras.iter().filter(|(_, s)| *s != 0.0).cloned().collect();
        let mut e = self.engine();
        let same = want.len() == e.adapters.loras.len()
            && want.iter().all(|(a, s)| {
                e.adapters
                    .loras
                    .iter()
                    .any(|(b, t)| Arc::ptr_eq(a, b) && s == t)
            });
        if !same {
            e.adapters.loras = want;
            e.graph = None;
        }
    }

    /// Upstream's `set_adapter_cvec`: with `data`, the directions of layers 1.. (`n_embd`
    /// values each, layers past the end of `data` keep their previous direction) for layers
    /// `il_start ..= il_end`; without, no layer gets one (the directions are kept). Fails
    /// (false, with a log line) when `n_embd` is not the model's.
    pub fn set_cvec(&self, data: Option<&[f32]>, n_embd: i32, il_start: i32, il_end: i32) -> bool {
        let mut e = self.engine();
        e.graph = None;
        let Some(data) = data else {
            if let Some(c) = e.adapters.cvec.take() {
                e.adapters.cvec = Some(Arc::new(ControlVector {
                    layer_start: -1,
                    layer_end: -1,
                    layers: c.layers.clone(),
                }));
            }
            return true;
        };
        if usize::try_from(n_embd).ok() != Some(self.hp.n_embd) {
            crate::log_error!("llama_adapter_cvec::apply: control vector n_embd does not match model ({n_embd}, model {})", self.hp.n_embd);
            return false;
        }
        let cvec = ControlVector::new(
            e.adapters.cvec.as_deref(),
            data,
            self.hp.n_embd,
            self.hp.n_layer,
            il_start,
            il_end,
        );
        e.adapters.cvec = Some(Arc::new(cvec));
        true
    }
}
