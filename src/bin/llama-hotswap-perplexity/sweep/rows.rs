//! Result rows: one per candidate, written to CSV and/or JSON lines as each round ends, and
//! read back to resume (rows already present are skipped) and to summarize.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Columns, in CSV order (JSON lines use the same keys).
pub const COLUMNS: [&str; 15] = [
    "tensor",
    "type",
    "bytes",
    "ppl",
    "ppl_err",
    "kld",
    "kld_err",
    "top1",
    "seconds",
    "eval_seconds",
    "status",
    "chunks",
    "n_ctx",
    "file",
    "reason",
];

/// One candidate's result.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Row {
    pub tensor: String,
    pub ggml_type: String,
    pub bytes: u64,
    pub ppl: Option<f64>,
    pub ppl_err: Option<f64>,
    pub kld: Option<f64>,
    pub kld_err: Option<f64>,
    /// Top-1 agreement with the base model, percent.
    pub top1: Option<f64>,
    /// The whole round: swap in, evaluate, swap back, check.
    pub seconds: f64,
    /// The evaluation alone.
    pub eval_seconds: Option<f64>,
    pub ok: bool,
    pub chunks: usize,
    pub n_ctx: usize,
    pub file: String,
    pub reason: String,
}

/// What identifies a row for resuming: the file, the tensor(s) and the type(s).
pub type RowKey = (String, String, String);

impl Row {
    pub fn key(&self) -> RowKey {
        (
            self.file.clone(),
            self.tensor.clone(),
            self.ggml_type.clone(),
        )
    }

    fn fields(&self) -> [String; 15] {
        let opt = |v: Option<f64>| v.map(|x| format!("{x}")).unwrap_or_default();
        [
            self.tensor.clone(),
            self.ggml_type.clone(),
            self.bytes.to_string(),
            opt(self.ppl),
            opt(self.ppl_err),
            opt(self.kld),
            opt(self.kld_err),
            opt(self.top1),
            format!("{:.6}", self.seconds),
            self.eval_seconds
                .map(|x| format!("{x:.6}"))
                .unwrap_or_default(),
            if self.ok { "ok" } else { "failed" }.into(),
            self.chunks.to_string(),
            self.n_ctx.to_string(),
            self.file.clone(),
            self.reason.clone(),
        ]
    }

    fn from_fields(get: &dyn Fn(&str) -> Option<String>) -> Result<Row, String> {
        let text = |k: &str| get(k).ok_or_else(|| format!("missing column '{k}'"));
        let float = |k: &str| -> Result<Option<f64>, String> {
            match get(k) {
                None => Ok(None),
                Some(s) if s.is_empty() => Ok(None),
                Some(s) => s
                    .parse::<f64>()
                    .map(Some)
                    .map_err(|_| format!("column '{k}': '{s}' is not a number")),
            }
        };
        let int = |k: &str| -> Result<u64, String> {
            let s = text(k)?;
            s.parse::<u64>()
                .map_err(|_| format!("column '{k}': '{s}' is not an integer"))
        };
        Ok(Row {
            tensor: text("tensor")?,
            ggml_type: text("type")?,
            bytes: int("bytes")?,
            ppl: float("ppl")?,
            ppl_err: float("ppl_err")?,
            kld: float("kld")?,
            kld_err: float("kld_err")?,
            top1: float("top1")?,
            seconds: float("seconds")?.unwrap_or(0.0),
            eval_seconds: float("eval_seconds")?,
            ok: match text("status")?.as_str() {
                "ok" => true,
                "failed" => false,
                s => return Err(format!("column 'status': '{s}' is neither ok nor failed")),
            },
            chunks: int("chunks")? as usize,
            n_ctx: int("n_ctx")? as usize,
            file: text("file")?,
            reason: text("reason")?,
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Csv,
    JsonLines,
}

/// An output file rows are appended to.
pub struct Sink {
    pub path: PathBuf,
    format: Format,
    file: File,
}

/// Output files larger than this are refused (a sweep of every tensor of the largest models
/// writes a few MiB of rows).
pub const MAX_OUTPUT_BYTES: u64 = 1 << 30;

/// How a JSON-lines row this module writes begins (the first column, no spaces).
const JSONL_ROW_START: &str = "{\"tensor\":";

impl Sink {
    /// Opens `path` for appending, reading back the rows it already holds. Nothing is
    /// written, and nothing cut, before the whole file is recognised as a sweep output:
    /// only a regular file (or none: it is created), every complete line a row (after the
    /// header, for CSV), at most 1 GiB. A last line without its newline (a run stopped
    /// mid-write) is then cut off, but only when it can be the start of a line this module
    /// writes; anything else is refused with the reason and the file is left as it was.
    pub fn open(path: &Path, format: Format) -> Result<(Sink, Vec<Row>), String> {
        let err = |e: std::io::Error| format!("{}: {e}", path.display());
        let mut file = open_output(path).map_err(err)?;
        let len = file.metadata().map_err(err)?.len();
        if len > MAX_OUTPUT_BYTES {
            return Err(format!(
                "{}: {len} bytes: larger than any sweep output (use another output file)",
                path.display()
            ));
        }
        let mut raw = Vec::new();
        (&mut file)
            .take(MAX_OUTPUT_BYTES + 1)
            .read_to_end(&mut raw)
            .map_err(err)?;
        let text = String::from_utf8(raw).map_err(|_| {
            format!(
                "{}: not UTF-8 text, so not a sweep output (use another output file)",
                path.display()
            )
        })?;
        let (rows, complete) = recognise(&text, format)
            .map_err(|e| format!("{}: {e}; the file is left as it is", path.display()))?;
        if complete < text.len() {
            crate_log(&format!(
                "{}: dropping an incomplete last line (a run stopped while writing it)",
                path.display()
            ));
            file.set_len(complete as u64).map_err(err)?;
        }
        file.seek(SeekFrom::End(0)).map_err(err)?;
        let mut sink = Sink {
            path: path.to_path_buf(),
            format,
            file,
        };
        if format == Format::Csv && complete == 0 {
            sink.write_line(&COLUMNS.join(","))?;
        }
        Ok((sink, rows))
    }

    pub fn append(&mut self, row: &Row) -> Result<(), String> {
        let line = line_of(row, self.format);
        self.write_line(&line)
    }

    fn write_line(&mut self, line: &str) -> Result<(), String> {
        // One write per line, flushed: a crash leaves at most one incomplete line.
        let mut buf = line.as_bytes().to_vec();
        buf.push(b'\n');
        self.file
            .write_all(&buf)
            .and_then(|_| self.file.flush())
            .map_err(|e| format!("{}: {e}", self.path.display()))
    }
}

/// One row as a line of `format` (without its newline).
fn line_of(row: &Row, format: Format) -> String {
    let fields = row.fields();
    let line = match format {
        Format::Csv => fields
            .iter()
            .map(|f| csv_field(f))
            .collect::<Vec<_>>()
            .join(","),
        Format::JsonLines => {
            let mut s = String::from("{");
            for (i, (k, v)) in COLUMNS.iter().zip(fields.iter()).enumerate() {
                if i > 0 {
                    s.push(',');
                }
                let numeric = !matches!(*k, "tensor" | "type" | "status" | "file" | "reason");
                // JSON has no NaN or Infinity: such a value (never in an ok row) is null
                let not_json = v.parse::<f64>().is_ok_and(|x| !x.is_finite());
                let value = if numeric {
                    if v.is_empty() || not_json {
                        "null".to_string()
                    } else {
                        v.clone()
                    }
                } else {
                    json_string(v)
                };
                s.push_str(&format!("{}:{value}", json_string(k)));
            }
            s.push('}');
            s
        }
    };
    line
}

fn crate_log(msg: &str) {
    eprintln!("sweep: {msg}");
}

/// Opens (or creates) an output without blocking and refuses anything but a regular file: a
/// FIFO would block the sweep forever, a device such as /dev/zero or /dev/full never ends
/// or never takes the rows.
fn open_output(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let not_regular = || {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file (an output must be a file the sweep can read back and append to)",
        )
    };
    match std::fs::metadata(path) {
        Ok(m) if !m.is_file() => return Err(not_regular()),
        _ => {}
    }
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(not_regular());
    }
    Ok(file)
}

/// Checks that `text` is a sweep output in `format` and returns its rows and the length of
/// its complete lines. A last line without its newline is accepted (and left out) only when
/// a line this module writes can start so: after a CSV header, or at the start of a CSV file
/// as a prefix of the header; in JSON lines, as the start of a row object.
pub fn recognise(text: &str, format: Format) -> Result<(Vec<Row>, usize), String> {
    let complete = text.rfind('\n').map_or(0, |i| i + 1);
    let (body, tail) = text.split_at(complete);
    let foreign = |why: &str| {
        Err(format!(
            "not a sweep output ({why}): use another output file"
        ))
    };
    let rows = match format {
        Format::Csv => {
            if body.is_empty() {
                let header = COLUMNS.join(",");
                if !header.starts_with(tail) {
                    return foreign("its first line is not the sweep's CSV header");
                }
                Vec::new()
            } else {
                parse_csv(body)?
            }
        }
        Format::JsonLines => {
            if !tail.is_empty()
                && !(tail.starts_with(JSONL_ROW_START) || JSONL_ROW_START.starts_with(tail))
            {
                return foreign("its last line is neither a row nor the start of one");
            }
            parse_jsonl(body)?
        }
    };
    Ok((rows, complete))
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// Splits CSV text into records (RFC 4180: quoted fields may hold commas, quotes, newlines).
fn csv_records(text: &str) -> Result<Vec<Vec<String>>, String> {
    let mut records = Vec::new();
    let mut record = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = text.chars().peekable();
    let mut line = 1;
    while let Some(c) = chars.next() {
        if quoted {
            match c {
                '"' if chars.peek() == Some(&'"') => {
                    chars.next();
                    field.push('"');
                }
                '"' => quoted = false,
                _ => {
                    if c == '\n' {
                        line += 1;
                    }
                    field.push(c);
                }
            }
            continue;
        }
        match c {
            '"' if field.is_empty() => quoted = true,
            ',' => record.push(std::mem::take(&mut field)),
            '\r' => {}
            '\n' => {
                record.push(std::mem::take(&mut field));
                records.push(std::mem::take(&mut record));
                line += 1;
            }
            _ => field.push(c),
        }
    }
    if quoted {
        return Err(format!("line {line}: unterminated quoted field"));
    }
    if !field.is_empty() || !record.is_empty() {
        record.push(field);
        records.push(record);
    }
    Ok(records)
}

fn parse_csv(text: &str) -> Result<Vec<Row>, String> {
    let records = csv_records(text)?;
    let Some((header, body)) = records.split_first() else {
        return Ok(Vec::new());
    };
    let index: HashMap<&str, usize> = header
        .iter()
        .enumerate()
        .map(|(i, h)| (h.as_str(), i))
        .collect();
    for c in COLUMNS {
        if !index.contains_key(c) {
            return Err(format!(
                "not a sweep output: the header lacks column '{c}' (use another output file)"
            ));
        }
    }
    body.iter()
        .enumerate()
        .filter(|(_, r)| !(r.len() == 1 && r[0].is_empty()))
        .map(|(n, r)| {
            let get = |k: &str| index.get(k).and_then(|&i| r.get(i)).cloned();
            Row::from_fields(&get).map_err(|e| format!("row {}: {e}", n + 1))
        })
        .collect()
}

fn parse_jsonl(text: &str) -> Result<Vec<Row>, String> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(n, l)| {
            let map = parse_flat_object(l).map_err(|e| format!("line {}: {e}", n + 1))?;
            let get = |k: &str| map.get(k).cloned();
            Row::from_fields(&get).map_err(|e| format!("line {}: {e}", n + 1))
        })
        .collect()
}

/// The fuzz harness of the resume reader (fuzz/fuzz_targets/sweep_rows.rs; `cargo test`
/// replays fuzz/corpus/sweep_rows): byte 0 picks the format (bit 0: JSON lines), the rest is
/// the file's text. [`recognise`] refuses it or accepts it; accepted, the part it keeps ends
/// at a line end and the part it would cut has no newline, and the rows written back in the
/// same format read back the same.
#[allow(dead_code)] // the fuzz target and the corpus replay (tests) call it
pub fn fuzz_check(bytes: &[u8]) {
    let Some((&sel, rest)) = bytes.split_first() else {
        return;
    };
    let format = if sel & 1 == 1 {
        Format::JsonLines
    } else {
        Format::Csv
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let Ok((rows, complete)) = recognise(text, format) else {
        return;
    };
    assert!(complete <= text.len());
    assert!(complete == 0 || text.as_bytes()[complete - 1] == b'\n');
    assert!(!text[complete..].contains('\n'));
    let mut out = String::new();
    if format == Format::Csv {
        out.push_str(&COLUMNS.join(","));
        out.push('\n');
    }
    for r in &rows {
        out.push_str(&line_of(r, format));
        out.push('\n');
    }
    let (back, n) = recognise(&out, format).expect("rows written back are a sweep output");
    assert_eq!(n, out.len());
    let shown = |rows: &[Row]| rows.iter().map(|r| line_of(r, format)).collect::<Vec<_>>();
    assert_eq!(shown(&back), shown(&rows));
}

pub fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Parses one JSON object whose values are strings, numbers, booleans or null (the rows this
/// module writes) into text values (null → absent).
fn parse_flat_object(line: &str) -> Result<HashMap<String, String>, String> {
    let mut p = JsonCursor {
        s: line.trim().as_bytes(),
        i: 0,
    };
    let mut map = HashMap::new();
    p.expect(b'{')?;
    p.ws();
    if p.peek() == Some(b'}') {
        return Ok(map);
    }
    loop {
        p.ws();
        let key = p.string()?;
        p.ws();
        p.expect(b':')?;
        p.ws();
        match p.peek() {
            Some(b'"') => {
                let v = p.string()?;
                map.insert(key, v);
            }
            Some(_) => {
                let start = p.i;
                while p
                    .peek()
                    .is_some_and(|c| !matches!(c, b',' | b'}' | b' ' | b'\t'))
                {
                    p.i += 1;
                }
                let raw = std::str::from_utf8(&p.s[start..p.i]).map_err(|e| e.to_string())?;
                if raw != "null" {
                    map.insert(key, raw.to_string());
                }
            }
            None => return Err("unexpected end".into()),
        }
        p.ws();
        match p.peek() {
            Some(b',') => p.i += 1,
            Some(b'}') => {
                p.i += 1;
                break;
            }
            _ => return Err(format!("expected ',' or '}}' at byte {}", p.i)),
        }
    }
    p.ws();
    if p.i != p.s.len() {
        return Err(format!("trailing text at byte {}", p.i));
    }
    Ok(map)
}

struct JsonCursor<'a> {
    s: &'a [u8],
    i: usize,
}

impl JsonCursor<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }
    fn ws(&mut self) {
        while self.peek().is_some_and(|c| c.is_ascii_whitespace()) {
            self.i += 1;
        }
    }
    fn expect(&mut self, c: u8) -> Result<(), String> {
        if self.peek() == Some(c) {
            self.i += 1;
            Ok(())
        } else {
            Err(format!("expected '{}' at byte {}", c as char, self.i))
        }
    }
    fn string(&mut self) -> Result<String, String> {
        self.expect(b'"')?;
        let mut out: Vec<u8> = Vec::new();
        loop {
            let c = self.peek().ok_or("unterminated string")?;
            self.i += 1;
            match c {
                b'"' => break,
                b'\\' => {
                    let e = self.peek().ok_or("unterminated escape")?;
                    self.i += 1;
                    match e {
                        b'"' => out.push(b'"'),
                        b'\\' => out.push(b'\\'),
                        b'/' => out.push(b'/'),
                        b'n' => out.push(b'\n'),
                        b'r' => out.push(b'\r'),
                        b't' => out.push(b'\t'),
                        b'b' => out.push(8),
                        b'f' => out.push(12),
                        b'u' => {
                            let hex = self
                                .s
                                .get(self.i..self.i + 4)
                                .and_then(|h| std::str::from_utf8(h).ok())
                                .and_then(|h| u32::from_str_radix(h, 16).ok())
                                .ok_or("bad \\u escape")?;
                            self.i += 4;
                            let ch = char::from_u32(hex).unwrap_or('\u{fffd}');
                            let mut b = [0u8; 4];
                            out.extend_from_slice(ch.encode_utf8(&mut b).as_bytes());
                        }
                        _ => return Err(format!("bad escape at byte {}", self.i)),
                    }
                }
                c => out.push(c),
            }
        }
        String::from_utf8(out).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(tensor: &str) -> Row {
        Row {
            tensor: tensor.into(),
            ggml_type: "q8_0".into(),
            bytes: 1234,
            ppl: Some(12.5),
            ppl_err: Some(0.25),
            kld: Some(0.001),
            kld_err: None,
            top1: Some(98.5),
            seconds: 1.5,
            eval_seconds: Some(1.25),
            ok: true,
            chunks: 4,
            n_ctx: 128,
            file: "q8_0/a,\"b\".gguf".into(),
            reason: "line\nbreak".into(),
        }
    }

    #[test]
    fn rows_round_trip_through_csv_and_json_lines() {
        for format in [Format::Csv, Format::JsonLines] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("out");
            let rows = vec![
                row("a"),
                row("b,c"),
                Row {
                    ok: false,
                    ppl: None,
                    ..row("d")
                },
            ];
            {
                let (mut sink, old) = Sink::open(&path, format).unwrap();
                assert!(old.is_empty());
                for r in &rows {
                    sink.append(r).unwrap();
                }
            }
            let (_, back) = Sink::open(&path, format).unwrap();
            assert_eq!(back, rows, "{format:?}");
        }
    }

    #[test]
    fn an_incomplete_last_line_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.csv");
        {
            let (mut sink, _) = Sink::open(&path, Format::Csv).unwrap();
            sink.append(&row("a")).unwrap();
        }
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"blk.0.x,q4_0,12").unwrap();
        drop(f);
        let (mut sink, back) = Sink::open(&path, Format::Csv).unwrap();
        assert_eq!(back, vec![row("a")]);
        sink.append(&row("b")).unwrap();
        drop(sink);
        let (_, back) = Sink::open(&path, Format::Csv).unwrap();
        assert_eq!(back, vec![row("a"), row("b")]);
    }

    #[test]
    fn hostile_output_files_are_errors_or_rows_never_panics() {
        let mut valid = String::new();
        valid.push_str(&COLUMNS.join(","));
        valid.push('\n');
        let r = row("a");
        valid.push_str(
            &r.fields()
                .iter()
                .map(|f| csv_field(f))
                .collect::<Vec<_>>()
                .join(","),
        );
        valid.push('\n');
        let json = "{\"tensor\":\"a\",\"type\":\"q8_0\",\"bytes\":1,\"ppl\":null,\"status\":\"ok\",\"chunks\":1,\"n_ctx\":4,\"file\":\"f\",\"reason\":\"\\u00e9\\\"\"}";
        assert!(parse_jsonl(json).is_ok(), "{:?}", parse_jsonl(json));
        let mut state = 0x1234_5678_9abc_def0u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for text in [valid.as_str(), json] {
            let bytes = text.as_bytes();
            for cut in 0..bytes.len() {
                let t = String::from_utf8_lossy(&bytes[..cut]);
                let _ = parse_csv(&t);
                let _ = parse_jsonl(&t);
            }
            for _ in 0..2000 {
                let mut b = bytes.to_vec();
                for _ in 0..1 + next() % 4 {
                    let i = (next() as usize) % b.len();
                    b[i] = b"\",\\{}:\n\r0123456789.-eunlt x\x00\xff"[(next() % 26) as usize];
                }
                let t = String::from_utf8_lossy(&b);
                let _ = parse_csv(&t);
                let _ = parse_jsonl(&t);
            }
        }
        assert!(parse_csv("\"unterminated\n").is_err());
        assert!(parse_jsonl("{\"a\":").is_err());
        assert!(parse_jsonl("[]").is_err());
        assert!(parse_jsonl("{\"tensor\":\"\\u12\"}").is_err());
    }

    /// Finding 1 of issue 35: a file that is not a sweep output is never cut or written,
    /// with or without a newline at its end.
    #[test]
    fn foreign_files_are_left_as_they_are() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config");
        for (format, text) in [
            (Format::JsonLines, "{\"important\": \"config\"}"),
            (
                Format::JsonLines,
                "{\"important\": \"config\"}\n{\"more\": 1}",
            ),
            (Format::JsonLines, "{\"tensor\":\"x\"}\n{\"b\":"),
            (Format::JsonLines, "notes\nmore notes"),
            (Format::Csv, "a,b\n1,2\n3,4"),
            (Format::Csv, "name,value"),
            (Format::Csv, "tensor,type\n"),
            (Format::Csv, "\u{feff}precious"),
        ] {
            std::fs::write(&path, text).unwrap();
            let e = Sink::open(&path, format).err().unwrap();
            assert!(e.contains("left as it is"), "{text:?}: {e}");
            assert_eq!(std::fs::read_to_string(&path).unwrap(), text, "{format:?}");
        }
        // binary: not UTF-8
        std::fs::write(&path, b"\xff\xfe\x00data").unwrap();
        assert!(Sink::open(&path, Format::Csv).is_err());
        assert_eq!(std::fs::read(&path).unwrap(), b"\xff\xfe\x00data");
        // our own files cut mid-write are still recognised (and only the cut line dropped)
        for (format, text) in [
            (Format::Csv, "tensor,type,by"),
            (Format::JsonLines, "{\"tens"),
            (Format::JsonLines, "{\"tensor\":\"blk.0"),
        ] {
            std::fs::write(&path, text).unwrap();
            let (_, rows) = Sink::open(&path, format).unwrap();
            assert!(rows.is_empty());
            let now = std::fs::read_to_string(&path).unwrap();
            let expect = if format == Format::Csv {
                format!("{}\n", COLUMNS.join(","))
            } else {
                String::new()
            };
            assert_eq!(now, expect, "{text:?}");
        }
    }

    /// Finding 7 of issue 35: devices and FIFOs are refused at once (no endless read of
    /// /dev/zero, no write to /dev/full, no wait on a FIFO).
    #[test]
    fn outputs_must_be_regular_files() {
        for dev in ["/dev/zero", "/dev/full", "/dev/null"] {
            if Path::new(dev).exists() {
                let e = Sink::open(Path::new(dev), Format::Csv).err().unwrap();
                assert!(e.contains("not a regular file"), "{dev}: {e}");
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.is_ok_and(|s| s.success()));
        let e = Sink::open(&fifo, Format::JsonLines).err().unwrap();
        assert!(e.contains("not a regular file"), "{e}");
        let big = dir.path().join("big");
        let f = File::create(&big).unwrap();
        f.set_len(MAX_OUTPUT_BYTES + 1).unwrap();
        let e = Sink::open(&big, Format::Csv).err().unwrap();
        assert!(e.contains("larger than any sweep output"), "{e}");
    }

    /// Finding 4 of issue 35: JSON lines never hold a bare NaN or inf.
    #[test]
    fn non_finite_values_are_null_in_json() {
        let r = Row {
            ppl: Some(f64::NAN),
            kld: Some(f64::INFINITY),
            top1: Some(f64::NEG_INFINITY),
            ok: false,
            ..row("a")
        };
        let line = line_of(&r, Format::JsonLines);
        assert!(!line.contains("NaN") && !line.contains("inf"), "{line}");
        assert!(
            line.contains("\"ppl\":null") && line.contains("\"kld\":null"),
            "{line}"
        );
        let back = parse_jsonl(&line).unwrap();
        assert_eq!((back[0].ppl, back[0].kld), (None, None));
    }

    fn rows_corpus_dir() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/sweep_rows")
    }

    fn rows_seeds() -> Vec<(&'static str, Vec<u8>)> {
        let rows = [
            row("a"),
            Row {
                ok: false,
                ppl: None,
                ..row("b,c")
            },
        ];
        let mut csv = format!("{}\n", COLUMNS.join(","));
        let mut jsonl = String::new();
        for r in &rows {
            csv.push_str(&line_of(r, Format::Csv));
            csv.push('\n');
            jsonl.push_str(&line_of(r, Format::JsonLines));
            jsonl.push('\n');
        }
        let with = |sel: u8, t: &str| {
            let mut v = vec![sel];
            v.extend_from_slice(t.as_bytes());
            v
        };
        vec![
            ("seed_csv", with(0, &csv)),
            ("seed_csv_cut", with(0, &csv[..csv.len() - 7])),
            ("seed_jsonl", with(1, &jsonl)),
            ("seed_jsonl_cut", with(1, &jsonl[..jsonl.len() - 9])),
            ("seed_foreign_json", with(1, "{\"important\": \"config\"}")),
            ("seed_foreign_csv", with(0, "a,b\n1,2")),
        ]
    }

    #[test]
    #[ignore = "rewrites fuzz/corpus/sweep_rows; run by hand when the row format changes"]
    fn write_rows_fuzz_corpus() {
        std::fs::create_dir_all(rows_corpus_dir()).unwrap();
        for (name, bytes) in rows_seeds() {
            std::fs::write(rows_corpus_dir().join(name), bytes).unwrap();
        }
    }

    /// The resume reader's fuzz harness over the committed corpus and seeded mutations.
    #[test]
    fn rows_fuzz_corpus_and_mutations_replay() {
        let mut inputs: Vec<Vec<u8>> = std::fs::read_dir(rows_corpus_dir())
            .expect("fuzz/corpus/sweep_rows exists")
            .map(|e| std::fs::read(e.unwrap().path()).unwrap())
            .collect();
        assert!(inputs.len() >= 6, "corpus looks incomplete");
        inputs.extend(rows_seeds().into_iter().map(|(_, b)| b));
        let mut next = crate::fuzz_rng::xorshift(0x2545_f491_4f6c_dd1du64);
        let n = inputs.len();
        for i in 0..4000 {
            let mut b = inputs[i % n].clone();
            for _ in 0..1 + next() % 3 {
                if b.len() < 2 {
                    break;
                }
                let at = 1 + (next() as usize) % (b.len() - 1);
                match next() % 3 {
                    0 => b[at] = b"\",{}:\n\r0123456789.-eNaninful x\\"[(next() % 30) as usize],
                    1 => b.truncate(at),
                    _ => {
                        b.remove(at);
                    }
                }
            }
            fuzz_check(&b);
        }
    }

    #[test]
    fn a_foreign_csv_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.csv");
        std::fs::write(&path, "a,b\n1,2\n").unwrap();
        let err = Sink::open(&path, Format::Csv).err().unwrap();
        assert!(err.contains("lacks column"), "{err}");
    }
}
