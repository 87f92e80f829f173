//! `llama-hotswap-perplexity sweep` end to end on a tiny llama model in one-tensor shards,
//! with candidates in the GGUF-Tool-Suite layout (one directory per type, one tensor per
//! file): an identical candidate gives the base PPL and KLD exactly; a type change gives the
//! same PPL and KLD as a fresh load of a model with that tensor in that type; a truncated
//! candidate is a failed row and the sweep goes on; a corrupted restore is caught (and the
//! sweep stops when it cannot be repaired); a second run skips the rows already written.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use llama::gguf::fixtures::{llama_tensor_specs, tensor_values, tiny_llama, TinyLlamaOpts};
use llama::gguf::{GgmlType, GgufWriter, SplitMode};

const BIN: &str = env!("CARGO_BIN_EXE_llama-hotswap-perplexity");
const SAME: &str = "blk.0.attn_q.weight";
const RETYPED: &str = "blk.1.ffn_down.weight";
const TRUNCATED: &str = "output.weight";

fn opts() -> TinyLlamaOpts {
    TinyLlamaOpts {
        name: "sweep-test".into(),
        ..TinyLlamaOpts::default()
    }
}

/// A one-tensor GGUF holding `name` with the fixture's values encoded as `ty`.
fn candidate(name: &str, ty: GgmlType, path: &Path) {
    let spec = llama_tensor_specs(&opts())
        .into_iter()
        .find(|s| s.name == name)
        .unwrap();
    let count = spec.dims.iter().product::<i64>() as usize;
    let values = tensor_values(opts().seed, name, count, false);
    let mut w = GgufWriter::new();
    w.set("general.architecture", "llama");
    w.add_tensor_f32(name, &spec.dims, ty, &values).unwrap();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    w.write_to(path).unwrap();
}

struct Fixture {
    dir: tempfile::TempDir,
    model: PathBuf,
    text: PathBuf,
    cands: PathBuf,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("model").join("tiny");
    std::fs::create_dir_all(prefix.parent().unwrap()).unwrap();
    let shards = tiny_llama(&opts())
        .unwrap()
        .write_split(prefix.to_str().unwrap(), SplitMode::MaxTensors(1))
        .unwrap();
    assert!(shards.len() > 10, "one tensor per shard");
    let text = dir.path().join("text.txt");
    let sentence = "the quick brown fox jumps over the lazy dog while three tired otters sing. ";
    std::fs::write(&text, sentence.repeat(40)).unwrap();
    let cands = dir.path().join("candidates");
    candidate(SAME, GgmlType::F32, &cands.join("f32").join("a.gguf"));
    candidate(RETYPED, GgmlType::Q8_0, &cands.join("q8_0").join("b.gguf"));
    let cut = cands.join("q4_0").join("c.gguf");
    candidate(TRUNCATED, GgmlType::Q4_0, &cut);
    let len = std::fs::metadata(&cut).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&cut).unwrap();
    f.set_len(len - 100).unwrap();
    Fixture {
        model: shards[0].clone(),
        dir,
        text,
        cands,
    }
}

struct Run {
    ok: bool,
    stderr: String,
}

fn sweep(fx: &Fixture, out: &str, extra: &[&str], env: &[(&str, &str)]) -> Run {
    let csv = fx.dir.path().join(format!("{out}.csv"));
    let jsonl = fx.dir.path().join(format!("{out}.jsonl"));
    let mut cmd = Command::new(BIN);
    cmd.arg("sweep")
        .arg("-m")
        .arg(&fx.model)
        .arg("-f")
        .arg(&fx.text)
        .arg("--candidates")
        .arg(&fx.cands)
        .arg("--csv")
        .arg(&csv)
        .arg("--jsonl")
        .arg(&jsonl)
        .args([
            "-c", "32", "-b", "32", "--chunks", "3", "-t", "2", "--plain",
        ])
        .args(extra)
        .env_remove("LLAMA_HOTSWAP_SWEEP_TEST_CORRUPT_RESTORE");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let o = cmd.output().unwrap();
    Run {
        ok: o.status.success(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

/// CSV rows as maps (the test's fields hold no quotes or commas except the reason, last).
fn rows(path: &Path) -> Vec<HashMap<String, String>> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    let header: Vec<String> = lines.next().unwrap().split(',').map(String::from).collect();
    assert_eq!(header.last().map(String::as_str), Some("reason"));
    lines
        .map(|l| {
            let fields: Vec<&str> = l.splitn(header.len(), ',').collect();
            header
                .iter()
                .cloned()
                .zip(fields.iter().map(|s| s.to_string()))
                .collect()
        })
        .collect()
}

fn row<'a>(rows: &'a [HashMap<String, String>], tensor: &str) -> &'a HashMap<String, String> {
    rows.iter()
        .find(|r| r["tensor"] == tensor)
        .unwrap_or_else(|| panic!("no row for {tensor}: {rows:?}"))
}

/// (PPL, KLD) of the base round, printed exactly.
fn base_line(stderr: &str) -> (String, String) {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("sweep: base model: PPL = "))
        .unwrap_or_else(|| panic!("no base line in:\n{stderr}"));
    let ppl = line["sweep: base model: PPL = ".len()..]
        .split(' ')
        .next()
        .unwrap()
        .to_string();
    let kld = line
        .split("KLD vs base logits = ")
        .nth(1)
        .unwrap()
        .split(',')
        .next()
        .unwrap()
        .to_string();
    (ppl, kld)
}

#[test]
fn sweep_rows_resume_truncated_and_type_change() {
    let fx = fixture();
    let run = sweep(&fx, "out", &[], &[]);
    assert!(run.ok, "{}", run.stderr);
    let csv = fx.dir.path().join("out.csv");
    let r = rows(&csv);
    assert_eq!(r.len(), 3, "{r:?}");
    let (base_ppl, base_kld) = base_line(&run.stderr);

    // Identical candidate: exactly the base's PPL and KLD (the base-logits file quantizes
    // log-probs, so the base's own KLD is tiny but not 0).
    let same = row(&r, SAME);
    assert_eq!(same["status"], "ok");
    assert_eq!(same["type"], "f32");
    assert_eq!(same["ppl"], base_ppl);
    assert_eq!(same["kld"], base_kld);
    assert!(base_kld.parse::<f64>().unwrap().abs() < 1e-4, "{base_kld}");
    assert_eq!(same["top1"], "100");
    assert_eq!(same["bytes"], (64 * 64 * 4).to_string());
    assert_eq!(
        (same["chunks"].as_str(), same["n_ctx"].as_str()),
        ("3", "32")
    );

    // Type change: Q8_0 bytes, an ok row whose KLD is above the base's.
    let retyped = row(&r, RETYPED);
    assert_eq!(retyped["status"], "ok", "{retyped:?}");
    assert_eq!(retyped["type"], "q8_0");
    assert_eq!(retyped["bytes"], (128 * 64 / 32 * 34).to_string());
    assert!(retyped["kld"].parse::<f64>().unwrap() > base_kld.parse::<f64>().unwrap());
    assert!(
        retyped["seconds"].parse::<f64>().unwrap()
            >= retyped["eval_seconds"].parse::<f64>().unwrap()
    );

    // Truncated: a failed row with its reason, and the others still ran.
    let cut = row(&r, TRUNCATED);
    assert_eq!(cut["status"], "failed");
    assert_eq!(cut["type"], "q4_0");
    // rows name a candidate by its canonical path (its identity, issue 35 finding 3)
    let canon = std::fs::canonicalize(fx.cands.join("q4_0").join("c.gguf")).unwrap();
    assert_eq!(cut["file"], canon.display().to_string());
    assert!(cut["reason"].contains("GGUF"), "{cut:?}");
    assert!(cut["ppl"].is_empty());

    // JSON lines got the same rows.
    let jsonl = std::fs::read_to_string(fx.dir.path().join("out.jsonl")).unwrap();
    assert_eq!(jsonl.lines().count(), 3);
    assert!(
        jsonl.contains(&format!("\"ppl\":{}", same["ppl"])),
        "{jsonl}"
    );

    // Resume: nothing left to do, nothing appended.
    let before = std::fs::read_to_string(&csv).unwrap();
    let again = sweep(&fx, "out", &[], &[]);
    assert!(again.ok, "{}", again.stderr);
    assert!(
        again.stderr.contains("0 to run, 3 already"),
        "{}",
        again.stderr
    );
    assert_eq!(std::fs::read_to_string(&csv).unwrap(), before);

    // An output lost (or added later) is filled in; the other gets no duplicates.
    std::fs::remove_file(fx.dir.path().join("out.jsonl")).unwrap();
    let refill = sweep(&fx, "out", &[], &[]);
    assert!(refill.ok, "{}", refill.stderr);
    assert!(
        refill.stderr.contains("3 to run, 0 already"),
        "{}",
        refill.stderr
    );
    assert_eq!(std::fs::read_to_string(&csv).unwrap(), before);
    let jsonl = std::fs::read_to_string(fx.dir.path().join("out.jsonl")).unwrap();
    assert_eq!(jsonl.lines().count(), 3, "{jsonl}");

    // Resume after losing the last row and half of a line: only that candidate runs, and
    // it measures the same as before (the base logits file is reused).
    let mut lines: Vec<&str> = before.lines().collect();
    let last = lines.pop().unwrap().to_string();
    let cut_text = format!("{}\n{}", lines.join("\n"), &last[..last.len() / 2]);
    std::fs::write(&csv, cut_text).unwrap();
    let third = sweep(&fx, "out", &[], &[]);
    assert!(third.ok, "{}", third.stderr);
    assert!(
        third.stderr.contains("1 to run, 2 already"),
        "{}",
        third.stderr
    );
    let after = rows(&csv);
    assert_eq!(after.len(), 3);
    let rerun = after.last().unwrap();
    let old = rows_from_line(&before, &last);
    for k in ["tensor", "type", "bytes", "ppl", "kld", "top1", "status"] {
        assert_eq!(rerun[k], old[k], "{k}");
    }

    // The size budget: room for everything keeps the base types; a model that must shed
    // the F32 ffn_down's 32768 - 8704 bytes takes its Q8_0 candidate.
    let size: u64 = 460_032;
    let roomy = sweep(&fx, "out", &["--budget", &size.to_string()], &[]);
    assert!(roomy.ok, "{}", roomy.stderr);
    assert!(
        roomy
            .stderr
            .contains(&format!("sweep:   {RETYPED} f32 32768 bytes")),
        "{}",
        roomy.stderr
    );
    let tight = size - (32768 - 8704);
    let tight = sweep(&fx, "out", &["--budget", &tight.to_string()], &[]);
    assert!(tight.ok, "{}", tight.stderr);
    assert!(
        tight
            .stderr
            .contains(&format!("sweep:   {RETYPED} q8_0 8704 bytes")),
        "{}",
        tight.stderr
    );
    let impossible = sweep(&fx, "out", &["--budget", "1000"], &[]);
    assert!(
        impossible
            .stderr
            .contains("budget 1000 bytes: the tensors not swept alone take"),
        "{}",
        impossible.stderr
    );

    // Resume refuses rows measured with other settings.
    let other = sweep(&fx, "out", &["--chunks", "2"], &[]);
    assert!(!other.ok);
    assert!(
        other.stderr.contains("use another output file"),
        "{}",
        other.stderr
    );

    // A fresh load of a model whose tensor is Q8_0 from the start, evaluated against the same
    // base logits, measures exactly what the swapped-in candidate did.
    let q8_prefix = fx.dir.path().join("model-q8").join("tiny");
    std::fs::create_dir_all(q8_prefix.parent().unwrap()).unwrap();
    let mut w = GgufWriter::new();
    let base = tiny_llama(&opts()).unwrap();
    for (k, v) in base.kvs() {
        w.set(k, v.clone());
    }
    for spec in llama_tensor_specs(&opts()) {
        let count = spec.dims.iter().product::<i64>() as usize;
        let values = tensor_values(
            opts().seed,
            &spec.name,
            count,
            spec.name.ends_with("_norm.weight"),
        );
        let ty = if spec.name == RETYPED {
            GgmlType::Q8_0
        } else {
            spec.ggml_type
        };
        w.add_tensor_f32(&spec.name, &spec.dims, ty, &values)
            .unwrap();
    }
    let q8 = w
        .write_split(q8_prefix.to_str().unwrap(), SplitMode::MaxTensors(1))
        .unwrap();
    let empty = fx.dir.path().join("no-candidates");
    std::fs::create_dir_all(&empty).unwrap();
    let o = Command::new(BIN)
        .arg("sweep")
        .arg("-m")
        .arg(&q8[0])
        .arg("--candidates")
        .arg(&empty)
        .arg("--kl-divergence-base")
        .arg(fx.dir.path().join("out.csv.base-logits"))
        .arg("--csv")
        .arg(fx.dir.path().join("q8.csv"))
        .args([
            "-c", "32", "-b", "32", "--chunks", "3", "-t", "2", "--plain",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    let (ppl, kld) = base_line(&stderr);
    assert_eq!(ppl, retyped["ppl"]);
    assert_eq!(kld, retyped["kld"]);
}

fn rows_from_line(text: &str, line: &str) -> HashMap<String, String> {
    let header: Vec<&str> = text.lines().next().unwrap().split(',').collect();
    header
        .iter()
        .map(|h| h.to_string())
        .zip(line.splitn(header.len(), ',').map(String::from))
        .collect()
}

#[test]
fn a_corrupted_restore_is_caught() {
    let fx = fixture();
    // Corrupted once: the check fires, the second restore repairs it, the sweep goes on.
    let run = sweep(
        &fx,
        "once",
        &[],
        &[("LLAMA_HOTSWAP_SWEEP_TEST_CORRUPT_RESTORE", SAME)],
    );
    assert!(run.ok, "{}", run.stderr);
    let r = rows(&fx.dir.path().join("once.csv"));
    assert_eq!(r.len(), 3);
    let same = row(&r, SAME);
    assert_eq!(same["status"], "failed");
    assert!(same["reason"].contains("restore check failed"), "{same:?}");
    assert!(same["reason"].contains("repaired"), "{same:?}");
    assert_eq!(row(&r, RETYPED)["status"], "ok");

    // Corrupted every time: the check fires and the sweep stops (later rows would be
    // measured on a model that is not the base).
    let run = sweep(
        &fx,
        "always",
        &[],
        &[(
            "LLAMA_HOTSWAP_SWEEP_TEST_CORRUPT_RESTORE",
            &format!("{SAME}:always"),
        )],
    );
    assert!(!run.ok, "{}", run.stderr);
    assert!(run.stderr.contains("stopped"), "{}", run.stderr);
    let r = rows(&fx.dir.path().join("always.csv"));
    let same = row(&r, SAME);
    assert_eq!(same["status"], "failed");
    assert!(same["reason"].contains("no longer the base"), "{same:?}");
    // a.gguf (f32/) sorts first: nothing ran after it.
    assert_eq!(r.len(), 1, "{r:?}");
}

#[test]
fn bad_arguments_are_errors() {
    for args in [
        vec!["sweep"],
        vec!["sweep", "-m", "x.gguf"],
        vec!["sweep", "-m", "x.gguf", "--candidates", "d"],
        vec!["sweep", "--bogus"],
        vec!["sweep", "--chunks", "0"],
        vec!["sweep", "--budget", "lots"],
    ] {
        let o = Command::new(BIN).args(&args).output().unwrap();
        assert!(!o.status.success(), "{args:?}");
        assert!(!o.stderr.is_empty(), "{args:?}");
    }
    let missing = Command::new(BIN)
        .args([
            "sweep",
            "-m",
            "/nonexistent/m.gguf",
            "--candidates",
            "/tmp",
            "--csv",
        ])
        .arg(std::env::temp_dir().join(format!("sweep-missing-{}.csv", std::process::id())))
        .output()
        .unwrap();
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("cannot load"));
}

#[test]
fn candidates_that_do_not_fit_are_failed_rows() {
    let fx = fixture();
    let bad = fx.dir.path().join("bad");
    // A tensor the model lacks, a shape that differs, and one good candidate after them.
    let mut w = GgufWriter::new();
    w.add_tensor_f32(
        "blk.9.attn_q.weight",
        &[64, 64],
        GgmlType::F32,
        &[0.0; 64 * 64],
    )
    .unwrap();
    std::fs::create_dir_all(&bad).unwrap();
    w.write_to(bad.join("a-unknown.gguf")).unwrap();
    let mut w = GgufWriter::new();
    w.add_tensor_f32(SAME, &[32, 128], GgmlType::F32, &[0.0; 64 * 64])
        .unwrap();
    w.write_to(bad.join("b-shape.gguf")).unwrap();
    std::fs::write(bad.join("c-empty.gguf"), b"").unwrap();
    candidate(RETYPED, GgmlType::Q4_0, &bad.join("d-good.gguf"));
    // A FIFO named like a candidate must not block the sweep.
    let fifo = Command::new("mkfifo")
        .arg(bad.join("e-fifo.gguf"))
        .status()
        .unwrap();
    assert!(fifo.success());
    let csv = fx.dir.path().join("bad.csv");
    let o = Command::new(BIN)
        .arg("sweep")
        .arg("-m")
        .arg(&fx.model)
        .arg("-f")
        .arg(&fx.text)
        .arg("--candidates")
        .arg(&bad)
        .arg("--csv")
        .arg(&csv)
        .args([
            "-c", "32", "-b", "32", "--chunks", "2", "-t", "2", "--plain",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    let r = rows(&csv);
    assert_eq!(r.len(), 5, "{r:?}");
    let by_file = |f: &str| {
        r.iter()
            .find(|x| x["file"].ends_with(&format!("/{f}")))
            .unwrap()
    };
    let unknown = by_file("a-unknown.gguf");
    assert_eq!(unknown["status"], "failed");
    assert!(unknown["reason"].contains("no tensor named"), "{unknown:?}");
    let shape = by_file("b-shape.gguf");
    assert_eq!(shape["status"], "failed");
    assert!(shape["reason"].contains("shape"), "{shape:?}");
    assert_eq!(by_file("c-empty.gguf")["status"], "failed");
    let good = by_file("d-good.gguf");
    assert_eq!(good["status"], "ok", "{good:?}");
    assert_eq!(good["type"], "q4_0");
    let fifo = by_file("e-fifo.gguf");
    assert_eq!(fifo["status"], "failed");
    assert!(fifo["reason"].contains("not a regular file"), "{fifo:?}");
}

#[test]
fn a_file_of_several_tensors_is_one_round_with_per_file() {
    let fx = fixture();
    let dir = fx.dir.path().join("group");
    std::fs::create_dir_all(&dir).unwrap();
    let mut w = GgufWriter::new();
    for (name, ty) in [(SAME, GgmlType::F16), (RETYPED, GgmlType::Q8_0)] {
        let spec = llama_tensor_specs(&opts())
            .into_iter()
            .find(|s| s.name == name)
            .unwrap();
        let count = spec.dims.iter().product::<i64>() as usize;
        let values = tensor_values(opts().seed, name, count, false);
        w.add_tensor_f32(name, &spec.dims, ty, &values).unwrap();
    }
    w.write_to(dir.join("group.gguf")).unwrap();
    let run = |per_file: bool, out: &str| {
        let csv = fx.dir.path().join(out);
        let mut cmd = Command::new(BIN);
        cmd.arg("sweep")
            .arg("-m")
            .arg(&fx.model)
            .arg("-f")
            .arg(&fx.text)
            .arg("--candidates")
            .arg(&dir)
            .arg("--csv")
            .arg(&csv)
            .args([
                "-c", "32", "-b", "32", "--chunks", "2", "-t", "2", "--plain",
            ]);
        if per_file {
            cmd.arg("--per-file");
        }
        let o = cmd.output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        rows(&csv)
    };
    let each = run(false, "each.csv");
    assert_eq!(each.len(), 2, "{each:?}");
    assert_eq!(row(&each, SAME)["type"], "f16");
    assert_eq!(row(&each, RETYPED)["type"], "q8_0");
    let together = run(true, "together.csv");
    assert_eq!(together.len(), 1, "{together:?}");
    let g = &together[0];
    assert_eq!(g["tensor"], format!("{SAME}+{RETYPED}"));
    assert_eq!(g["type"], "f16+q8_0");
    assert_eq!(g["status"], "ok", "{g:?}");
    assert_eq!(g["bytes"], (64 * 64 * 2 + 128 * 64 / 32 * 34).to_string());
    // Both swapped at once move the output more than either alone.
    let kld = |r: &HashMap<String, String>| r["kld"].parse::<f64>().unwrap();
    assert!(
        kld(g) > kld(row(&each, SAME)).max(kld(row(&each, RETYPED))),
        "{g:?} {each:?}"
    );
}

/// The sweep's command line without `--plain`, as one shell-quoted string.
fn sweep_command(fx: &Fixture, csv: &Path) -> String {
    let quote = |p: &Path| format!("'{}'", p.display().to_string().replace('\'', r"'\''"));
    format!(
        "{} sweep -m {} -f {} --candidates {} --csv {} -c 32 -b 32 --chunks 2 -t 2",
        quote(Path::new(BIN)),
        quote(&fx.model),
        quote(&fx.text),
        quote(&fx.cands),
        quote(csv),
    )
}

#[test]
fn progress_is_a_bar_on_a_terminal_and_plain_lines_otherwise() {
    let fx = fixture();
    // On a terminal (a pseudo-terminal from util-linux `script`): the bar is redrawn in place
    // with an ETA, each finished round is one line, and no plain `sweep: [i/n]` lines.
    let csv = fx.dir.path().join("tty.csv");
    let o = Command::new("script")
        .args(["-q", "-e", "-c", &sweep_command(&fx, &csv), "/dev/null"])
        .output()
        .expect("util-linux `script` gives the test a pseudo-terminal");
    let tty = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{tty}");
    assert!(
        tty.contains("\r\x1b[2K["),
        "no bar redrawn in place:\n{tty:?}"
    );
    assert!(tty.contains("% ETA "), "no ETA on the bar:\n{tty:?}");
    for i in 1..=3 {
        assert!(
            tty.contains(&format!("[{i}/3] ")),
            "round {i} missing:\n{tty:?}"
        );
    }
    assert!(
        !tty.contains("sweep: [1/3]"),
        "plain lines on a terminal:\n{tty:?}"
    );
    assert_eq!(rows(&csv).len(), 3);
    // Through a pipe: one plain line per round with its ETA, and no escape sequences.
    let csv = fx.dir.path().join("pipe.csv");
    let o = Command::new("sh")
        .args(["-c", &sweep_command(&fx, &csv)])
        .output()
        .unwrap();
    let piped = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{piped}");
    assert!(
        !piped.contains('\x1b'),
        "escape sequences in a pipe:\n{piped:?}"
    );
    for i in 1..=3 {
        let line = piped
            .lines()
            .find(|l| l.starts_with(&format!("sweep: [{i}/3] ")))
            .unwrap_or_else(|| panic!("no plain line for round {i}:\n{piped}"));
        assert!(line.contains(", ETA "), "{line}");
    }
}

/// A one-tensor GGUF holding `name` (F32) with the fixture's values changed by `edit`,
/// optionally after a padding tensor the model lacks (so the data sits at another offset).
fn edited_candidate(name: &str, path: &Path, pad: bool, edit: impl Fn(&mut [f32])) {
    let spec = llama_tensor_specs(&opts())
        .into_iter()
        .find(|s| s.name == name)
        .unwrap();
    let count = spec.dims.iter().product::<i64>() as usize;
    let mut values = tensor_values(opts().seed, name, count, false);
    edit(&mut values);
    let mut w = GgufWriter::new();
    w.set("general.architecture", "llama");
    if pad {
        let junk: Vec<f32> = (0..4096).map(|i| (i % 13) as f32 - 6.0).collect();
        w.add_tensor_f32("zz.pad", &[4096], GgmlType::F32, &junk)
            .unwrap();
    }
    w.add_tensor_f32(name, &spec.dims, GgmlType::F32, &values)
        .unwrap();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    w.write_to(path).unwrap();
}

/// Issue 35, findings 1-4 and 9 end to end: a foreign --jsonl file is left untouched;
/// a candidate replaced between discovery and its round is measured from its new bytes;
/// two directories with the same file names give two rows (and a resume skips exactly
/// those); a candidate that makes the model NaN is a failed row (never a budget choice)
/// even on the tiled attention path (64-token micro-batches); -c that does not divide -b runs.
#[test]
fn hostile_candidates_and_outputs() {
    let fx = fixture();
    let root = fx.dir.path();

    // Finding 1: a file that is not a sweep output is refused and left as it was.
    let config = root.join("config.json");
    std::fs::write(&config, "{\"important\": \"config\"}").unwrap();
    let o = Command::new(BIN)
        .arg("sweep")
        .arg("-m")
        .arg(&fx.model)
        .arg("-f")
        .arg(&fx.text)
        .arg("--candidates")
        .arg(&fx.cands)
        .arg("--jsonl")
        .arg(&config)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{stderr}");
    assert!(stderr.contains("not a sweep output"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(&config).unwrap(),
        "{\"important\": \"config\"}"
    );
    // Finding 7: devices are refused as outputs at once.
    let o = Command::new(BIN)
        .args(["sweep", "-m"])
        .arg(&fx.model)
        .arg("--candidates")
        .arg(&fx.cands)
        .args(["--csv", "/dev/full"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("not a regular file"));

    let one = root.join("one");
    let two = root.join("two");
    // Finding 3: the same relative names in two directories, different values.
    candidate(SAME, GgmlType::F32, &one.join("f32").join("a.gguf"));
    edited_candidate(SAME, &two.join("f32").join("a.gguf"), false, |v| {
        v.iter_mut().for_each(|x| *x *= 0.5)
    });
    // Finding 2: one.../b.gguf is replaced before its round by a file holding the same
    // tensor (same values) after a padding tensor: its old offset now points at the pad.
    candidate(RETYPED, GgmlType::F32, &one.join("f32").join("b.gguf"));
    let replacement = root.join("replacement.gguf");
    edited_candidate(RETYPED, &replacement, true, |_| {});
    // Findings 4 and 5: NaN in an attention weight.
    edited_candidate(
        "blk.1.attn_k.weight",
        &one.join("nan").join("k.gguf"),
        false,
        |v| v[5] = f32::NAN,
    );
    let hook = format!(
        "[ -e '{r}' ] && mv '{r}' '{d}'; true",
        r = replacement.display(),
        d = one.join("f32").join("b.gguf").display()
    );
    let csv = root.join("hostile.csv");
    let jsonl = root.join("hostile.jsonl");
    let run = |budget: bool| {
        let mut cmd = Command::new(BIN);
        cmd.arg("sweep")
            .arg("-m")
            .arg(&fx.model)
            .arg("-f")
            .arg(&fx.text)
            .arg("--candidates")
            .arg(&one)
            .arg("--candidates")
            .arg(&two)
            .arg("--csv")
            .arg(&csv)
            .arg("--jsonl")
            .arg(&jsonl)
            // finding 9: 96 does not divide the default -b 2048 (upstream runs it with 21
            // chunks of 96 side by side, a batch of 2016); 64-token micro-batches take
            // the tiled attention
            .args([
                "-c", "96", "-ub", "64", "--chunks", "2", "-t", "2", "--plain",
            ])
            .env("LLAMA_HOTSWAP_SWEEP_TEST_BEFORE_ROUND", &hook);
        if budget {
            cmd.args(["--budget", "1T"]);
        }
        cmd.output().unwrap()
    };
    let o = run(false);
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{stderr}");
    let (base_ppl, base_kld) = base_line(&stderr);
    let r = rows(&csv);
    assert_eq!(r.len(), 4, "{r:?}");
    let at = |dir: &Path, rel: &str| {
        let want = std::fs::canonicalize(dir.join(rel))
            .unwrap()
            .display()
            .to_string();
        r.iter()
            .find(|x| x["file"] == want)
            .unwrap_or_else(|| panic!("no row for {want}: {r:?}"))
    };
    let same_one = at(&one, "f32/a.gguf");
    let same_two = at(&two, "f32/a.gguf");
    assert_eq!(
        (same_one["status"].as_str(), same_two["status"].as_str()),
        ("ok", "ok")
    );
    assert_eq!(same_one["ppl"], base_ppl);
    assert_ne!(
        same_two["ppl"], base_ppl,
        "the second directory's file was measured"
    );
    // the replaced file: re-read, so its row is the identical tensor's (the base's PPL)
    let replaced = at(&one, "f32/b.gguf");
    assert_eq!(replaced["status"], "ok", "{replaced:?}");
    assert_eq!(replaced["type"], "f32");
    assert_eq!(replaced["ppl"], base_ppl, "{replaced:?}");
    assert_eq!(replaced["kld"], base_kld, "{replaced:?}");
    assert!(
        stderr.contains("changed since the sweep found it"),
        "{stderr}"
    );
    let nan = at(&one, "nan/k.gguf");
    assert_eq!(nan["status"], "failed", "{nan:?}");
    assert!(nan["reason"].contains("non-finite"), "{nan:?}");
    // JSON lines stay JSON: no bare NaN
    let json = std::fs::read_to_string(&jsonl).unwrap();
    for bare in [":NaN", ":inf", ":-inf"] {
        assert!(!json.contains(bare), "{json}");
    }
    assert_eq!(json.lines().count(), 4);

    // Resume: what is in is not measured again (the replaced file's new padding tensor is
    // new: one failed row); the budget never picks the NaN.
    let o = run(true);
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{stderr}");
    assert!(stderr.contains("1 to run, 4 already in"), "{stderr}");
    assert_eq!(rows(&csv).len(), 5);
    assert!(stderr.contains("sweep: budget"), "{stderr}");
    assert!(
        !stderr
            .lines()
            .any(|l| l.contains("blk.1.attn_k.weight") && l.contains("KLD 0.000000")),
        "{stderr}"
    );
}
