//! Command-line flags, spelled as upstream's `llama-perplexity` (common/arg.cpp) spells them,
//! with its error messages. Flags of upstream's that place or tune the model on devices are
//! accepted and ignored with a warning, so existing driver scripts run unchanged.

use std::path::PathBuf;

/// What the command line asks for.
#[derive(Clone, Debug, PartialEq)]
pub struct Args {
    pub model: Option<PathBuf>,
    pub file: Option<PathBuf>,
    pub n_ctx: i64,
    pub n_batch: i64,
    pub n_ubatch: i64,
    pub n_threads: Option<i64>,
    pub n_threads_batch: Option<i64>,
    /// `--chunks` (negative: all).
    pub n_chunks: i64,
    /// `--kl-divergence-base` / `--save-all-logits`.
    pub logits_file: Option<PathBuf>,
    pub kl_divergence: bool,
    pub help: bool,
}

impl Default for Args {
    fn default() -> Self {
        Args {
            model: None,
            file: None,
            n_ctx: 512,
            n_batch: 2048,
            n_ubatch: 512,
            n_threads: None,
            n_threads_batch: None,
            n_chunks: -1,
            logits_file: None,
            kl_divergence: false,
            help: false,
        }
    }
}

/// Flags with one value that this tool accepts and ignores (device placement, memory
/// locking, sampling seeds: nothing that changes what is computed on the CPU).
const IGNORED_WITH_VALUE: &[&str] = &[
    "-ngl",
    "--gpu-layers",
    "--n-gpu-layers",
    "-sm",
    "--split-mode",
    "-ts",
    "--tensor-split",
    "-mg",
    "--main-gpu",
    "-ot",
    "--override-tensor",
    "-fa",
    "--flash-attn",
    "-s",
    "--seed",
    "--numa",
    "-dev",
    "--device",
];
/// Flags without a value accepted and ignored.
const IGNORED_SWITCHES: &[&str] = &["--mlock", "--no-mmap", "--no-warmup", "--fit"];

pub const USAGE: &str = "\
usage: llama-hotswap-perplexity -m MODEL -f TEXT [options]
       llama-hotswap-perplexity sweep [options]   (see `sweep --help`)

  -m,  --model FNAME               model path (first shard of a split set)
  -f,  --file FNAME                text to evaluate
  -c,  --ctx-size N                tokens per chunk (default: 512)
  -b,  --batch-size N              logical batch size (default: 2048)
  -ub, --ubatch-size N             physical batch size (default: 512)
  -t,  --threads N                 threads (default: all cores)
  -tb, --threads-batch N           threads for batches (default: same as --threads)
       --chunks N                  max number of chunks to process (default: -1, all)
       --kl-divergence-base FNAME  save the logits to FNAME (with --kl-divergence: read them)
       --kl-divergence             compare with the logits in --kl-divergence-base
  -h,  --help                      this text

hot-swap (ik_llama.cpp's protocols, read from the environment):
  LLAMA_HOTSWAP_ENABLED=1          reload changed tensors before the first evaluation and
                                   between evaluations; exit when nothing was reloaded
  LLAMA_PERPLEXITY_PRE_RELOAD_SCRIPT=CMD  run CMD (sh -c) before each reload
  LLAMA_HOTSWAP_CONTROL_FILE, LLAMA_HOTSWAP_STATUS_FILE  signal-file mode: wait for
                                   `reload|compute|exit <seq>` commands after each evaluation";

fn parse_int(flag: &str, v: &str) -> Result<i64, String> {
    v.trim().parse::<i64>().ok().filter(|n| i32::try_from(*n).is_ok()).ok_or_else(|| {
        format!("error while handling argument \"{flag}\": invalid integer '{v}'\n\nto show complete usage, run with -h")
    })
}

/// Parses the arguments after the program name. Errors carry upstream's message.
pub fn parse(argv: &[String]) -> Result<Args, String> {
    let mut a = Args::default();
    let mut i = 0;
    while i < argv.len() {
        let mut arg = argv[i].clone();
        if arg.starts_with("--") {
            arg = arg.replace('_', "-");
        }
        let value = |i: usize| -> Result<&String, String> {
            argv.get(i + 1).ok_or_else(|| {
                format!("error while handling argument \"{arg}\": expected value for argument\n\nto show complete usage, run with -h")
            })
        };
        match arg.as_str() {
            "-h" | "--help" | "--usage" => a.help = true,
            "--kl-divergence" => a.kl_divergence = true,
            s if IGNORED_SWITCHES.contains(&s) => {
                eprintln!("warning: {s} is ignored by llama-hotswap-perplexity");
            }
            s if IGNORED_WITH_VALUE.contains(&s) => {
                value(i)?;
                eprintln!("warning: {s} is ignored by llama-hotswap-perplexity");
                i += 1;
            }
            "-m" | "--model" => {
                a.model = Some(PathBuf::from(value(i)?));
                i += 1;
            }
            "-f" | "--file" => {
                a.file = Some(PathBuf::from(value(i)?));
                i += 1;
            }
            "--kl-divergence-base" | "--save-all-logits" => {
                a.logits_file = Some(PathBuf::from(value(i)?));
                i += 1;
            }
            "-c" | "--ctx-size" | "-b" | "--batch-size" | "-ub" | "--ubatch-size" | "-t"
            | "--threads" | "-tb" | "--threads-batch" | "--chunks" => {
                let n = parse_int(&arg, value(i)?)?;
                match arg.as_str() {
                    "-c" | "--ctx-size" => a.n_ctx = n,
                    "-b" | "--batch-size" => a.n_batch = n,
                    "-ub" | "--ubatch-size" => a.n_ubatch = n,
                    "-t" | "--threads" => a.n_threads = Some(n),
                    "-tb" | "--threads-batch" => a.n_threads_batch = Some(n),
                    _ => a.n_chunks = n,
                }
                i += 1;
            }
            _ => return Err(format!("error: invalid argument: {arg}")),
        }
        i += 1;
    }
    Ok(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn parses_upstream_flags() {
        let a = parse(&v(
            "-m m.gguf -f t.txt -c 128 -b 256 -t 2 --chunks 4 --kl-divergence-base b.kld --kl-divergence -ngl 99 --mlock",
        ))
        .unwrap();
        assert_eq!(a.model.as_deref(), Some(std::path::Path::new("m.gguf")));
        assert_eq!(
            (a.n_ctx, a.n_batch, a.n_threads, a.n_chunks),
            (128, 256, Some(2), 4)
        );
        assert!(a.kl_divergence);
        assert_eq!(
            a.logits_file.as_deref(),
            Some(std::path::Path::new("b.kld"))
        );
        assert_eq!(
            parse(&v("--save_all_logits x"))
                .unwrap()
                .logits_file
                .unwrap(),
            PathBuf::from("x")
        );
    }

    #[test]
    fn bad_flags_are_errors() {
        assert_eq!(
            parse(&v("--bogus")).unwrap_err(),
            "error: invalid argument: --bogus"
        );
        assert!(parse(&v("-c")).unwrap_err().contains("expected value"));
        assert!(parse(&v("-c abc")).unwrap_err().contains("invalid integer"));
        assert!(parse(&v("-c 99999999999")).is_err());
        assert!(parse(&v("-ngl")).is_err());
    }
}
