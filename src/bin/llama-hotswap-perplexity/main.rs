//! `llama-hotswap-perplexity`: upstream's `llama-perplexity` (perplexity, KL divergence
//! against saved base logits) on llama-hotswap's engine, with ik_llama.cpp's hot-swap loop
//! and signal-file protocols, and an in-process quantization sweep (`sweep`).
//!
//! Modules: `args` (upstream's flags) · `eval` (the evaluation, shared with the sweep) ·
//! `kld_file` (upstream's base-logits file) · `protocol` (ik's loop and signal modes) ·
//! `sweep` (the sweep subcommand).

mod args;
mod eval;
#[cfg(test)]
mod fuzz_rng;
mod kld_file;
mod protocol;
mod sweep;
mod text_file;

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use llama::loader::{self, LoadOptions, ModelSource};
use llama::model::{LoadMode, Model};
use llama::tokenizer::Tokenizer;

use eval::{EvalConfig, Evaluator};
use kld_file::KldBase;
use text_file::read_text;

/// Loads a model (and its tokenizer) as `llama_model_load_from_file` does with default
/// parameters (`no_mmap`: upstream's `use_mmap = false`, the weights read into memory the
/// model owns); hot-swap follows `LLAMA_HOTSWAP_ENABLED`.
pub fn load_model(path: &Path, no_mmap: bool) -> Result<(Arc<Model>, Tokenizer), String> {
    let options = LoadOptions {
        progress: Some(&mut |_| true),
        load_mode: if no_mmap {
            LoadMode::None
        } else {
            LoadMode::Auto
        },
        ..LoadOptions::default()
    };
    let mut model = loader::load(ModelSource::Path(path.to_path_buf()), options)
        .map_err(|e| format!("failed to load model from {}: {e}", path.display()))?;
    llama::model::derived::derive_all(&model);
    let tokenizer = llama::tokenizer::attach(&mut model.vocab)?;
    Ok((Arc::new(model), tokenizer))
}

/// Reloads the tensors whose files changed (the core of `llama_reload_changed_tensors`),
/// printing `reloaded tensor '<name>'` for each; true when at least one was reloaded.
pub fn reload_changed(model: &Model) -> bool {
    match llama::hotswap::reload_changed(model) {
        Ok(report) => {
            for e in report.entries.iter().filter(|e| e.outcome.reloaded()) {
                eprintln!("reloaded tensor '{}'", e.name);
            }
            report.reloaded() > 0
        }
        Err(e) => {
            eprintln!("main: reload: {e}");
            false
        }
    }
}

fn threads(n: Option<i64>, default: usize) -> usize {
    match n {
        Some(n) if n > 0 => n as usize,
        _ => default,
    }
}

fn run_perplexity(argv: &[String]) -> Result<(), String> {
    let a = args::parse(argv)?;
    if a.help {
        println!("{}", args::USAGE);
        return Ok(());
    }
    if a.n_ctx <= 0 {
        return Err("main: perplexity tool requires '--ctx-size' > 0".into());
    }
    if a.n_batch <= 0 || a.n_ubatch <= 0 {
        return Err("main: '--batch-size' and '--ubatch-size' must be > 0".into());
    }
    let Some(model_path) = a.model.clone() else {
        return Err("error: no model given (-m FNAME)".into());
    };
    let hw = std::thread::available_parallelism().map_or(4, |n| n.get());
    let n_threads = threads(a.n_threads, hw);
    let mut cfg = EvalConfig {
        n_ctx: a.n_ctx as usize,
        n_batch: a.n_batch as usize,
        n_ubatch: a.n_ubatch as usize,
        n_chunks: usize::try_from(a.n_chunks).ok(),
        n_threads,
        n_threads_batch: threads(a.n_threads_batch, n_threads),
        print: true,
        type_k: a.cache_type_k,
        type_v: a.cache_type_v,
        flash_attn_type: a.flash_attn,
    };
    // Inputs are checked before the model loads: a bad file costs nothing.
    let mut base = None;
    let mut text = None;
    if a.kl_divergence {
        let Some(f) = &a.logits_file else {
            return Err("kl_divergence: you must provide a name of a file containing the log probabilities of the base model".into());
        };
        let b = KldBase::open(f).map_err(|e| format!("kl_divergence: {e}"))?;
        if b.n_ctx > cfg.n_ctx {
            return Err(format!(
                "kl_divergence: {} has been computed with {}, while the current context is {}. Increase it with -c and retry",
                f.display(),
                b.n_ctx,
                cfg.n_ctx
            ));
        }
        // chunks as the file has them (upstream uses the file's n_ctx, not -c)
        cfg.n_ctx = b.n_ctx;
        cfg.n_batch = cfg
            .n_batch
            .min((a.n_batch as usize / a.n_ctx as usize).max(1) * a.n_ctx as usize);
        base = Some(b);
    } else {
        let Some(f) = &a.file else {
            return Err("error: no text given (-f FNAME)".into());
        };
        text = Some(read_text(f)?);
    }
    let (model, tokenizer) = load_model(&model_path, a.no_mmap)
        .map_err(|e| format!("{e}\nmain: unable to load model"))?;
    let mut ev = Evaluator::new(Arc::clone(&model), cfg).map_err(|e| format!("main: {e}"))?;
    let tokens = match &text {
        Some(t) => {
            eprintln!("perplexity: tokenizing the input ..");
            let t0 = std::time::Instant::now();
            let tokens = eval::tokenize_text(&model, &tokenizer, t).map_err(|e| e.to_string())?;
            eprintln!(
                "perplexity: tokenization took {} ms",
                t0.elapsed().as_secs_f64() * 1e3
            );
            let n_ctx = ev.config().n_ctx;
            if tokens.len() < 2 * n_ctx {
                return Err(format!(
                    "perplexity: you need at least {} tokens to evaluate perplexity with a context of {n_ctx}\nperplexity: the data file you provided tokenizes to only {} tokens",
                    2 * n_ctx,
                    tokens.len()
                ));
            }
            tokens
        }
        None => Vec::new(),
    };
    let save = if a.kl_divergence {
        None
    } else {
        a.logits_file.clone()
    };
    let env = protocol::ProtocolEnv::from_env();
    let mut evaluate = |_iter: u64| {
        let r = match base.as_mut() {
            Some(b) => ev.kl_divergence(b),
            None => ev.perplexity(&tokens, save.as_deref()),
        };
        match r {
            Ok(s) => {
                eprintln!("main: evaluation took {:.2} s", s.seconds);
                true
            }
            Err(e) => {
                eprintln!("main: {e}");
                false
            }
        }
    };
    let mut reload = || reload_changed(&model);
    let out = protocol::drive(&env, &mut evaluate, &mut reload)?;
    if out.last_ok {
        Ok(())
    } else {
        Err("main: the last evaluation failed".into())
    }
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let r = match argv.first().map(String::as_str) {
        Some("sweep") => sweep::run(&argv[1..]),
        _ => run_perplexity(&argv),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
