//! Context creation: parameters resolved as upstream, the engine checks, the memory.

use super::*;

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
            let missing = match arch::missing_pieces(&model.arch) {
                Some(what) => format!(": it needs {what}"),
                None => String::new(),
            };
            return Err(ContextError::Unsupported(format!(
                "model architecture '{}' is not supported by llama-hotswap's engine yet{missing} (supported: {})",
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
        if !hp.ext.mem_extra.is_empty() && matches!(type_k, KvType::Packed(_)) {
            return Err(ContextError::Unsupported(format!(
                "model architecture '{}': a {:?} cache of DeepSeek-V4's compressed attention is not supported by llama-hotswap yet (F16 and F32 are)",
                model.arch, type_k
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
                // a hybrid memory's indexer cache (llama_memory_hybrid_idx's third cache)
                .chain(hp.ext.idx_rows.iter().map(|&w| (w, 0)))
                // DeepSeek-V4's compressor inputs and compressed keys (layers after those)
                .chain(hp.ext.mem_extra.iter().map(|&w| (w, 0)))
                .collect(),
        };
        // upstream's recurrent memory: max(1, n_seq_max) cells, F32 conv and SSM rows on the
        // recurrent layers
        let rs_widths: Vec<(usize, usize)> = (0..hp.n_layer)
            .map(|il| match memory {
                arch::Memory::Recurrent => (hp.n_embd_r_at(il), hp.n_embd_s()),
                arch::Memory::Hybrid | arch::Memory::HybridLatent if hp.is_recurrent(il) => {
                    (hp.n_embd_r_at(il), hp.n_embd_s())
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
                let mut rs = crate::kv_cache::RsMemory::new(n_seq_max, n_seq_max, &rs_widths)
                    .map_err(|e| kv_fail(e.to_string()))?;
                // Qwen4-exp's PLE conv history: upstream's second conv row of its layer
                if let Some(p) = &hp.ext.ple {
                    if let Some(l) = rs.layers.get_mut(p.layer).filter(|l| l.n_r > 0) {
                        l.n_r2 = p.row_values();
                    }
                }
                kv.rs = Some(rs);
                kv.attn = mem_kind.hybrid();
            }
            kv.kpool = if hp.ext.idx_rows.is_empty() {
                0
            } else {
                hp.ext.kpool
            };
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
    pub(super) fn new_vocab_only(
        model: Arc<Model>,
        p: &ContextParams,
    ) -> Result<Context, ContextError> {
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

    pub(super) fn assemble(
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
}
