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
    /// `-ctk` / `-ctv`: KV cache types as ggml type ids (None: the library's default, F16).
    pub cache_type_k: Option<u32>,
    pub cache_type_v: Option<u32>,
    /// `--no-mmap`: the weights are read into memory the model owns (upstream's
    /// `use_mmap = false`), so a hot-swap never has a mapping to return to.
    pub no_mmap: bool,
    /// `-fa`: `llama_flash_attn_type` (-1 auto, 0 off, 1 on); auto is on for the CPU.
    pub flash_attn: i32,
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
            cache_type_k: None,
            cache_type_v: None,
            no_mmap: false,
            flash_attn: -1,
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
    "-s",
    "--seed",
    "--numa",
    "-dev",
    "--device",
    // ik_llama.cpp's: MLA attention variant and attention batch cap (GPU-side memory knobs;
    // the CPU engine's attention is upstream's)
    "-mla",
    "--mla-use",
    "--mla-attn",
    "-amb",
    "--attn-max-batch",
];
/// Flags without a value accepted and ignored (ik_llama.cpp's `--warmup-batch` among them:
/// this tool does no warm-up pass).
const IGNORED_SWITCHES: &[&str] = &["--mlock", "--no-warmup", "--fit", "--warmup-batch", "-wb"];

/// `-ctk` / `-ctv` values, as upstream's common/arg.cpp lists them (name, ggml type id).
pub const KV_CACHE_TYPES: &[(&str, u32)] = &[
    ("f32", 0),
    ("f16", 1),
    ("bf16", 30),
    ("q8_0", 8),
    ("q4_0", 2),
    ("q4_1", 3),
    ("iq4_nl", 20),
    ("q5_0", 6),
    ("q5_1", 7),
];

/// `-fa` values as upstream's common_arg_utils reads them (truthy, falsey, auto).
fn parse_flash_attn(flag: &str, v: &str) -> Result<i32, String> {
    match v {
        "on" | "enabled" | "true" | "1" => Ok(1),
        "off" | "disabled" | "false" | "0" => Ok(0),
        "auto" | "-1" => Ok(-1),
        _ => Err(format!(
            "error while handling argument \"{flag}\": error: unknown value for --flash-attn: '{v}'\n\n\nto show complete usage, run with -h"
        )),
    }
}

fn parse_cache_type(flag: &str, v: &str) -> Result<u32, String> {
    KV_CACHE_TYPES
        .iter()
        .find(|(name, _)| *name == v)
        .map(|&(_, id)| id)
        .ok_or_else(|| {
            format!("error while handling argument \"{flag}\": Unsupported cache type: {v}\n\nto show complete usage, run with -h")
        })
}

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
  -ctk, --cache-type-k TYPE        KV cache type for K: f32, f16 (default), bf16, q8_0, q4_0,
  -ctv, --cache-type-v TYPE        q4_1, iq4_nl, q5_0, q5_1 (the CPU engine decodes f32, f16,
                                   bf16, q8_0, q4_0 and q4_1 caches; others fail at context creation)
       --no-mmap                   read the weights into memory instead of mapping the file
  -fa, --flash-attn on|off|auto    flash attention (default: auto, which is on for the CPU)
  -h,  --help                      this text
  Accepted and ignored with a warning: device and placement flags (-ngl, -sm, -ts, -mg, -ot,
  -dev, --mlock), --seed, --numa, --fit, --no-warmup, and ik_llama.cpp's -mla, -amb,
  --warmup-batch.

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
            "--no-mmap" => a.no_mmap = true,
            "-fa" | "--flash-attn" => {
                a.flash_attn = parse_flash_attn(&arg, value(i)?)?;
                i += 1;
            }
            "-ctk" | "--cache-type-k" => {
                a.cache_type_k = Some(parse_cache_type(&arg, value(i)?)?);
                i += 1;
            }
            "-ctv" | "--cache-type-v" => {
                a.cache_type_v = Some(parse_cache_type(&arg, value(i)?)?);
                i += 1;
            }
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

    /// The command line of GGUF-Tool-Suite's benchmark_each_tensor.sh template for
    /// ik_llama.cpp's llama-perplexity parses: ik's flags accepted, -ctk taken, --no-mmap kept.
    #[test]
    fn ik_template_parses() {
        let a = parse(&v(
            "-m m.gguf -mla 3 -fa on -amb 1024 -ctk f16 -ngl 99 -ot exps=CPU -b 512 -ub 512 \
             --warmup-batch --no-mmap --threads 36 --main-gpu 0 --seed 1337 -f t.txt -c 512 --chunks 250",
        ))
        .unwrap();
        assert_eq!(a.cache_type_k, Some(1));
        assert_eq!(a.cache_type_v, None);
        assert!(a.no_mmap);
        assert_eq!(
            (a.n_batch, a.n_ubatch, a.n_threads, a.n_chunks),
            (512, 512, Some(36), 250)
        );
        let b = parse(&v("-ctk q8_0 --cache-type-v q4_1")).unwrap();
        assert_eq!((b.cache_type_k, b.cache_type_v), (Some(8), Some(3)));
        assert!(!parse(&v("-m x")).unwrap().no_mmap);
        assert_eq!(a.flash_attn, 1);
        assert_eq!(parse(&v("-fa off")).unwrap().flash_attn, 0);
        assert_eq!(parse(&v("--flash-attn auto")).unwrap().flash_attn, -1);
        assert_eq!(parse(&v("-m x")).unwrap().flash_attn, -1);
    }

    #[test]
    fn bad_cache_types_are_upstreams_errors() {
        let e = parse(&v("-ctk q3_k")).unwrap_err();
        assert!(
            e.starts_with("error while handling argument \"-ctk\": Unsupported cache type: q3_k"),
            "{e}"
        );
        assert!(parse(&v("-ctv")).unwrap_err().contains("expected value"));
        assert!(parse(&v("-mla")).unwrap_err().contains("expected value"));
        assert!(parse(&v("-fa maybe"))
            .unwrap_err()
            .contains("unknown value for --flash-attn: 'maybe'"));
    }
}
