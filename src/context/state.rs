//! A context's state, as upstream's `llama_context::state_*` writes and reads it: the whole
//! state (the architecture's name, then the memory) and a sequence's state (a magic and the
//! sequence id, then that sequence's memory), in buffers and in session files. The memory's
//! byte layout is [`crate::kv_cache::state`]'s. Upstream's session format (version 10) holds
//! no logits or embeddings: a restore leaves the last decode's outputs as they are.
//!
//! A restore is checked whole before anything changes; a state that fails leaves the
//! context as it was (upstream has by then emptied the cache or the destination sequence,
//! and applies a session file before noticing data left over at its end).
//!
//! Models with sliding-window layers: upstream keeps two caches and writes both (the
//! full-attention layers, then the sliding-window layers, whose sequence states hold only
//! the cells inside the window); ours keeps one set of cells and writes the same sections.
//! M-RoPE models' cells carry their 2D position and token id (upstream's `llama_kv_cell_ext`).
//! MiniMax-M3's indexer keys follow its layers' cache as upstream's second cache, and so do
//! the lightning indexer's keys of DeepSeek's sparse attention (upstream's
//! `llama_kv_cache_dsa`; dots3note's sliding-window cache after the pair).
//! Not supported yet (a failure with a log line): DeepSeek-V4's compressed attention and
//! contexts computing on a GPU.

use std::io::Write;

use super::{Context, Engine};
use crate::kv_cache::state::{
    KvRestore, RsRestore, SliceSource, StateError, StateLayers, StateOut, StateReader, StateSource,
    StateWriter,
};

/// `LLAMA_SESSION_MAGIC` ('ggsn') and `LLAMA_SESSION_VERSION`.
pub const SESSION_MAGIC: u32 = 0x6767_736e;
pub const SESSION_VERSION: u32 = 10;
/// `LLAMA_STATE_SEQ_MAGIC` ('ggsq') and `LLAMA_STATE_SEQ_VERSION`.
pub const SEQ_MAGIC: u32 = 0x6767_7371;
pub const SEQ_VERSION: u32 = 3;
/// The magic that starts a sequence state in a buffer (upstream's `io_magic`).
const IO_MAGIC: u32 = 0xaf14_3cd8;
/// `LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY`: only the partial (sliding-window) part.
pub const FLAG_PARTIAL_ONLY: u32 = 1;
/// `LLAMA_STATE_SEQ_FLAGS_ON_DEVICE`: tensor data stays with the context.
pub const FLAG_ON_DEVICE: u32 = 2;

fn fail<T>(msg: impl Into<String>) -> Result<T, StateError> {
    Err(StateError(msg.into()))
}

impl Context {
    /// The memory's sections (None: a context without memory, `vocab_only` or diffusion).
    fn state_sections(&self, e: &Engine) -> Result<Option<Vec<StateLayers>>, StateError> {
        if self.vocab_only || self.memoryless {
            return Ok(None);
        }
        // the RPC executor's remote rows come to the host cache and go back (sync_kv)
        if !matches!(e.exec.name(), "CPU" | "RPC") {
            return fail(format!(
                "state of a context computing on {} (its KV cache in device memory) is not supported by llama-hotswap yet",
                e.exec.name()
            ));
        }
        if !self.hp.ext.mem_extra.is_empty() {
            return fail(format!(
                "state of model architecture '{}' (DeepSeek-V4's compressor state and compressed keys) is not supported by llama-hotswap yet",
                self.model.arch
            ));
        }
        let ix = &self.hp.ext.indexer;
        let v_trans = !e.cparams.flash_attn;
        // M-RoPE cells carry their 2D position and token (upstream's has_cell_ext)
        let cell_ext = self.multi_pos;
        let layers: Vec<usize> = if e.kv.rs.is_some() {
            // recurrent memory: no KV section; hybrid: the attention layers' cache (upstream's
            // hybrid memory holds a KV cache of those layers only), then the states
            if !e.kv.attn {
                return Ok(Some(Vec::new()));
            }
            // nemotron_h's FFN-only layers hold no cache in upstream's hybrid memory (its
            // attention filter: not recurrent and no FFN)
            let ffn_only_layers =
                matches!(self.model.arch.as_str(), "nemotron_h" | "nemotron_h_moe");
            (0..self.hp.n_layer)
                .filter(|&il| self.hp.has_kv(il))
                .filter(|&il| !ffn_only_layers || self.hp.n_ff.get(il).copied().unwrap_or(0) == 0)
                .collect()
        } else {
            (0..self.hp.n_layer).collect()
        };
        if ix.head > 0 && ix.block == 0 {
            return Ok(Some(self.dsa_sections(layers, v_trans, cell_ext)));
        }
        if ix.head > 0 {
            // upstream's llama_kv_cache_msa: the layers' cache, then the indexer's (a
            // llama_kv_cache of one key head, its V never filled) on the sparse layers only:
            // our indexer rows of the leading dense layers stay out
            let idx = (self.hp.ext.n_layer_dense_lead..self.hp.n_layer)
                .map(|il| self.hp.n_layer + il)
                .collect();
            return Ok(Some(with_indexer(
                layers,
                idx,
                v_trans,
                cell_ext,
                self.hp.head_v,
                false,
            )));
        }
        if !self.hp.ext.idx_rows.is_empty() {
            // upstream's llama_memory_hybrid_idx: the attention layers' cache, the states,
            // then the indexer's cache (K only) on the layers that have one
            let idx = (0..self.hp.n_layer)
                .filter(|&il| self.hp.ext.idx_rows[il] > 0)
                .map(|il| self.hp.n_layer + il)
                .collect();
            return Ok(Some(with_indexer(layers, idx, v_trans, cell_ext, 0, true)));
        }
        if !self.hp.swa_layers.iter().any(|&swa| swa) {
            return Ok(Some(vec![StateLayers::cache(layers, 0, v_trans, cell_ext)]));
        }
        // upstream's two caches (llama_kv_cache_iswa, also inside a hybrid memory with a
        // sliding window): the full-attention layers, then the sliding-window ones; either
        // may hold no layer (its cells are written all the same)
        let (full, win) = self.split_swa(layers);
        Ok(Some(vec![
            StateLayers::cache(full, 0, v_trans, cell_ext),
            StateLayers::cache(win, self.hp.n_swa, v_trans, cell_ext),
        ]))
    }

    /// `layers` split into the full-attention ones and the sliding-window ones, in order.
    fn split_swa(&self, layers: Vec<usize>) -> (Vec<usize>, Vec<usize>) {
        let swa = |il: &usize| self.hp.swa_layers.get(*il).copied().unwrap_or(false);
        let (win, full) = layers.into_iter().partition(swa);
        (full, win)
    }

    /// The sections of DeepSeek's sparse attention (deepseek32, glm-dsa, hy_v4, dots3note):
    /// upstream's `llama_kv_cache_dsa` writes its MLA cache, then its lightning indexer's (a
    /// `llama_kv_cache` of one key head: `indexer.key_length` key values per cell, filled in
    /// step with the MLA one; no V, the model being MLA) over the layers that own an indexer
    /// (`attention.indexer.types` "full"; every layer for deepseek32). dots3note's
    /// `llama_kv_cache_dsa_iswa` writes that pair over the full-attention layers, then its
    /// sliding-window cache.
    fn dsa_sections(&self, layers: Vec<usize>, v_trans: bool, cell_ext: bool) -> Vec<StateLayers> {
        let hp = &self.hp;
        let full_indexer = |il: &usize| hp.ext.indexer.full.get(*il).copied().unwrap_or(true);
        let idx = (0..hp.n_layer)
            .filter(full_indexer)
            .map(|il| hp.n_layer + il)
            .collect();
        if !hp.swa_layers.iter().any(|&swa| swa) {
            return with_indexer(layers, idx, v_trans, cell_ext, 0, false);
        }
        let (full, win) = self.split_swa(layers);
        let mut sections = with_indexer(full, idx, v_trans, cell_ext, 0, false);
        sections.push(StateLayers::cache(win, hp.n_swa, v_trans, cell_ext));
        sections
    }

    /// Whether a sequence state with `LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY` leaves out `sect`, as
    /// upstream's memories do: the sliding-window pair (`llama_kv_cache_iswa`, also inside a
    /// hybrid memory with a sliding window) keeps only its sliding-window cache, a hybrid
    /// memory without one only its recurrent part, a plain KV cache everything.
    fn partial_skips(&self, e: &Engine, sect: &StateLayers) -> bool {
        if self.hp.swa_layers.iter().any(|&swa| swa) {
            sect.n_swa == 0
        } else {
            e.kv.rs.is_some()
        }
    }

    /// Writes the whole state (`state_write_data`); returns the bytes written, or counted
    /// with [`StateOut::Count`].
    pub fn state_write(&self, out: StateOut) -> Result<usize, StateError> {
        let mut e = self.engine();
        let sections = self.state_sections(&e)?;
        sync_kv(&mut e, true)?;
        let mut w = StateWriter::new(out);
        w.string(&self.model.arch)?;
        for sect in sections.iter().flatten().filter(|s| !s.after_rs) {
            e.kv.state_write(&mut w, None, sect)?;
        }
        if let (Some(_), Some(rs)) = (&sections, &e.kv.rs) {
            rs.state_write(&mut w, None)?;
        }
        for sect in sections.iter().flatten().filter(|s| s.after_rs) {
            e.kv.state_write(&mut w, None, sect)?;
        }
        Ok(w.n_bytes())
    }

    /// Reads a whole state (`state_read_data`) and installs it; returns the bytes read.
    /// `check` runs after parsing, before anything changes, with the bytes read.
    fn state_read_checked(
        &self,
        src: &mut dyn StateSource,
        check: impl FnOnce(usize) -> Result<(), StateError>,
    ) -> Result<usize, StateError> {
        let mut e = self.engine();
        let sections = self.state_sections(&e)?;
        let mut r = StateReader::new(src, None);
        let arch = r.string()?;
        if arch != self.model.arch {
            return fail(format!(
                "wrong model arch: '{arch}' instead of '{}'",
                self.model.arch
            ));
        }
        let mut staged: Vec<(KvRestore, StateLayers)> = Vec::new();
        let has_memory = sections.is_some();
        let (after, before): (Vec<_>, Vec<_>) =
            sections.into_iter().flatten().partition(|s| s.after_rs);
        for sect in before {
            staged.push((e.kv.state_parse(&mut r, None, &sect)?, sect));
        }
        let rs = match &e.kv.rs {
            Some(rs) if has_memory => Some(rs.state_parse(&mut r, None)?),
            _ => None,
        };
        for sect in after {
            staged.push((e.kv.state_parse(&mut r, None, &sect)?, sect));
        }
        let n = r.n_bytes();
        check(n)?;
        sync_kv(&mut e, true)?;
        install(&mut e, staged, None, rs)?;
        sync_kv(&mut e, false)?;
        Ok(n)
    }

    /// Reads a whole state and installs it; returns the bytes read.
    pub fn state_read(&self, src: &mut dyn StateSource) -> Result<usize, StateError> {
        self.state_read_checked(src, |_| Ok(()))
    }

    /// Writes the state of sequence `seq_id` (-1: every sequence) after upstream's magic and
    /// the id (`state_seq_get_data`); `out` None only counts. With [`FLAG_ON_DEVICE`] the
    /// tensor data is neither written nor counted: the context keeps it for `seq_id`,
    /// replacing what it kept before.
    pub fn state_seq_write(
        &self,
        out: Option<&mut dyn Write>,
        seq_id: i32,
        flags: u32,
    ) -> Result<usize, StateError> {
        let on_device = flags & FLAG_ON_DEVICE != 0;
        let keep = on_device && out.is_some();
        let mut aside = Vec::new();
        let sink = match out {
            None => StateOut::Count {
                tensors: !on_device,
            },
            Some(out) if on_device => StateOut::Aside {
                out,
                tensors: &mut aside,
            },
            Some(out) => StateOut::Bytes(out),
        };
        let mut w = StateWriter::new(sink);
        w.u32(IO_MAGIC)?;
        w.i32(seq_id)?;
        let mut e = self.engine();
        if self.state_sections(&e)?.is_some() {
            sync_kv(&mut e, true)?;
        }
        self.seq_memory_write(&e, &mut w, seq_id, flags)?;
        let n = w.n_bytes();
        drop(w);
        if keep {
            e.state_aside.insert(seq_id, aside);
        }
        Ok(n)
    }

    /// The memory part of a sequence state (`state_seq_write_data`).
    fn seq_memory_write(
        &self,
        e: &Engine,
        w: &mut StateWriter,
        seq_id: i32,
        flags: u32,
    ) -> Result<(), StateError> {
        if !(-1..crate::kv_cache::MAX_SEQ as i32).contains(&seq_id) {
            return fail(format!("seq_id {seq_id} is out of range"));
        }
        let seq = usize::try_from(seq_id).ok();
        let sections = self.state_sections(e)?;
        let skip =
            |sect: &StateLayers| flags & FLAG_PARTIAL_ONLY != 0 && self.partial_skips(e, sect);
        for sect in sections.iter().flatten().filter(|s| !s.after_rs) {
            if !skip(sect) {
                e.kv.state_write(w, seq, sect)?;
            }
        }
        if let (Some(_), Some(rs)) = (&sections, &e.kv.rs) {
            rs.state_write(w, seq)?;
        }
        for sect in sections.iter().flatten().filter(|s| s.after_rs) {
            if !skip(sect) {
                e.kv.state_write(w, seq, sect)?;
            }
        }
        Ok(())
    }

    /// Reads a sequence state written by [`Context::state_seq_write`] into `dest_seq_id`
    /// (-1: the whole memory); returns the bytes read.
    pub fn state_seq_read(
        &self,
        src: &mut dyn StateSource,
        dest_seq_id: i32,
        flags: u32,
    ) -> Result<usize, StateError> {
        let e = self.engine();
        let mut head = StateReader::new(src, None);
        if head.u32()? != IO_MAGIC {
            return fail("wrong sequence state magic");
        }
        let seq_read = head.i32()?;
        let n_head = head.n_bytes();
        let aside = if flags & FLAG_ON_DEVICE != 0 {
            match e.state_aside.get(&seq_read) {
                Some(a) => Some(a.clone()),
                None => {
                    return fail(format!(
                        "no tensor data kept for sequence {seq_read} (LLAMA_STATE_SEQ_FLAGS_ON_DEVICE: save it with the flag first)"
                    ))
                }
            }
        } else {
            None
        };
        drop(e);
        let mut r = StateReader::new(src, aside.as_deref());
        let n = self.seq_memory_read(&mut r, dest_seq_id, flags, |_| Ok(()))?;
        Ok(n_head + n)
    }

    /// The memory part of a sequence restore (`state_seq_read_data`); returns the bytes read.
    fn seq_memory_read(
        &self,
        r: &mut StateReader,
        dest_seq_id: i32,
        flags: u32,
        check: impl FnOnce(usize) -> Result<(), StateError>,
    ) -> Result<usize, StateError> {
        let mut e = self.engine();
        let seq = if dest_seq_id == -1 {
            None
        } else {
            Some(e.kv.check_seq(dest_seq_id).map_err(|e| StateError(e.0))?)
        };
        let mut staged: Vec<(KvRestore, StateLayers)> = Vec::new();
        let sections = self.state_sections(&e)?;
        let has_memory = sections.is_some();
        let (after, before): (Vec<_>, Vec<_>) = sections
            .into_iter()
            .flatten()
            .filter(|s| flags & FLAG_PARTIAL_ONLY == 0 || !self.partial_skips(&e, s))
            .partition(|s| s.after_rs);
        for sect in before {
            staged.push((e.kv.state_parse(r, seq, &sect)?, sect));
        }
        let rs = match &e.kv.rs {
            Some(rs) if has_memory => Some(rs.state_parse(r, seq)?),
            _ => None,
        };
        for sect in after {
            staged.push((e.kv.state_parse(r, seq, &sect)?, sect));
        }
        let n = r.n_bytes();
        check(n)?;
        sync_kv(&mut e, true)?;
        install(&mut e, staged, seq, rs)?;
        sync_kv(&mut e, false)?;
        Ok(n)
    }

    /// Saves a session file (`llama_state_save_file`): magic, version, the prompt tokens,
    /// the whole state.
    pub fn state_save_file(&self, path: &str, tokens: &[i32]) -> Result<(), StateError> {
        let file = std::fs::File::create(path)
            .map_err(|e| StateError(format!("failed to open {path}: {e}")))?;
        let mut f = std::io::BufWriter::new(file);
        let io = |e: std::io::Error| StateError(format!("cannot write {path}: {e}"));
        let n = u32::try_from(tokens.len()).map_err(|_| StateError("too many tokens".into()))?;
        for v in [SESSION_MAGIC, SESSION_VERSION, n] {
            f.write_all(&v.to_le_bytes()).map_err(io)?;
        }
        for t in tokens {
            f.write_all(&t.to_le_bytes()).map_err(io)?;
        }
        self.state_write(StateOut::Bytes(&mut f))?;
        f.flush().map_err(io)?;
        Ok(())
    }

    /// Loads a session file (`llama_state_load_file`): checks magic and version, returns the
    /// prompt tokens (at most `capacity`) after installing the state, which must end the file.
    pub fn state_load_file(&self, path: &str, capacity: usize) -> Result<Vec<i32>, StateError> {
        let data =
            std::fs::read(path).map_err(|e| StateError(format!("failed to open {path}: {e}")))?;
        let mut src = SliceSource::new(&data);
        let (tokens, at) = {
            let mut r = StateReader::new(&mut src, None);
            let (magic, version) = (r.u32()?, r.u32()?);
            if magic != SESSION_MAGIC || version != SESSION_VERSION {
                return fail(format!(
                    "unknown (magic, version) for session file: {magic:08x}, {version:08x}"
                ));
            }
            let n = r.u32()?;
            if n as usize > capacity {
                return fail(format!(
                    "token count in session file exceeded capacity! {n} > {capacity}"
                ));
            }
            let tokens = read_tokens(&mut r, n as usize)?;
            (tokens, r.n_bytes())
        };
        let left = data.len() - at;
        self.state_read_checked(&mut src, |n| {
            if n != left {
                return fail(format!(
                    "did not read all of the session file data! size {left}, got {n}"
                ));
            }
            Ok(())
        })?;
        Ok(tokens)
    }

    /// Saves a sequence state file (`llama_state_seq_save_file`): magic, version, the
    /// tokens, the sequence's memory. Returns the file's size.
    pub fn state_seq_save_file(
        &self,
        path: &str,
        seq_id: i32,
        tokens: &[i32],
    ) -> Result<usize, StateError> {
        let file = std::fs::File::create(path)
            .map_err(|e| StateError(format!("failed to open {path}: {e}")))?;
        let mut f = std::io::BufWriter::new(file);
        let n = u32::try_from(tokens.len()).map_err(|_| StateError("too many tokens".into()))?;
        let e = self.engine();
        let mut w = StateWriter::new(StateOut::Bytes(&mut f));
        for v in [SEQ_MAGIC, SEQ_VERSION, n] {
            w.u32(v)?;
        }
        for &t in tokens {
            w.i32(t)?;
        }
        self.seq_memory_write(&e, &mut w, seq_id, 0)?;
        let total = w.n_bytes();
        drop(w);
        f.flush()
            .map_err(|e| StateError(format!("cannot write {path}: {e}")))?;
        Ok(total)
    }

    /// Loads a sequence state file into `dest_seq_id` (`llama_state_seq_load_file`).
    /// `capacity` None only reads the token count (no state is loaded). Returns the tokens
    /// and the bytes read from the file.
    pub fn state_seq_load_file(
        &self,
        path: &str,
        dest_seq_id: i32,
        capacity: Option<usize>,
    ) -> Result<SeqFile, StateError> {
        let data =
            std::fs::read(path).map_err(|e| StateError(format!("failed to open {path}: {e}")))?;
        let mut src = SliceSource::new(&data);
        let mut r = StateReader::new(&mut src, None);
        let (magic, version) = (r.u32()?, r.u32()?);
        if magic != SEQ_MAGIC || version != SEQ_VERSION {
            return fail(format!(
                "unknown (magic, version) for sequence state file: {magic:08x}, {version:08x}"
            ));
        }
        let n = r.u32()? as usize;
        let Some(capacity) = capacity else {
            let max = (data.len() - r.n_bytes()) / 4;
            if n > max {
                return fail(format!(
                    "token count in sequence state file exceeds the file size! {n} > {max}"
                ));
            }
            return Ok(SeqFile {
                tokens: Vec::new(),
                n_tokens: n,
                n_read: r.n_bytes(),
            });
        };
        if n > capacity {
            return fail(format!(
                "token count in sequence state file exceeded capacity! {n} > {capacity}"
            ));
        }
        let tokens = read_tokens(&mut r, n)?;
        let n_head = r.n_bytes();
        let n_state = self.seq_memory_read(&mut r, dest_seq_id, 0, |_| Ok(()))?;
        let n_state = n_state - n_head;
        if n_state == 0 {
            return fail("failed to restore sequence state");
        }
        Ok(SeqFile {
            tokens,
            n_tokens: n,
            n_read: n_head + n_state,
        })
    }
}

/// Brings the KV rows a backend keeps in its own memory (rpc-servers) into the host cache, or
/// sends the host cache's back.
fn sync_kv(e: &mut Engine, to_host: bool) -> Result<(), StateError> {
    let Engine { exec, kv, .. } = e;
    exec.sync_kv(kv, to_host)
        .map_err(|err| StateError(format!("the KV rows on the device: {err}")))
}

/// Installs parsed sections: the first full-attention one places the cells (a whole
/// restore empties the cache first); sliding-window sections write their layers' rows into
/// the cells with their positions (ours are one set of cells for upstream's two caches).
/// Everything is checked before the first change.
fn install(
    e: &mut Engine,
    staged: Vec<(KvRestore, StateLayers)>,
    seq: Option<usize>,
    rs: Option<RsRestore>,
) -> Result<(), StateError> {
    let placed = |s: &StateLayers| s.n_swa == 0 && !s.follows;
    let placing = staged.first().filter(|(_, s)| placed(s)).map(|(r, _)| r);
    for (restore, sect) in &staged {
        if placed(sect) {
            if let Some(q) = seq {
                if !e.kv.state_fits(restore, q) {
                    return fail("failed to restore kv cache: not enough available cells");
                }
            }
        } else {
            let ok = match placing {
                Some(base) => restore.cells_within(base),
                None => e.kv.state_match_rows(restore, seq).is_some(),
            };
            if !ok && sect.follows {
                return fail(
                    "the indexer cache of the state holds cells its attention cache does not: llama-hotswap keeps one set of cells for both",
                );
            }
            if !ok {
                return fail(
                    "the sliding-window cache of the state holds cells its full-attention cache (or, restoring only the partial state, the sequence) does not: llama-hotswap keeps one set of cells for both",
                );
            }
        }
    }
    for (restore, sect) in staged {
        if placed(&sect) {
            e.kv.state_apply(restore, seq, &sect)?;
        } else {
            let rows =
                e.kv.state_match_rows(&restore, seq)
                    .ok_or_else(|| StateError("the second cache's cells were not found".into()))?;
            e.kv.state_apply_rows(&restore, &rows, &sect);
        }
    }
    if let (Some(restore), Some(mem)) = (rs, e.kv.rs.as_mut()) {
        mem.state_apply(restore, seq)?;
    }
    // the restored cells regroup their pools (upstream stales the sequence, or every one
    // where cells are shared)
    e.kv.pools_stale_from(seq, 0);
    if e.kv.pools_shared() {
        e.kv.pools_stale_from(None, 0);
    }
    Ok(())
}

/// What [`Context::state_seq_load_file`] read.
#[derive(Debug)]
pub struct SeqFile {
    /// The tokens (empty when only counted).
    pub tokens: Vec<i32>,
    pub n_tokens: usize,
    /// Bytes read from the file (upstream's return value).
    pub n_read: usize,
}

fn read_tokens(r: &mut StateReader, n: usize) -> Result<Vec<i32>, StateError> {
    let bytes = r.read(
        n.checked_mul(4)
            .ok_or(StateError("too many tokens".into()))?,
    )?;
    Ok(bytes
        .chunks_exact(4)
        .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect())
}

/// The main cache's section, then the indexer's (`idx` layers, following it; `zero_v` unused V
/// rows per cell; after the recurrent states when `after_rs`).
fn with_indexer(
    layers: Vec<usize>,
    idx: Vec<usize>,
    v_trans: bool,
    cell_ext: bool,
    zero_v: usize,
    after_rs: bool,
) -> Vec<StateLayers> {
    vec![
        StateLayers::cache(layers, 0, v_trans, cell_ext),
        StateLayers {
            zero_v,
            follows: true,
            after_rs,
            ..StateLayers::cache(idx, 0, v_trans, cell_ext)
        },
    ]
}
