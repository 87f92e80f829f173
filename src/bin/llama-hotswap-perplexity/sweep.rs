//! `llama-hotswap-perplexity sweep`: the in-process quantization sweep. The base model is
//! loaded once (one-tensor shards, any split set, or one file); for each candidate tensor
//! (GGUF files under the candidate directories, the GGUF-Tool-Suite layout) one round swaps
//! it in through the core's `tensor_set` (`llama_ext_tensor_set`; the type may change),
//! evaluates PPL and KL-divergence on the chunks of the base logits, swaps the original back
//! and checks it bit-identical (hash of the restored bytes against the hash before the swap),
//! and appends one row (tensor, type, bytes, PPL, KLD, top-1 agreement, seconds) to CSV
//! and/or JSON lines. Rows already in the output are skipped (resume); a candidate that
//! cannot be used is a failed row with its reason and the sweep goes on; a restore that
//! cannot be verified stops it (every later row would be measured on a model that is not
//! the base). The base logits are computed once from the base model (and kept in a file in
//! upstream's format, so a resumed sweep reuses them) or read from `--kl-divergence-base`.

mod candidates;
mod progress;
mod rows;
mod source;
mod summary;
mod swap;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use llama::loader::{load, LoadOptions, ModelSource};
use llama::model::{LoadMode, Model};
use llama::quantize::imatrix::Imatrix;
use llama::tokenizer::Tokenizer;

use crate::eval::{tokenize_text, EvalConfig, Evaluator, Summary};
use crate::kld_file::KldBase;
use candidates::Candidate;
use progress::Progress;
use rows::{Format, Row, RowKey, Sink};
use source::Source;
use swap::{SwapInError, Swapper};

const USAGE: &str = "\
usage: llama-hotswap-perplexity sweep -m MODEL (--candidates DIR ... | --quantize TYPES)
                                      (--csv FILE | --jsonl FILE) [options]

For each candidate tensor (every tensor of every *.gguf under the candidate directories,
and every quantizable tensor of the base in each --quantize type): swap it into the loaded
base model, evaluate PPL and KL-divergence against the base logits, swap the original back
and check it is bit-identical, write one row.

  -m, --model FILE            base model: a GGUF, or the first shard of a split set
  --candidates DIR            candidate GGUF files (repeatable; a file is taken as is)
  --quantize TYPES            in-memory candidates, no files: each tensor llama-quantize
                              would quantize, converted from the loaded base to each type
                              (comma-separated, e.g. q4_0,q4_K,q8_0) as llama-quantize
                              --allow-requantize converts it (rows: file '(quantized in memory)')
  --imatrix FILE              importance matrix (llama-imatrix's GGUF or legacy file) for the
                              in-memory candidates and --write-model, used as llama-quantize
                              --imatrix uses it; the grid types (iq2_xxs, iq2_xs, iq2_s,
                              iq3_xxs, iq1_s, iq1_m) need one, as in llama-quantize
  --from FILE                 quantize the in-memory candidates (and --write-model) from
                              this model instead of the loaded base: a higher-precision
                              copy of it, e.g. the BF16 GGUF it was made from (one file or
                              the first shard of a split set), read tensor by tensor
                              (rows: file '(quantized in memory from FILE)')
  -f, --file FILE             text to evaluate (needed to compute the base logits)
  --kl-divergence-base FILE   base logits in upstream's format: read when the file exists,
                              else computed from the base model and written there
                              (default: the first output file + '.base-logits')
  --csv FILE, --jsonl FILE    outputs (either or both); rows already there are skipped
  -c, --ctx-size N            tokens per chunk (default 512; an existing base file's wins)
  -b, --batch-size N          logical batch (default 2048)
  -ub, --ubatch-size N        physical batch (default 512)
  -t, --threads N             threads (default: all)
  --chunks N                  evaluate at most N chunks
  --per-file                  one round per file, all its tensors together
                              (default: one round per tensor)
  --include REGEX             only tensors whose name matches
  --retry-failed              run failed rows again (default: failed rows count as done)
  --budget SIZE               at the end, pick a type per swept tensor keeping the whole
                              model under SIZE (bytes, or with K/M/G/T) with the least
                              summed KLD
  --recipe FILE               with --budget: write the pick as a GGUF-Tool-Suite recipe
                              (one `name=type` line per tensor)
  --tensor-type-file FILE     with --budget: write it for llama-quantize --tensor-type-file
  --write-model OUT           with --budget: quantize the base (one GGUF file) into the pick
                              (llama_model_quantize; the same file as upstream's
                              llama-quantize --allow-requantize --pure --tensor-type-file
                              FILE BASE OUT Q8_0)
  --plain                     plain progress lines even on a terminal
";

/// Test hook: a shell command run before each round (tests replace a candidate file between
/// its discovery and its round with it); nothing else reads it.
const BEFORE_ROUND_ENV: &str = "LLAMA_HOTSWAP_SWEEP_TEST_BEFORE_ROUND";

#[derive(Debug, Default)]
struct SweepArgs {
    model: Option<PathBuf>,
    candidates: Vec<PathBuf>,
    quantize: Vec<llama::gguf::GgmlType>,
    file: Option<PathBuf>,
    base: Option<PathBuf>,
    csv: Option<PathBuf>,
    jsonl: Option<PathBuf>,
    n_ctx: Option<usize>,
    n_batch: Option<usize>,
    n_ubatch: Option<usize>,
    n_threads: Option<usize>,
    n_chunks: Option<usize>,
    per_file: bool,
    include: Option<regex::Regex>,
    retry_failed: bool,
    budget: Option<u64>,
    recipe: Option<PathBuf>,
    tensor_type_file: Option<PathBuf>,
    write_model: Option<PathBuf>,
    imatrix: Option<PathBuf>,
    from: Option<PathBuf>,
    plain: bool,
    help: bool,
}

fn parse_args(argv: &[String]) -> Result<SweepArgs, String> {
    let mut a = SweepArgs::default();
    let mut i = 0;
    while i < argv.len() {
        let flag = argv[i].as_str();
        let value = || {
            argv.get(i + 1)
                .cloned()
                .ok_or_else(|| format!("sweep: {flag} needs a value"))
        };
        let number = || -> Result<usize, String> {
            let v = value()?;
            v.trim()
                .parse::<usize>()
                .ok()
                .filter(|&n| n > 0 && n <= i32::MAX as usize)
                .ok_or_else(|| format!("sweep: {flag}: '{v}' is not a positive integer"))
        };
        let mut takes_value = true;
        match flag {
            "-h" | "--help" => {
                a.help = true;
                takes_value = false;
            }
            "-m" | "--model" => a.model = Some(value()?.into()),
            "--candidates" => a.candidates.push(value()?.into()),
            "--recipe" => a.recipe = Some(value()?.into()),
            "--tensor-type-file" => a.tensor_type_file = Some(value()?.into()),
            "--write-model" => a.write_model = Some(value()?.into()),
            "--imatrix" => a.imatrix = Some(value()?.into()),
            "--from" => a.from = Some(value()?.into()),
            "--quantize" => {
                for name in value()?.split(',').filter(|n| !n.trim().is_empty()) {
                    let ty = llama::gguf::GgmlType::all()
                        .find(|t| t.name().eq_ignore_ascii_case(name.trim()))
                        .ok_or_else(|| format!("sweep: --quantize: unknown type '{name}'"))?;
                    if !a.quantize.contains(&ty) {
                        a.quantize.push(ty);
                    }
                }
            }
            "-f" | "--file" => a.file = Some(value()?.into()),
            "--kl-divergence-base" => a.base = Some(value()?.into()),
            "--csv" => a.csv = Some(value()?.into()),
            "--jsonl" => a.jsonl = Some(value()?.into()),
            "-c" | "--ctx-size" => a.n_ctx = Some(number()?),
            "-b" | "--batch-size" => a.n_batch = Some(number()?),
            "-ub" | "--ubatch-size" => a.n_ubatch = Some(number()?),
            "-t" | "--threads" => a.n_threads = Some(number()?),
            "--chunks" => a.n_chunks = Some(number()?),
            "--include" => {
                let v = value()?;
                a.include =
                    Some(regex::Regex::new(&v).map_err(|e| format!("sweep: --include: {e}"))?);
            }
            "--budget" => {
                a.budget = Some(
                    summary::parse_size(&value()?).map_err(|e| format!("sweep: --budget: {e}"))?,
                )
            }
            "--per-file" | "--retry-failed" | "--plain" => {
                takes_value = false;
                match flag {
                    "--per-file" => a.per_file = true,
                    "--retry-failed" => a.retry_failed = true,
                    _ => a.plain = true,
                }
            }
            _ => return Err(format!("sweep: unknown argument '{flag}'\n\n{USAGE}")),
        }
        i += if takes_value { 2 } else { 1 };
    }
    Ok(a)
}

/// Entry point of `llama-hotswap-perplexity sweep ARGS` (`args` after the word `sweep`).
pub fn run(args: &[String]) -> Result<(), String> {
    let args = match args.first().map(String::as_str) {
        Some("sweep") => &args[1..],
        _ => args,
    };
    let a = parse_args(args)?;
    if a.help {
        print!("{USAGE}");
        return Ok(());
    }
    let model_path = a
        .model
        .clone()
        .ok_or(format!("sweep: -m MODEL is required\n\n{USAGE}"))?;
    if a.candidates.is_empty() && a.quantize.is_empty() {
        return Err(format!(
            "sweep: --candidates DIR or --quantize TYPES is required\n\n{USAGE}"
        ));
    }
    if a.budget.is_none()
        && (a.recipe.is_some() || a.tensor_type_file.is_some() || a.write_model.is_some())
    {
        return Err(
            "sweep: --recipe, --tensor-type-file and --write-model need --budget SIZE".into(),
        );
    }
    if let Some(out) = &a.write_model {
        // A missing directory fails now, not after days of sweeping.
        let dir = out.parent().filter(|d| !d.as_os_str().is_empty());
        if dir.is_some_and(|d| !d.is_dir()) {
            return Err(format!(
                "sweep: --write-model {}: the directory does not exist",
                out.display()
            ));
        }
    }
    let outputs: Vec<(PathBuf, Format)> = [(&a.csv, Format::Csv), (&a.jsonl, Format::JsonLines)]
        .into_iter()
        .filter_map(|(p, f)| p.clone().map(|p| (p, f)))
        .collect();
    if outputs.is_empty() {
        return Err(format!(
            "sweep: an output is required (--csv FILE and/or --jsonl FILE)\n\n{USAGE}"
        ));
    }
    let base_path = a.base.clone().unwrap_or_else(|| {
        let mut p = outputs[0].0.clone().into_os_string();
        p.push(".base-logits");
        PathBuf::from(p)
    });

    // The imatrix next: a bad file fails before minutes of loading.
    if a.imatrix.is_some() && a.quantize.is_empty() && a.write_model.is_none() {
        return Err(
            "sweep: --imatrix is used by --quantize and --write-model; neither is given".into(),
        );
    }
    if a.from.is_some() && a.quantize.is_empty() && a.write_model.is_none() {
        return Err(
            "sweep: --from is used by --quantize and --write-model; neither is given".into(),
        );
    }
    let source = match &a.from {
        Some(p) => Some(Source::open(p).map_err(|e| format!("sweep: {e}"))?),
        None => None,
    };
    let imatrix = match &a.imatrix {
        Some(p) => {
            Some(Imatrix::read(p).map_err(|e| format!("sweep: --imatrix {}: {e}", p.display()))?)
        }
        None => None,
    };

    // The outputs first: a bad output file fails before minutes of loading.
    // A candidate is done when every output has its row; a new row goes to the outputs
    // that lack it (one output lost or added later is filled in, none gets duplicates).
    let mut sinks = Vec::new();
    let mut sink_done: Vec<HashSet<RowKey>> = Vec::new();
    let mut done_rows: Vec<Row> = Vec::new();
    for (path, format) in &outputs {
        let (sink, rows) = Sink::open(path, *format)?;
        sink_done.push(
            rows.iter()
                .filter(|r| r.ok || !a.retry_failed)
                .map(Row::key)
                .collect(),
        );
        done_rows.extend(rows);
        sinks.push(sink);
    }

    let t_load = Instant::now();
    let model = Arc::new(
        load(
            ModelSource::Path(model_path.clone()),
            LoadOptions {
                load_mode: LoadMode::Auto,
                vocab_only: false,
                no_alloc: false,
                check_tensors: false,
                overrides: Vec::new(),
                progress: Some(&mut |_| true),
                placement: Default::default(),
                hotswap: true,
            },
        )
        .map_err(|e| format!("sweep: cannot load {}: {e}", model_path.display()))?,
    );
    eprintln!(
        "sweep: loaded {} ({} tensors, {} bytes) in {:.2} s",
        model_path.display(),
        model.tensors.len(),
        model.size,
        t_load.elapsed().as_secs_f64()
    );

    let mut cfg = EvalConfig {
        print: false,
        n_chunks: a.n_chunks,
        ..EvalConfig::default()
    };
    if let Some(n) = a.n_ctx {
        cfg.n_ctx = n;
    }
    if let Some(n) = a.n_batch {
        cfg.n_batch = n;
    }
    if let Some(n) = a.n_ubatch {
        cfg.n_ubatch = n;
    }
    if let Some(n) = a.n_threads {
        cfg.n_threads = n;
        cfg.n_threads_batch = n;
    }
    let mut base = base_logits(&model, &a, &base_path, &mut cfg)?;
    let mut ev =
        Evaluator::new(Arc::clone(&model), cfg.clone()).map_err(|e| format!("sweep: {e}"))?;

    // The base round: the unmodified model against its own logits. Its PPL is the one an
    // identical candidate must give exactly; its KLD is the floor (the file's log-probs are
    // quantized, so even the base is not at exactly 0).
    let base_summary = ev
        .kl_divergence(&mut base)
        .map_err(|e| format!("sweep: evaluating the base model: {e}"))?;
    let base_kld = base_summary.kld.as_ref().map_or(f64::NAN, |k| k.kld_mean);
    if !base_summary.ppl.is_finite() || !base_kld.is_finite() {
        return Err(format!(
            "sweep: the base model gives PPL {} and KLD {base_kld} against {}: no candidate can be \
             measured against it",
            base_summary.ppl,
            base_path.display()
        ));
    }
    eprintln!(
        "sweep: base model: PPL = {} +/- {:.6}, KLD vs base logits = {base_kld}, {} chunks of {} in {:.2} s",
        base_summary.ppl, base_summary.ppl_err, base_summary.n_chunks, base.n_ctx, base_summary.seconds
    );
    let (n_chunks, n_ctx) = (base_summary.n_chunks, base.n_ctx);
    if let Some(r) = done_rows
        .iter()
        .find(|r| r.chunks != n_chunks || r.n_ctx != n_ctx)
    {
        return Err(format!(
            "sweep: the output holds rows measured on {} chunks of {} tokens ({} {}), this run \
             measures {n_chunks} of {n_ctx}: use another output file, or the same --chunks and -c",
            r.chunks, r.n_ctx, r.tensor, r.ggml_type
        ));
    }

    // Candidates.
    let files = candidates::find_files(&a.candidates)?;
    let mut all: Vec<Candidate> = Vec::new();
    for (path, label) in &files {
        all.extend(candidates::from_file(&model, path, label, a.per_file));
    }
    all.extend(candidates::in_memory(&model, &a.quantize, source.as_ref()));
    if let Some(re) = &a.include {
        all.retain(|c| c.tensors.is_empty() || c.tensors.iter().any(|t| re.is_match(&t.name)));
    }
    if let Some(m) = &imatrix {
        // an imatrix made for another model fails now, not in every round
        for c in all.iter().filter(|c| c.in_memory) {
            for t in &c.tensors {
                imatrix_for(&model, m, &t.name).map_err(|e| format!("sweep: --imatrix: {e}"))?;
            }
        }
    }
    // llama_model_quantize refuses the very low-bit grid types for a tensor without an
    // imatrix entry (upstream's tensor_requires_imatrix): such a row would measure bytes no
    // quantization run can write.
    for c in all
        .iter_mut()
        .filter(|c| c.in_memory && c.problem.is_none())
    {
        let missing = c.tensors.iter().find(|t| {
            let has = imatrix
                .as_ref()
                .is_some_and(|m| matches!(imatrix_for(&model, m, &t.name), Ok(Some(_))));
            !has && llama::quantize::policy::tensor_requires_imatrix(&t.name, t.ggml_type, 0)
        });
        if let Some(t) = missing {
            c.problem = Some(format!(
                "{} needs an importance matrix with an entry for '{}' (--imatrix), as llama-quantize does",
                t.ggml_type.name(),
                t.name
            ));
        }
    }
    let key = |c: &Candidate| (c.label.clone(), c.tensor_label(), c.type_label());
    let todo: Vec<&Candidate> = all
        .iter()
        .filter(|c| sink_done.iter().any(|d| !d.contains(&key(c))))
        .collect();
    eprintln!(
        "sweep: {} candidate file(s), {} in-memory type(s), {} candidate(s): {} to run, {} already in {}",
        files.len(),
        a.quantize.len(),
        all.len(),
        todo.len(),
        all.len() - todo.len(),
        outputs
            .iter()
            .map(|(p, _)| p.display().to_string())
            .collect::<Vec<_>>()
            .join(" and ")
    );

    let mut swapper = Swapper::new(&model);
    let mut progress = Progress::new(todo.len(), a.plain);
    let mut new_rows = Vec::new();
    let mut fatal = None;
    let before_round = std::env::var(BEFORE_ROUND_ENV)
        .ok()
        .filter(|s| !s.is_empty());
    for cand in todo {
        if let Some(cmd) = &before_round {
            let _ = std::process::Command::new("sh").arg("-c").arg(cmd).status();
        }
        progress.starting(&format!("{} {}", cand.tensor_label(), cand.type_label()));
        let (row, stop) = round(
            cand,
            a.per_file,
            &mut swapper,
            &mut ev,
            &mut base,
            n_chunks,
            n_ctx,
            InMemory {
                imatrix: imatrix.as_ref(),
                source: source.as_ref(),
            },
        );
        for (sink, done) in sinks.iter_mut().zip(&sink_done) {
            if !done.contains(&row.key()) {
                sink.append(&row)?;
            }
        }
        progress.finished(&row);
        new_rows.push(row);
        if let Some(reason) = stop {
            fatal = Some(reason);
            break;
        }
    }
    progress.finish();
    if fatal.is_none() {
        // Every tensor swept is back to its first bytes (each round checked its own; this
        // also catches a tensor changed behind the sweep's back).
        if let Err(e) = swap::verify_all(&swapper) {
            fatal = Some(format!(
                "the model is no longer the base after the sweep: {e}"
            ));
        }
    }

    // The summary: one row per candidate, the newest (a retried row replaces the old one).
    let mut rows: Vec<Row> = Vec::new();
    let mut at: std::collections::HashMap<RowKey, usize> = std::collections::HashMap::new();
    for r in done_rows.into_iter().chain(new_rows) {
        match at.get(&r.key()) {
            Some(&i) => rows[i] = r,
            None => {
                at.insert(r.key(), rows.len());
                rows.push(r);
            }
        }
    }
    for line in summary::summarize(&rows, Some(base_summary.ppl)) {
        eprintln!("{line}");
    }
    if let Some(budget) = a.budget {
        if let Some(pick) = print_budget(&model, &rows, budget) {
            let input = a.from.as_ref().unwrap_or(&model_path);
            write_pick(&model, input, &a, &pick, imatrix.as_ref())?;
        } else if a.recipe.is_some() || a.tensor_type_file.is_some() || a.write_model.is_some() {
            return Err("sweep: no pick within the budget: nothing written".into());
        }
    }
    if let Some(reason) = fatal {
        return Err(format!("sweep: stopped: {reason}"));
    }
    Ok(())
}

/// Opens the base logits, computing them from the base model first when the file does not
/// exist (written to a temporary name and renamed, so an interrupted run leaves no half
/// file). `cfg.n_ctx` becomes the file's.
fn base_logits(
    model: &Arc<Model>,
    a: &SweepArgs,
    path: &Path,
    cfg: &mut EvalConfig,
) -> Result<KldBase, String> {
    if !path.exists() {
        let text_path = a.file.as_ref().ok_or_else(|| {
            format!(
                "sweep: {} does not exist: give -f TEXT to compute the base logits",
                path.display()
            )
        })?;
        let text = crate::text_file::read_bounded(text_path).map_err(|e| format!("sweep: {e}"))?;
        let tokens = tokenize_text(model, &Tokenizer::new(&model.vocab), &text)
            .map_err(|e| format!("sweep: {e}"))?;
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        // The temporary name is ours only when it holds an unfinished base file (or nothing).
        if let Ok(m) = std::fs::symlink_metadata(&tmp) {
            let mut head = [0u8; 8];
            let ours = m.is_file()
                && (m.len() == 0
                    || std::fs::File::open(&tmp).is_ok_and(|mut f| {
                        std::io::Read::read_exact(&mut f, &mut head).is_ok()
                            && &head == crate::kld_file::MAGIC
                    }));
            if !ours {
                return Err(format!(
                    "sweep: {} exists and is not an unfinished base-logits file: move it away \
                     or give --kl-divergence-base another path",
                    tmp.display()
                ));
            }
        }
        let mut ev =
            Evaluator::new(Arc::clone(model), cfg.clone()).map_err(|e| format!("sweep: {e}"))?;
        let s: Summary = ev
            .perplexity(&tokens, Some(&tmp))
            .map_err(|e| format!("sweep: computing the base logits: {e}"))?;
        std::fs::rename(&tmp, path).map_err(|e| format!("sweep: {}: {e}", path.display()))?;
        eprintln!(
            "sweep: base logits of {} chunks written to {} ({:.2} s)",
            s.n_chunks,
            path.display(),
            s.seconds
        );
    } else if a.file.is_some() {
        eprintln!(
            "sweep: reading the base logits from {} (its tokens; -f is not used)",
            path.display()
        );
    }
    let base = KldBase::open(path).map_err(|e| format!("sweep: {e}"))?;
    if base.n_vocab != model.vocab.tokens.len() {
        return Err(format!(
            "sweep: {} has logits over {} tokens, the model's vocabulary has {}",
            path.display(),
            base.n_vocab,
            model.vocab.tokens.len()
        ));
    }
    cfg.n_ctx = base.n_ctx;
    Ok(base)
}

/// One round. Returns the row and, when the model could not be verified back to the base,
/// why the sweep must stop.
fn round(
    cand: &Candidate,
    per_file: bool,
    swapper: &mut Swapper<'_>,
    ev: &mut Evaluator,
    base: &mut KldBase,
    chunks: usize,
    n_ctx: usize,
    in_memory: InMemory<'_>,
) -> (Row, Option<String>) {
    let t0 = Instant::now();
    // The file may have been replaced since its header was read (a sweep runs for days):
    // read it again, so the row describes the bytes measured.
    let refreshed;
    let cand = if cand.changed() {
        match cand.refresh(swapper.model(), per_file) {
            Ok(c) => {
                eprintln!(
                    "sweep: {} changed since the sweep found it: its header was read again",
                    cand.path.display()
                );
                refreshed = c;
                &refreshed
            }
            Err(e) => {
                let row = Row {
                    tensor: cand.tensor_label(),
                    ggml_type: cand.type_label(),
                    bytes: cand.nbytes(),
                    chunks,
                    n_ctx,
                    file: cand.label.clone(),
                    ok: false,
                    reason: format!("the file changed since the sweep found it: {e}"),
                    seconds: t0.elapsed().as_secs_f64(),
                    ..Row::default()
                };
                return (row, None);
            }
        }
    } else {
        cand
    };
    let mut row = Row {
        tensor: cand.tensor_label(),
        ggml_type: cand.type_label(),
        bytes: cand.nbytes(),
        chunks,
        n_ctx,
        file: cand.label.clone(),
        ..Row::default()
    };
    let fail = |mut row: Row, reason: String, stop: Option<String>| {
        row.ok = false;
        row.reason = reason;
        row.seconds = t0.elapsed().as_secs_f64();
        (row, stop)
    };
    if let Some(p) = &cand.problem {
        return fail(row, p.clone(), None);
    }
    let bytes = if cand.in_memory {
        quantize_candidate(swapper.model(), cand, in_memory)
    } else {
        cand.read_bytes()
    };
    let bytes = match bytes {
        Ok(b) => b,
        Err(e) => return fail(row, e, None),
    };
    let tensors: Vec<(String, i32, Vec<u8>)> = cand
        .tensors
        .iter()
        .zip(bytes)
        .map(|(t, b)| (t.name.clone(), t.ggml_type.id() as i32, b))
        .collect();
    let saved = match swapper.swap_in(&tensors) {
        Ok(s) => s,
        Err(SwapInError::Refused(e)) => return fail(row, e, None),
        Err(SwapInError::Restore(e, r)) => {
            let stop = (!r.repaired).then(|| r.reason.clone());
            return fail(row, format!("{e}; {}", r.reason), stop);
        }
    };
    drop(tensors);
    let t_eval = Instant::now();
    let result = ev.kl_divergence(base);
    let eval_seconds = t_eval.elapsed().as_secs_f64();
    let restored = swapper.restore_all(saved);
    match result {
        Ok(s) => {
            row.ppl = Some(s.ppl);
            row.ppl_err = Some(s.ppl_err);
            if let Some(k) = &s.kld {
                row.kld = Some(k.kld_mean);
                row.kld_err = Some(k.kld_err);
                row.top1 = Some(100.0 * k.same_top);
            }
            row.eval_seconds = Some(eval_seconds);
            // A NaN or infinite score is a broken candidate, never a result to rank.
            match non_finite(&row) {
                Some(what) => {
                    row.reason = format!(
                        "the evaluation gave a non-finite {what}: the candidate breaks the model"
                    );
                }
                None => row.ok = true,
            }
        }
        Err(e) => row.reason = format!("evaluation failed: {e}"),
    }
    if let Err(r) = restored {
        let stop = (!r.repaired).then(|| r.reason.clone());
        row.ok = false;
        row.reason = if row.reason.is_empty() {
            r.reason
        } else {
            format!("{}; {}", row.reason, r.reason)
        };
        row.seconds = t0.elapsed().as_secs_f64();
        return (row, stop);
    }
    row.seconds = t0.elapsed().as_secs_f64();
    (row, None)
}

/// What in-memory candidates are made with.
#[derive(Clone, Copy)]
struct InMemory<'a> {
    imatrix: Option<&'a Imatrix>,
    /// `--from`: quantize from this model's tensor instead of the base's.
    source: Option<&'a Source>,
}

/// An in-memory candidate's bytes: its tensor as `--from` holds it, else as the base holds
/// it (every earlier round put it back), converted to the candidate's type as
/// `llama-quantize` converts it.
fn quantize_candidate(
    model: &Model,
    cand: &Candidate,
    InMemory { imatrix, source }: InMemory<'_>,
) -> Result<Vec<Vec<u8>>, String> {
    cand.tensors
        .iter()
        .map(|ct| {
            let t = model
                .tensors
                .get(&ct.name)
                .ok_or_else(|| format!("no tensor '{}'", ct.name))?;
            let (from, ne, nbytes) = {
                let s = t.read();
                (s.layout.ggml_type, s.layout.ne, s.layout.nbytes)
            };
            let (from, bytes) = match source {
                Some(s) => s.read(&ct.name)?,
                None => {
                    let mut bytes = vec![0u8; nbytes as usize];
                    t.read()
                        .read_into(&mut bytes)
                        .map_err(|e| format!("reading '{}': {e}", ct.name))?;
                    (from, bytes)
                }
            };
            let weights = match imatrix {
                Some(m) => imatrix_for(model, m, &ct.name)?,
                None => None,
            };
            llama::quantize::quantize_tensor(from, &bytes, ne, ct.ggml_type, weights, 0)
                .map_err(|e| format!("quantizing '{}' to {}: {e}", ct.name, ct.ggml_type.name()))
        })
        .collect()
}

/// The imatrix values of tensor `name` as `llama_model_quantize` takes them: none when the
/// file has no entry; an entry of the wrong size is an error, except for the token
/// embeddings, which upstream then quantizes without one.
fn imatrix_for<'m>(model: &Model, m: &'m Imatrix, name: &str) -> Result<Option<&'m [f32]>, String> {
    let ne = model
        .tensors
        .get(name)
        .map(|t| t.read().layout.ne)
        .ok_or_else(|| format!("no tensor '{name}'"))?;
    match m.for_tensor(name, ne) {
        Ok(v) => Ok(v),
        Err(_) if name == "token_embd.weight" || name == "per_layer_token_embd.weight" => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

/// The first measurement of `row` that is NaN or infinite, named.
fn non_finite(row: &Row) -> Option<String> {
    [
        ("PPL", row.ppl),
        ("PPL error", row.ppl_err),
        ("KLD", row.kld),
        ("KLD error", row.kld_err),
        ("top-1 agreement", row.top1),
    ]
    .into_iter()
    .find_map(|(name, v)| {
        v.filter(|x| !x.is_finite())
            .map(|x| format!("{name} ({x})"))
    })
}

fn print_budget(
    model: &Model,
    rows: &[Row],
    budget: u64,
) -> Option<Vec<(String, summary::Choice)>> {
    let base = |name: &str| {
        // Every tensor is back on the base when this runs.
        model.tensors.get(name).map(|t| {
            let s = t.read();
            (s.layout.ggml_type.name().to_string(), s.layout.nbytes)
        })
    };
    let choices = summary::choices(rows, &base);
    let swept_base: u64 = choices.values().map(|c| c[0].bytes).sum();
    let fixed = model.size.saturating_sub(swept_base);
    let Some(for_swept) = budget.checked_sub(fixed) else {
        eprintln!("sweep: budget {budget} bytes: the tensors not swept alone take {fixed} bytes");
        return None;
    };
    match summary::assign(&choices, for_swept) {
        None => {
            eprintln!(
                "sweep: budget {budget} bytes: not reachable with the swept types (the smallest \
                 choices exceed it)"
            );
            None
        }
        Some(pick) => {
            let bytes: u64 = fixed + pick.iter().map(|(_, c)| c.bytes).sum::<u64>();
            let kld: f64 = pick.iter().map(|(_, c)| c.kld).sum();
            eprintln!(
                "sweep: budget {budget} bytes: model {bytes} bytes, estimated KLD {kld:.6} (sum over tensors)"
            );
            for (name, c) in &pick {
                eprintln!(
                    "sweep:   {name} {} {} bytes KLD {:.6}",
                    c.ggml_type, c.bytes, c.kld
                );
            }
            Some(pick)
        }
    }
}

/// The type of every tensor of the base under the budget's pick: the picked type for the
/// swept tensors, the base's own for the others (in the model's tensor order).
fn picked_types(model: &Model, pick: &[(String, summary::Choice)]) -> Vec<(String, String)> {
    (0..model.tensors.len())
        .map(|i| {
            let t = model.tensors.at(i);
            let ty = pick
                .iter()
                .find(|(n, _)| *n == t.name)
                .map(|(_, c)| c.ggml_type.clone())
                .unwrap_or_else(|| t.read().layout.ggml_type.name().to_string());
            (t.name.clone(), ty)
        })
        .collect()
}

/// Writes what `--recipe`, `--tensor-type-file` and `--write-model` ask for. Files are
/// written under a temporary name and renamed, so a failure leaves none half-written.
fn write_pick(
    model: &Model,
    input: &Path,
    a: &SweepArgs,
    pick: &[(String, summary::Choice)],
    imatrix: Option<&Imatrix>,
) -> Result<(), String> {
    let types = picked_types(model, pick);
    let escape = |name: &str| regex::escape(name);
    let write = |path: &Path, text: String| -> Result<(), String> {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        std::fs::write(&tmp, text)
            .and_then(|()| std::fs::rename(&tmp, path))
            .map_err(|e| {
                let _ = std::fs::remove_file(&tmp);
                format!("sweep: {}: {e}", path.display())
            })?;
        eprintln!("sweep: wrote {}", path.display());
        Ok(())
    };
    if let Some(path) = &a.recipe {
        // GGUF-Tool-Suite's recipe: `regex=type` per line, `#` comments
        let mut text = format!(
            "## Quant mix picked by llama-hotswap-perplexity sweep --budget {} from {}\n",
            a.budget.unwrap_or(0),
            input.display()
        );
        for (name, ty) in &types {
            text.push_str(&format!("{}={ty}\n", escape(name)));
        }
        write(path, text)?;
    }
    if let Some(path) = &a.tensor_type_file {
        // llama-quantize --tensor-type-file: whitespace-separated `regex=type`, each searched
        // in the tensor names: anchored, so blk.1 never matches blk.10
        let text: String = types
            .iter()
            .map(|(name, ty)| format!("^{}$={ty}\n", escape(name)))
            .collect();
        write(path, text)?;
    }
    if let Some(out) = &a.write_model {
        let overrides = types
            .iter()
            .map(|(name, ty)| {
                let t = llama::gguf::GgmlType::all()
                    .find(|t| t.name() == ty)
                    .ok_or_else(|| format!("sweep: --write-model: unknown type '{ty}'"))?;
                Ok((format!("^{}$", escape(name)), t))
            })
            .collect::<Result<Vec<_>, String>>()?;
        let params = llama::quantize::QuantizeParams {
            // A quantized ftype, so that the per-tensor types apply (upstream applies
            // --tensor-type only then); every quantizable tensor has its own line, so the
            // ftype's default type is never used.
            ftype: llama::quantize::policy::ftype::Q8_0,
            allow_requantize: true,
            pure: true,
            tensor_types: overrides,
            imatrix: imatrix.map(|m| m.entries.clone().into_iter().collect()),
            ..llama::quantize::QuantizeParams::upstream_default()
        };
        llama::quantize::quantize_model(input, out, &params)
            .map_err(|e| format!("sweep: --write-model {}: {e}", out.display()))?;
        eprintln!("sweep: wrote {}", out.display());
    }
    Ok(())
}
