//! Detection: one `stat` per watched file; a file whose identity changed is opened once and
//! its tensors are planned and run from that one descriptor.

use std::collections::HashMap;
use std::sync::Arc;

use crate::gguf::TensorInfo;
use crate::model::swap::{lock, WatchedFile};
use crate::model::Model;
use crate::storage::FileIdentity;

use super::mapping::migrate_off_mapping;
use super::outcomes::{finish, hotswap_of, HotSwapError, Outcomes};
use super::plan::{open_gguf, plan, run_jobs};
use crate::model::swap::report::Report;

/// Polls every watched file and reloads the tensors of those that changed.
pub fn reload_changed(model: &Model) -> Result<Arc<Report>, HotSwapError> {
    let hs = hotswap_of(model)?;
    let mut watch = lock(&hs.watch);
    let mut out = Outcomes::default();
    for (fi, watched) in watch.iter_mut().enumerate() {
        let Some(path) = watched.path.as_deref() else {
            continue;
        };
        let now = std::fs::metadata(path).ok().map(|m| FileIdentity::of(&m));
        if now == watched.identity {
            continue;
        }
        if let Some(seen) = reload_file(model, fi, watched, now, &mut out) {
            watched.identity = seen;
        }
    }
    drop(watch);
    Ok(finish(model, hs, out))
}

/// `LLAMA_HOTSWAP_AUTO`: called before every decode of a context on `model`. When automatic
/// reloads are on and the interval has passed, looks at the watched files (one `stat` each)
/// and, when one changed, reloads as [`reload_changed`] does (transactional per tensor, the
/// report logged and kept as the last report). Returns the report of a reload that ran; None
/// when nothing was due or nothing changed (the last report is then left as it was).
pub fn auto_reload(model: &Model) -> Option<Arc<Report>> {
    let hs = model.hotswap.as_ref()?;
    if !hs.auto.as_ref()?.due() {
        return None;
    }
    let changed = lock(&hs.watch).iter().any(|w| {
        w.path
            .as_deref()
            .is_some_and(|p| std::fs::metadata(p).ok().map(|m| FileIdentity::of(&m)) != w.identity)
    });
    if !changed {
        return None;
    }
    let report = reload_changed(model).ok()?;
    // a warning, not info: servers show only warnings of the library by default, and a
    // program whose answers change under it must be able to see why
    crate::log_warn!(
        "hot-swap: {}: {} tensor(s) reloaded, {} entries in the report, before this decode",
        crate::model::swap::AUTO_ENV,
        report.reloaded(),
        report.entries.len()
    );
    Some(report)
}

/// Handles one changed shard: parse its header once, reload its tensors from it. Returns the
/// identity to record as seen, or None when a transient failure (open, read, allocation)
/// means the next call must look at this version again.
pub(super) fn reload_file(
    model: &Model,
    fi: usize,
    watched: &WatchedFile,
    now: Option<FileIdentity>,
    out: &mut Outcomes,
) -> Option<Option<FileIdentity>> {
    let ours = &watched.tensors;
    let path = watched.path.as_deref()?;
    let loaded = model.files[fi].identity;
    // Bytes under a mapping can change only when the loaded inode itself was written: a
    // rename-into-place leaves it intact (its descriptor is held open), a metadata-only
    // change (chmod, touch) writes nothing.
    let same_inode = |id: &Option<FileIdentity>| {
        id.is_some_and(|id| id.dev == loaded.dev && id.ino == loaded.ino)
    };
    let (file, header) = match open_gguf(path) {
        Ok(x) => x,
        Err(failure) => {
            let reason = failure.reason;
            crate::log_warn!("hot-swap: {}: {reason}", path.display());
            for &i in ours {
                out.fail(model, i, None, format!("{}: {reason}", path.display()));
            }
            let resized = now.is_some_and(|id| id.size != loaded.size);
            if same_inode(&now) && (failure.about_content || resized) {
                migrate_off_mapping(model, fi, ours, out);
            }
            return failure.about_content.then_some(now);
        }
    };
    // The identity of what we actually opened (the path may have moved on since the stat).
    let meta = file.metadata().ok();
    let file_size = meta.as_ref().map_or(0, |m| m.len());
    let opened_identity = meta.map(|m| FileIdentity::of(&m));
    let seen = opened_identity.or(watched.identity);
    let in_place = same_inode(&opened_identity);
    let gguf = match header.gguf() {
        Ok(g) => g,
        Err(e) => {
            for &i in ours {
                out.fail(model, i, None, format!("{}: {e}", path.display()));
            }
            if in_place {
                migrate_off_mapping(model, fi, ours, out);
            }
            return Some(seen);
        }
    };
    let by_name: HashMap<&str, &TensorInfo<'_>> =
        gguf.tensors().iter().map(|t| (t.name, t)).collect();
    let entries_before = out.entries.len();
    let retry_before = std::mem::take(&mut out.retry);
    let mut jobs = Vec::new();
    for &i in ours {
        let info = by_name.get(model.tensors.at(i).name.as_str()).copied();
        if let Some(job) = plan(model, i, info, &gguf, &file, file_size, path, out) {
            jobs.push(job);
        }
    }
    run_jobs(model, jobs, out);
    // Written in place: what changed shows in the report (tensors with owned copies, a new
    // size or layout); then every tensor still mapped moves off the mapping, whose bytes the
    // writer may change again. Nothing changed: a metadata-only change, nothing moves.
    let content_changed = out.entries.len() > entries_before || file_size != loaded.size;
    if in_place && content_changed {
        migrate_off_mapping(model, fi, ours, out);
    }
    let retry = std::mem::replace(&mut out.retry, retry_before);
    if retry {
        None
    } else {
        Some(seen)
    }
}
