//! `llama_model_quantize` against upstream's `llama-quantize` (built by
//! scripts/build-upstream-tools.sh, cached): the same input and arguments must give the same
//! file, byte for byte. Inputs: an F16 copy of the real SmolLM2 (made by upstream's tool from
//! the shipped Q4_1) and upstream's random-weight architecture fixtures.

use std::path::{Path, PathBuf};
use std::process::Command;

use llama::gguf::GgmlType;
use llama::quantize::{quantize_model, QuantizeParams};

fn script(name: &str, args: &[&str]) -> String {
    let out = Command::new("bash")
        .arg(format!("scripts/{name}"))
        .args(args)
        .output()
        .expect("run script");
    assert!(
        out.status.success(),
        "{name} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .last()
        .unwrap()
        .trim()
        .to_owned()
}

fn tools() -> PathBuf {
    PathBuf::from(script("build-upstream-tools.sh", &["llama-quantize"]))
}

fn work_dir(tag: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("llama-hotswap-quant-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs upstream's llama-quantize; returns whether it succeeded.
fn upstream(tools: &Path, args: &[&str]) -> bool {
    let out = Command::new(tools.join("llama-quantize"))
        .env("LD_LIBRARY_PATH", tools)
        .args(args)
        .output()
        .expect("run llama-quantize");
    if !out.status.success() {
        eprintln!(
            "{}",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .rev()
                .take(5)
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    out.status.success()
}

/// The F16 base of SmolLM2, made once in the cache by upstream's tool.
fn smol_f16(tools: &Path) -> PathBuf {
    let q41 = PathBuf::from(script("fetch-models.sh", &[]));
    let f16 = q41.with_file_name("SmolLM2-135M-Instruct.F16.gguf");
    if !f16.exists() {
        // the tests run in parallel and may all find it missing on a fresh cache: each writes
        // its own temporary file and renames it into place (the same bytes; the last wins)
        let tmp = f16.with_extension(format!(
            "gguf.tmp.{}.{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        assert!(upstream(
            tools,
            &[
                "--allow-requantize",
                q41.to_str().unwrap(),
                tmp.to_str().unwrap(),
                "F16"
            ]
        ));
        std::fs::rename(&tmp, &f16).unwrap();
    }
    f16
}

fn ftype_id(name: &str) -> i32 {
    use llama::quantize::policy::ftype::*;
    match name {
        "F16" => F16,
        "BF16" => BF16,
        "F32" => ALL_F32,
        "Q8_0" => Q8_0,
        "Q4_0" => Q4_0,
        "Q4_1" => Q4_1,
        "Q5_0" => Q5_0,
        "Q5_1" => Q5_1,
        "Q2_K" => Q2_K,
        "Q3_K_S" => Q3_K_S,
        "Q3_K_M" => Q3_K_M,
        "Q3_K_L" => Q3_K_L,
        "Q4_K_S" => Q4_K_S,
        "Q4_K_M" => Q4_K_M,
        "Q5_K_S" => Q5_K_S,
        "Q5_K_M" => Q5_K_M,
        "Q6_K" => Q6_K,
        "IQ4_NL" => IQ4_NL,
        "IQ4_XS" => IQ4_XS,
        "TQ1_0" => TQ1_0,
        "TQ2_0" => TQ2_0,
        "MXFP4_MOE" => MXFP4_MOE,
        "Q1_0" => Q1_0,
        "Q2_0" => Q2_0,
        "IQ2_XXS" => IQ2_XXS,
        "IQ2_XS" => IQ2_XS,
        "IQ2_S" => IQ2_S,
        "IQ2_M" => IQ2_M,
        "IQ3_XXS" => IQ3_XXS,
        "IQ3_XS" => IQ3_XS,
        "IQ3_S" => IQ3_S,
        "IQ3_M" => IQ3_M,
        "IQ1_S" => IQ1_S,
        "IQ1_M" => IQ1_M,
        // LLAMA_FTYPE_MOSTLY_NVFP4: in llama.h, but no file type upstream quantizes to
        "NVFP4" => 39,
        other => panic!("no ftype {other}"),
    }
}

/// Quantizes `input` with both and compares; returns a description of the first difference.
fn compare(
    tools: &Path,
    dir: &Path,
    input: &Path,
    ty: &str,
    extra: &[&str],
    params: QuantizeParams,
) -> Result<(), String> {
    let theirs = dir.join(format!("up-{ty}.gguf"));
    let ours = dir.join(format!("ours-{ty}.gguf"));
    let mut args: Vec<&str> = extra.to_vec();
    let (i, t) = (input.to_str().unwrap(), theirs.to_str().unwrap());
    args.extend([i, t, ty, "2"]);
    if !upstream(tools, &args) {
        // Upstream refuses: so must we, leaving no file behind.
        return match quantize_model(input, &ours, &params) {
            Ok(_) => Err(format!("{ty}: upstream refused, ours accepted")),
            Err(_) if ours.exists() => Err(format!("{ty}: refused but left {}", ours.display())),
            Err(_) => Ok(()),
        };
    }
    quantize_model(input, &ours, &params).map_err(|e| format!("{ty}: ours failed: {e}"))?;
    let a = std::fs::read(&theirs).unwrap();
    let b = std::fs::read(&ours).unwrap();
    let _ = std::fs::remove_file(&theirs);
    let _ = std::fs::remove_file(&ours);
    if a == b {
        return Ok(());
    }
    let first = a
        .iter()
        .zip(&b)
        .position(|(x, y)| x != y)
        .unwrap_or(a.len().min(b.len()));
    Err(format!(
        "{ty}: files differ (sizes {} vs {}, first difference at byte {first})",
        a.len(),
        b.len()
    ))
}

fn params(ty: &str) -> QuantizeParams {
    QuantizeParams {
        ftype: ftype_id(ty),
        nthread: 2,
        ..QuantizeParams::upstream_default()
    }
}

const TYPES: &[&str] = &[
    "F16",
    "BF16",
    "Q8_0",
    "Q4_0",
    "Q4_1",
    "Q5_0",
    "Q5_1",
    "Q2_K",
    "Q3_K_S",
    "Q3_K_M",
    "Q3_K_L",
    "Q4_K_S",
    "Q4_K_M",
    "Q5_K_S",
    "Q5_K_M",
    "Q6_K",
    "IQ4_NL",
    "IQ4_XS",
    "TQ1_0",
    "TQ2_0",
    "MXFP4_MOE",
    "Q1_0",
    "Q2_0",
];

// These run upstream's llama-quantize and ours on whole models: minutes each, so they run in
// release through `make test-quantize` (scripts/test-quantize.sh), not in the debug `cargo test`.
#[test]
#[ignore = "slow differential: make test-quantize runs it in release"]
fn smollm2_every_type_is_byte_identical() {
    let tools = tools();
    let input = smol_f16(&tools);
    let dir = work_dir("smol");
    let only = std::env::var("QUANT_TYPES").ok();
    let failures: Vec<String> = TYPES
        .iter()
        .filter(|t| {
            only.as_deref()
                .is_none_or(|o| o.split(',').any(|x| x == **t))
        })
        .filter_map(|ty| compare(&tools, &dir, &input, ty, &[], params(ty)).err())
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
#[ignore = "slow differential: make test-quantize runs it in release"]
fn smollm2_options_are_byte_identical() {
    let tools = tools();
    let input = smol_f16(&tools);
    let dir = work_dir("opts");
    let mut failures = Vec::new();
    // --pure, --output-tensor-type, --token-embedding-type, --tensor-type, --leave-output-tensor,
    // --prune-layers, --keep-split (single input: one shard named -00001-of-00001).
    let mut p = params("Q4_K_M");
    p.pure = true;
    failures.extend(compare(&tools, &dir, &input, "Q4_K_M", &["--pure"], p).err());
    let mut p = params("Q5_K_S");
    p.output_tensor_type = Some(GgmlType::Q8_0);
    p.token_embedding_type = Some(GgmlType::Q4_0);
    failures.extend(
        compare(
            &tools,
            &dir,
            &input,
            "Q5_K_S",
            &[
                "--output-tensor-type",
                "q8_0",
                "--token-embedding-type",
                "q4_0",
            ],
            p,
        )
        .err(),
    );
    let mut p = params("Q4_0");
    p.tensor_types = vec![
        ("ffn_down".into(), GgmlType::Q6_K),
        ("attn_v".into(), GgmlType::Q8_0),
    ];
    failures.extend(
        compare(
            &tools,
            &dir,
            &input,
            "Q4_0",
            &[
                "--tensor-type",
                "ffn_down=q6_k",
                "--tensor-type",
                "attn_v=q8_0",
            ],
            p,
        )
        .err(),
    );
    let mut p = params("Q6_K");
    p.prune_layers = vec![2, 5];
    failures.extend(compare(&tools, &dir, &input, "Q6_K", &["--prune-layers", "2,5"], p).err());
    let mut p = params("Q8_0");
    p.quantize_output_tensor = false;
    failures.extend(compare(&tools, &dir, &input, "Q8_0", &["--leave-output-tensor"], p).err());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
#[ignore = "slow differential: make test-quantize runs it in release"]
fn architecture_fixtures_are_byte_identical() {
    let tools = tools();
    let fixtures = PathBuf::from(script("upstream-arch-fixtures.sh", &[]));
    let dir = work_dir("archs");
    let mut failures = Vec::new();
    let mut n = 0;
    let mut names: Vec<_> = std::fs::read_dir(&fixtures)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "gguf"))
        .collect();
    names.sort();
    for path in names {
        for ty in ["Q4_K_M", "Q8_0", "MXFP4_MOE"] {
            n += 1;
            if let Err(e) = compare(&tools, &dir, &path, ty, &[], params(ty)) {
                failures.push(format!(
                    "{}: {e}",
                    path.file_name().unwrap().to_string_lossy()
                ));
            }
        }
    }
    assert!(n > 100, "only {n} fixture runs");
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Every tensor of `path`: name, type, shape and bytes.
fn tensors_of(path: &Path) -> Vec<(String, GgmlType, [i64; 4], Vec<u8>)> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::open(path).unwrap();
    let size = file.metadata().unwrap().len();
    let header = llama::gguf::read_header_from(&file, size, 64 << 20).unwrap();
    let gguf = header.gguf().unwrap();
    gguf.tensors()
        .iter()
        .map(|t| {
            let mut bytes = vec![0u8; t.nbytes as usize];
            file.read_exact_at(&mut bytes, t.abs_offset(&gguf)).unwrap();
            (t.name.to_string(), t.ggml_type, t.ne, bytes)
        })
        .collect()
}

/// `quantize_tensor` (the sweep's in-memory candidates) gives, tensor by tensor, the bytes
/// upstream's `llama-quantize --pure` writes: from the F16 base, and requantizing the shipped
/// Q4_1 (dequantized to f32 first, as upstream's `--allow-requantize`).
#[test]
#[ignore = "slow differential: make test-quantize runs it in release"]
fn smollm2_tensor_quantizer_matches_upstream_files() {
    let tools = tools();
    let f16 = smol_f16(&tools);
    let q41 = PathBuf::from(script("fetch-models.sh", &[]));
    let dir = work_dir("tensor");
    for (input, ty) in [(&f16, "Q4_0"), (&f16, "Q4_K_S"), (&q41, "Q8_0")] {
        let theirs = dir.join(format!("up-{ty}.gguf"));
        let (i, t) = (input.to_str().unwrap(), theirs.to_str().unwrap());
        assert!(upstream(
            &tools,
            &["--pure", "--allow-requantize", i, t, ty, "2"]
        ));
        let base = tensors_of(input);
        let out = tensors_of(&theirs);
        let _ = std::fs::remove_file(&theirs);
        let mut converted = 0;
        assert_eq!(base.len(), out.len(), "{ty}: tensor counts differ");
        for (name2, to, ne2, want) in &out {
            let (name, from, ne, bytes) = base
                .iter()
                .find(|(n, ..)| n == name2)
                .unwrap_or_else(|| panic!("{ty}: {name2} is not in the input"));
            assert_eq!(ne, ne2, "{ty}: {name}: shapes differ");
            let got = llama::quantize::quantize_tensor(*from, bytes, *ne, *to, None, 2)
                .unwrap_or_else(|e| panic!("{ty}: {name} {} -> {}: {e}", from.name(), to.name()));
            assert!(
                &got == want,
                "{ty}: {name} {} -> {}: bytes differ from upstream's",
                from.name(),
                to.name()
            );
            converted += usize::from(from != to);
        }
        assert!(
            converted > 100,
            "{ty}: only {converted} tensors changed type"
        );
    }
    // What a row size forbids is an error, never a silent other type.
    let (name, from, ne, bytes) = tensors_of(&f16)
        .into_iter()
        .find(|(_, _, ne, _)| ne[0] % 256 != 0)
        .expect("a tensor whose rows are not a multiple of 256");
    let e = llama::quantize::quantize_tensor(from, &bytes, ne, GgmlType::Q4_K, None, 2)
        .expect_err("Q4_K needs rows of a multiple of 256");
    assert!(
        e.to_string().contains("cannot be stored as q4_K"),
        "{name}: {e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// An imatrix of SmolLM2 F16 made by upstream's `llama-imatrix` (2 chunks of 128 tokens of
/// upstream's README, from the cache), at `dir/imatrix.gguf`.
fn smol_imatrix(f16: &Path, dir: &Path) -> PathBuf {
    let tools = PathBuf::from(script(
        "build-upstream-tools.sh",
        &["llama-quantize", "llama-imatrix"],
    ));
    let src = PathBuf::from(script("fetch-upstream.sh", &[])).join("vendor/llama.cpp");
    let text = dir.join("text.txt");
    std::fs::copy(src.join("README.md"), &text).unwrap();
    let im = dir.join("imatrix.gguf");
    let out = Command::new(tools.join("llama-imatrix"))
        .env("LD_LIBRARY_PATH", &tools)
        .args(["-m", f16.to_str().unwrap(), "-f", text.to_str().unwrap()])
        .args([
            "-c",
            "128",
            "--chunks",
            "2",
            "-t",
            "2",
            "-o",
            im.to_str().unwrap(),
        ])
        .output()
        .expect("run llama-imatrix");
    assert!(
        out.status.success(),
        "llama-imatrix failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    im
}

/// The parameters `llama-quantize --imatrix FILE` passes: the normalised values and the four
/// `quantize.imatrix.*` keys it records in the output.
fn with_imatrix(mut p: QuantizeParams, path: &Path) -> QuantizeParams {
    use llama::model::meta::{KvOverride, OverrideValue};
    let m = llama::quantize::imatrix::Imatrix::read(path).unwrap();
    let kv = |key: &str, value| KvOverride {
        key: key.into(),
        value,
    };
    let file: String = path.to_string_lossy().chars().take(127).collect();
    p.kv_overrides
        .push(kv("quantize.imatrix.file", OverrideValue::Str(file)));
    if let Some(d) = m.datasets.first() {
        let d: String = d.chars().take(127).collect();
        p.kv_overrides
            .push(kv("quantize.imatrix.dataset", OverrideValue::Str(d)));
    }
    p.kv_overrides.push(kv(
        "quantize.imatrix.entries_count",
        OverrideValue::Int(m.entries.len() as i64),
    ));
    if m.chunk_count > 0 {
        p.kv_overrides.push(kv(
            "quantize.imatrix.chunks_count",
            OverrideValue::Int(i64::from(m.chunk_count)),
        ));
    }
    p.imatrix = Some(m.entries.into_iter().collect());
    p
}

/// The grid IQ types (IQ1_S/M, IQ2_XXS/XS, IQ2_S as IQ2_M's default type, IQ3_XXS/S) with
/// an imatrix from upstream's `llama-imatrix`: byte-identical to upstream's `llama-quantize
/// --imatrix`. `--pure` with layers 3..29 pruned and the token embedding at Q8_0 holds the run
/// to seconds per type: SmolLM2's 576-wide rows fall back to IQ4_NL, so the grid quantizer
/// runs on the three 1536-wide ffn_down tensors (without `--pure` the first layers' ffn_down
/// would be Q2_K). Without an imatrix upstream refuses the types that need
/// one, and so must we (no file left); IQ3_S needs none and must match without it too.
#[test]
#[ignore = "slow differential: make test-quantize runs it in release"]
fn smollm2_grid_iq_types_are_byte_identical() {
    let tools = tools();
    let input = smol_f16(&tools);
    let dir = work_dir("grid");
    let im = smol_imatrix(&input, &dir);
    let prune: Vec<i32> = (3..30).collect();
    let prune_arg = prune
        .iter()
        .map(|l| l.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let trimmed = |ty: &str| QuantizeParams {
        prune_layers: prune.clone(),
        token_embedding_type: Some(GgmlType::Q8_0),
        pure: true,
        ..params(ty)
    };
    let small = [
        "--pure",
        "--prune-layers",
        &prune_arg,
        "--token-embedding-type",
        "q8_0",
    ];
    let only = std::env::var("QUANT_TYPES").ok();
    let wanted = |t: &str| only.as_deref().is_none_or(|o| o.split(',').any(|x| x == t));
    let mut failures = Vec::new();
    let mut n = 0;
    for ty in [
        "IQ2_XXS", "IQ2_XS", "IQ2_M", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M",
    ]
    .into_iter()
    .filter(|t| wanted(t))
    {
        let mut args = vec!["--imatrix", im.to_str().unwrap()];
        args.extend(small);
        n += 1;
        failures.extend(
            compare(
                &tools,
                &dir,
                &input,
                ty,
                &args,
                with_imatrix(trimmed(ty), &im),
            )
            .err(),
        );
    }
    for ty in ["IQ2_XXS", "IQ2_XS", "IQ1_S", "IQ1_M", "IQ3_XXS", "IQ3_S"]
        .into_iter()
        .filter(|t| wanted(t))
    {
        n += 1;
        failures.extend(
            compare(&tools, &dir, &input, ty, &small, trimmed(ty))
                .map_err(|e| format!("without imatrix: {e}"))
                .err(),
        );
    }
    assert!(n > 0, "QUANT_TYPES selected no grid type");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The F16 SmolLM2 split by upstream's llama-gguf-split into three files (at most 100
/// tensors each), made once in the cache; returns the first file.
fn smol_f16_split(tools: &Path, f16: &Path) -> PathBuf {
    let dir = f16.with_file_name("smol-f16-split");
    let first = dir.join("smol-00001-of-00003.gguf");
    if !first.exists() {
        let tmp = f16.with_file_name("smol-f16-split.tmp");
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).unwrap();
        let out = Command::new(tools.join("llama-gguf-split"))
            .env("LD_LIBRARY_PATH", tools)
            .args(["--split", "--split-max-tensors", "100"])
            .arg(f16)
            .arg(tmp.join("smol"))
            .output()
            .expect("run llama-gguf-split");
        assert!(
            out.status.success(),
            "llama-gguf-split: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::rename(&tmp, &dir).unwrap();
    }
    assert!(
        first.exists(),
        "llama-gguf-split did not write {}",
        first.display()
    );
    first
}

/// NVFP4, which upstream's llama-quantize writes only as a per-tensor override: the files
/// byte-identical (Q8_0 with ffn_down and attn_q as NVFP4; the output tensor too), and the
/// NVFP4 file type (39) refused by both with no file left.
#[test]
#[ignore = "slow differential: make test-quantize runs it in release"]
fn smollm2_nvfp4_overrides_are_byte_identical() {
    let tools = tools();
    let input = smol_f16(&tools);
    let dir = work_dir("nvfp4");
    let mut failures = Vec::new();
    let mut p = params("Q8_0");
    p.tensor_types = vec![
        ("ffn_down".into(), GgmlType::NVFP4),
        ("attn_q".into(), GgmlType::NVFP4),
    ];
    p.output_tensor_type = Some(GgmlType::NVFP4);
    let args = [
        "--tensor-type",
        "ffn_down=nvfp4",
        "--tensor-type",
        "attn_q=nvfp4",
        "--output-tensor-type",
        "nvfp4",
    ];
    failures.extend(compare(&tools, &dir, &input, "Q8_0", &args, p).err());
    // upstream: "invalid ftype"; ours: no default type for file type 39
    failures.extend(compare(&tools, &dir, &input, "NVFP4", &[], params("NVFP4")).err());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A model split in several GGUF files as quantization input (upstream's loader reads the
/// set from its first file): one output file, and --keep-split's one output per input
/// split, byte-identical to upstream's llama-quantize on the same set; a set with a file
/// missing, or started from its second file, refused by both with no file left.
#[test]
#[ignore = "slow differential: make test-quantize runs it in release"]
fn split_input_is_byte_identical() {
    let tools = PathBuf::from(script(
        "build-upstream-tools.sh",
        &["llama-quantize", "llama-gguf-split"],
    ));
    let f16 = smol_f16(&tools);
    let first = smol_f16_split(&tools, &f16);
    let dir = work_dir("split");
    let mut failures = Vec::new();
    failures.extend(compare(&tools, &dir, &first, "Q4_0", &[], params("Q4_0")).err());

    // --keep-split: upstream's program strips ".gguf" and the library names the files.
    let theirs = dir.join("up-keep");
    let ours = dir.join("ours-keep");
    let t = format!("{}.gguf", theirs.display());
    assert!(upstream(
        &tools,
        &["--keep-split", first.to_str().unwrap(), &t, "Q8_0", "2"]
    ));
    let p = QuantizeParams {
        keep_split: true,
        ..params("Q8_0")
    };
    let report = quantize_model(&first, &ours, &p).expect("ours with keep_split");
    assert_eq!(report.outputs.len(), 3, "{:?}", report.outputs);
    for i in 1..=3 {
        let name = |base: &Path| format!("{}-{i:05}-of-00003.gguf", base.display());
        let (a, b) = (std::fs::read(name(&theirs)), std::fs::read(name(&ours)));
        match (a, b) {
            (Ok(a), Ok(b)) if a == b => {}
            (Ok(a), Ok(b)) => failures.push(format!(
                "keep-split file {i}: differs (sizes {} vs {})",
                a.len(),
                b.len()
            )),
            (a, b) => failures.push(format!(
                "keep-split file {i}: upstream {:?}, ours {:?}",
                a.err(),
                b.err()
            )),
        }
    }

    // Hostile sets: the second file as input; the third file missing.
    let second = first.with_file_name("smol-00002-of-00003.gguf");
    failures.extend(
        compare(&tools, &dir, &second, "Q4_0", &[], params("Q4_0"))
            .map_err(|e| format!("second file as input: {e}"))
            .err(),
    );
    let broken = dir.join("broken");
    std::fs::create_dir_all(&broken).unwrap();
    for i in [1, 2] {
        let name = format!("smol-{i:05}-of-00003.gguf");
        std::fs::copy(first.with_file_name(&name), broken.join(&name)).unwrap();
    }
    let broken_first = broken.join("smol-00001-of-00003.gguf");
    let err = quantize_model(&broken_first, &dir.join("x.gguf"), &params("Q4_0"))
        .err()
        .map(|e| e.to_string());
    if !err
        .as_deref()
        .is_some_and(|e| e.contains("smol-00003-of-00003.gguf"))
    {
        failures.push(format!("a missing third file: ours said {err:?}"));
    }
    failures.extend(
        compare(&tools, &dir, &broken_first, "Q4_0", &[], params("Q4_0"))
            .map_err(|e| format!("third file missing: {e}"))
            .err(),
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let _ = std::fs::remove_dir_all(&dir);
}
