//! The loaded model: metadata, hyperparameters, vocabulary and tensors.
#![forbid(unsafe_code)]

pub mod adapter;
pub mod arch;
pub mod derived;
pub mod ftype;
pub mod hparams;
pub mod json;
pub mod meta;
pub mod report;
pub mod save;
pub mod split;
pub mod swap;
pub mod tensors;
pub mod text_index;
pub mod vocab;

use std::collections::HashMap;
use std::ffi::CString;

use std::sync::atomic::AtomicU64;

use crate::storage::{ModelDevices, SourceFile};
use hparams::HParams;
use meta::Metadata;
use swap::HotSwap;
use tensors::TensorStore;
use vocab::Vocab;

/// A loaded model.
#[derive(Debug)]
pub struct Model {
    pub arch: String,
    pub meta: Metadata,
    /// Zero for a vocab-only model (upstream leaves them at their defaults).
    pub hparams: HParams,
    pub vocab: Vocab,
    /// `llama_ftype`, possibly with the GUESSED bit.
    pub ftype: i32,
    /// `"<arch> <size label> <ftype name>"`; empty for vocab-only models.
    pub desc: String,
    /// Sum of tensor bytes over every file (padding excluded).
    pub size: u64,
    pub n_params: u64,
    /// Chat templates by GGUF key (`tokenizer.chat_template[.<name>]`), NUL-terminated.
    pub chat_templates: HashMap<String, CString>,
    pub cls_labels: Vec<CString>,
    pub tensors: TensorStore,
    /// The files the tensors came from (kept open: hot-swap watches them).
    pub files: Vec<SourceFile>,
    /// The model's devices and split points (None for vocab-only models).
    pub devices: Option<ModelDevices>,
    /// Bumped whenever a hot-swap relocates or retypes a tensor; contexts compare it with the
    /// generation their cached graph was built for.
    pub generation: AtomicU64,
    /// Hot-swap registration (None when `LLAMA_HOTSWAP_ENABLED` was off at load).
    pub hotswap: Option<HotSwap>,
    /// Repacked layouts allowed (upstream's `use_extra_bufts`, default true): weights that
    /// upstream's CPU backend would put in its `CPU_REPACK` buffer get one.
    pub use_extra_bufts: bool,
    /// Set when the first context logged the tensors no graph reads (once per model).
    pub unused_tensors_logged: std::sync::atomic::AtomicBool,
}

/// How tensor data is brought into memory (`enum llama_load_mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoadMode {
    Auto = -1,
    None = 0,
    Mmap = 1,
    Mlock = 2,
    MmapMlock = 3,
    DirectIo = 4,
}

impl LoadMode {
    /// Validates a C value.
    pub fn from_raw(value: i32) -> Option<LoadMode> {
        Some(match value {
            -1 => LoadMode::Auto,
            0 => LoadMode::None,
            1 => LoadMode::Mmap,
            2 => LoadMode::Mlock,
            3 => LoadMode::MmapMlock,
            4 => LoadMode::DirectIo,
            _ => return None,
        })
    }

    /// Upstream's name for the mode.
    pub fn name(self) -> &'static std::ffi::CStr {
        match self {
            LoadMode::Auto => c"auto",
            LoadMode::None => c"none",
            LoadMode::Mmap => c"mmap",
            LoadMode::Mlock => c"mlock",
            LoadMode::MmapMlock => c"mmap+mlock",
            LoadMode::DirectIo => c"dio",
        }
    }

    /// Parses upstream's name.
    pub fn from_name(name: &str) -> Option<LoadMode> {
        [
            Self::Auto,
            Self::None,
            Self::Mmap,
            Self::Mlock,
            Self::MmapMlock,
            Self::DirectIo,
        ]
        .into_iter()
        .find(|mode| mode.name().to_bytes() == name.as_bytes())
    }

    /// Whether CPU tensors alias a file mapping (AUTO maps unless a device needs otherwise).
    pub fn uses_mmap(self) -> bool {
        matches!(self, LoadMode::Auto | LoadMode::Mmap | LoadMode::MmapMlock)
    }

    pub fn uses_mlock(self) -> bool {
        matches!(self, LoadMode::Mlock | LoadMode::MmapMlock)
    }
}

impl Model {
    /// Upstream's `llama_model_chat_template`: the named or default template, or None.
    pub fn chat_template(&self, name: Option<&str>) -> Option<&std::ffi::CStr> {
        let key = match name {
            None => "tokenizer.chat_template".to_string(),
            Some(n) => format!("tokenizer.chat_template.{n}"),
        };
        match self.chat_templates.get(&key) {
            Some(t) => Some(t.as_c_str()),
            // Upstream's one-off for Mistral-Small-2503 (no template in the file): a TEKKEN
            // vocab with 40 layers (layers exist only when tensors were loaded).
            None if name.is_none()
                && self.vocab.pre_type == vocab::pre::TEKKEN
                && self.hparams.n_layer_all == 40 =>
            {
                Some(c"mistral-v7-tekken")
            }
            None => None,
        }
    }
}
