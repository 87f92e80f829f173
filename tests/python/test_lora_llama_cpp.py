"""llama-cpp-python's `Llama(lora_path=...)` on our library, against upstream's: the same
random rank-8 adapter (scripts/make_lora.py) at scales 1 and 0.5 changes the prompt's last
logits, and changes them as upstream's library does (same argmax, mean KL divergence between
the two libraries' softmaxes below 1e-4, far below the adapter's own effect). Each library
runs in its own subprocess (`worker` mode: LLAMA_CPP_LIB_PATH picks the library).

Usage: test_lora_llama_cpp.py MODEL ADAPTER OUR_LIB_DIR UPSTREAM_LIB_DIR WORK_DIR"""
import json
import os
import subprocess
import sys

PROMPT = "The capital of France is Paris. The capital of Italy is"
RUNS = (("base", None), ("lora1", 1.0), ("lora05", 0.5))


def worker(model, adapter, work, tag):
    import numpy as np
    from llama_cpp import Llama

    for name, scale in RUNS:
        kw = {} if scale is None else {"lora_path": adapter, "lora_scale": scale}
        # logits_all: without it llama-cpp-python 0.3.36 leaves Llama.scores at zero
        llm = Llama(model_path=model, n_ctx=256, n_threads=2, verbose=False, seed=1,
                    logits_all=True, **kw)
        llm.eval(llm.tokenize(PROMPT.encode(), add_bos=True))
        np.array(llm.scores[llm.n_tokens - 1], dtype=np.float64).tofile(
            os.path.join(work, f"{name}.{tag}.f64"))
        llm.close()
    return 0


def run(lib_dir, model, adapter, work, tag):
    env = dict(os.environ, LLAMA_CPP_LIB_PATH=lib_dir)
    proc = subprocess.run([sys.executable, __file__, "worker", model, adapter, work, tag],
                          env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit(f"FAIL worker on {lib_dir} exited {proc.returncode}")


def main(model, adapter, ours_dir, upstream_dir, work):
    import numpy as np

    os.makedirs(work, exist_ok=True)
    run(upstream_dir, model, adapter, work, "upstream")
    run(ours_dir, model, adapter, work, "ours")
    load = lambda name, tag: np.fromfile(os.path.join(work, f"{name}.{tag}.f64"))  # noqa: E731

    def kl(a, b):
        pa = np.exp(a - a.max()); pa /= pa.sum()
        pb = np.exp(b - b.max()); pb /= pb.sum()
        return float(np.sum(pa * (np.log(pa + 1e-300) - np.log(pb + 1e-300))))

    failures = []
    report = {}
    for name, _ in RUNS:
        a, b = load(name, "upstream"), load(name, "ours")
        if not (a.any() and b.any()):
            failures.append(f"{name}: logits all zero (Llama.scores not filled)")
        d = kl(a, b)
        report[name] = {"kl_vs_upstream": d, "argmax": [int(a.argmax()), int(b.argmax())]}
        if a.argmax() != b.argmax() or d > 1e-4:
            failures.append(f"{name}: ours differs from upstream (KL {d:.3g}, argmax {a.argmax()} / {b.argmax()})")
        if name != "base":
            effect = {tag: kl(load("base", tag), load(name, tag)) for tag in ("upstream", "ours")}
            report[name]["adapter_effect_kl"] = effect
            if min(effect.values()) < 1e-3 or d > 1e-2 * min(effect.values()):
                failures.append(f"{name}: the adapter does not move the logits clearly ({effect}) or ours moves them differently (KL {d:.3g})")
    print("Llama(lora_path=...) ours vs upstream: " + json.dumps(report))
    for f in failures:
        print("FAIL", f)
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "worker":
        sys.exit(worker(*sys.argv[2:6]))
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    sys.exit(main(*sys.argv[1:]))
