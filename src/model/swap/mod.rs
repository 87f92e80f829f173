//! What a model keeps for hot-swap: the registration made at load (each shard's path and
//! identity, the tensors that came from it), the last report, the staging buffer and the pool
//! of freed private buffers. The logic
//! that uses them (detection, plans, staging, commits) is [`crate::hotswap`], which sits above
//! the model; keeping the state here lets the model own it without importing that logic.

pub mod report;

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::storage::{BufferPool, FileIdentity, SourceFile};

use super::tensors::TensorStore;
use report::Report;

/// The environment variable read at model load.
pub const ENV: &str = "LLAMA_HOTSWAP_ENABLED";

/// The environment variable (read at model load, with hot-swap enabled) that makes the library
/// look for changed files by itself at `llama_decode` boundaries, at most every that many
/// milliseconds.
pub const AUTO_ENV: &str = "LLAMA_HOTSWAP_AUTO";

/// The interval `LLAMA_HOTSWAP_AUTO` asks for: None when unset, empty, or not a whole number of
/// milliseconds (logged); `0` means before every decode.
pub fn auto_interval_by_env() -> Option<Duration> {
    let v = std::env::var_os(AUTO_ENV)?;
    let v = v.to_string_lossy();
    parse_auto_interval(&v).or_else(|| {
        if !v.trim().is_empty() {
            crate::log_warn!(
                "hot-swap: {AUTO_ENV}='{v}' is not a number of milliseconds: automatic reloads off"
            );
        }
        None
    })
}

/// See [`auto_interval_by_env`].
pub fn parse_auto_interval(value: &str) -> Option<Duration> {
    value.trim().parse::<u64>().ok().map(Duration::from_millis)
}

/// Automatic reloads (`LLAMA_HOTSWAP_AUTO`): the interval and when the last look was.
#[derive(Debug)]
pub struct AutoReload {
    pub every: Duration,
    pub last: Mutex<Option<Instant>>,
}

impl AutoReload {
    /// True (and the clock restarted) when the interval has passed since the last look;
    /// false while another thread is looking (that look covers this decode too).
    pub fn due(&self) -> bool {
        let Ok(mut last) = self.last.try_lock() else {
            return false;
        };
        let now = Instant::now();
        if last.is_some_and(|t| now.duration_since(t) < self.every) {
            return false;
        }
        *last = Some(now);
        true
    }
}

/// Whether `LLAMA_HOTSWAP_ENABLED` turns hot-swap on: set to anything but empty, `0`,
/// `false` or `off` (case-insensitive, surrounding whitespace ignored).
pub fn enabled_by_env() -> bool {
    match std::env::var_os(ENV) {
        None => false,
        Some(v) => is_enabling_value(&v.to_string_lossy()),
    }
}

/// See [`enabled_by_env`].
pub fn is_enabling_value(value: &str) -> bool {
    let v = value.trim().to_ascii_lowercase();
    !(v.is_empty() || v == "0" || v == "false" || v == "off")
}

/// One watched shard.
#[derive(Debug)]
pub struct WatchedFile {
    pub path: Option<PathBuf>,
    /// As of the last look (None: the path did not exist).
    pub identity: Option<FileIdentity>,
    /// The model's tensors whose bytes came from this file (indices, file order).
    pub tensors: Vec<usize>,
}

/// Registration and the last report; the mutex serializes reload calls.
#[derive(Debug)]
pub struct HotSwap {
    pub watch: Mutex<Vec<WatchedFile>>,
    pub report: Mutex<Arc<Report>>,
    /// A staging buffer kept between calls (the largest tensor staged so far), so that a
    /// reload does not pay page faults for a fresh buffer every time.
    pub staging: Mutex<Vec<u8>>,
    /// In-place reloads of owned (arena) tensors: the stage whose pages move into the tensor.
    pub page_stage: Mutex<PageStageSlot>,
    /// Private buffers freed by returns and relocations, kept for the next relocation of
    /// the same size (their pages are resident). Bounded by the model's largest tensor.
    pub buffers: Mutex<BufferPool>,
    /// The model was loaded with `check_tensors`: swapped-in bytes are validated the same way
    /// before they are committed.
    pub check_tensors: bool,
    /// `LLAMA_HOTSWAP_AUTO` at load: look for changed files before decodes.
    pub auto: Option<AutoReload>,
}

/// The page stage of in-place reloads (`hotswap::direct`) and what decides when one is made.
#[derive(Debug, Default)]
pub struct PageStageSlot {
    /// The stage, made for one tensor's geometry (page offset, length); taken while in use.
    pub stage: Option<crate::storage::PageStage>,
    /// The geometry of the last in-place reload that found no stage made for it.
    pub missed: Option<(usize, usize)>,
    /// The kernel refused to move pages once (Linux older than 5.7, or `vm.max_map_count`
    /// reached): in-place reloads copy from then on.
    pub off: bool,
}

pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl HotSwap {
    /// Records every shard's path and identity (tensor offsets stay on the tensors): a model's
    /// `files` and `tensors` (the pieces, not the model, so that this room imports nothing
    /// from the model's `mod.rs`, which owns it).
    pub fn register(sources: &[SourceFile], tensors: &TensorStore, check_tensors: bool) -> HotSwap {
        let mut files: Vec<WatchedFile> = sources
            .iter()
            .map(|f| {
                if f.path.is_none() {
                    crate::log_warn!(
                        "hot-swap: a model loaded from a FILE * has no path to watch; \
                         llama_ext_tensor_set and llama_ext_model_reload_from_file still work"
                    );
                }
                WatchedFile {
                    path: f.path.clone(),
                    identity: Some(f.identity),
                    tensors: Vec::new(),
                }
            })
            .collect();
        for (i, t) in tensors.iter().enumerate() {
            files[t.source.file_index].tensors.push(i);
        }
        let largest = tensors
            .iter()
            .map(|t| t.read().layout.nbytes)
            .max()
            .unwrap_or(0);
        crate::log_info!(
            "hot-swap: enabled, watching {} file(s) for {} tensors",
            sources.len(),
            tensors.len()
        );
        let auto = auto_interval_by_env().map(|every| {
            crate::log_info!(
                "hot-swap: {AUTO_ENV}: changed files are reloaded before a decode, looked for at \
                 most every {} ms",
                every.as_millis()
            );
            AutoReload {
                every,
                last: Mutex::new(Some(Instant::now())),
            }
        });
        HotSwap {
            watch: Mutex::new(files),
            report: Mutex::new(Arc::new(Report::default())),
            staging: Mutex::new(Vec::new()),
            page_stage: Mutex::new(PageStageSlot::default()),
            buffers: Mutex::new(BufferPool::new(largest)),
            check_tensors,
            auto,
        }
    }

    /// The last reload call's report.
    pub fn last_report(&self) -> Arc<Report> {
        Arc::clone(&lock(&self.report))
    }
}
