//! ik_llama.cpp's hot-swap protocols for llama-perplexity, so that existing drivers (the
//! GGUF-Tool-Suite's `benchmark_each_tensor.sh --hotswap`, `tensor-swap.sh` pre-reload
//! scripts) run unchanged. Selected by the environment, as ik's tool does:
//!
//! * `LLAMA_HOTSWAP_ENABLED` set (any value): reload changed tensors once before the first
//!   evaluation.
//! * **Loop mode** (no control file): evaluate; run `LLAMA_PERPLEXITY_PRE_RELOAD_SCRIPT`
//!   (`sh -c`, its output echoed as `main: [pre-reload] <line>`); reload; exit when the reload
//!   reloaded nothing. Without `LLAMA_HOTSWAP_ENABLED` there is one evaluation.
//! * **Signal mode** (`LLAMA_HOTSWAP_CONTROL_FILE` and `LLAMA_HOTSWAP_STATUS_FILE`): after
//!   each evaluation publish `done <iter> <seq>` and wait for a command line `<cmd> [<seq>]`
//!   in the control file (polled every 200 ms, taken only once it has a newline, deleted when
//!   read): `reload` (reload, then evaluate; nothing reloaded → `reload_failed` and wait
//!   again), `compute` (evaluate again), `exit`/`quit`/`stop`. A `seq` not greater than the
//!   last accepted one is stale and ignored; a command without one always runs. The status
//!   file always holds one complete line `<state> <iter> <seq>` (written to `<path>.tmp`, then
//!   renamed over it); states: computing, done, reload_failed, exiting.
//!
//! Every reloaded tensor prints `reloaded tensor '<name>'` (stderr), the line drivers grep.
//!
//! The driving logic takes the evaluation and the reload as closures, so it is tested
//! without a model.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// The environment variables, read once.
#[derive(Clone, Debug, Default)]
pub struct ProtocolEnv {
    /// `LLAMA_HOTSWAP_ENABLED` is set (any value, as ik's tool checks it).
    pub hotswap: bool,
    pub pre_reload_script: Option<String>,
    pub control_file: Option<PathBuf>,
    pub status_file: Option<PathBuf>,
    /// Poll interval of the control file (ik: 200 ms).
    pub poll: Duration,
}

impl ProtocolEnv {
    pub fn from_env() -> ProtocolEnv {
        let nonempty = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
        ProtocolEnv {
            hotswap: std::env::var_os("LLAMA_HOTSWAP_ENABLED").is_some(),
            pre_reload_script: std::env::var("LLAMA_PERPLEXITY_PRE_RELOAD_SCRIPT").ok(),
            control_file: nonempty("LLAMA_HOTSWAP_CONTROL_FILE").map(PathBuf::from),
            status_file: nonempty("LLAMA_HOTSWAP_STATUS_FILE").map(PathBuf::from),
            poll: Duration::from_millis(200),
        }
    }

    /// Signal mode: hot-swap on and a control file named (ik's condition).
    pub fn signal_mode(&self) -> bool {
        self.hotswap && self.control_file.is_some()
    }
}

/// Publishes `<state> <iter> <seq>` atomically: written to `<path>.tmp`, renamed over
/// `path` (a reader sees the old line or the new one, never a partial one). Retries until it
/// succeeds, as ik's tool does: a lost status would leave the driver waiting forever.
pub fn write_status(path: &Path, state: &str, iter: u64, seq: i64) {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let line = format!("{state} {iter} {seq}\n");
    let mut attempt = 0u64;
    loop {
        let r = std::fs::write(&tmp, &line).and_then(|()| std::fs::rename(&tmp, path));
        match r {
            Ok(()) => return,
            Err(e) => {
                if attempt > 0 && attempt % 500 == 0 {
                    eprintln!(
                        "hotswap: still trying to publish status '{state}' to file '{}': {e}",
                        path.display()
                    );
                }
            }
        }
        attempt += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The most of a control file that is read (a command is one short line).
const MAX_COMMAND_BYTES: u64 = 4096;

/// A command read from the control file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Command {
    pub cmd: String,
    /// None: no sequence number (always executed).
    pub seq: Option<i64>,
}

/// Reads and deletes a complete command (a line ending in a newline); None when there is
/// no file or it is still being written. A blank command is deleted and ignored.
pub fn read_command(path: &Path) -> Option<Command> {
    // a command is one short line: a control file that is huge or endless is read no further
    let bytes = {
        use std::io::Read;
        let file = llama::storage::file::open_regular(path, 0).ok()?;
        let mut b = Vec::new();
        file.take(MAX_COMMAND_BYTES).read_to_end(&mut b).ok()?;
        b
    };
    if !bytes.contains(&b'\n') {
        return None;
    }
    let text = String::from_utf8_lossy(&bytes);
    let mut words = text.split_whitespace();
    let cmd = words.next().map(str::to_string);
    // ik: `int seq; parser >> seq`: a 32-bit int; a number out of its range fails the
    // extraction like any other word, and is "no seq" (so `compute 9223372036854775807`
    // does not make every later command stale)
    let seq = words
        .next()
        .and_then(|w| w.parse::<i32>().ok())
        .filter(|&s| s >= 0)
        .map(i64::from);
    for _ in 0..50 {
        if std::fs::remove_file(path).is_ok() || !path.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    match cmd {
        Some(cmd) => Some(Command { cmd, seq }),
        None => {
            eprintln!("main: ignoring an empty hot-swap command");
            None
        }
    }
}

/// Runs `LLAMA_PERPLEXITY_PRE_RELOAD_SCRIPT` with `sh -c`, echoing its output lines.
pub fn run_pre_reload_script(script: &str) {
    eprintln!("main: executing pre-reload script: {script}");
    match std::process::Command::new("sh")
        .arg("-c")
        .arg(script)
        .stderr(std::process::Stdio::inherit())
        .output()
    {
        Ok(out) => {
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                eprintln!("main: [pre-reload] {line}");
            }
            if !out.status.success() {
                eprintln!("main: pre-reload script exited with {}", out.status);
            }
        }
        Err(e) => eprintln!("main: failed to execute pre-reload script: {script}: {e}"),
    }
}

/// How the protocol run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Evaluations run.
    pub iterations: u64,
    /// Whether the last evaluation succeeded.
    pub last_ok: bool,
}

/// Drives evaluations and reloads as ik's llama-perplexity `main` does. `evaluate` runs one
/// evaluation (printing its results) and says whether it succeeded; `reload` reloads changed
/// tensors (printing `reloaded tensor '<name>'` per tensor) and says whether any was.
pub fn drive(
    env: &ProtocolEnv,
    evaluate: &mut dyn FnMut(u64) -> bool,
    reload: &mut dyn FnMut() -> bool,
) -> Result<Outcome, String> {
    let signal = env.signal_mode();
    let status = match (&env.status_file, signal) {
        (Some(s), true) => Some(s.clone()),
        (None, true) => {
            return Err(
                "main: error: LLAMA_HOTSWAP_CONTROL_FILE requires LLAMA_HOTSWAP_STATUS_FILE to be set as well"
                    .into(),
            )
        }
        _ => None,
    };
    if env.hotswap {
        reload();
    }
    let mut iter = 1u64;
    let mut seq = 0i64;
    if let (Some(ctrl), Some(stat)) = (&env.control_file, &status) {
        let _ = std::fs::remove_file(ctrl); // stale commands of an earlier run
        eprintln!(
            "main: hot-swap signal mode enabled (control='{}', status='{}')",
            ctrl.display(),
            stat.display()
        );
        write_status(stat, "computing", iter, seq);
    }
    loop {
        let ok = evaluate(iter);
        if let (Some(ctrl), Some(stat)) = (&env.control_file, &status) {
            eprintln!("main: hot-swap iteration {iter} finished, waiting for the next command");
            write_status(stat, "done", iter, seq);
            let mut terminate = false;
            loop {
                let Some(c) = read_command(ctrl) else {
                    std::thread::sleep(env.poll);
                    continue;
                };
                if let Some(s) = c.seq {
                    if s <= seq {
                        eprintln!(
                            "main: ignoring stale hot-swap command '{}' (seq {s} <= {seq})",
                            c.cmd
                        );
                        continue;
                    }
                    seq = s;
                }
                eprintln!("main: hot-swap command received: {}", c.cmd);
                match c.cmd.as_str() {
                    "exit" | "quit" | "stop" => {
                        terminate = true;
                        break;
                    }
                    "reload" => {
                        if reload() {
                            break;
                        }
                        eprintln!(
                            "main: hot-swap reload requested, but no tensor has changed on disk"
                        );
                        write_status(stat, "reload_failed", iter, seq);
                    }
                    "compute" => break,
                    other => eprintln!("main: unknown hot-swap command '{other}' ignored"),
                }
            }
            if terminate {
                eprintln!("main: hot-swap exit requested, terminating");
                write_status(stat, "exiting", iter, seq);
                return Ok(Outcome {
                    iterations: iter,
                    last_ok: ok,
                });
            }
            iter += 1;
            write_status(stat, "computing", iter, seq);
            continue;
        }
        if let Some(script) = &env.pre_reload_script {
            run_pre_reload_script(script);
        }
        if !(env.hotswap && reload()) {
            return Ok(Outcome {
                iterations: iter,
                last_ok: ok,
            });
        }
        iter += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn loop_mode_reloads_before_and_between_and_stops_when_nothing_reloads() {
        let env = ProtocolEnv {
            hotswap: true,
            ..Default::default()
        };
        let mut log = Vec::new();
        let mut reloads = 0;
        let out = {
            let log = std::cell::RefCell::new(&mut log);
            drive(
                &env,
                &mut |i| {
                    log.borrow_mut().push(format!("eval {i}"));
                    true
                },
                &mut || {
                    reloads += 1;
                    log.borrow_mut().push(format!("reload {reloads}"));
                    reloads <= 3 // the first call (before evaluating) and two more succeed
                },
            )
            .unwrap()
        };
        assert_eq!(
            log,
            ["reload 1", "eval 1", "reload 2", "eval 2", "reload 3", "eval 3", "reload 4"]
        );
        assert_eq!(out.iterations, 3);
    }

    #[test]
    fn without_hotswap_one_evaluation_and_no_reload() {
        let env = ProtocolEnv::default();
        let mut evals = 0;
        let out = drive(
            &env,
            &mut |_| {
                evals += 1;
                false
            },
            &mut || panic!("no reload without LLAMA_HOTSWAP_ENABLED"),
        )
        .unwrap();
        assert_eq!((evals, out.last_ok), (1, false));
    }

    #[test]
    fn control_file_without_status_file_is_an_error() {
        let env = ProtocolEnv {
            hotswap: true,
            control_file: Some("ctrl".into()),
            ..Default::default()
        };
        assert!(drive(&env, &mut |_| true, &mut || true).is_err());
    }

    #[test]
    fn commands_need_a_newline_and_are_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("ctrl");
        assert_eq!(read_command(&p), None);
        std::fs::write(&p, "reload 3").unwrap();
        assert_eq!(read_command(&p), None);
        assert!(p.exists());
        std::fs::write(&p, "reload 3\n").unwrap();
        assert_eq!(
            read_command(&p),
            Some(Command {
                cmd: "reload".into(),
                seq: Some(3)
            })
        );
        assert!(!p.exists());
        std::fs::write(&p, "compute\n").unwrap();
        assert_eq!(read_command(&p).unwrap().seq, None);
        // ik's seq is an int: beyond its range is no seq (always runs), its maximum is one
        std::fs::write(&p, "compute 9223372036854775807\n").unwrap();
        assert_eq!(read_command(&p).unwrap().seq, None);
        std::fs::write(&p, "compute 2147483648\n").unwrap();
        assert_eq!(read_command(&p).unwrap().seq, None);
        std::fs::write(&p, "compute 2147483647\n").unwrap();
        assert_eq!(read_command(&p).unwrap().seq, Some(2147483647));
        // a FIFO as control file is not waited on
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if made.is_ok_and(|s| s.success()) {
            assert_eq!(read_command(&fifo), None);
        }
        std::fs::write(&p, "\n").unwrap();
        assert_eq!(read_command(&p), None);
        assert!(!p.exists());
    }

    #[test]
    fn status_is_replaced_atomically() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("status");
        write_status(&p, "done", 2, 7);
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "done 2 7\n");
        assert!(!dir.path().join("status.tmp").exists());
    }

    /// A driver thread speaks the protocol: stale and unknown commands are ignored, a failed
    /// reload publishes reload_failed, exit ends the run.
    #[test]
    fn signal_mode_end_to_end() {
        let dir = tempfile::tempdir().unwrap();
        let ctrl = dir.path().join("ctrl");
        let stat = dir.path().join("status");
        let env = ProtocolEnv {
            hotswap: true,
            control_file: Some(ctrl.clone()),
            status_file: Some(stat.clone()),
            poll: Duration::from_millis(5),
            ..Default::default()
        };
        let reload_ok = Arc::new(AtomicUsize::new(1));
        let driver = {
            let (ctrl, stat) = (ctrl.clone(), stat.clone());
            std::thread::spawn(move || {
                let wait = |want: &str| {
                    for _ in 0..2000 {
                        if std::fs::read_to_string(&stat).ok().as_deref() == Some(want) {
                            return;
                        }
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    panic!("status never became {want:?}");
                };
                let send = |c: &str| {
                    let tmp = ctrl.with_extension("w");
                    std::fs::write(&tmp, c).unwrap();
                    std::fs::rename(&tmp, &ctrl).unwrap();
                    while ctrl.exists() {
                        std::thread::sleep(Duration::from_millis(2));
                    }
                };
                wait("done 1 0\n");
                send("reload 1\n");
                wait("done 2 1\n");
                send("reload 1\n"); // stale: ignored
                send("frobnicate 2\n"); // unknown: ignored, seq taken
                send("reload 3\n"); // the reload closure now fails
                wait("reload_failed 2 3\n");
                send("compute 4\n");
                wait("done 3 4\n");
                send("exit 5\n");
                wait("exiting 3 5\n");
            })
        };
        let mut evals = 0;
        let flag = Arc::clone(&reload_ok);
        let mut reloads = 0;
        let out = drive(
            &env,
            &mut |_| {
                evals += 1;
                true
            },
            &mut || {
                reloads += 1;
                // the initial call and the first commanded reload succeed
                reloads <= 2 && flag.load(Ordering::SeqCst) == 1
            },
        )
        .unwrap();
        driver.join().unwrap();
        assert_eq!(evals, 3);
        assert_eq!(out.iterations, 3);
        assert_eq!(reloads, 3);
    }
}
