"""llama-cpp-python's Llama.save_state / load_state on our library, against upstream's:
after a prompt, save_state(); eval one more token (the reference logits); load_state() in
the same Llama and in a fresh one, eval the same token: the logits must equal the reference
bit for bit. Each library runs in its own subprocess (`worker` mode: LLAMA_CPP_LIB_PATH picks
the library); the driver also requires the saved state bytes and the reference logits to be
equal between the two libraries, and each library to load the other's state with the same
next logits.

Usage: test_state_llama_cpp.py MODEL OUR_LIB_DIR UPSTREAM_LIB_DIR WORK_DIR"""
import json
import os
import subprocess
import sys

PROMPT = "The capital of France is Paris. The capital of Italy is"


def worker(model, work, tag, other_state):
    import numpy as np
    from llama_cpp import Llama

    def make():
        # logits_all: without it llama-cpp-python 0.3.36 never fills Llama.scores (all zero)
        return Llama(model_path=model, n_ctx=256, n_threads=2, verbose=False, seed=1,
                     logits_all=True)

    llm = make()
    tokens = llm.tokenize(PROMPT.encode(), add_bos=True)
    llm.eval(tokens)
    state = llm.save_state()
    nxt = int(np.argmax(llm.scores[llm.n_tokens - 1]))
    llm.eval([nxt])
    ref = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)

    def continue_from(target, st):
        target.load_state(st)
        target.eval([nxt])
        return np.array(target.scores[target.n_tokens - 1], dtype=np.float32)

    same_llama = continue_from(llm, state)
    fresh = continue_from(make(), state)
    with open(os.path.join(work, f"state.{tag}.bin"), "wb") as f:
        f.write(state.llama_state)
    ref.tofile(os.path.join(work, f"ref.{tag}.f32"))
    result = {
        "n_tokens": state.n_tokens,
        "state_size": state.llama_state_size,
        "next": nxt,
        "ref_nonzero": bool(np.any(ref != 0)),
        "same_llama_equal": bool(np.array_equal(same_llama, ref)),
        "fresh_llama_equal": bool(np.array_equal(fresh, ref)),
    }
    if other_state:
        # the other library's state bytes in this library's LlamaState
        with open(other_state, "rb") as f:
            state.llama_state = f.read()
        state.llama_state_size = len(state.llama_state)
        np.array(continue_from(make(), state), dtype=np.float32).tofile(
            os.path.join(work, f"cross.{tag}.f32"))
    with open(os.path.join(work, f"result.{tag}.json"), "w") as f:
        json.dump(result, f)
    return 0


def run(lib_dir, model, work, tag, other_state=""):
    env = dict(os.environ, LLAMA_CPP_LIB_PATH=lib_dir)
    args = [sys.executable, __file__, "worker", model, work, tag, other_state]
    proc = subprocess.run(args, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit(f"FAIL worker on {lib_dir} exited {proc.returncode}")
    with open(os.path.join(work, f"result.{tag}.json")) as f:
        return json.load(f)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def main(model, ours_dir, upstream_dir, work):
    os.makedirs(work, exist_ok=True)
    up = run(upstream_dir, model, work, "upstream")
    ours = run(ours_dir, model, work, "ours", os.path.join(work, "state.upstream.bin"))
    run(upstream_dir, model, work, "upstream", os.path.join(work, "state.ours.bin"))
    j = lambda name: os.path.join(work, name)  # noqa: E731
    failures = []
    for side, r in (("upstream", up), ("ours", ours)):
        if not r["ref_nonzero"]:
            failures.append(f"{side}: the reference logits are all zero (Llama.scores not filled)")
        if not (r["same_llama_equal"] and r["fresh_llama_equal"]):
            failures.append(f"{side}: load_state does not give the same next logits: {r}")
    if up != ours:
        failures.append(f"results differ: upstream {up} ours {ours}")
    if read(j("state.upstream.bin")) != read(j("state.ours.bin")):
        failures.append("the saved states differ")
    if read(j("ref.upstream.f32")) != read(j("ref.ours.f32")):
        failures.append("the next logits differ between the libraries")
    if read(j("cross.ours.f32")) != read(j("ref.upstream.f32")):
        failures.append("ours loading upstream's state gives other logits")
    if read(j("cross.upstream.f32")) != read(j("ref.ours.f32")):
        failures.append("upstream loading our state gives other logits")
    print(f"Llama.save_state/load_state: {ours['n_tokens']} tokens, {ours['state_size']} bytes of "
          "state, equal bytes; next logits bit-identical after load_state (same and fresh Llama, "
          "either library's state)")
    for f in failures:
        print("FAIL", f)
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "worker":
        sys.exit(worker(*sys.argv[2:5], sys.argv[5]))
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    sys.exit(main(*sys.argv[1:]))
