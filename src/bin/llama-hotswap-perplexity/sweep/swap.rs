//! One round's swaps: candidate tensors in (through the core's `tensor_set`, the same path as
//! `llama_ext_tensor_set`; a type change is allowed), then the originals back (read again
//! from the base model's file, or from a copy when the file does not hold them), checked
//! bit-identical by a hash of the restored bytes against the hash taken before the swap.

use std::borrow::Cow;
use std::collections::HashMap;

use llama::hotswap::tensor_set;
use llama::model::Model;
use llama::storage::read_exact_at_parallel;

/// Test hook: `LLAMA_HOTSWAP_SWEEP_TEST_CORRUPT_RESTORE=<tensor>` flips one bit of that
/// tensor's bytes on its first restore (the check fires, the second restore repairs it);
/// `<tensor>:always` on every restore (the check fires and the sweep stops). Tests use it to
/// see the return check work; nothing else reads it.
pub const CORRUPT_RESTORE_ENV: &str = "LLAMA_HOTSWAP_SWEEP_TEST_CORRUPT_RESTORE";

/// A tensor as it was before a swap: what restores it and what it must hash to after.
pub struct Saved {
    name: String,
    ggml_type: i32,
    nbytes: usize,
    /// A copy, when the model's file does not hold the base bytes (else they are read
    /// from there at the restore).
    bytes: Option<Vec<u8>>,
    hash: u64,
}

/// A swap back that did not verify.
#[derive(Debug)]
pub struct RestoreFailure {
    pub reason: String,
    /// A second restore made every tensor bit-identical again: later rounds are sound.
    pub repaired: bool,
}

/// Why a swap-in did not happen.
#[derive(Debug)]
pub enum SwapInError {
    /// The candidate was refused or failed; the model is as it was.
    Refused(String),
    /// The candidate failed and undoing the tensors already swapped did not verify.
    Restore(String, RestoreFailure),
}

pub struct Swapper<'m> {
    model: &'m Model,
    /// Each tensor's hash the first time it was swapped: every later round must find it so.
    first_hash: HashMap<String, u64>,
    /// Per tensor: whether the model's file holds its base bytes.
    file_holds_base: HashMap<String, bool>,
    corrupt: Option<String>,
    corrupt_always: bool,
}

impl<'m> Swapper<'m> {
    pub fn new(model: &'m Model) -> Swapper<'m> {
        let hook = std::env::var(CORRUPT_RESTORE_ENV)
            .ok()
            .filter(|s| !s.is_empty());
        let corrupt_always = hook.as_deref().is_some_and(|h| h.ends_with(":always"));
        Swapper {
            model,
            first_hash: HashMap::new(),
            file_holds_base: HashMap::new(),
            corrupt: hook.map(|h| h.trim_end_matches(":always").to_string()),
            corrupt_always,
        }
    }

    /// The model swaps go into.
    pub fn model(&self) -> &'m Model {
        self.model
    }

    /// Swaps every `(name, type, bytes)` in; on a failure, the ones already in go back and
    /// the reason is returned. The saved originals restore them.
    pub fn swap_in(
        &mut self,
        tensors: &[(String, i32, Vec<u8>)],
    ) -> Result<Vec<Saved>, SwapInError> {
        let mut saved = Vec::with_capacity(tensors.len());
        for (name, ty, bytes) in tensors {
            let result = self.save(name).and_then(|original| {
                let r = set(self.model, name, *ty, bytes).map_err(|e| format!("swap in: {e}"));
                // Saved whatever the result: a half-done set is undone too.
                saved.push(original);
                r
            });
            if let Err(e) = result {
                return Err(match self.restore_all(saved) {
                    Ok(()) => SwapInError::Refused(e),
                    Err(r) => SwapInError::Restore(e, r),
                });
            }
        }
        Ok(saved)
    }

    fn save(&mut self, name: &str) -> Result<Saved, String> {
        let t = self
            .model
            .tensors
            .get(name)
            .ok_or_else(|| format!("no tensor '{name}'"))?;
        let (ggml_type, nbytes) = {
            let state = t.read();
            (
                state.layout.ggml_type.id() as i32,
                state.layout.nbytes as usize,
            )
        };
        let hash = live_hash(self.model, name)?;
        let first = *self.first_hash.entry(name.to_string()).or_insert(hash);
        if first != hash {
            return Err(format!(
                "'{name}' no longer holds the bytes it had when first swapped (hash {first:016x}, \
                 now {hash:016x}): an earlier restore went wrong"
            ));
        }
        // The restore reads the base's bytes from the model's own file when they are the
        // same (checked once per tensor), so no copy of a tensor that may be gigabytes is
        // held during the evaluation; otherwise it keeps a copy.
        let in_file = match self.file_holds_base.get(name) {
            Some(&b) => b,
            None => {
                let b = self
                    .read_base_file(name, nbytes)
                    .is_ok_and(|bytes| hash64(&bytes) == hash);
                self.file_holds_base.insert(name.to_string(), b);
                b
            }
        };
        let bytes = if in_file {
            None
        } else {
            let mut copy = vec![0u8; nbytes];
            t.read()
                .read_into(&mut copy)
                .map_err(|e| format!("reading '{name}' before the swap: {e}"))?;
            Some(copy)
        };
        Ok(Saved {
            name: name.to_string(),
            ggml_type,
            nbytes,
            bytes,
            hash,
        })
    }

    /// The tensor's bytes as its file (the base model's shard) holds them.
    fn read_base_file(&self, name: &str, nbytes: usize) -> Result<Vec<u8>, String> {
        let t = self
            .model
            .tensors
            .get(name)
            .ok_or_else(|| format!("no tensor '{name}'"))?;
        let file = self
            .model
            .files
            .get(t.source.file_index)
            .ok_or_else(|| format!("'{name}': no source file"))?;
        let mut bytes = vec![0u8; nbytes];
        read_exact_at_parallel(&file.file, &mut bytes, file.base + t.source.offset)
            .map_err(|e| format!("reading '{name}' from the base model's file: {e}"))?;
        Ok(bytes)
    }

    /// The bytes that restore a saved tensor.
    fn original<'s>(&self, s: &'s Saved) -> Result<Cow<'s, [u8]>, String> {
        match &s.bytes {
            Some(b) => Ok(Cow::Borrowed(b)),
            None => self.read_base_file(&s.name, s.nbytes).map(Cow::Owned),
        }
    }

    /// Puts every saved tensor back (last swapped first) and checks each is bit-identical to
    /// before. A mismatch is retried once with the saved bytes; the error says what happened
    /// (and whether the retry repaired it, in which case the model is sound again).
    pub fn restore_all(&mut self, saved: Vec<Saved>) -> Result<(), RestoreFailure> {
        let mut problems = Vec::new();
        let mut repaired = true;
        for s in saved.into_iter().rev() {
            if let Err(f) = self.restore(&s) {
                repaired &= f.repaired;
                problems.push(f.reason);
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(RestoreFailure {
                reason: problems.join("; "),
                repaired,
            })
        }
    }

    fn restore(&mut self, s: &Saved) -> Result<(), RestoreFailure> {
        let put = self.put(s);
        let first = put.and_then(|()| self.check(s));
        match first {
            Ok(()) => Ok(()),
            Err(e) => {
                // One more try with the saved bytes; the round is reported failed either way.
                let again = self.put(s).and_then(|()| self.check(s));
                Err(match again {
                    Ok(()) => RestoreFailure {
                        reason: format!(
                            "restore check failed for '{}': {e} (a second restore repaired it)",
                            s.name
                        ),
                        repaired: true,
                    },
                    Err(e2) => RestoreFailure {
                        reason: format!(
                            "restore check failed for '{}': {e}; retry: {e2} (the model is \
                             no longer the base)",
                            s.name
                        ),
                        repaired: false,
                    },
                })
            }
        }
    }

    /// Writes the saved bytes back (through the test hook, when it names this tensor).
    fn put(&mut self, s: &Saved) -> Result<(), String> {
        let bytes = self.original(s)?;
        if self.corrupt.as_deref() == Some(s.name.as_str()) {
            if !self.corrupt_always {
                self.corrupt = None;
            }
            let mut bad = bytes.into_owned();
            if let Some(b) = bad.first_mut() {
                *b ^= 0x01;
            }
            return set(self.model, &s.name, s.ggml_type, &bad);
        }
        set(self.model, &s.name, s.ggml_type, &bytes)
    }

    fn check(&self, s: &Saved) -> Result<(), String> {
        let now = live_hash(self.model, &s.name)?;
        if now == s.hash {
            Ok(())
        } else {
            Err(format!(
                "restored bytes hash to {now:016x}, {:016x} before the swap",
                s.hash
            ))
        }
    }
}

/// Whether the model is known to still be the base: every tensor swapped so far hashes as it
/// did the first time.
pub fn verify_all(sw: &Swapper<'_>) -> Result<(), String> {
    for (name, &h) in &sw.first_hash {
        let now = live_hash(sw.model, name)?;
        if now != h {
            return Err(format!(
                "'{name}' hashes to {now:016x}, {h:016x} originally"
            ));
        }
    }
    Ok(())
}

fn set(model: &Model, name: &str, ggml_type: i32, bytes: &[u8]) -> Result<(), String> {
    let report = tensor_set(model, name, ggml_type, bytes).map_err(|e| e.to_string())?;
    match report.entries.iter().find(|e| e.name == name) {
        Some(e) if e.outcome.reloaded() => Ok(()),
        Some(e) => Err(format!(
            "'{name}' {} ({} -> {}): {}",
            e.outcome.name(),
            e.old_type.name(),
            e.new_type.name(),
            e.reason
        )),
        None => Err(format!("'{name}': no report entry")),
    }
}

/// The hash of a tensor's current bytes (borrowed in place when they are in CPU memory).
pub fn live_hash(model: &Model, name: &str) -> Result<u64, String> {
    let t = model
        .tensors
        .get(name)
        .ok_or_else(|| format!("no tensor '{name}'"))?;
    let state = t.read();
    if let Some(b) = state.host_bytes() {
        return Ok(hash64(b));
    }
    let mut bytes = vec![0u8; state.layout.nbytes as usize];
    state
        .read_into(&mut bytes)
        .map_err(|e| format!("reading '{name}': {e}"))?;
    Ok(hash64(&bytes))
}

/// A fast 64-bit hash (four independent multiply-rotate lanes over 8-byte words, folded with
/// the tail and the length). Not cryptographic: it detects accidents, not adversaries.
pub fn hash64(data: &[u8]) -> u64 {
    const P1: u64 = 0x9E37_79B1_85EB_CA87;
    const P2: u64 = 0xC2B2_AE3D_27D4_EB4F;
    const P3: u64 = 0x1656_67B1_9E37_79F9;
    let mut lanes = [P1 ^ 1, P2 ^ 2, P3 ^ 3, P1 ^ P2];
    let mut stripes = data.chunks_exact(32);
    for stripe in &mut stripes {
        for (k, lane) in lanes.iter_mut().enumerate() {
            let w = u64::from_le_bytes(stripe[k * 8..k * 8 + 8].try_into().unwrap());
            *lane = (*lane ^ w.wrapping_mul(P2))
                .rotate_left(31)
                .wrapping_mul(P1);
        }
    }
    let mut h = (data.len() as u64).wrapping_mul(P3);
    for lane in lanes {
        h = (h ^ lane).rotate_left(27).wrapping_mul(P1).wrapping_add(P3);
    }
    for &b in stripes.remainder() {
        h = (h ^ u64::from(b)).wrapping_mul(P2).rotate_left(11);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(P2);
    h ^ (h >> 29)
}

#[cfg(test)]
mod tests {
    use super::hash64;

    #[test]
    fn the_hash_sees_every_bit_and_the_length() {
        let base: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
        let h = hash64(&base);
        assert_eq!(h, hash64(&base.clone()));
        for i in [0, 31, 32, 500, 991, 992, 999] {
            for bit in [0, 7] {
                let mut b = base.clone();
                b[i] ^= 1 << bit;
                assert_ne!(hash64(&b), h, "byte {i} bit {bit}");
            }
        }
        assert_ne!(hash64(&base[..999]), h);
        assert_ne!(hash64(&[0u8; 64]), hash64(&[0u8; 65]));
    }
}
