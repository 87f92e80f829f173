//! The in-process hot-swap sweep (`llama-hotswap-perplexity sweep ...`): written on its own
//! branch on top of `eval.rs`; this placeholder says so.

/// Runs the sweep with the arguments after `sweep`.
pub fn run(args: &[String]) -> Result<(), String> {
    let _ = args;
    Err("sweep not built yet".to_string())
}
