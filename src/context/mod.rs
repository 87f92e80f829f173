//! Inference contexts: parameters as upstream resolves them, the KV cache, the decode driver
//! (batch intake, micro-batch split, slot search, graph reuse, outputs) and the results of
//! the last evaluation.

pub mod batch;
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
    /// Creates a context: resolves the parameters as upstream, checks that the engine can
    /// run the model (architecture, tensor types, tensors in host memory) and allocates the
    /// KV cache.
    /// A `vocab_only` model gets a context without memory, as upstream's (which creates no
    /// backend and no KV cache for it).
    pub fn new(model: Arc<Model>, p: &ContextParams) -> Result<Context, ContextError> {
        let vocab_only = model.devices.is_none();
        if vocab_only {
            return Self::new_vocab_only(model, p);
        }
        for (what, n) in [
            ("n_threads", p.n_threads),
            ("n_threads_batch", p.n_threads_batch),
        ] {
            // upstream starts that many threads (its CPU build hangs or dies on 99999): ggml's
            // GGML_MAX_N_THREADS bounds what a context may ask for
            if n > crate::kernels::cpu::MAX_THREADS as i32 {
                let msg = format!(
                    "{what} = {n} exceeds the most threads a context runs ({})",
                    crate::kernels::cpu::MAX_THREADS
                );
                crate::log_error!("llama_context: {msg}");
                return Err(ContextError::Invalid(msg));
            }
        }
        if !arch::is_supported(&model.arch) {
            return Err(ContextError::Unsupported(format!(
                "model architecture '{}' is not supported by llama-hotswap's engine yet (supported: {})",
                model.arch,
                arch::supported_names().join(", ")
            )));
        }
        // A `no_alloc` model (sizes only, upstream's dry run for parameter fitting) gets a
        // context that reports its memory and never decodes.
        let dry_run = model
            .tensors
            .iter()
            .any(|t| matches!(t.read().data, crate::storage::TensorData::Unallocated));
        let executor: Box<dyn Executor> = match crate::graph::exec_cuda::executor_for(&model) {
            Ok(Some(cuda)) if !dry_run => Box::new(cuda),
            Ok(_) if !dry_run => match crate::graph::exec_rpc::executor_for(&model) {
                Some(rpc) => Box::new(rpc),
                None => Box::new(CpuExecutor::default()),
            },
            Ok(_) => Box::new(CpuExecutor::default()),
            Err(e) if !dry_run => {
                return Err(ContextError::Unsupported(format!("CUDA compute: {e}")))
            }
            Err(_) => Box::new(CpuExecutor::default()),
        };
        if !dry_run {
            for t in model.tensors.iter() {
                let st = t.read();
                executor
                    .supports_weight(&st, &t.name)
                    .map_err(|e| ContextError::Unsupported(e.to_string()))?;
            }
        }
        let hp = arch::load_params(&model).map_err(ContextError::Invalid)?;
        let n_seq_max = p.n_seq_max.max(1);
        if n_seq_max as usize > crate::kv_cache::MAX_SEQ {
            return Err(ContextError::Invalid(format!(
                "n_seq_max must be <= {}",
                crate::kv_cache::MAX_SEQ
            )));
        }
        let mut n_ctx = if p.n_ctx == 0 {
            model.hparams.n_ctx_train
        } else {
            p.n_ctx
        };
        if n_ctx == 0 {
            return Err(ContextError::Invalid(
                "n_ctx and model->hparams.n_ctx_train cannot both be zero".into(),
            ));
        }
        let causal_attn = match p.attention_type {
            0 => true,
            1 => false,
            _ => hp.causal,
        };
        let n_batch = if causal_attn {
            n_ctx.min(p.n_batch)
        } else {
            p.n_batch
        };
        let n_ubatch = n_batch.min(if p.n_ubatch == 0 {
            p.n_batch
        } else {
            p.n_ubatch
        });
        n_ctx = n_ctx.div_ceil(CTX_PAD) * CTX_PAD;
        let n_ctx_seq = if p.kv_unified {
            n_ctx
        } else {
            let per = (n_ctx / n_seq_max).div_ceil(CTX_PAD) * CTX_PAD;
            if per == 0 {
                return Err(ContextError::Invalid("n_ctx_seq == 0".into()));
            }
            if n_ctx != per * n_seq_max {
                n_ctx = per * n_seq_max;
                crate::log_warn!(
                    "llama_context: n_ctx is not divisible by n_seq_max - rounding down to {n_ctx}"
                );
            }
            per
        };
        if n_batch == 0 || n_ubatch == 0 {
            return Err(ContextError::Invalid(
                "n_batch and n_ubatch must be greater than zero".into(),
            ));
        }
        // upstream's resolution: the caller's, else the file's, else NONE
        let pooling_type = if p.pooling_type < 0 {
            hp.pooling_type.max(0)
        } else {
            p.pooling_type
        };
        if pooling_type > 4 {
            return Err(ContextError::Invalid(format!(
                "unknown pooling type {pooling_type}"
            )));
        }
        if p.pooling_type >= 0 && p.pooling_type != hp.pooling_type {
            crate::log_warn!(
                "llama_init_from_model: model default pooling_type is [{}], but [{}] was specified",
                hp.pooling_type,
                p.pooling_type
            );
        }
        let rope = RopeConfig::resolve(&hp, &p.rope);
        let memory = arch::lookup(&model.arch).map_or(arch::Memory::Kv, |d| d.memory);
        let memoryless = memory == arch::Memory::None;
        // without memory (upstream keeps no cache) the batch's own K and V sit in an F32
        // scratch: attention reads them as upstream's graph does (rounded to F16 before flash
        // attention, as they are without it)
        let (type_k, type_v) = if memoryless {
            (KvType::F32, KvType::F32)
        } else {
            (kv_type(p.type_k, "type_k")?, kv_type(p.type_v, "type_v")?)
        };
        let packed = |t: KvType| matches!(t, KvType::Packed(t) if t.block_size() > 1);
        if memory.latent() && (packed(type_k) || packed(type_v)) {
            return Err(ContextError::Unsupported(format!(
                "model architecture '{}': a quantized cache of the compressed (MLA) attention is not supported by llama-hotswap yet",
                model.arch
            )));
        }
        if !memoryless {
            check_kv_types(&hp, type_k, type_v, p.flash_attn_type)?;
        }
        let recurrent = memory.recurrent();
        let shape = KvShape {
            // upstream's kv_size: each stream holds n_ctx_seq cells (n_ctx when unified);
            // without memory, one micro-batch's worth
            size: if memoryless {
                n_ubatch.div_ceil(CTX_PAD) * CTX_PAD
            } else {
                n_ctx_seq
            },
            n_seq_max: n_seq_max as usize,
            // a recurrent model has no KV cache upstream: ours keeps an unused one-stream
            // shell; the memory-less scratch is one stream whose cells carry the sequences
            unified: p.kv_unified || matches!(memory, arch::Memory::Recurrent | arch::Memory::None),
            type_k,
            type_v,
            layers: (0..hp.n_layer)
                .map(|il| match memory {
                    arch::Memory::Kv | arch::Memory::None => {
                        (hp.n_embd_k_gqa(il), hp.n_embd_v_gqa(il))
                    }
                    // V is read from the K rows
                    arch::Memory::KvLatent => (hp.n_embd_k_gqa(il), 0),
                    arch::Memory::Recurrent => (0, 0),
                    arch::Memory::Hybrid | arch::Memory::HybridLatent if !hp.has_kv(il) => (0, 0),
                    arch::Memory::Hybrid => (hp.n_embd_k_gqa(il), hp.n_embd_v_gqa(il)),
                    arch::Memory::HybridLatent => (hp.n_embd_k_gqa(il), 0),
                })
                // the sparse attention's indexer keys: layers n_layer.. of the same cells
                // (upstream's second cache of llama_kv_cache_dsa, filled in step with the first)
                .chain((0..hp.n_layer).filter_map(|_| {
                    let ix = &hp.ext.indexer;
                    (ix.head > 0).then_some((ix.head, 0))
                }))
                .collect(),
        };
        // upstream's recurrent memory: max(1, n_seq_max) cells, F32 conv and SSM rows on the
        // recurrent layers
        let rs_widths: Vec<(usize, usize)> = (0..hp.n_layer)
            .map(|il| match memory {
                arch::Memory::Recurrent => (hp.n_embd_r(), hp.n_embd_s()),
                arch::Memory::Hybrid | arch::Memory::HybridLatent if hp.is_recurrent(il) => {
                    (hp.n_embd_r(), hp.n_embd_s())
                }
                _ => (0, 0),
            })
            .collect();
        let cparams = CParams {
            n_ctx,
            n_ctx_seq,
            n_batch,
            n_ubatch,
            n_seq_max,
            n_threads: p.n_threads,
            n_threads_batch: p.n_threads_batch,
            pooling_type,
            causal_attn,
            embeddings: p.embeddings,
            warmup: false,
            rope,
            flash_attn: p.flash_attn_type != 0,
        };
        crate::log_info!(
            "llama_context: n_seq_max = {n_seq_max}, n_ctx = {n_ctx}, n_ctx_seq = {n_ctx_seq}, n_batch = {n_batch}, n_ubatch = {n_ubatch}, causal_attn = {}",
            causal_attn as i32
        );
        if !p.swa_full && hp.swa_layers.iter().any(|&swa| swa) {
            // Upstream keeps a second, window-sized cache for the sliding-window layers and
            // prunes cells that left every window; ours keeps the full-size one (the same
            // logits through the window mask, more memory, nothing pruned for seq_pos_min).
            crate::log_warn!(
                "llama_context: swa_full = false is not supported by llama-hotswap yet: the sliding-window layers use the full-size cache"
            );
        }
        let kv_rot = kv_rotation(&hp, type_k, type_v);
        // the graph of one token, built and dropped: a tensor the architecture needs that
        // the file lacks (or has in another shape) fails here, not at the first decode
        let probe = GraphShape {
            n_tokens: 1,
            n_outputs: 1,
            generation: 0,
            embd_input: false,
        };
        let probe_graph = arch::build(
            &model,
            &hp,
            rope,
            probe,
            n_ctx_seq,
            kv_rot,
            &Adapters::default(),
        )
        .map_err(|e| {
            ContextError::Unsupported(format!("model architecture '{}': {e}", model.arch))
        })?;
        log_unused_tensors(&model, &probe_graph);
        // Sizes are checked before anything is allocated, and the allocations are fallible:
        // a context too large for the host is a failure value with a log line (upstream:
        // "failed to allocate buffer for kv cache", llama_init_from_model returns NULL).
        let mem_kind = memory;
        let memory = shape.memory_bytes().and_then(|b| {
            if recurrent {
                b.checked_add(crate::kv_cache::RsMemory::bytes(n_seq_max, &rs_widths)?)
            } else {
                Some(b)
            }
        });
        let host = crate::device::host_memory();
        let kv_fail = |why: String| {
            let msg = format!("failed to allocate buffer for kv cache: {why}");
            crate::log_error!("llama_context: {msg}");
            ContextError::Invalid(msg)
        };
        match memory {
            _ if dry_run => {}
            None => {
                return Err(kv_fail(format!(
                    "n_ctx = {n_ctx} over {} layers: the size overflows",
                    shape.layers.len()
                )))
            }
            Some(b) if host > 0 && b > host => {
                return Err(kv_fail(format!(
                    "n_ctx = {n_ctx} needs {b} bytes, more than the host's memory ({host} bytes)"
                )))
            }
            Some(_) => {}
        }
        let kv_bytes = shape.bytes();
        let kv = if dry_run {
            crate::log_info!(
                "llama_context: the model was loaded with no_alloc: a context that reports its memory ({} MiB of KV cache) and cannot decode",
                kv_bytes >> 20
            );
            KvCache::new(&KvShape {
                layers: Vec::new(),
                ..shape
            })
        } else {
            let mut kv = KvCache::try_new(&shape).map_err(|e| kv_fail(e.to_string()))?;
            if recurrent {
                kv.rs = Some(
                    crate::kv_cache::RsMemory::new(n_seq_max, n_seq_max, &rs_widths)
                        .map_err(|e| kv_fail(e.to_string()))?,
                );
                kv.attn = mem_kind.hybrid();
            }
            kv
        };
        let mut ctx = Self::assemble(model, hp, cparams, kv, executor, false);
        ctx.memoryless = memoryless;
        ctx.kv_rot = kv_rot;
        ctx.dry_run = dry_run;
        ctx.kv_bytes = kv_bytes;
        Ok(ctx)
    }

    /// The context of a `vocab_only` model: upstream's parameter resolution (its n_ctx_train
    /// is 0 then), no memory.
    fn new_vocab_only(model: Arc<Model>, p: &ContextParams) -> Result<Context, ContextError> {
        if p.n_ctx == 0 {
            return Err(ContextError::Invalid(
                "n_ctx and model->hparams.n_ctx_train cannot both be zero".into(),
            ));
        }
        let hp = ArchParams::vocab_only(&model);
        let n_seq_max = p.n_seq_max.max(1);
        if n_seq_max as usize > crate::kv_cache::MAX_SEQ {
            return Err(ContextError::Invalid(format!(
                "n_seq_max must be <= {}",
                crate::kv_cache::MAX_SEQ
            )));
        }
        let causal_attn = p.attention_type != 1;
        let n_batch = if causal_attn {
            p.n_ctx.min(p.n_batch)
        } else {
            p.n_batch
        };
        let n_ubatch = n_batch.min(if p.n_ubatch == 0 {
            p.n_batch
        } else {
            p.n_ubatch
        });
        let mut n_ctx = p.n_ctx.div_ceil(CTX_PAD) * CTX_PAD;
        let n_ctx_seq = if p.kv_unified {
            n_ctx
        } else {
            let per = (n_ctx / n_seq_max).div_ceil(CTX_PAD) * CTX_PAD;
            n_ctx = per * n_seq_max;
            per
        };
        let cparams = CParams {
            n_ctx,
            n_ctx_seq,
            n_batch,
            n_ubatch,
            n_seq_max,
            n_threads: p.n_threads,
            n_threads_batch: p.n_threads_batch,
            pooling_type: p.pooling_type.max(0),
            causal_attn,
            embeddings: p.embeddings,
            warmup: false,
            rope: RopeConfig::resolve(&hp, &p.rope),
            flash_attn: p.flash_attn_type != 0,
        };
        crate::log_info!(
            "llama_context: vocab-only model: a context without memory (n_ctx = {n_ctx}); decode cannot run on it"
        );
        let empty = KvShape {
            size: 0,
            n_seq_max: n_seq_max as usize,
            unified: p.kv_unified,
            type_k: KvType::F16,
            type_v: KvType::F16,
            layers: Vec::new(),
        };
        Ok(Self::assemble(
            model,
            hp,
            cparams,
            KvCache::new(&empty),
            Box::new(CpuExecutor::default()),
            true,
        ))
    }

    fn assemble(
        model: Arc<Model>,
        hp: ArchParams,
        cparams: CParams,
        kv: KvCache,
        exec: Box<dyn Executor>,
        vocab_only: bool,
    ) -> Context {
        let generation = model.generation.load(Ordering::Acquire);
        let rope = crate::model::arch::rope_type(&model.arch, model.hparams.rope_sections);
        let multi_pos =
            rope == crate::model::arch::ROPE_MROPE || rope == crate::model::arch::ROPE_IMROPE;
        Context {
            engine: Mutex::new(Engine {
                cparams,
                kv,
                graph: None,
                exec,
                raw: RawBatch::default(),
                batch: Batch::default(),
                slots: Vec::new(),
                rs_groups: Vec::new(),
                out_ids: Vec::new(),
                split: split::Split::default(),
                ub: UbatchData::default(),
                logits: Vec::new(),
                embd: Vec::new(),
                output_ids: Vec::new(),
                embd_seq: Vec::new(),
                n_outputs: 0,
                abort: None,
                observer: None,
                n_graph_builds: 0,
                state_aside: std::collections::HashMap::new(),
                adapters: Adapters::default(),
                pool_threads: (None, None),
            }),
            model,
            hp,
            vocab_only,
            memoryless: false,
            kv_rot: (0, 0),
            dry_run: false,
            kv_bytes: 0,
            multi_pos,
            graph_generation: AtomicU64::new(generation),
        }
    }

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
        // pending position shifts re-rotate the cached keys first
        if e.kv.has_shift() {
            if e.exec.name() == "RPC" {
                // the shift re-rotates host rows; the KV rows of remote layers live on the
                // servers (docs/rpc.md): refused rather than decoding with stale keys
                crate::log_error!(
                    "decode: shifting positions (seq_add/seq_div) of a context with layers on rpc-servers is not supported by llama-hotswap yet"
                );
                return -3;
            }
            self.apply_k_shift(e);
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
        }
        e.split = split;
        code
    }

    /// Computes one micro-batch: the batch's tokens `idx` (in `n_seqs` equal groups, one
    /// per stream, when the cache has several).
    fn process_ubatch(&self, e: &mut Engine, idx: &[usize], n_seqs: usize, generation: u64) -> i32 {
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
            e.kv.apply(&e.slots, &ub.pos, &ub.seqs);
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
    fn pool(&self, e: &mut Engine, idx: &[usize]) -> Result<(), String> {
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
    fn classify(&self, row: Vec<f32>) -> Result<Vec<f32>, String> {
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
    fn rollback(&self, e: &mut Engine) {
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
    fn apply_k_shift(&self, e: &mut Engine) {
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
        // (row, shift) of every used cell with a pending shift, over all streams
        let size = e.kv.size();
        let shifted: Vec<(usize, i32)> = (0..e.kv.n_stream())
            .flat_map(|st| {
                let cells = e.kv.cells(st);
                (0..size).filter_map(move |j| {
                    let shift = cells.shift(j);
                    (shift != 0 && !cells.is_empty(j))
                        .then_some(((st as u32 * size + j) as usize, shift))
                })
            })
            .collect();
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
        for il in hp.n_layer..e.kv.layers.len() {
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
