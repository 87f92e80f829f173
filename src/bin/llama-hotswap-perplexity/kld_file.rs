//! Upstream's base-logits file (`--kl-divergence-base`, tools/perplexity/perplexity.cpp), so
//! that files written by either tool are read by the other:
//!
//! ```text
//! "_logits_"                      8 bytes
//! n_ctx    i32                    context of each chunk
//! n_vocab  i32
//! n_chunk  i32
//! tokens   i32 × n_chunk·n_ctx    the evaluated tokens (as tokenized, BOS not substituted)
//! rows     per chunk, n_ctx−1−n_ctx/2 rows of `row_len(n_vocab)` u16:
//!          [scale f32][min_log_prob f32][n_vocab quantized log-probs][pad to even]
//! ```
//!
//! A row holds the base model's log-probabilities of every token at one scored position:
//! `log_prob[i] = scale·q[i] + min_log_prob`, the range clamped to 16 below the maximum logit.
//! All numbers are little-endian (upstream writes host order; every host it runs on is LE).

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// The file's magic.
pub const MAGIC: &[u8; 8] = b"_logits_";

/// u16 per row: two f32 (scale, minimum log-prob), the log-probs, padding to an even count.
pub fn row_len(n_vocab: usize) -> usize {
    2 * n_vocab.div_ceil(2) + 4
}

/// Scored positions per chunk (the second half of the chunk, less the last token, which has
/// nothing to predict).
pub fn rows_per_chunk(n_ctx: usize) -> usize {
    n_ctx - 1 - n_ctx / 2
}

/// Why a base-logits file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KldFileError {
    #[error("failed to open {0}: {1}")]
    Open(String, std::io::Error),
    #[error("{0} does not look like a file containing log-probabilities")]
    BadMagic(String),
    #[error("failed reading n_vocab, n_chunk from {0}")]
    ShortHeader(String),
    #[error("{path}: invalid header (n_ctx = {n_ctx}, n_vocab = {n_vocab}, n_chunk = {n_chunk})")]
    BadHeader {
        path: String,
        n_ctx: i64,
        n_vocab: i64,
        n_chunk: i64,
    },
    #[error("{path}: {len} bytes, but a file of {n_chunk} chunks of {n_ctx} tokens over a vocabulary of {n_vocab} has {expected}: truncated, or not a base-logits file")]
    WrongSize {
        path: String,
        n_ctx: usize,
        n_vocab: usize,
        n_chunk: usize,
        expected: u64,
        len: u64,
    },
    #[error("failed reading evaluation tokens from {0}")]
    ShortTokens(String),
    #[error("failed reading log-probs for chunk {chunk} from {path}")]
    ShortChunk { path: String, chunk: usize },
    #[error("{path}: write failed: {err}")]
    Write { path: String, err: std::io::Error },
}

/// Quantizes one row of logits into `out` (`row_len(n_vocab)` u16) as upstream's
/// `log_softmax(n_vocab, logits, log_prob, tok)`, and returns the negative log-likelihood of
/// `tok` (the same float operations, so the bytes equal upstream's for equal logits).
pub fn encode_row(logits: &[f32], out: &mut [u16], tok: usize) -> f64 {
    let n_vocab = logits.len();
    let mut max_logit = logits[0];
    let mut min_logit = logits[0];
    for &l in &logits[1..] {
        max_logit = max_logit.max(l);
        min_logit = min_logit.min(l);
    }
    min_logit = min_logit.max(max_logit - 16.0);
    let mut sum_exp = 0.0f64;
    for &l in logits {
        sum_exp += f64::from((l - max_logit).exp());
    }
    let log_sum_exp = sum_exp.ln() as f32;
    let min_log_prob = min_logit - max_logit - log_sum_exp;
    let scale = (max_logit - min_logit) / 65535.0;
    let s = scale.to_bits();
    let m = min_log_prob.to_bits();
    out[0] = s as u16;
    out[1] = (s >> 16) as u16;
    out[2] = m as u16;
    out[3] = (m >> 16) as u16;
    let q = &mut out[4..4 + n_vocab];
    if scale != 0.0 {
        let inv_scale = 1.0 / scale;
        for (d, &l) in q.iter_mut().zip(logits) {
            // upstream's nearest_int: round half to even
            *d = if l > min_logit {
                (inv_scale * (l - min_logit)).round_ties_even() as i32 as u16
            } else {
                0
            };
        }
    } else {
        q.fill(0);
    }
    out[4 + n_vocab..].fill(0);
    f64::from(max_logit + log_sum_exp - logits[tok])
}

/// The (scale, minimum log-prob) header of a row.
pub fn row_scale(row: &[u16]) -> (f32, f32) {
    let f = |lo: u16, hi: u16| f32::from_bits(u32::from(lo) | (u32::from(hi) << 16));
    (f(row[0], row[1]), f(row[2], row[3]))
}

/// Writes a base-logits file chunk by chunk.
pub struct KldWriter {
    out: BufWriter<File>,
    path: String,
    n_vocab: usize,
    rows_per_chunk: usize,
    bytes: Vec<u8>,
}

impl KldWriter {
    /// Creates the file and writes the header and the tokens of the `n_chunk` chunks
    /// (`tokens` must hold at least `n_chunk·n_ctx`).
    pub fn create(
        path: &Path,
        n_ctx: usize,
        n_vocab: usize,
        n_chunk: usize,
        tokens: &[i32],
    ) -> Result<KldWriter, KldFileError> {
        let name = path.display().to_string();
        let file = File::create(path).map_err(|e| KldFileError::Open(name.clone(), e))?;
        let mut w = KldWriter {
            out: BufWriter::with_capacity(1 << 20, file),
            path: name,
            n_vocab,
            rows_per_chunk: rows_per_chunk(n_ctx),
            bytes: Vec::new(),
        };
        let mut head = Vec::with_capacity(20 + 4 * n_chunk * n_ctx);
        head.extend_from_slice(MAGIC);
        for v in [n_ctx, n_vocab, n_chunk] {
            head.extend_from_slice(&(v as i32).to_le_bytes());
        }
        for &t in &tokens[..n_chunk * n_ctx] {
            head.extend_from_slice(&t.to_le_bytes());
        }
        w.write_bytes(&head)?;
        Ok(w)
    }

    fn write_bytes(&mut self, b: &[u8]) -> Result<(), KldFileError> {
        self.out.write_all(b).map_err(|err| KldFileError::Write {
            path: self.path.clone(),
            err,
        })
    }

    /// Appends one chunk's rows (`rows_per_chunk · row_len` u16).
    pub fn write_chunk(&mut self, rows: &[u16]) -> Result<(), KldFileError> {
        debug_assert_eq!(rows.len(), self.rows_per_chunk * row_len(self.n_vocab));
        let mut bytes = std::mem::take(&mut self.bytes);
        bytes.clear();
        bytes.reserve(rows.len() * 2);
        for &v in rows {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        let r = self.write_bytes(&bytes);
        self.bytes = bytes;
        r
    }

    /// Flushes the file.
    pub fn finish(mut self) -> Result<(), KldFileError> {
        let path = self.path.clone();
        self.out
            .flush()
            .map_err(|err| KldFileError::Write { path, err })
    }
}

/// What a [`KldBase`] reads from: the file, or bytes in memory (the fuzz harness).
pub trait ReadSeek: Read + Seek + Send {}
impl<T: Read + Seek + Send> ReadSeek for T {}

/// A base-logits file opened for reading: header and tokens in memory, rows read chunk by
/// chunk ([`KldBase::rewind`] starts again, so one open file serves many evaluations).
pub struct KldBase {
    pub path: PathBuf,
    pub n_ctx: usize,
    pub n_vocab: usize,
    pub n_chunk: usize,
    pub tokens: Vec<i32>,
    file: BufReader<Box<dyn ReadSeek>>,
    data_start: u64,
    next_chunk: usize,
}

impl std::fmt::Debug for KldBase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KldBase")
            .field("path", &self.path)
            .field("n_ctx", &self.n_ctx)
            .field("n_vocab", &self.n_vocab)
            .field("n_chunk", &self.n_chunk)
            .finish_non_exhaustive()
    }
}

/// The size a file with this header has: header, tokens, and every chunk's rows (None when
/// it does not fit in u64).
pub fn expected_len(n_ctx: usize, n_vocab: usize, n_chunk: usize) -> Option<u64> {
    let n_ctx = n_ctx as u64;
    let tokens = n_ctx.checked_mul(n_chunk as u64)?.checked_mul(4)?;
    let rows = (rows_per_chunk(n_ctx as usize) as u64)
        .checked_mul(row_len(n_vocab) as u64)?
        .checked_mul(2)?
        .checked_mul(n_chunk as u64)?;
    20u64.checked_add(tokens)?.checked_add(rows)
}

impl KldBase {
    /// Opens a file and reads its header and tokens. Only a regular file is read (a FIFO
    /// would block, a device never ends), and its size must be exactly what the header
    /// describes: a header that miscounts its chunks would otherwise make rows be read from
    /// the tokens, or tokens from the rows.
    pub fn open(path: &Path) -> Result<KldBase, KldFileError> {
        let name = path.display().to_string();
        let file = llama::storage::file::open_regular(path, 0)
            .map_err(|e| KldFileError::Open(name.clone(), e))?;
        let file_len = file
            .metadata()
            .map_err(|e| KldFileError::Open(name.clone(), e))?
            .len();
        Self::from_reader(path, Box::new(file), file_len)
    }

    /// [`KldBase::open`] over any reader of `len` bytes (`path` names it in messages).
    pub fn from_reader(
        path: &Path,
        reader: Box<dyn ReadSeek>,
        len: u64,
    ) -> Result<KldBase, KldFileError> {
        let name = path.display().to_string();
        let mut r = BufReader::with_capacity(1 << 20, reader);
        let mut magic = [0u8; 8];
        if r.read_exact(&mut magic).is_err() || &magic != MAGIC {
            return Err(KldFileError::BadMagic(name));
        }
        let mut head = [0u8; 12];
        r.read_exact(&mut head)
            .map_err(|_| KldFileError::ShortHeader(name.clone()))?;
        let field = |i: usize| i32::from_le_bytes(head[4 * i..4 * i + 4].try_into().unwrap());
        let (n_ctx, n_vocab, n_chunk) = (field(0), field(1), field(2));
        let bad = || KldFileError::BadHeader {
            path: name.clone(),
            n_ctx: n_ctx.into(),
            n_vocab: n_vocab.into(),
            n_chunk: n_chunk.into(),
        };
        // n_ctx ≥ 4 leaves at least one scored row per chunk
        if n_ctx < 4 || n_vocab < 1 || n_chunk < 1 {
            return Err(bad());
        }
        let (n_ctx, n_vocab, n_chunk) = (n_ctx as usize, n_vocab as usize, n_chunk as usize);
        let expected = expected_len(n_ctx, n_vocab, n_chunk).ok_or_else(bad)?;
        if expected != len {
            return Err(KldFileError::WrongSize {
                path: name,
                n_ctx,
                n_vocab,
                n_chunk,
                expected,
                len,
            });
        }
        let n_tokens = n_ctx * n_chunk;
        let data_start = 20 + 4 * n_tokens as u64;
        let mut raw = Vec::new();
        raw.try_reserve_exact(4 * n_tokens)
            .map_err(|_| KldFileError::ShortTokens(name.clone()))?;
        raw.resize(4 * n_tokens, 0);
        r.read_exact(&mut raw)
            .map_err(|_| KldFileError::ShortTokens(name.clone()))?;
        let tokens = raw
            .chunks_exact(4)
            .map(|b| i32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        Ok(KldBase {
            path: path.to_path_buf(),
            n_ctx,
            n_vocab,
            n_chunk,
            tokens,
            file: r,
            data_start,
            next_chunk: 0,
        })
    }

    /// u16 in one chunk's rows.
    pub fn chunk_len(&self) -> usize {
        rows_per_chunk(self.n_ctx) * row_len(self.n_vocab)
    }

    /// Positions the reader at the first chunk again.
    pub fn rewind(&mut self) -> Result<(), KldFileError> {
        self.file
            .seek(SeekFrom::Start(self.data_start))
            .map_err(|e| KldFileError::Open(self.path.display().to_string(), e))?;
        self.next_chunk = 0;
        Ok(())
    }

    /// Reads the next chunk's rows into `out` (resized to [`KldBase::chunk_len`]).
    pub fn read_chunk(&mut self, out: &mut Vec<u16>) -> Result<(), KldFileError> {
        let chunk = self.next_chunk;
        let short = || KldFileError::ShortChunk {
            path: self.path.display().to_string(),
            chunk,
        };
        if chunk >= self.n_chunk {
            return Err(short());
        }
        let n = self.chunk_len();
        let mut bytes = vec![0u8; 2 * n];
        self.file.read_exact(&mut bytes).map_err(|_| short())?;
        out.clear();
        out.extend(
            bytes
                .chunks_exact(2)
                .map(|b| u16::from_le_bytes([b[0], b[1]])),
        );
        self.next_chunk += 1;
        Ok(())
    }
}

/// The fuzz harness of the reader (fuzz/fuzz_targets/kld_base.rs; `cargo test` replays
/// fuzz/corpus/kld_base): any bytes are refused with an error or accepted; an accepted
/// file gives every chunk, twice (rewound), and writing its header, tokens and rows back
/// gives the same bytes.
#[allow(dead_code)] // the fuzz target and the corpus replay (tests) call it
pub fn fuzz_check(bytes: &[u8]) {
    let len = bytes.len() as u64;
    let reader = Box::new(std::io::Cursor::new(bytes.to_vec()));
    let Ok(mut base) = KldBase::from_reader(Path::new("fuzz"), reader, len) else {
        return;
    };
    assert_eq!(base.tokens.len(), base.n_ctx * base.n_chunk);
    assert_eq!(
        expected_len(base.n_ctx, base.n_vocab, base.n_chunk),
        Some(len)
    );
    let mut again = Vec::with_capacity(bytes.len());
    again.extend_from_slice(MAGIC);
    for v in [base.n_ctx, base.n_vocab, base.n_chunk] {
        again.extend_from_slice(&(v as i32).to_le_bytes());
    }
    for t in &base.tokens {
        again.extend_from_slice(&t.to_le_bytes());
    }
    let mut rows = Vec::new();
    for pass in 0..2 {
        for _ in 0..base.n_chunk {
            base.read_chunk(&mut rows)
                .expect("an accepted file has every chunk");
            assert_eq!(rows.len(), base.chunk_len());
            if pass == 0 {
                for v in &rows {
                    again.extend_from_slice(&v.to_le_bytes());
                }
            }
        }
        assert!(base.read_chunk(&mut rows).is_err(), "no chunk past n_chunk");
        base.rewind().unwrap();
    }
    assert_eq!(
        again, bytes,
        "an accepted file is exactly its header, tokens and rows"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_row_matches_upstream_rules() {
        let logits = [1.0f32, 3.0, -20.0, 2.5, 3.0];
        let mut row = vec![0u16; row_len(logits.len())];
        assert_eq!(row.len(), 2 * 3 + 4);
        let nll = encode_row(&logits, &mut row, 3);
        let (scale, min_lp) = row_scale(&row);
        // clamped at 16 below the maximum
        assert_eq!(scale, 16.0 / 65535.0);
        // the maximum encodes to 65535, values below the clamp to 0
        assert_eq!(row[4 + 1], 65535);
        assert_eq!(row[4 + 2], 0);
        let lp = |i: usize| scale * f32::from(row[4 + i]) + min_lp;
        let lse = logits.iter().map(|l| (l - 3.0f32).exp()).sum::<f32>().ln() + 3.0;
        assert!((lp(3) - (2.5 - lse)).abs() < 1e-3);
        assert!((nll - f64::from(lse - 2.5)).abs() < 1e-5);
        // padding is zero
        assert_eq!(row[4 + 5], 0);
    }

    #[test]
    fn write_then_read_roundtrip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("base.kld");
        let (n_ctx, n_vocab, n_chunk) = (8usize, 5usize, 2usize);
        let tokens: Vec<i32> = (0..(n_ctx * n_chunk) as i32).collect();
        let mut w = KldWriter::create(&path, n_ctx, n_vocab, n_chunk, &tokens).unwrap();
        let per = rows_per_chunk(n_ctx) * row_len(n_vocab);
        let chunks: Vec<Vec<u16>> = (0..n_chunk)
            .map(|c| (0..per).map(|i| (i * 7 + c) as u16).collect())
            .collect();
        for c in &chunks {
            w.write_chunk(c).unwrap();
        }
        w.finish().unwrap();
        let mut base = KldBase::open(&path).unwrap();
        assert_eq!(
            (base.n_ctx, base.n_vocab, base.n_chunk),
            (n_ctx, n_vocab, n_chunk)
        );
        assert_eq!(base.tokens, tokens);
        let mut buf = Vec::new();
        for _ in 0..2 {
            for c in &chunks {
                base.read_chunk(&mut buf).unwrap();
                assert_eq!(&buf, c);
            }
            assert!(base.read_chunk(&mut buf).is_err());
            base.rewind().unwrap();
        }
    }

    /// A small valid file: `n_chunk` chunks of `n_ctx` over `n_vocab`, rows from the encoder.
    fn small_file(n_ctx: usize, n_vocab: usize, n_chunk: usize) -> Vec<u8> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let tokens: Vec<i32> = (0..(n_ctx * n_chunk) as i32)
            .map(|i| i % n_vocab as i32)
            .collect();
        let mut w = KldWriter::create(&path, n_ctx, n_vocab, n_chunk, &tokens).unwrap();
        let rl = row_len(n_vocab);
        let mut rows = vec![0u16; rows_per_chunk(n_ctx) * rl];
        for c in 0..n_chunk {
            for (k, row) in rows.chunks_mut(rl).enumerate() {
                let logits: Vec<f32> = (0..n_vocab)
                    .map(|i| ((i * 7 + k * 3 + c) % 11) as f32 - 5.0)
                    .collect();
                encode_row(&logits, row, (k + c) % n_vocab);
            }
            w.write_chunk(&rows).unwrap();
        }
        w.finish().unwrap();
        std::fs::read(&path).unwrap()
    }

    fn corpus_dir() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/kld_base")
    }

    fn seeds() -> Vec<(&'static str, Vec<u8>)> {
        let good = small_file(8, 5, 2);
        let mut under = good.clone();
        under[16] = 1; // n_chunk 1: the header undercounts its chunks
        vec![
            ("seed_8x5x2", good.clone()),
            ("seed_4x1x1", small_file(4, 1, 1)),
            ("seed_6x4x3", small_file(6, 4, 3)),
            ("seed_undercount", under),
            ("seed_cut", good[..good.len() - 3].to_vec()),
        ]
    }

    #[test]
    #[ignore = "rewrites fuzz/corpus/kld_base; run by hand when the format changes"]
    fn write_fuzz_corpus() {
        std::fs::create_dir_all(corpus_dir()).unwrap();
        for (name, bytes) in seeds() {
            std::fs::write(corpus_dir().join(name), bytes).unwrap();
        }
    }

    /// The fuzz harness over the committed corpus and seeded mutations of it (header fields,
    /// lengths, bytes): none may panic.
    #[test]
    fn fuzz_corpus_and_mutations_replay() {
        let mut inputs: Vec<Vec<u8>> = std::fs::read_dir(corpus_dir())
            .expect("fuzz/corpus/kld_base exists")
            .map(|e| std::fs::read(e.unwrap().path()).unwrap())
            .collect();
        assert!(inputs.len() >= 5, "corpus looks incomplete");
        inputs.extend(seeds().into_iter().map(|(_, b)| b));
        let mut next = crate::fuzz_rng::xorshift(0x9e37_79b9_7f4a_7c15u64);
        let n = inputs.len();
        for i in 0..4000 {
            let mut b = inputs[i % n].clone();
            match next() % 4 {
                0 if !b.is_empty() => {
                    let at = (next() as usize) % b.len();
                    b[at] = next() as u8;
                }
                1 if b.len() >= 20 => {
                    // a header field set to a nearby or extreme value
                    let f = 8 + 4 * (next() as usize % 3);
                    let v = [0i32, 1, 2, 3, 4, -1, i32::MAX, 65536][next() as usize % 8];
                    b[f..f + 4].copy_from_slice(&v.to_le_bytes());
                }
                2 => b.truncate((next() as usize) % (b.len() + 1)),
                _ => b.extend((0..next() % 9).map(|_| next() as u8)),
            }
            fuzz_check(&b);
        }
        // the valid seeds are accepted, the undercounting and cut ones refused
        for (name, bytes) in seeds() {
            let ok = KldBase::from_reader(
                Path::new(name),
                Box::new(std::io::Cursor::new(bytes.clone())),
                bytes.len() as u64,
            )
            .is_ok();
            assert_eq!(
                ok,
                !name.contains("undercount") && !name.contains("cut"),
                "{name}"
            );
        }
    }

    #[test]
    fn a_header_that_miscounts_its_chunks_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("base");
        let good = small_file(8, 5, 3);
        for (n_chunk, name) in [(1i32, "under"), (2, "under by one"), (4, "over")] {
            let mut b = good.clone();
            b[16..20].copy_from_slice(&n_chunk.to_le_bytes());
            std::fs::write(&p, &b).unwrap();
            let e = KldBase::open(&p).unwrap_err().to_string();
            assert!(e.contains("bytes, but a file of"), "{name}: {e}");
        }
        // a vocabulary or context that does not match the size either
        for (field, v) in [(8usize, 6i32), (12, 4)] {
            let mut b = good.clone();
            b[field..field + 4].copy_from_slice(&v.to_le_bytes());
            std::fs::write(&p, &b).unwrap();
            assert!(KldBase::open(&p).is_err());
        }
        std::fs::write(&p, &good).unwrap();
        assert!(KldBase::open(&p).is_ok());
    }

    #[test]
    fn only_regular_files_are_read() {
        for dev in ["/dev/zero", "/dev/null"] {
            if Path::new(dev).exists() {
                let e = KldBase::open(Path::new(dev)).unwrap_err().to_string();
                assert!(e.contains("not a regular file"), "{dev}: {e}");
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if made.is_ok_and(|s| s.success()) {
            // would block in open(2) forever if it were opened as a file
            let e = KldBase::open(&fifo).unwrap_err().to_string();
            assert!(e.contains("not a regular file"), "{e}");
        }
    }

    #[test]
    fn hostile_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x");
        for bytes in [
            &b""[..],
            b"_logits",
            b"_logitz_\x00\x02\x00\x00",
            b"_logits_\x00\x02",
            b"_logits_\x00\x02\x00\x00\x05\x00\x00\x00\xff\xff\xff\xff",
            b"_logits_\x00\x02\x00\x00\x05\x00\x00\x00\x01\x00\x00\x00\x01",
        ] {
            std::fs::write(&p, bytes).unwrap();
            assert!(KldBase::open(&p).is_err(), "{bytes:?}");
        }
        assert!(KldBase::open(&dir.path().join("missing")).is_err());
    }
}
