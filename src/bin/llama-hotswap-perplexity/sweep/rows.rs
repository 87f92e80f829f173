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

impl Sink {
    /// Opens `path` for appending, reading back the rows it already holds. A last line
    /// without its newline (a run stopped mid-write) is cut off first.
    pub fn open(path: &Path, format: Format) -> Result<(Sink, Vec<Row>), String> {
        let err = |e: std::io::Error| format!("{}: {e}", path.display());
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(err)?;
        let mut text = String::new();
        file.read_to_string(&mut text)
            .map_err(|e| format!("{}: not UTF-8 text: {e}", path.display()))?;
        let complete = text.rfind('\n').map_or(0, |i| i + 1);
        if complete < text.len() {
            crate_log(&format!(
                "{}: dropping an incomplete last line (a run stopped while writing it)",
                path.display()
            ));
            file.set_len(complete as u64).map_err(err)?;
            text.truncate(complete);
        }
        file.seek(SeekFrom::End(0)).map_err(err)?;
        let rows = match format {
            Format::Csv => parse_csv(&text),
            Format::JsonLines => parse_jsonl(&text),
        }
        .map_err(|e| format!("{}: {e}", path.display()))?;
        let mut sink = Sink {
            path: path.to_path_buf(),
            format,
            file,
        };
        if format == Format::Csv && text.is_empty() {
            sink.write_line(&COLUMNS.join(","))?;
        }
        Ok((sink, rows))
    }

    pub fn append(&mut self, row: &Row) -> Result<(), String> {
        let fields = row.fields();
        let line = match self.format {
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
                    let value = if numeric {
                        if v.is_empty() {
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

fn crate_log(msg: &str) {
    eprintln!("sweep: {msg}");
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

    #[test]
    fn a_foreign_csv_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.csv");
        std::fs::write(&path, "a,b\n1,2\n").unwrap();
        let err = Sink::open(&path, Format::Csv).err().unwrap();
        assert!(err.contains("lacks column"), "{err}");
    }
}
