//! Library-wide functions: version, default parameters, backend init, limits, capabilities,
//! system info, logging, load-mode and split-path helpers.

use std::ffi::{c_char, c_void, CStr, CString};
use std::sync::{Mutex, OnceLock};

use super::types::*;
use super::{c_str, write_snprintf, FfiError};

use crate::log::{self, Level};

/// The llama.cpp version this library mirrors ("0.5.0-dev", as upstream's build reports it).
/// The string is static.
#[no_mangle]
pub extern "C" fn llama_version() -> *const c_char {
    c"0.5.0-dev".as_ptr()
}

/// Upstream's default model parameters: all layers offloaded (`n_gpu_layers = -1`), LAYER
/// split, AUTO load mode, AUTO lazy mode, `use_extra_bufts = true`.
#[no_mangle]
pub extern "C" fn llama_model_default_params() -> llama_model_params {
    llama_model_params {
        devices: std::ptr::null_mut(),
        tensor_buft_overrides: std::ptr::null(),
        n_gpu_layers: -1,
        split_mode: LlamaSplitMode(llama_split_mode::LLAMA_SPLIT_MODE_LAYER as i32),
        load_mode: LlamaLoadMode(llama_load_mode::LLAMA_LOAD_MODE_AUTO as i32),
        lazy_mode: LlamaLazyMode(llama_lazy_mode::LLAMA_LAZY_MODE_AUTO as i32),
        main_gpu: 0,
        tensor_split: std::ptr::null(),
        progress_callback: None,
        progress_callback_user_data: std::ptr::null_mut(),
        kv_overrides: std::ptr::null(),
        vocab_only: false,
        check_tensors: false,
        use_extra_bufts: true,
        no_host: false,
        no_alloc: false,
        load_mtp: false,
    }
}

/// Upstream's default context parameters (n_ctx 512, n_batch 2048, n_ubatch 512, …).
#[no_mangle]
pub extern "C" fn llama_context_default_params() -> llama_context_params {
    llama_context_params {
        n_ctx: 512,
        n_batch: 2048,
        n_ubatch: 512,
        n_seq_max: 1,
        n_rs_seq: 0,
        n_outputs_max: 0,
        n_outputs_max_per_seq: 1,
        n_threads: 4,
        n_threads_batch: 4,
        ctx_type: LlamaContextType(llama_context_type::LLAMA_CONTEXT_TYPE_DEFAULT as i32),
        rope_scaling_type: LlamaRopeScalingType(
            llama_rope_scaling_type::LLAMA_ROPE_SCALING_TYPE_UNSPECIFIED as i32,
        ),
        pooling_type: LlamaPoolingType(llama_pooling_type::LLAMA_POOLING_TYPE_UNSPECIFIED as i32),
        attention_type: LlamaAttentionType(
            llama_attention_type::LLAMA_ATTENTION_TYPE_UNSPECIFIED as i32,
        ),
        flash_attn_type: LlamaFlashAttnType(
            llama_flash_attn_type::LLAMA_FLASH_ATTN_TYPE_AUTO as i32,
        ),
        rope_freq_base: 0.0,
        rope_freq_scale: 0.0,
        yarn_ext_factor: -1.0,
        yarn_attn_factor: -1.0,
        yarn_beta_fast: -1.0,
        yarn_beta_slow: -1.0,
        yarn_orig_ctx: 0,
        defrag_thold: -1.0,
        cb_eval: None,
        cb_eval_user_data: std::ptr::null_mut(),
        type_k: GgmlType(ggml_type::GGML_TYPE_F16 as i32),
        type_v: GgmlType(ggml_type::GGML_TYPE_F16 as i32),
        abort_callback: None,
        abort_callback_data: std::ptr::null_mut(),
        embeddings: false,
        offload_kqv: true,
        no_perf: true,
        op_offload: true,
        swa_full: true,
        kv_unified: false,
        samplers: std::ptr::null_mut(),
        n_samplers: 0,
        ctx_other: std::ptr::null_mut(),
    }
}

/// Upstream's default sampler-chain parameters (`no_perf = true`).
#[no_mangle]
pub extern "C" fn llama_sampler_chain_default_params() -> llama_sampler_chain_params {
    llama_sampler_chain_params { no_perf: true }
}

/// Upstream's default quantization parameters (Q8_0, output tensor quantized, 8 GiB buffer).
/// Quantization itself is `llama_model_quantize` (src/ffi/quantize.rs).
#[no_mangle]
pub extern "C" fn llama_model_quantize_default_params() -> llama_model_quantize_params {
    llama_model_quantize_params {
        nthread: 0,
        ftype: LlamaFtype(llama_ftype::LLAMA_FTYPE_MOSTLY_Q8_0 as i32),
        output_tensor_type: GgmlType(ggml_type::GGML_TYPE_COUNT as i32),
        token_embedding_type: GgmlType(ggml_type::GGML_TYPE_COUNT as i32),
        allow_requantize: false,
        quantize_output_tensor: true,
        only_copy: false,
        pure: false,
        keep_split: false,
        dry_run: false,
        imatrix: std::ptr::null(),
        kv_overrides: std::ptr::null(),
        tt_overrides: std::ptr::null(),
        prune_layers: std::ptr::null(),
        max_buf_size: 8 << 30,
    }
}

/// Initializes the library: reads the CPU kernel mode (`LLAMA_HOTSWAP_EXACT=1`: upstream's
/// portable build bit for bit; otherwise the fastest kernels for this CPU) and logs it with
/// the ISA level, once. Safe to call any number of times.
#[no_mangle]
pub extern "C" fn llama_backend_init() {
    super::clock::time_origin();
    let _ = crate::kernels::cpu::kernel_mode();
}

/// Counterpart of `llama_backend_init`; nothing to release.
#[no_mangle]
pub extern "C" fn llama_backend_free() {}

/// Records a NUMA strategy, as upstream's CPU backend (`ggml_numa_init`): once per process,
/// with the machine's nodes from sysfs. On a machine with more than one node, kernel worker
/// threads started afterwards are pinned as upstream pins its compute threads (DISTRIBUTE:
/// worker i on node i mod nodes; ISOLATE: the calling thread's node; NUMACTL: the calling
/// thread's CPU set; MIRROR: not pinned) and models mapped afterwards are neither prefetched
/// nor read ahead. On one node nothing changes. An out-of-range value is logged and ignored.
#[no_mangle]
pub extern "C" fn llama_numa_init(numa: GgmlNumaStrategy) {
    boundary!("llama_numa_init", (), {
        let Some(strategy) = crate::device::numa::Strategy::from_ggml(numa.0) else {
            return Err(FfiError::Invalid(format!(
                "invalid NUMA strategy {}",
                numa.0
            )));
        };
        // upstream does nothing at all for DISABLED (not even the node count)
        if strategy != crate::device::numa::Strategy::Disabled {
            crate::device::numa::init(strategy);
        }
        Ok(())
    })
}

/// Microseconds on the monotonic clock, as upstream's (`ggml_time_us`: `CLOCK_MONOTONIC`,
/// whose origin is unspecified; only differences are meaningful). The same clock as libggml's,
/// so programs may subtract `llama_perf_context`'s `t_start_ms` from `ggml_time_ms()`.
#[no_mangle]
pub extern "C" fn llama_time_us() -> i64 {
    super::clock::monotonic_us()
}

/// The most devices a model can be split across (16, as upstream).
#[no_mangle]
pub extern "C" fn llama_max_devices() -> usize {
    16
}

/// The most parallel sequences a context supports (256, upstream's LLAMA_MAX_SEQ).
#[no_mangle]
pub extern "C" fn llama_max_parallel_sequences() -> usize {
    256
}

/// The most tensor buffer-type overrides accepted (4096, as upstream).
#[no_mangle]
pub extern "C" fn llama_max_tensor_buft_overrides() -> usize {
    4096
}

/// True: models can be memory-mapped.
#[no_mangle]
pub extern "C" fn llama_supports_mmap() -> bool {
    true
}

/// True: mapped and owned model memory can be locked (failure to lock is a warning).
#[no_mangle]
pub extern "C" fn llama_supports_mlock() -> bool {
    true
}

/// True, as upstream built with its RPC backend answers: weights can be offloaded to
/// devices on upstream's `rpc-server` (`LLAMA_RPC_SERVERS`), besides GPU devices (CUDA or
/// virtual). Upstream's rule is "a GPU device is present, or RPC is supported", and this
/// library always has its RPC client. (The device registry is not created here: upstream's
/// tools ask this while they parse arguments, before a later `--rpc` registers its servers.)
#[no_mangle]
pub extern "C" fn llama_supports_gpu_offload() -> bool {
    llama_supports_rpc()
}

/// True: devices on upstream's `rpc-server` (ggml-rpc protocol 7.0) can be registered with
/// `LLAMA_RPC_SERVERS`, `llama_ext_rpc_add_server`, or in upstream's programs with `--rpc`
/// (see docs/rpc.md).
#[no_mangle]
pub extern "C" fn llama_supports_rpc() -> bool {
    true
}

/// A description of the library's features, in upstream's `"<REG> : <name> = <value> | "`
/// form: the version, the CPU kernels' ISA level and mode (`KERNELS = fast`, or `exact` with
/// `LLAMA_HOTSWAP_EXACT=1`) and the CPU's x86 features. The string is static and owned by the
/// library.
#[no_mangle]
pub extern "C" fn llama_print_system_info() -> *const c_char {
    static INFO: OnceLock<CString> = OnceLock::new();
    INFO.get_or_init(|| {
        let text = format!(
            "CPU : LLAMA_HOTSWAP = {} | HOTSWAP = 1 | {}",
            env!("CARGO_PKG_VERSION"),
            crate::kernels::cpu::mode::system_info()
        );
        CString::new(text).unwrap_or_default()
    })
    .as_ptr()
}

/// The C log callback and its user data, as given to `llama_log_set`.
#[derive(Clone, Copy)]
struct CLogTarget {
    callback: ggml_log_callback,
    user_data: *mut c_void,
}
// SAFETY: the pointer is an opaque token handed back to the C callback; thread-safety of
// whatever it points to is the host's contract with its own callback, as upstream.
unsafe impl Send for CLogTarget {}
// SAFETY: as above; the target is only copied, never mutated through a shared reference.
unsafe impl Sync for CLogTarget {}

static LOG_TARGET: Mutex<Option<CLogTarget>> = Mutex::new(None);

/// The default log callback (upstream's: write to stderr and flush). `llama_log_get`
/// returns it when no callback is set.
unsafe extern "C" fn default_log_callback(
    _level: GgmlLogLevel,
    text: *const c_char,
    _ud: *mut c_void,
) {
    if !text.is_null() {
        // SAFETY: the library always passes a NUL-terminated string.
        let text = unsafe { CStr::from_ptr(text) };
        log::write_stderr(&text.to_string_lossy());
    }
}

/// Sets the log callback for everything the library logs; NULL restores the default
/// (stderr). `user_data` is passed back to the callback. Not thread-safe with concurrent
/// logging from other threads of the host, as upstream.
#[no_mangle]
pub extern "C" fn llama_log_set(log_callback: ggml_log_callback, user_data: *mut c_void) {
    boundary!("llama_log_set", (), {
        let mut target = LOG_TARGET.lock().unwrap_or_else(|e| e.into_inner());
        match log_callback {
            None => {
                *target = None;
                log::set_sink(None);
            }
            Some(callback) => {
                let c_target = CLogTarget {
                    callback: Some(callback),
                    user_data,
                };
                *target = Some(c_target);
                log::set_sink(Some(Box::new(move |level: Level, text: &str| {
                    let c_target = c_target;
                    let Ok(text) = CString::new(text.replace('\0', " ")) else {
                        return;
                    };
                    if let Some(cb) = c_target.callback {
                        // SAFETY: the host registered this callback for exactly this call.
                        unsafe {
                            cb(
                                GgmlLogLevel(level as i32),
                                text.as_ptr(),
                                c_target.user_data,
                            )
                        };
                    }
                })));
            }
        }
        Ok(())
    })
}

/// Writes the current log callback and user data to the non-NULL out-pointers. Without a
/// callback set, the default (stderr) callback and NULL are returned.
#[no_mangle]
pub unsafe extern "C" fn llama_log_get(
    log_callback: *mut ggml_log_callback,
    user_data: *mut *mut c_void,
) {
    boundary!("llama_log_get", (), {
        let target = *LOG_TARGET.lock().unwrap_or_else(|e| e.into_inner());
        let (callback, ud) = match target {
            Some(t) => (t.callback, t.user_data),
            None => (
                Some(default_log_callback as unsafe extern "C" fn(_, _, _)),
                std::ptr::null_mut(),
            ),
        };
        if !log_callback.is_null() {
            // SAFETY: non-NULL out-pointer provided by the caller.
            unsafe { *log_callback = callback };
        }
        if !user_data.is_null() {
            // SAFETY: as above.
            unsafe { *user_data = ud };
        }
        Ok(())
    })
}

/// The name of a load mode ("auto", "none", "mmap", "mlock", "mmap+mlock", "dio"). For a value
/// outside the enum, logs an error and returns NULL (upstream aborts).
#[no_mangle]
pub extern "C" fn llama_load_mode_name(load_mode: LlamaLoadMode) -> *const c_char {
    boundary!("llama_load_mode_name", std::ptr::null(), {
        crate::model::LoadMode::from_raw(load_mode.0)
            .map(|mode| mode.name().as_ptr())
            .ok_or_else(|| FfiError::Invalid(format!("invalid load mode {}", load_mode.0)))
    })
}

/// Parses a load-mode name (see `llama_load_mode_name`). An unknown string or NULL logs an
/// error and returns LLAMA_LOAD_MODE_AUTO (upstream throws an exception across the C API).
#[no_mangle]
pub unsafe extern "C" fn llama_load_mode_from_str(str: *const c_char) -> LlamaLoadMode {
    let auto = LlamaLoadMode(llama_load_mode::LLAMA_LOAD_MODE_AUTO as i32);
    boundary!("llama_load_mode_from_str", auto, {
        // SAFETY: NULL or a C string per the API contract.
        let name = unsafe { c_str(str, "str") }?;
        crate::model::LoadMode::from_name(&name)
            .map(|mode| LlamaLoadMode(mode as i32))
            .ok_or_else(|| FfiError::Invalid(format!("unknown load mode: {name} (using auto)")))
    })
}

/// The name of a flash-attention setting ("auto", "disabled", "enabled"); NULL and a log
/// line for a value outside the enum (upstream aborts).
#[no_mangle]
pub extern "C" fn llama_flash_attn_type_name(flash_attn_type: LlamaFlashAttnType) -> *const c_char {
    boundary!("llama_flash_attn_type_name", std::ptr::null(), {
        let name: &CStr = match flash_attn_type.0 {
            -1 => c"auto",
            0 => c"disabled",
            1 => c"enabled",
            other => {
                return Err(FfiError::Invalid(format!(
                    "invalid flash_attn_type {other}"
                )))
            }
        };
        Ok(name.as_ptr())
    })
}

/// Upstream's name for a file type, e.g. "Q4_K - Medium"; guessed types get "(guessed) ".
/// The string is static.
#[no_mangle]
pub extern "C" fn llama_ftype_name(ftype: LlamaFtype) -> *const c_char {
    crate::model::ftype::ftype_name(ftype.0).as_ptr()
}

/// The GGUF key of a sampling metadata key, e.g. "general.sampling.top_k"; NULL for an
/// unknown value. The string is static.
#[no_mangle]
pub extern "C" fn llama_model_meta_key_str(key: LlamaModelMetaKey) -> *const c_char {
    let name: &CStr = match key.0 {
        0 => c"general.sampling.sequence",
        1 => c"general.sampling.top_k",
        2 => c"general.sampling.top_p",
        3 => c"general.sampling.min_p",
        4 => c"general.sampling.xtc_probability",
        5 => c"general.sampling.xtc_threshold",
        6 => c"general.sampling.temp",
        7 => c"general.sampling.penalty_last_n",
        8 => c"general.sampling.penalty_repeat",
        9 => c"general.sampling.mirostat",
        10 => c"general.sampling.mirostat_tau",
        11 => c"general.sampling.mirostat_eta",
        _ => return std::ptr::null(),
    };
    name.as_ptr()
}

/// Writes `"<path_prefix>-%05d-of-%05d.gguf"` (split_no 0-based, printed 1-based) into
/// `split_path`. Returns the length written, or 0 on error or truncation (as upstream).
#[no_mangle]
pub unsafe extern "C" fn llama_split_path(
    split_path: *mut c_char,
    maxlen: usize,
    path_prefix: *const c_char,
    split_no: i32,
    split_count: i32,
) -> i32 {
    boundary!("llama_split_path", 0, {
        // SAFETY: NULL or a C string per the API contract.
        let prefix = unsafe { c_str(path_prefix, "path_prefix") }?;
        if split_path.is_null() && maxlen > 0 {
            return Err(FfiError::Null("split_path"));
        }
        let path = crate::model::split::split_path(&prefix, split_no, split_count);
        // SAFETY: `split_path` is valid for `maxlen` bytes per the contract.
        let written = unsafe { write_snprintf(split_path, maxlen, path.as_bytes()) };
        // Like upstream: a truncated path is reported as 0 (the buffer holds the truncation).
        Ok(if path.len() >= maxlen { 0 } else { written })
    })
}

/// If `split_path` ends with the postfix of split `split_no` of `split_count`, writes the
/// prefix into `split_prefix` (truncated to `maxlen - 1` bytes) and returns the prefix's full
/// length; otherwise returns 0 (as upstream).
#[no_mangle]
pub unsafe extern "C" fn llama_split_prefix(
    split_prefix: *mut c_char,
    maxlen: usize,
    split_path: *const c_char,
    split_no: i32,
    split_count: i32,
) -> i32 {
    boundary!("llama_split_prefix", 0, {
        // SAFETY: NULL or a C string per the API contract.
        let path = unsafe { c_str(split_path, "split_path") }?;
        if split_prefix.is_null() && maxlen > 0 {
            return Err(FfiError::Null("split_prefix"));
        }
        match crate::model::split::split_prefix(&path, split_no, split_count) {
            // SAFETY: `split_prefix` is valid for `maxlen` bytes per the contract.
            Some(prefix) => Ok(unsafe { write_snprintf(split_prefix, maxlen, prefix.as_bytes()) }),
            None => Ok(0),
        }
    })
}
