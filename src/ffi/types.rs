//! Every C type that appears in an exported signature, laid out exactly as the pinned
//! upstream `llama.h` (and the few ggml headers it needs) lay them out. The ABI test compares
//! sizes, alignments, offsets and constants against the upstream header.
//!
//! Enums: the C-named Rust enums below exist so cbindgen writes the constants into the header.
//! Values that come *from* C (struct fields, arguments, returns of untrusted origin) use the
//! `#[repr(transparent)]` integer newtypes (`LlamaSplitMode`, …) that cbindgen renames to
//! `enum llama_split_mode` (see cbindgen.toml): an out-of-range value is then a number we
//! validate, never undefined behaviour.

#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_void};

// ---------------------------------------------------------------------------------------------
// ggml declarations (opaque handles and the enums llama.h uses), with ggml's exact values.
// ---------------------------------------------------------------------------------------------

/// `enum ggml_type` of the pinned ggml.
#[repr(C)]
pub enum ggml_type {
    GGML_TYPE_F32 = 0,
    GGML_TYPE_F16 = 1,
    GGML_TYPE_Q4_0 = 2,
    GGML_TYPE_Q4_1 = 3,
    GGML_TYPE_Q5_0 = 6,
    GGML_TYPE_Q5_1 = 7,
    GGML_TYPE_Q8_0 = 8,
    GGML_TYPE_Q8_1 = 9,
    GGML_TYPE_Q2_K = 10,
    GGML_TYPE_Q3_K = 11,
    GGML_TYPE_Q4_K = 12,
    GGML_TYPE_Q5_K = 13,
    GGML_TYPE_Q6_K = 14,
    GGML_TYPE_Q8_K = 15,
    GGML_TYPE_IQ2_XXS = 16,
    GGML_TYPE_IQ2_XS = 17,
    GGML_TYPE_IQ3_XXS = 18,
    GGML_TYPE_IQ1_S = 19,
    GGML_TYPE_IQ4_NL = 20,
    GGML_TYPE_IQ3_S = 21,
    GGML_TYPE_IQ2_S = 22,
    GGML_TYPE_IQ4_XS = 23,
    GGML_TYPE_I8 = 24,
    GGML_TYPE_I16 = 25,
    GGML_TYPE_I32 = 26,
    GGML_TYPE_I64 = 27,
    GGML_TYPE_F64 = 28,
    GGML_TYPE_IQ1_M = 29,
    GGML_TYPE_BF16 = 30,
    GGML_TYPE_TQ1_0 = 34,
    GGML_TYPE_TQ2_0 = 35,
    GGML_TYPE_MXFP4 = 39,
    GGML_TYPE_NVFP4 = 40,
    GGML_TYPE_Q1_0 = 41,
    GGML_TYPE_Q2_0 = 42,
    GGML_TYPE_COUNT = 43,
}

/// `enum ggml_log_level`.
#[repr(C)]
pub enum ggml_log_level {
    GGML_LOG_LEVEL_NONE = 0,
    GGML_LOG_LEVEL_DEBUG = 1,
    GGML_LOG_LEVEL_INFO = 2,
    GGML_LOG_LEVEL_WARN = 3,
    GGML_LOG_LEVEL_ERROR = 4,
    GGML_LOG_LEVEL_CONT = 5,
}

/// `enum ggml_numa_strategy`.
#[repr(C)]
pub enum ggml_numa_strategy {
    GGML_NUMA_STRATEGY_DISABLED = 0,
    GGML_NUMA_STRATEGY_DISTRIBUTE = 1,
    GGML_NUMA_STRATEGY_ISOLATE = 2,
    GGML_NUMA_STRATEGY_NUMACTL = 3,
    GGML_NUMA_STRATEGY_MIRROR = 4,
    GGML_NUMA_STRATEGY_COUNT = 5,
}

/// `enum ggml_opt_optimizer_type`.
#[repr(C)]
pub enum ggml_opt_optimizer_type {
    GGML_OPT_OPTIMIZER_TYPE_ADAMW = 0,
    GGML_OPT_OPTIMIZER_TYPE_SGD = 1,
    GGML_OPT_OPTIMIZER_TYPE_COUNT = 2,
}

/// `enum ggml_backend_dev_type`.
#[repr(C)]
pub enum ggml_backend_dev_type {
    GGML_BACKEND_DEVICE_TYPE_CPU = 0,
    GGML_BACKEND_DEVICE_TYPE_GPU = 1,
    GGML_BACKEND_DEVICE_TYPE_IGPU = 2,
    GGML_BACKEND_DEVICE_TYPE_ACCEL = 3,
    GGML_BACKEND_DEVICE_TYPE_META = 4,
}

/// Validated-integer forms of the C enums (see the module comment).
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GgmlType(pub c_int);
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GgmlLogLevel(pub c_int);
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GgmlNumaStrategy(pub c_int);
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GgmlOptOptimizerType(pub c_int);
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GgmlBackendDevType(pub c_int);

/// Opaque ggml objects. Only pointers to them cross the boundary.
pub struct ggml_tensor {
    _opaque: [u8; 0],
}
pub struct ggml_context {
    _opaque: [u8; 0],
}
pub struct ggml_cgraph {
    _opaque: [u8; 0],
}
pub struct gguf_context {
    _opaque: [u8; 0],
}
pub struct ggml_threadpool {
    _opaque: [u8; 0],
}
pub struct ggml_opt_dataset {
    _opaque: [u8; 0],
}
pub struct ggml_opt_context {
    _opaque: [u8; 0],
}
pub struct ggml_opt_result {
    _opaque: [u8; 0],
}

pub type ggml_threadpool_t = *mut ggml_threadpool;
pub type ggml_opt_dataset_t = *mut ggml_opt_dataset;
pub type ggml_opt_context_t = *mut ggml_opt_context;
pub type ggml_opt_result_t = *mut ggml_opt_result;

/// A device handle (`ggml_backend_dev_t`). Internals are private to the library.
pub type ggml_backend_dev_t = *mut crate::ffi::handles::ggml_backend_device;
/// A buffer-type handle (`ggml_backend_buffer_type_t`). Internals are private to the library.
pub type ggml_backend_buffer_type_t = *mut crate::ffi::handles::ggml_backend_buffer_type;

pub type ggml_log_callback =
    Option<unsafe extern "C" fn(level: GgmlLogLevel, text: *const c_char, user_data: *mut c_void)>;
pub type ggml_abort_callback = Option<unsafe extern "C" fn(data: *mut c_void) -> bool>;
pub type ggml_backend_sched_eval_callback =
    Option<unsafe extern "C" fn(t: *mut ggml_tensor, ask: bool, user_data: *mut c_void) -> bool>;

/// `struct ggml_opt_optimizer_params` (returned by value from `ggml_opt_get_optimizer_params`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ggml_opt_optimizer_params {
    pub adamw: ggml_opt_adamw_params,
    pub sgd: ggml_opt_sgd_params,
}
/// The `adamw` member of `struct ggml_opt_optimizer_params` (anonymous upstream).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ggml_opt_adamw_params {
    pub alpha: f32,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    pub wd: f32,
}
/// The `sgd` member of `struct ggml_opt_optimizer_params` (anonymous upstream).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ggml_opt_sgd_params {
    pub alpha: f32,
    pub wd: f32,
}

pub type ggml_opt_get_optimizer_params =
    Option<unsafe extern "C" fn(userdata: *mut c_void) -> ggml_opt_optimizer_params>;
pub type ggml_opt_epoch_callback = Option<
    unsafe extern "C" fn(
        train: bool,
        opt_ctx: ggml_opt_context_t,
        dataset: ggml_opt_dataset_t,
        result: ggml_opt_result_t,
        ibatch: i64,
        ibatch_max: i64,
        t_start_us: i64,
    ),
>;

/// `struct ggml_backend_dev_caps`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ggml_backend_dev_caps {
    pub r#async: bool,
    pub host_buffer: bool,
    pub buffer_from_host_ptr: bool,
    pub events: bool,
    pub mmap_support: bool,
}

/// `struct ggml_backend_dev_props`. The strings are owned by the device and live as long as
/// the library.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ggml_backend_dev_props {
    pub name: *const c_char,
    pub description: *const c_char,
    pub memory_free: usize,
    pub memory_total: usize,
    pub r#type: GgmlBackendDevType,
    pub device_id: *const c_char,
    pub caps: ggml_backend_dev_caps,
}

// ---------------------------------------------------------------------------------------------
// llama.h
// ---------------------------------------------------------------------------------------------

pub type llama_pos = i32;
pub type llama_token = i32;
pub type llama_seq_id = i32;
pub type llama_state_seq_flags = u32;
pub type llama_sampler_context_t = *mut c_void;

/// Opaque memory handle (`llama_memory_t`).
pub struct llama_memory_i {
    _opaque: [u8; 0],
}
pub type llama_memory_t = *mut llama_memory_i;

/// Opaque extended batch. Not supported by llama-hotswap yet.
pub struct llama_batch_ext {
    _opaque: [u8; 0],
}

#[repr(C)]
pub enum llama_vocab_type {
    LLAMA_VOCAB_TYPE_NONE = 0,
    LLAMA_VOCAB_TYPE_SPM = 1,
    LLAMA_VOCAB_TYPE_BPE = 2,
    LLAMA_VOCAB_TYPE_WPM = 3,
    LLAMA_VOCAB_TYPE_UGM = 4,
    LLAMA_VOCAB_TYPE_RWKV = 5,
    LLAMA_VOCAB_TYPE_PLAMO2 = 6,
    LLAMA_VOCAB_TYPE_TEST = 7,
}

#[repr(C)]
pub enum llama_rope_type {
    LLAMA_ROPE_TYPE_NONE = -1,
    LLAMA_ROPE_TYPE_NORM = 0,
    LLAMA_ROPE_TYPE_NEOX = 2,
    LLAMA_ROPE_TYPE_MROPE = 8,
    LLAMA_ROPE_TYPE_IMROPE = 40,
    LLAMA_ROPE_TYPE_VISION = 24,
}

#[repr(C)]
pub enum llama_token_type {
    LLAMA_TOKEN_TYPE_UNDEFINED = 0,
    LLAMA_TOKEN_TYPE_NORMAL = 1,
    LLAMA_TOKEN_TYPE_UNKNOWN = 2,
    LLAMA_TOKEN_TYPE_CONTROL = 3,
    LLAMA_TOKEN_TYPE_USER_DEFINED = 4,
    LLAMA_TOKEN_TYPE_UNUSED = 5,
    LLAMA_TOKEN_TYPE_BYTE = 6,
}

#[repr(C)]
pub enum llama_token_attr {
    LLAMA_TOKEN_ATTR_UNDEFINED = 0,
    LLAMA_TOKEN_ATTR_UNKNOWN = 1,
    LLAMA_TOKEN_ATTR_UNUSED = 2,
    LLAMA_TOKEN_ATTR_NORMAL = 4,
    LLAMA_TOKEN_ATTR_CONTROL = 8,
    LLAMA_TOKEN_ATTR_USER_DEFINED = 16,
    LLAMA_TOKEN_ATTR_BYTE = 32,
    LLAMA_TOKEN_ATTR_NORMALIZED = 64,
    LLAMA_TOKEN_ATTR_LSTRIP = 128,
    LLAMA_TOKEN_ATTR_RSTRIP = 256,
    LLAMA_TOKEN_ATTR_SINGLE_WORD = 512,
}

#[repr(C)]
pub enum llama_ftype {
    LLAMA_FTYPE_ALL_F32 = 0,
    LLAMA_FTYPE_MOSTLY_F16 = 1,
    LLAMA_FTYPE_MOSTLY_Q4_0 = 2,
    LLAMA_FTYPE_MOSTLY_Q4_1 = 3,
    LLAMA_FTYPE_MOSTLY_Q8_0 = 7,
    LLAMA_FTYPE_MOSTLY_Q5_0 = 8,
    LLAMA_FTYPE_MOSTLY_Q5_1 = 9,
    LLAMA_FTYPE_MOSTLY_Q2_K = 10,
    LLAMA_FTYPE_MOSTLY_Q3_K_S = 11,
    LLAMA_FTYPE_MOSTLY_Q3_K_M = 12,
    LLAMA_FTYPE_MOSTLY_Q3_K_L = 13,
    LLAMA_FTYPE_MOSTLY_Q4_K_S = 14,
    LLAMA_FTYPE_MOSTLY_Q4_K_M = 15,
    LLAMA_FTYPE_MOSTLY_Q5_K_S = 16,
    LLAMA_FTYPE_MOSTLY_Q5_K_M = 17,
    LLAMA_FTYPE_MOSTLY_Q6_K = 18,
    LLAMA_FTYPE_MOSTLY_IQ2_XXS = 19,
    LLAMA_FTYPE_MOSTLY_IQ2_XS = 20,
    LLAMA_FTYPE_MOSTLY_Q2_K_S = 21,
    LLAMA_FTYPE_MOSTLY_IQ3_XS = 22,
    LLAMA_FTYPE_MOSTLY_IQ3_XXS = 23,
    LLAMA_FTYPE_MOSTLY_IQ1_S = 24,
    LLAMA_FTYPE_MOSTLY_IQ4_NL = 25,
    LLAMA_FTYPE_MOSTLY_IQ3_S = 26,
    LLAMA_FTYPE_MOSTLY_IQ3_M = 27,
    LLAMA_FTYPE_MOSTLY_IQ2_S = 28,
    LLAMA_FTYPE_MOSTLY_IQ2_M = 29,
    LLAMA_FTYPE_MOSTLY_IQ4_XS = 30,
    LLAMA_FTYPE_MOSTLY_IQ1_M = 31,
    LLAMA_FTYPE_MOSTLY_BF16 = 32,
    LLAMA_FTYPE_MOSTLY_TQ1_0 = 36,
    LLAMA_FTYPE_MOSTLY_TQ2_0 = 37,
    LLAMA_FTYPE_MOSTLY_MXFP4_MOE = 38,
    LLAMA_FTYPE_MOSTLY_NVFP4 = 39,
    LLAMA_FTYPE_MOSTLY_Q1_0 = 40,
    LLAMA_FTYPE_MOSTLY_Q2_0 = 41,
    LLAMA_FTYPE_GUESSED = 1024,
}

#[repr(C)]
pub enum llama_rope_scaling_type {
    LLAMA_ROPE_SCALING_TYPE_UNSPECIFIED = -1,
    LLAMA_ROPE_SCALING_TYPE_NONE = 0,
    LLAMA_ROPE_SCALING_TYPE_LINEAR = 1,
    LLAMA_ROPE_SCALING_TYPE_YARN = 2,
    LLAMA_ROPE_SCALING_TYPE_LONGROPE = 3,
}
/// Upstream spells this as an enumerator equal to `LLAMA_ROPE_SCALING_TYPE_LONGROPE`; Rust enums
/// cannot repeat a value, so it is a constant here (same value, same use in C).
pub const LLAMA_ROPE_SCALING_TYPE_MAX_VALUE: c_int = 3;

#[repr(C)]
pub enum llama_pooling_type {
    LLAMA_POOLING_TYPE_UNSPECIFIED = -1,
    LLAMA_POOLING_TYPE_NONE = 0,
    LLAMA_POOLING_TYPE_MEAN = 1,
    LLAMA_POOLING_TYPE_CLS = 2,
    LLAMA_POOLING_TYPE_LAST = 3,
    LLAMA_POOLING_TYPE_RANK = 4,
}

#[repr(C)]
pub enum llama_attention_type {
    LLAMA_ATTENTION_TYPE_UNSPECIFIED = -1,
    LLAMA_ATTENTION_TYPE_CAUSAL = 0,
    LLAMA_ATTENTION_TYPE_NON_CAUSAL = 1,
}

#[repr(C)]
pub enum llama_flash_attn_type {
    LLAMA_FLASH_ATTN_TYPE_AUTO = -1,
    LLAMA_FLASH_ATTN_TYPE_DISABLED = 0,
    LLAMA_FLASH_ATTN_TYPE_ENABLED = 1,
}

#[repr(C)]
pub enum llama_split_mode {
    /// single GPU
    LLAMA_SPLIT_MODE_NONE = 0,
    /// split layers and KV across GPUs
    LLAMA_SPLIT_MODE_LAYER = 1,
    /// split layers and KV across GPUs, use tensor parallelism if supported
    LLAMA_SPLIT_MODE_ROW = 2,
    LLAMA_SPLIT_MODE_TENSOR = 3,
}

#[repr(C)]
pub enum llama_load_mode {
    /// auto-detect based on device capabilities
    LLAMA_LOAD_MODE_AUTO = -1,
    /// no special loading mode
    LLAMA_LOAD_MODE_NONE = 0,
    /// memory map the model
    LLAMA_LOAD_MODE_MMAP = 1,
    /// force system to keep model in RAM rather than swapping or compressing
    LLAMA_LOAD_MODE_MLOCK = 2,
    /// mmap + force system to keep model in RAM
    LLAMA_LOAD_MODE_MMAP_MLOCK = 3,
    /// use direct I/O if available
    LLAMA_LOAD_MODE_DIRECT_IO = 4,
}

#[repr(C)]
pub enum llama_lazy_mode {
    LLAMA_LAZY_MODE_OFF = 0,
    LLAMA_LAZY_MODE_AUTO = 1,
    LLAMA_LAZY_MODE_ON = 2,
}

#[repr(C)]
pub enum llama_context_type {
    LLAMA_CONTEXT_TYPE_DEFAULT = 0,
    LLAMA_CONTEXT_TYPE_MTP = 1,
}

#[repr(C)]
pub enum llama_model_kv_override_type {
    LLAMA_KV_OVERRIDE_TYPE_INT = 0,
    LLAMA_KV_OVERRIDE_TYPE_FLOAT = 1,
    LLAMA_KV_OVERRIDE_TYPE_BOOL = 2,
    LLAMA_KV_OVERRIDE_TYPE_STR = 3,
}

#[repr(C)]
pub enum llama_model_meta_key {
    LLAMA_MODEL_META_KEY_SAMPLING_SEQUENCE = 0,
    LLAMA_MODEL_META_KEY_SAMPLING_TOP_K = 1,
    LLAMA_MODEL_META_KEY_SAMPLING_TOP_P = 2,
    LLAMA_MODEL_META_KEY_SAMPLING_MIN_P = 3,
    LLAMA_MODEL_META_KEY_SAMPLING_XTC_PROBABILITY = 4,
    LLAMA_MODEL_META_KEY_SAMPLING_XTC_THRESHOLD = 5,
    LLAMA_MODEL_META_KEY_SAMPLING_TEMP = 6,
    LLAMA_MODEL_META_KEY_SAMPLING_PENALTY_LAST_N = 7,
    LLAMA_MODEL_META_KEY_SAMPLING_PENALTY_REPEAT = 8,
    LLAMA_MODEL_META_KEY_SAMPLING_MIROSTAT = 9,
    LLAMA_MODEL_META_KEY_SAMPLING_MIROSTAT_TAU = 10,
    LLAMA_MODEL_META_KEY_SAMPLING_MIROSTAT_ETA = 11,
}

#[repr(C)]
pub enum llama_process_type {
    LLAMA_PROCESS_TYPE_ENCODE = 0,
    LLAMA_PROCESS_TYPE_DECODE = 1,
}

#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LlamaVocabType(pub c_int);
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LlamaRopeType(pub c_int);
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LlamaTokenAttr(pub c_int);
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LlamaFtype(pub c_int);
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LlamaRopeScalingType(pub c_int);
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LlamaPoolingType(pub c_int);
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LlamaAttentionType(pub c_int);
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LlamaFlashAttnType(pub c_int);
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LlamaSplitMode(pub c_int);
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LlamaLoadMode(pub c_int);
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LlamaLazyMode(pub c_int);
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LlamaContextType(pub c_int);
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LlamaKvOverrideType(pub c_int);
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LlamaModelMetaKey(pub c_int);
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LlamaProcessType(pub c_int);

#[repr(C)]
#[derive(Clone, Copy)]
pub struct llama_token_data {
    /// token id
    pub id: llama_token,
    /// log-odds of the token
    pub logit: f32,
    /// probability of the token
    pub p: f32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct llama_token_data_array {
    pub data: *mut llama_token_data,
    pub size: usize,
    /// index in the data array (not the token id)
    pub selected: i64,
    pub sorted: bool,
}

/// Called during loading with progress in [0, 1]; returning false cancels the load.
pub type llama_progress_callback =
    Option<unsafe extern "C" fn(progress: f32, user_data: *mut c_void) -> bool>;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct llama_batch {
    pub n_tokens: i32,
    pub token: *mut llama_token,
    pub embd: *mut f32,
    pub pos: *mut llama_pos,
    pub n_seq_id: *mut i32,
    pub seq_id: *mut *mut llama_seq_id,
    pub logits: *mut i8,
}

/// `struct llama_model_kv_override`. Upstream uses an anonymous union, which cbindgen cannot
/// write, so the header text of this struct comes from cbindgen.toml; this definition gives
/// Rust the same layout (checked by the ABI test). `val_bool` is read as a byte so a C caller
/// cannot hand Rust an invalid `bool`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct llama_model_kv_override {
    pub tag: LlamaKvOverrideType,
    pub key: [c_char; 128],
    pub value: llama_model_kv_override_value,
}
#[repr(C)]
#[derive(Clone, Copy)]
pub union llama_model_kv_override_value {
    pub val_i64: i64,
    pub val_f64: f64,
    pub val_bool: u8,
    pub val_str: [c_char; 128],
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct llama_model_tensor_buft_override {
    pub pattern: *const c_char,
    pub buft: ggml_backend_buffer_type_t,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct llama_model_params {
    /// NULL-terminated list of devices to use for offloading (if NULL, all available devices are used)
    pub devices: *mut ggml_backend_dev_t,
    /// NULL-terminated list of buffer types to use for tensors that match a pattern
    pub tensor_buft_overrides: *const llama_model_tensor_buft_override,
    /// number of layers to store in VRAM, a negative value means all layers
    pub n_gpu_layers: i32,
    /// how to split the model across multiple GPUs
    pub split_mode: LlamaSplitMode,
    /// how to load the model
    pub load_mode: LlamaLoadMode,
    /// on-demand reading of tensors marked by the arch
    pub lazy_mode: LlamaLazyMode,
    /// the GPU that is used for the entire model when split_mode is LLAMA_SPLIT_MODE_NONE
    pub main_gpu: i32,
    /// proportion of the model (layers or rows) to offload to each GPU, size: llama_max_devices()
    pub tensor_split: *const f32,
    /// Called with a progress value between 0.0 and 1.0. Pass NULL to disable.
    /// If the provided progress_callback returns true, model loading continues.
    /// If it returns false, model loading is immediately aborted.
    pub progress_callback: llama_progress_callback,
    /// context pointer passed to the progress callback
    pub progress_callback_user_data: *mut c_void,
    /// override key-value pairs of the model meta data
    pub kv_overrides: *const llama_model_kv_override,
    /// only load the vocabulary, no weights
    pub vocab_only: bool,
    /// validate model tensor data
    pub check_tensors: bool,
    /// use extra buffer types (used for weight repacking)
    pub use_extra_bufts: bool,
    /// bypass host buffer allowing extra buffers to be used
    pub no_host: bool,
    /// only load metadata and simulate memory allocations
    pub no_alloc: bool,
    /// whether to load MTP layers
    pub load_mtp: bool,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct llama_sampler_seq_config {
    pub seq_id: llama_seq_id,
    pub sampler: *mut llama_sampler,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct llama_context_params {
    /// text context, 0 = from model
    pub n_ctx: u32,
    /// logical maximum batch size that can be submitted to llama_decode
    pub n_batch: u32,
    /// physical maximum batch size
    pub n_ubatch: u32,
    /// max number of sequences (i.e. distinct states for recurrent models)
    pub n_seq_max: u32,
    /// number of recurrent-state snapshots per seq for rollback (0 = no rollback) [EXPERIMENTAL]
    pub n_rs_seq: u32,
    /// max outputs in a ubatch (0 = n_batch)
    pub n_outputs_max: u32,
    /// max outputs per sequence (0 = n_outputs_max)
    pub n_outputs_max_per_seq: u32,
    /// number of threads to use for generation
    pub n_threads: i32,
    /// number of threads to use for batch processing
    pub n_threads_batch: i32,
    pub ctx_type: LlamaContextType,
    pub rope_scaling_type: LlamaRopeScalingType,
    pub pooling_type: LlamaPoolingType,
    pub attention_type: LlamaAttentionType,
    pub flash_attn_type: LlamaFlashAttnType,
    pub rope_freq_base: f32,
    pub rope_freq_scale: f32,
    pub yarn_ext_factor: f32,
    pub yarn_attn_factor: f32,
    pub yarn_beta_fast: f32,
    pub yarn_beta_slow: f32,
    pub yarn_orig_ctx: u32,
    /// [DEPRECATED]
    pub defrag_thold: f32,
    pub cb_eval: ggml_backend_sched_eval_callback,
    pub cb_eval_user_data: *mut c_void,
    /// data type for K cache [EXPERIMENTAL]
    pub type_k: GgmlType,
    /// data type for V cache [EXPERIMENTAL]
    pub type_v: GgmlType,
    pub abort_callback: ggml_abort_callback,
    pub abort_callback_data: *mut c_void,
    pub embeddings: bool,
    pub offload_kqv: bool,
    pub no_perf: bool,
    pub op_offload: bool,
    pub swa_full: bool,
    pub kv_unified: bool,
    pub samplers: *mut llama_sampler_seq_config,
    pub n_samplers: usize,
    pub ctx_other: *mut crate::ffi::handles::llama_context,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct llama_model_tensor_override {
    pub pattern: *const c_char,
    pub r#type: GgmlType,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct llama_model_imatrix_data {
    pub name: *const c_char,
    pub data: *const f32,
    pub size: usize,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct llama_model_quantize_params {
    pub nthread: i32,
    pub ftype: LlamaFtype,
    pub output_tensor_type: GgmlType,
    pub token_embedding_type: GgmlType,
    pub allow_requantize: bool,
    pub quantize_output_tensor: bool,
    pub only_copy: bool,
    pub pure: bool,
    pub keep_split: bool,
    pub dry_run: bool,
    pub imatrix: *const llama_model_imatrix_data,
    pub kv_overrides: *const llama_model_kv_override,
    pub tt_overrides: *const llama_model_tensor_override,
    pub prune_layers: *const i32,
    pub max_buf_size: usize,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct llama_logit_bias {
    pub token: llama_token,
    pub bias: f32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct llama_sampler_chain_params {
    /// whether to measure performance timings
    pub no_perf: bool,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct llama_chat_message {
    pub role: *const c_char,
    pub content: *const c_char,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct llama_embd {
    pub data: *const f32,
    /// number of embedding rows in data
    pub n_rows: usize,
    /// size of one row
    pub n_embd: usize,
}

pub type llama_model_set_tensor_data_t =
    Option<unsafe extern "C" fn(tensor: *mut ggml_tensor, userdata: *mut c_void)>;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct llama_sampler_data {
    pub logits: *mut ggml_tensor,
    pub probs: *mut ggml_tensor,
    pub sampled: *mut ggml_tensor,
    pub candidates: *mut ggml_tensor,
}

/// The sampler interface table (upstream's public `struct llama_sampler_i`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct llama_sampler_i {
    pub name: Option<unsafe extern "C" fn(smpl: *const llama_sampler) -> *const c_char>,
    pub accept: Option<unsafe extern "C" fn(smpl: *mut llama_sampler, token: llama_token)>,
    pub apply:
        Option<unsafe extern "C" fn(smpl: *mut llama_sampler, cur_p: *mut llama_token_data_array)>,
    pub reset: Option<unsafe extern "C" fn(smpl: *mut llama_sampler)>,
    pub clone: Option<unsafe extern "C" fn(smpl: *const llama_sampler) -> *mut llama_sampler>,
    pub free: Option<unsafe extern "C" fn(smpl: *mut llama_sampler)>,
    pub backend_init: Option<
        unsafe extern "C" fn(
            smpl: *mut llama_sampler,
            buft: ggml_backend_buffer_type_t,
            n_outputs_max_per_seq: u32,
        ) -> bool,
    >,
    pub backend_accept: Option<
        unsafe extern "C" fn(
            smpl: *mut llama_sampler,
            ctx: *mut ggml_context,
            gf: *mut ggml_cgraph,
            selected_token: *mut ggml_tensor,
        ),
    >,
    pub backend_apply: Option<
        unsafe extern "C" fn(
            smpl: *mut llama_sampler,
            ctx: *mut ggml_context,
            gf: *mut ggml_cgraph,
            data: *mut llama_sampler_data,
        ),
    >,
    pub backend_set_input: Option<unsafe extern "C" fn(smpl: *mut llama_sampler)>,
    pub backend_reset: Option<unsafe extern "C" fn(smpl: *mut llama_sampler)>,
    pub copy_state:
        Option<unsafe extern "C" fn(src: *const llama_sampler, dst: *mut llama_sampler)>,
}

/// Upstream's public sampler struct.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct llama_sampler {
    pub iface: *mut llama_sampler_i,
    pub ctx: llama_sampler_context_t,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct llama_perf_context_data {
    /// absolute start time
    pub t_start_ms: f64,
    /// time needed for loading the model
    pub t_load_ms: f64,
    /// time needed for processing the prompt
    pub t_p_eval_ms: f64,
    /// time needed for generating tokens
    pub t_eval_ms: f64,
    /// number of prompt tokens
    pub n_p_eval: i32,
    /// number of generated tokens
    pub n_eval: i32,
    /// number of times a ggml compute graph had been reused
    pub n_reused: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct llama_perf_sampler_data {
    /// time needed for sampling in ms
    pub t_sample_ms: f64,
    /// number of sampled tokens
    pub n_sample: i32,
}

pub type llama_opt_param_filter =
    Option<unsafe extern "C" fn(tensor: *const ggml_tensor, userdata: *mut c_void) -> bool>;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct llama_opt_params {
    /// assumed context size post training, use context size specified in llama_context if 0
    pub n_ctx_train: u32,
    pub param_filter: llama_opt_param_filter,
    pub param_filter_ud: *mut c_void,
    pub get_opt_pars: ggml_opt_get_optimizer_params,
    pub get_opt_pars_ud: *mut c_void,
    pub optimizer_type: GgmlOptOptimizerType,
}

// Constants of llama.h.
pub const LLAMA_DEFAULT_SEED: u32 = 0xFFFFFFFFu32;
pub const LLAMA_TOKEN_NULL: i32 = -1;
pub const LLAMA_FILE_MAGIC_GGLA: u32 = 0x67676c61u32;
pub const LLAMA_FILE_MAGIC_GGSN: u32 = 0x6767736eu32;
pub const LLAMA_FILE_MAGIC_GGSQ: u32 = 0x67677371u32;
pub const LLAMA_SESSION_MAGIC: u32 = LLAMA_FILE_MAGIC_GGSN;
pub const LLAMA_SESSION_VERSION: i32 = 10;
pub const LLAMA_STATE_SEQ_MAGIC: u32 = LLAMA_FILE_MAGIC_GGSQ;
pub const LLAMA_STATE_SEQ_VERSION: i32 = 3;
pub const LLAMA_STATE_SEQ_FLAGS_NONE: u32 = 0;
pub const LLAMA_STATE_SEQ_FLAGS_SWA_ONLY: u32 = 1;
pub const LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY: u32 = 1;
pub const LLAMA_STATE_SEQ_FLAGS_ON_DEVICE: u32 = 2;
