//! Cross-check with gguf-py (tests/python/gguf_crosscheck.py), when its venv exists:
//! (a) files our writer makes are read by gguf-py's GGUFReader exactly as we meant them;
//! (b) files gguf-py's GGUFWriter makes (with its own Q8_0/Q4_0/BF16/F16 quantizations) are read
//!     exactly by our reader, and our (de)quantizers agree with gguf-py's bit for bit.
//! Rust writes JSON descriptions; the Python script does the comparisons and fails on any
//! mismatch. A tampered copy of the descriptions checks that the comparison can fail.
//!
//! The venv is `$LLAMA_HOTSWAP_VENV`, else `${XDG_CACHE_HOME:-$HOME/.cache}/llama-hotswap/venv`
//! (scripts/setup-venv.sh); without it the test prints SKIP and passes.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use llama::gguf::fixtures::{tiny_llama, tiny_moe, vocab_only, TinyLlamaOpts};
use llama::gguf::{quant, GgmlType, Gguf, GgufWriter, MetaArray, MetaValue, SplitMode};

fn venv_python() -> Option<PathBuf> {
    let venv = match std::env::var_os("LLAMA_HOTSWAP_VENV") {
        Some(dir) => PathBuf::from(dir),
        None => {
            let cache = std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
            cache.join("llama-hotswap").join("venv")
        }
    };
    let python = venv.join("bin").join("python");
    python.exists().then_some(python)
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/gguf_crosscheck.py")
}

fn run_script(python: &Path, command: &str, dir: &Path) -> (bool, String) {
    let output = Command::new(python)
        .arg(script())
        .arg(command)
        .arg(dir)
        .output()
        .expect("run the crosscheck script");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

// ------------------------------------------------------------------ JSON descriptions

fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2 + 2);
    out.push('"');
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out.push('"');
    out
}

fn list<T>(items: impl IntoIterator<Item = T>, f: impl Fn(T) -> String) -> String {
    let parts: Vec<String> = items.into_iter().map(f).collect();
    format!("[{}]", parts.join(","))
}

/// Type name, element type name and encoded value, as the script encodes them.
fn encode_value(value: &MetaValue) -> (String, Option<String>, String) {
    let scalar = |v: &MetaValue| -> String {
        match v {
            MetaValue::U8(x) => x.to_string(),
            MetaValue::I8(x) => x.to_string(),
            MetaValue::U16(x) => x.to_string(),
            MetaValue::I16(x) => x.to_string(),
            MetaValue::U32(x) => x.to_string(),
            MetaValue::I32(x) => x.to_string(),
            MetaValue::F32(x) => x.to_bits().to_string(),
            MetaValue::Bool(x) => x.to_string(),
            MetaValue::Str(x) => hex(x),
            MetaValue::U64(x) => x.to_string(),
            MetaValue::I64(x) => x.to_string(),
            MetaValue::F64(x) => x.to_bits().to_string(),
            MetaValue::Array(_) => unreachable!("arrays are not scalars"),
        }
    };
    let type_name = value.value_type().name().to_string();
    let MetaValue::Array(array) = value else {
        return (type_name, None, scalar(value));
    };
    let elem = array.elem_type().name().to_string();
    let items = match array {
        MetaArray::U8(v) => list(v, |&x| scalar(&MetaValue::U8(x))),
        MetaArray::I8(v) => list(v, |&x| scalar(&MetaValue::I8(x))),
        MetaArray::U16(v) => list(v, |&x| scalar(&MetaValue::U16(x))),
        MetaArray::I16(v) => list(v, |&x| scalar(&MetaValue::I16(x))),
        MetaArray::U32(v) => list(v, |&x| scalar(&MetaValue::U32(x))),
        MetaArray::I32(v) => list(v, |&x| scalar(&MetaValue::I32(x))),
        MetaArray::F32(v) => list(v, |&x| scalar(&MetaValue::F32(x))),
        MetaArray::Bool(v) => list(v, |&x| scalar(&MetaValue::Bool(x))),
        MetaArray::Str(v) => list(v, |x| hex(x)),
        MetaArray::U64(v) => list(v, |&x| scalar(&MetaValue::U64(x))),
        MetaArray::I64(v) => list(v, |&x| scalar(&MetaValue::I64(x))),
        MetaArray::F64(v) => list(v, |&x| scalar(&MetaValue::F64(x))),
    };
    (type_name, Some(elem), items)
}

fn kv_json(key: &str, value: &MetaValue) -> String {
    let (type_name, elem, encoded) = encode_value(value);
    let elem = elem.map_or(String::new(), |e| format!(",\"elem\":{}", json_str(&e)));
    format!(
        "{{\"key\":{},\"type\":{}{elem},\"value\":{encoded}}}",
        json_str(key),
        json_str(&type_name)
    )
}

struct TensorJson {
    name: String,
    ggml_type: GgmlType,
    ne: Vec<i64>,
    offset: u64,
    data: Vec<u8>,
    extra: String,
}

impl TensorJson {
    fn to_json(&self) -> String {
        format!(
            "{{\"name\":{},\"type\":{},\"ne\":{},\"offset\":{},\"nbytes\":{},\"data\":{}{}}}",
            json_str(&self.name),
            self.ggml_type.id(),
            list(&self.ne, |n| n.to_string()),
            self.offset,
            self.data.len(),
            hex(&self.data),
            self.extra
        )
    }
}

fn description(
    version: u32,
    alignment: u32,
    data_offset: u64,
    kvs: &[String],
    tensors: &[TensorJson],
) -> String {
    format!(
        "{{\"version\":{version},\"alignment\":{alignment},\"data_offset\":{data_offset},\"kvs\":[{}],\"tensors\":{}}}",
        kvs.join(","),
        list(tensors, TensorJson::to_json)
    )
}

/// What our writer is about to write: its own inputs and layout, not a read-back.
fn describe_writer(writer: &GgufWriter) -> String {
    let layout = writer.layout().unwrap();
    let kvs: Vec<String> = writer.kvs().iter().map(|(k, v)| kv_json(k, v)).collect();
    let tensors: Vec<TensorJson> = writer
        .tensors()
        .iter()
        .zip(&layout.tensor_offsets)
        .map(|(t, &offset)| TensorJson {
            name: t.name.clone(),
            ggml_type: t.ggml_type,
            ne: t.dims.clone(),
            offset,
            data: match &t.data {
                llama::gguf::writer::TensorData::Bytes(bytes) => bytes.clone(),
                llama::gguf::writer::TensorData::Deferred => panic!("no deferred data here"),
            },
            extra: String::new(),
        })
        .collect();
    description(
        writer.version(),
        layout.alignment,
        layout.data_offset,
        &kvs,
        &tensors,
    )
}

/// What our reader found in a file, plus our dequantization of every quantized tensor
/// named "q.*" and our quantization of its "src.*" companion.
fn describe_read(gguf: &Gguf<'_>) -> String {
    let kvs: Vec<String> = gguf
        .kvs()
        .iter()
        .map(|kv| kv_json(kv.key_str().unwrap(), &MetaValue::from_value(&kv.value)))
        .collect();
    let mut quant_checks = 0;
    let tensors: Vec<TensorJson> = gguf
        .tensors()
        .iter()
        .map(|t| {
            let data = gguf.tensor_data(t).unwrap().to_vec();
            let mut extra = String::new();
            if let Some(suffix) = t.name.strip_prefix("q.") {
                let deq = quant::dequantize(t.ggml_type, &data).unwrap();
                let _ = write!(
                    extra,
                    ",\"dequant_bits\":{}",
                    list(&deq, |v| v.to_bits().to_string())
                );
                let src_name = format!("src.{suffix}");
                let src = gguf.tensor(&src_name).unwrap();
                let values =
                    quant::dequantize(GgmlType::F32, gguf.tensor_data(src).unwrap()).unwrap();
                let ours = quant::quantize(t.ggml_type, &values).unwrap();
                let _ = write!(
                    extra,
                    ",\"requant_from\":{},\"requant\":{}",
                    json_str(&src_name),
                    hex(&ours)
                );
                quant_checks += 1;
            }
            TensorJson {
                name: t.name.to_owned(),
                ggml_type: t.ggml_type,
                ne: t.shape().to_vec(),
                offset: t.offset,
                data,
                extra,
            }
        })
        .collect();
    description(
        gguf.version(),
        gguf.alignment(),
        gguf.data_offset(),
        &kvs,
        &tensors,
    )
}

// ------------------------------------------------------------------ our files

fn our_files() -> Vec<(String, GgufWriter)> {
    let mut files = Vec::new();

    let mut values = GgufWriter::new();
    values
        .set("v.u8", 250u8)
        .set("v.i8", -120i8)
        .set("v.u16", 65000u16)
        .set("v.i16", -32000i16)
        .set("v.u32", 4_000_000_000u32)
        .set("v.i32", -2_000_000_000i32)
        .set("v.f32", -1.25e-3f32)
        .set("v.bool", true)
        .set("v.str", "h\u{e9}llo \u{2581}w\u{f6}rld")
        .set("v.bytes", MetaValue::Str(vec![0xff, 0x00, 0x41]))
        .set("v.u64", u64::MAX)
        .set("v.i64", i64::MIN)
        .set("v.f64", std::f64::consts::PI)
        .set("a.u8", vec![0u8, 1, 255])
        .set("a.i8", vec![-128i8, 127])
        .set("a.u16", vec![1u16, 65535])
        .set("a.i16", vec![-32768i16, 32767])
        .set("a.u32", vec![7u32, u32::MAX])
        .set("a.i32", vec![i32::MIN, -1, 0])
        .set("a.f32", vec![0.0f32, -0.0, 1e30, f32::MIN_POSITIVE])
        .set("a.bool", vec![true, false, true])
        .set("a.str", vec!["", "a", "quote\"back\\slash", "\u{2581}tok"])
        .set("a.u64", vec![u64::MAX, 0])
        .set("a.i64", vec![i64::MAX, i64::MIN])
        .set("a.f64", vec![f64::EPSILON, -2.5]);
    files.push(("rs_values".to_string(), values));

    // Every tensor type, several ranks, version 2. Except two where gguf-py 0.19 differs from
    // the pinned upstream: it predates Q2_0, and it still sizes a Q8_1 block as 40 bytes
    // where ggml-common.h (and the vendored gguf-py) say 36.
    let mut types = GgufWriter::new();
    types.set_version(2).set("general.architecture", "test");
    let known_to_gguf_py = |t: &GgmlType| *t != GgmlType::Q2_0 && *t != GgmlType::Q8_1;
    for (i, ty) in GgmlType::all().filter(known_to_gguf_py).enumerate() {
        let ne0 = ty.block_size() as i64 * (1 + i as i64 % 3);
        let dims: Vec<i64> = match i % 4 {
            0 => vec![ne0],
            1 => vec![ne0, 3],
            2 => vec![ne0, 2, 2],
            _ => vec![ne0, 1, 2, 2],
        };
        let mut ne = [1i64; 4];
        ne[..dims.len()].copy_from_slice(&dims);
        let len = ty.nbytes(ne).unwrap() as usize;
        let data = (0..len).map(|b| (b * 131 + i * 7) as u8).collect();
        types
            .add_tensor(&format!("t.{}", ty.name()), &dims, ty, data)
            .unwrap();
    }
    files.push(("rs_types_v2".to_string(), types));

    let mut aligned = GgufWriter::new();
    aligned.set_alignment(64).unwrap();
    aligned.set("general.architecture", "test");
    for (i, n) in [3i64, 17, 64, 1].into_iter().enumerate() {
        let values: Vec<f32> = (0..n).map(|v| v as f32 * 0.5 - i as f32).collect();
        aligned
            .add_tensor_f32(&format!("odd.{i}"), &[n], GgmlType::F32, &values)
            .unwrap();
    }
    files.push(("rs_align64".to_string(), aligned));

    let small = TinyLlamaOpts {
        n_layer: 1,
        n_embd: 32,
        n_head: 4,
        n_head_kv: 2,
        n_ff: 64,
        n_vocab: 40,
        chat_template: Some("{% for m in messages %}{{ m.content }}{% endfor %}".into()),
        ..TinyLlamaOpts::default()
    };
    for ty in [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::Q8_0,
        GgmlType::Q4_0,
    ] {
        let opts = TinyLlamaOpts {
            weight_type: ty,
            file_type: llama::gguf::fixtures::llama_ftype_for(ty),
            ..small.clone()
        };
        files.push((format!("rs_tiny_{}", ty.name()), tiny_llama(&opts).unwrap()));
    }
    let moe = TinyLlamaOpts {
        n_expert: 4,
        n_expert_used: 2,
        ..small.clone()
    };
    files.push(("rs_tiny_moe".to_string(), tiny_moe(&moe).unwrap()));
    files.push(("rs_vocab_only".to_string(), vocab_only(&small)));

    let model = tiny_llama(&small).unwrap();
    for (i, shard) in model
        .split(SplitMode::MaxTensors(4))
        .unwrap()
        .into_iter()
        .enumerate()
    {
        files.push((format!("rs_split-{:05}", i + 1), shard));
    }
    files
}

#[test]
fn gguf_py_agrees_with_our_reader_and_writer() {
    let Some(python) = venv_python() else {
        eprintln!(
            "SKIP gguf_crosscheck: no Python venv (set LLAMA_HOTSWAP_VENV or run scripts/setup-venv.sh)"
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();

    // (b) gguf-py writes, we read.
    let (ok, out) = run_script(&python, "write-py", dir.path());
    assert!(ok, "write-py failed:\n{out}");
    let mut py_files = 0;
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_owned();
        if name.starts_with("py_") && name.ends_with(".gguf") {
            let bytes = std::fs::read(&path).unwrap();
            let gguf = Gguf::parse(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
            std::fs::write(path.with_extension("rust.json"), describe_read(&gguf)).unwrap();
            py_files += 1;
        }
    }
    assert_eq!(py_files, 3);

    // (a) we write, gguf-py reads.
    for (name, writer) in our_files() {
        let path = dir.path().join(format!("{name}.gguf"));
        writer.write_to(&path).unwrap();
        std::fs::write(path.with_extension("rust.json"), describe_writer(&writer)).unwrap();
    }

    let (ok, out) = run_script(&python, "check", dir.path());
    println!("{out}");
    assert!(ok, "gguf-py disagrees:\n{out}");
    assert!(out.contains(" 0 mismatches"), "{out}");

    // The comparison must be able to fail: tamper with one value in each direction.
    let tampered = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, tampered.path().join(path.file_name().unwrap())).unwrap();
    }
    let values_json = tampered.path().join("rs_values.rust.json");
    let text = std::fs::read_to_string(&values_json).unwrap();
    std::fs::write(
        &values_json,
        text.replace("\"value\":4000000000", "\"value\":4000000001"),
    )
    .unwrap();
    let tensors_json = tampered.path().join("py_tensors.rust.json");
    let text = std::fs::read_to_string(&tensors_json).unwrap();
    let flipped = text.replacen("\"requant\":\"", "\"requant\":\"ff", 1);
    assert_ne!(flipped, text);
    std::fs::write(&tensors_json, flipped).unwrap();
    let (ok, out) = run_script(&python, "check", tampered.path());
    assert!(!ok, "tampered descriptions passed:\n{out}");
    assert!(
        out.contains("MISMATCH rs_values.gguf (gguf-py reads ours): key v.u32 value"),
        "{out}"
    );
    assert!(out.contains("MISMATCH py_tensors.gguf: quantize"), "{out}");
}
