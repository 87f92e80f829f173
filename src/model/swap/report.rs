//! The per-tensor report of a reload call.

use std::ffi::CString;
use std::fmt::Write;
use std::sync::OnceLock;

use crate::gguf::GgmlType;
use crate::model::json::json_string;

/// What happened to one tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Same type, size and placement: the new bytes were written over the old ones.
    ReloadedInPlace,
    /// New storage on its device (type change, moving off a mapping, partition resync).
    Relocated,
    /// Back on the buffer it was loaded into, with the file's current bytes.
    ReturnedToOriginal,
    /// Its device had no room: now in CPU memory.
    CpuFallback,
    /// Not reloaded by rule (shape changed, missing from the file, bad size or type).
    Refused,
    /// Not reloaded because of an error (short read, truncated file, allocation failure).
    Failed,
}

impl Outcome {
    pub fn name(self) -> &'static str {
        match self {
            Outcome::ReloadedInPlace => "reloaded_in_place",
            Outcome::Relocated => "relocated",
            Outcome::ReturnedToOriginal => "returned_to_original",
            Outcome::CpuFallback => "cpu_fallback",
            Outcome::Refused => "refused",
            Outcome::Failed => "failed",
        }
    }

    /// The value of `llama_ext_reload_entry.outcome` (`LLAMA_EXT_RELOAD_*`).
    pub fn as_raw(self) -> i32 {
        match self {
            Outcome::ReloadedInPlace => 0,
            Outcome::Relocated => 1,
            Outcome::ReturnedToOriginal => 2,
            Outcome::CpuFallback => 3,
            Outcome::Refused => 4,
            Outcome::Failed => 5,
        }
    }

    /// Whether the tensor now holds the new bytes.
    pub fn reloaded(self) -> bool {
        !matches!(self, Outcome::Refused | Outcome::Failed)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportEntry {
    pub name: String,
    pub outcome: Outcome,
    /// Empty when there is nothing to say.
    pub reason: String,
    pub old_type: GgmlType,
    pub new_type: GgmlType,
    /// Where the tensor is now: "CPU", "VGPU0", "VGPU0,VGPU1" (row split).
    pub device: String,
}

/// One reload call's outcome; unchanged tensors are not listed.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// The model's generation after the call.
    pub generation: u64,
    pub entries: Vec<ReportEntry>,
    /// NUL-terminated name, reason and device per entry, built on first use (C API).
    c: OnceLock<Vec<[CString; 3]>>,
}

fn c_string(text: &str) -> CString {
    CString::new(text.replace('\0', " ")).unwrap_or_default()
}

impl Report {
    pub fn new(generation: u64, entries: Vec<ReportEntry>) -> Report {
        Report {
            generation,
            entries,
            c: OnceLock::new(),
        }
    }

    /// Name, reason and device of each entry as C strings.
    pub fn c_strings(&self) -> &[[CString; 3]] {
        self.c.get_or_init(|| {
            self.entries
                .iter()
                .map(|e| [c_string(&e.name), c_string(&e.reason), c_string(&e.device)])
                .collect()
        })
    }

    /// Tensors that now hold new bytes.
    pub fn reloaded(&self) -> usize {
        self.entries.iter().filter(|e| e.outcome.reloaded()).count()
    }

    pub fn entry(&self, name: &str) -> Option<&ReportEntry> {
        self.entries.iter().find(|e| e.name == name)
    }

    /// `{"generation": N, "tensors": [{"name", "outcome", "reason", "old_type", "new_type",
    /// "device"}]}`.
    pub fn to_json(&self) -> String {
        let mut out = format!("{{\"generation\":{},\"tensors\":[", self.generation);
        for (i, e) in self.entries.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(
                out,
                "{{\"name\":{},\"outcome\":\"{}\",\"reason\":{},\"old_type\":\"{}\",\"new_type\":\"{}\",\"device\":{}}}",
                json_string(&e.name),
                e.outcome.name(),
                json_string(&e.reason),
                e.old_type.name(),
                e.new_type.name(),
                json_string(&e.device)
            );
        }
        out.push_str("]}");
        out
    }
}
