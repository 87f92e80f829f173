"""llama-cpp-python end to end on the real model (SmolLM2-135M Q4_1), our library against
upstream's: `Llama(model_path, n_ctx=256, logits_all=True)`, `.eval(tokens)` on a paragraph,
then `create_completion(..., max_tokens=16, temperature=0)`.

llama-cpp-python loads its library once per process, so each library runs in its own
subprocess (`worker` mode: LLAMA_CPP_LIB_PATH picks the library, the logits and text go to
an .npz file); the driver compares them:
- mean KL(upstream || ours) over all positions < 1e-2,
- greedy argmax equal at every position where upstream's top-1 leads its runner-up by more
  than 0.25 logit,
- the completion text identical, or, where greedy decoding on the two libraries parts, the
  parting token is a near-tie on upstream (its top-1 leads by <= 0.25 logit, as above; the
  workers also evaluate prompt + their completion so the driver can check this). The two
  texts and the parting margin are printed either way.

Usage: test_eval_llama_cpp.py MODEL OUR_LIB_DIR UPSTREAM_LIB_DIR WORK_DIR"""
import os

import numpy as np

import lib_worker

TEXT = (
    "The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France. "
    "It is named after the engineer Gustave Eiffel, whose company designed and built the tower "
    "from 1887 to 1889."
)
PROMPT = "The capital of France is"
KL_LIMIT = 1e-2
LEAD = 0.25


def worker(model, out):
    from llama_cpp import Llama

    llm = Llama(model_path=model, n_ctx=256, n_batch=256, logits_all=True, n_gpu_layers=0,
                verbose=False)
    tokens = llm.tokenize(TEXT.encode(), add_bos=True)
    llm.eval(tokens)
    logits = np.array(llm.scores[: len(tokens)], dtype=np.float32)
    llm.reset()
    completion = llm.create_completion(PROMPT, max_tokens=16, temperature=0)
    text = completion["choices"][0]["text"]
    # Prompt + completion, evaluated with all logits, to see the margins along the way.
    llm.reset()
    full = llm.tokenize((PROMPT + text).encode(), add_bos=True)
    llm.eval(full)
    full_logits = np.array(llm.scores[: len(full)], dtype=np.float32)
    np.savez(out, tokens=np.array(tokens), logits=logits, text=np.array(text),
             full=np.array(full), full_logits=full_logits)
    return 0


def log_softmax(x):
    x = x.astype(np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def main(model, ours_dir, upstream_dir, work):
    os.makedirs(work, exist_ok=True)
    up = lib_worker.run(__file__, upstream_dir, model, os.path.join(work, "eval.upstream.npz"))
    ours = lib_worker.run(__file__, ours_dir, model, os.path.join(work, "eval.ours.npz"))
    failures = []
    if not np.array_equal(up["tokens"], ours["tokens"]):
        failures.append(f"tokens differ: {up['tokens'].tolist()} vs {ours['tokens'].tolist()}")
    else:
        lp, lq = log_softmax(up["logits"]), log_softmax(ours["logits"])
        kl = (np.exp(lp) * (lp - lq)).sum(axis=-1)
        top2 = np.sort(up["logits"], axis=-1)[:, -2:]
        clear = (top2[:, 1] - top2[:, 0]) > LEAD
        agree = up["logits"].argmax(-1) == ours["logits"].argmax(-1)
        print(f"eval: {len(kl)} positions, mean KL {kl.mean():.2e} (max {kl.max():.2e}), "
              f"argmax equal at {int((agree & clear).sum())}/{int(clear.sum())} clear positions "
              f"({int(agree.sum())}/{len(agree)} overall)")
        if not kl.mean() < KL_LIMIT:
            failures.append(f"mean KL {kl.mean():.3e} >= {KL_LIMIT}")
        if not agree[clear].all():
            failures.append(f"argmax differs at clear positions {np.nonzero(clear & ~agree)[0].tolist()}")
    up_text, our_text = str(up["text"]), str(ours["text"])
    print(f"completion: upstream {up_text!r}, ours {our_text!r}")
    if up_text != our_text:
        a, b = up["full"].tolist(), ours["full"].tolist()
        part = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), None)
        if part is None or part == 0:
            failures.append("completion text differs (not at a token)")
        else:
            top2 = np.sort(up["full_logits"][part - 1])[-2:]
            margin = float(top2[1] - top2[0])
            print(f"completion parts at token {part} ({a[part]} vs {b[part]}): upstream's top-1 "
                  f"leads by {margin:.3f} there")
            if margin > LEAD:
                failures.append(f"completion text differs at a clear token (lead {margin:.3f} > {LEAD})")
    for f in failures:
        print("FAIL", f)
    return 1 if failures else 0


if __name__ == "__main__":
    lib_worker.dispatch(__doc__, worker, main)
