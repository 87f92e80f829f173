"""llama-cpp-python with a vocab-only model, our library against upstream's:
`Llama(model_path, vocab_only=True)` must construct (it creates a context, which upstream
gives a vocab-only model: no memory, no backend), then tokenize / detokenize a text and
report the context's sizes. Each library runs in its own subprocess (`worker` mode:
LLAMA_CPP_LIB_PATH picks the library; the results go to a JSON file); the driver requires
the two results to be equal, and requires that ours refuses to decode (upstream aborts the
process there; ours returns -3, and the process goes on; llama-cpp-python's `eval` refuses
before decoding since the memory is NULL, so the worker calls `llama_decode` directly; the
log line is checked by the C test, llama-cpp-python silences the log).

Usage: test_vocab_only_llama_cpp.py MODEL OUR_LIB_DIR UPSTREAM_LIB_DIR WORK_DIR"""
import json
import os
import subprocess
import sys

TEXT = "Hello world! The capital of France is Paris. ünïcödé 123"


def worker(model, out, try_eval):
    import llama_cpp
    from llama_cpp import Llama

    llm = Llama(model_path=model, vocab_only=True, n_ctx=256, verbose=False)
    tokens = llm.tokenize(TEXT.encode(), add_bos=True)
    ctx = llm.ctx
    result = {
        "tokens": tokens,
        "text": llm.detokenize(tokens).decode("utf-8", "replace"),
        "n_ctx": llm.n_ctx(),
        "n_vocab": llm.n_vocab(),
        "memory_is_null": not bool(llama_cpp.llama_get_memory(ctx)),
        "n_batch": llama_cpp.llama_n_batch(ctx),
    }
    if try_eval:
        arr = (llama_cpp.llama_token * 4)(*tokens[:4])
        result["eval"] = llama_cpp.llama_decode(ctx, llama_cpp.llama_batch_get_one(arr, 4))
    with open(out, "w") as f:
        json.dump(result, f)
    return 0


def run(lib_dir, model, out, try_eval):
    env = dict(os.environ, LLAMA_CPP_LIB_PATH=lib_dir)
    args = [sys.executable, __file__, "worker", model, out, "1" if try_eval else "0"]
    proc = subprocess.run(args, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit(f"FAIL worker on {lib_dir} exited {proc.returncode}")
    with open(out) as f:
        return json.load(f), proc.stderr


def main(model, ours_dir, upstream_dir, work):
    os.makedirs(work, exist_ok=True)
    up, _ = run(upstream_dir, model, os.path.join(work, "vocab.upstream.json"), False)
    ours, _ = run(ours_dir, model, os.path.join(work, "vocab.ours.json"), True)
    failures = []
    our_eval = ours.pop("eval")
    if up != ours:
        failures.append(f"results differ: upstream {up} ours {ours}")
    if not up["memory_is_null"]:
        failures.append("upstream gives a vocab-only context memory (the test's premise changed)")
    if our_eval != -3:
        failures.append(f"llama_decode on a vocab-only context returned {our_eval} (expected -3)")
    print(f"Llama(vocab_only=True): {len(ours['tokens'])} tokens, n_ctx {ours['n_ctx']}, "
          f"n_vocab {ours['n_vocab']}, memory NULL, equal to upstream; llama_decode -> {our_eval}")
    for f in failures:
        print("FAIL", f)
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "worker":
        sys.exit(worker(sys.argv[2], sys.argv[3], sys.argv[4] == "1"))
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    sys.exit(main(*sys.argv[1:]))
