//! Detection: one `stat` per watched file; a file whose identity changed is opened once and
//! its tensors are planned and run from that one descriptor.

use std::collections::HashMap;
use std::sync::Arc;

use crate::gguf::TensorInfo;
use crate::model::swap::{lock, WatchedFile};
use crate::model::Model;
use crate::storage::FileIdentity;

use super::{
    finish, hotswap_of, migrate_off_mapping, open_gguf, plan, run_jobs, HotSwapError, Outcomes,
    Report,
};

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
        watched.identity = now;
        reload_file(model, fi, watched, &mut out);
    }
    drop(watch);
    Ok(finish(model, hs, out))
}

/// Handles one changed shard: parse its header once, reload its tensors from it.
pub(super) fn reload_file(model: &Model, fi: usize, watched: &mut WatchedFile, out: &mut Outcomes) {
    let ours = &watched.tensors;
    let Some(path) = watched.path.as_deref() else {
        return;
    };
    let opened = open_gguf(path);
    let (file, header) = match opened {
        Ok(x) => x,
        Err(reason) => {
            crate::log_warn!("hot-swap: {}: {reason}", path.display());
            for &i in ours {
                out.fail(model, i, None, format!("{}: {reason}", path.display()));
            }
            migrate_off_mapping(model, fi, ours, out);
            return;
        }
    };
    // The identity of what we actually opened (the path may have moved on since the stat).
    let meta = file.metadata().ok();
    let file_size = meta.as_ref().map_or(0, |m| m.len());
    let opened_identity = meta.map(|m| FileIdentity::of(&m));
    let gguf = match header.gguf() {
        Ok(g) => g,
        Err(e) => {
            for &i in ours {
                out.fail(model, i, None, format!("{}: {e}", path.display()));
            }
            migrate_off_mapping(model, fi, ours, out);
            watched.identity = opened_identity.or(watched.identity);
            return;
        }
    };
    let by_name: HashMap<&str, &TensorInfo<'_>> =
        gguf.tensors().iter().map(|t| (t.name, t)).collect();
    let mut jobs = Vec::new();
    for &i in ours {
        let info = by_name.get(model.tensors.at(i).name.as_str()).copied();
        if let Some(job) = plan(model, i, info, &gguf, &file, file_size, path, out) {
            jobs.push(job);
        }
    }
    run_jobs(model, jobs, out);
    migrate_off_mapping(model, fi, ours, out);
    watched.identity = opened_identity.or(watched.identity);
}
