//! Logging, routed like upstream: every message goes to one process-wide sink (the
//! `llama_log_set` callback in C terms; stderr by default) with ggml's levels.

use std::sync::{Arc, RwLock};

/// ggml's `enum ggml_log_level` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    None = 0,
    Debug = 1,
    Info = 2,
    Warn = 3,
    Error = 4,
    Cont = 5,
}

/// Receives each finished line (ending in '\n', as upstream's messages do).
pub type Sink = Box<SinkFn>;
type SinkFn = dyn Fn(Level, &str) + Send + Sync;

/// Held as an `Arc` so that [`emit`] calls the sink after releasing the lock: a sink may
/// itself log, or replace the sink (a C callback calling `llama_log_set`), without deadlocking.
static SINK: RwLock<Option<Arc<SinkFn>>> = RwLock::new(None);

/// Replaces the sink; `None` restores the default (stderr).
pub fn set_sink(sink: Option<Sink>) {
    let mut guard = SINK.write().unwrap_or_else(|e| e.into_inner());
    *guard = sink.map(Arc::from);
}

/// Sends one message. A missing trailing newline is added so every message is one line.
pub fn emit(level: Level, message: &str) {
    let owned;
    let text = if message.ends_with('\n') {
        message
    } else {
        owned = format!("{message}\n");
        &owned
    };
    // Clone the sink and release the lock before calling it (see [`Sink`]).
    let sink = SINK.read().unwrap_or_else(|e| e.into_inner()).clone();
    match sink {
        Some(sink) => sink(level, text),
        None => write_stderr(text),
    }
}

/// The default sink: upstream writes to stderr and flushes.
/// Text of a caught panic payload, for a log line or an error (the C boundary and the CUDA
/// driver edge both catch panics).
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_string()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "unknown panic".to_string()
    }
}

pub fn write_stderr(text: &str) {
    use std::io::Write;
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(text.as_bytes());
    let _ = err.flush();
}

#[macro_export]
macro_rules! log_debug { ($($arg:tt)*) => { $crate::log::emit($crate::log::Level::Debug, &format!($($arg)*)) } }
#[macro_export]
macro_rules! log_info { ($($arg:tt)*) => { $crate::log::emit($crate::log::Level::Info, &format!($($arg)*)) } }
#[macro_export]
macro_rules! log_warn { ($($arg:tt)*) => { $crate::log::emit($crate::log::Level::Warn, &format!($($arg)*)) } }
#[macro_export]
macro_rules! log_error { ($($arg:tt)*) => { $crate::log::emit($crate::log::Level::Error, &format!($($arg)*)) } }
