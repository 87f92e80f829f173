//! The loaded model: metadata, hyperparameters, vocabulary and tensors (the loading issue
//! fills this in).

pub mod ftype;
pub mod split;

/// A loaded model.
#[derive(Debug, Default)]
pub struct Model {}

/// Per-context state (graph-cache bookkeeping; decode is not supported yet).
#[derive(Debug, Default)]
pub struct Context {}

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
}
