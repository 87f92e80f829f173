"""llama-cpp-python's high-level generation on the real model (SmolLM2-135M Q4_1), our
library against upstream's, each in its own process (`worker` mode; LLAMA_CPP_LIB_PATH picks
the library, the results go to an .npz file):

- `create_completion(PROMPT, max_tokens=32, temperature=0)` (greedy),
- `create_completion(PROMPT, max_tokens=32, temperature=0.8, seed=42)` (llama-cpp-python's
  chain: penalties, top-k 40, typical 1, top-p 0.95, min-p 0.05, temp 0.8, dist 42),
- `create_chat_completion(..., response_format={"type": "json_object"}, temperature=0)` and
  the same with a JSON schema (a GBNF grammar sampler in the chain).

`Llama.sample` is wrapped (the chain is left as llama-cpp-python builds it) to record, per
generated token, the logits row it was drawn from and the pick. The driver requires, per case:
the prompt tokens identical, the logits rows the tokens were drawn from bit-identical, the
generated tokens and the texts identical (our engine follows upstream's float order, so the
two libraries compute the same logits), and JSON outputs that parse on both libraries.

Should the tokens part, the failure says whether upstream's pick was a near-tie there (a
diagnostic, not an excuse):
- greedy (with or without a grammar): upstream's logit for its pick leads its logit for ours
  by less than 0.25;
- seeded: upstream's draw lies within 1% of the probability mass of an end of the interval
  it picked, or two neighbouring candidates whose logits are less than 0.25 apart would,
  swapped, put the same draw on another token. The upstream worker replays each step: the
  chain without dist on a fresh candidate array (llama_sampler_apply), then dist's single-pass
  cumulative sum with the draw of a Python std::mt19937(42) + uniform_real_distribution<double>
  (libstdc++'s generate_canonical); the replayed pick must equal upstream's actual pick at
  every step, which checks the replay itself.
The texts and any parting token with its margin are printed.

Usage: test_completion_llama_cpp.py MODEL OUR_LIB_DIR UPSTREAM_LIB_DIR WORK_DIR"""
import ctypes
import json
import os

import numpy as np

import lib_worker

PROMPT = "The capital of France is"
SEED = 42
LEAD = 0.25  # logits
DRAW_MARGIN = 0.01  # probability mass
MESSAGES = [
    {"role": "system", "content": "You answer in JSON."},
    {"role": "user", "content": "What is the capital of France and how many people live there?"},
]
SCHEMA = {
    "type": "object",
    "properties": {"capital": {"type": "string"}, "population": {"type": "integer"}},
    "required": ["capital", "population"],
}
CASES = ["greedy", "seeded", "json_object", "json_schema"]


class MT19937:
    """std::mt19937 (32-bit Mersenne twister, init_genrand seeding)."""

    def __init__(self, seed):
        self.mt = [seed & 0xFFFFFFFF]
        for i in range(1, 624):
            prev = self.mt[-1]
            self.mt.append((1812433253 * (prev ^ (prev >> 30)) + i) & 0xFFFFFFFF)
        self.index = 624

    def next_u32(self):
        if self.index >= 624:
            mt = self.mt
            for i in range(624):
                y = (mt[i] & 0x80000000) | (mt[(i + 1) % 624] & 0x7FFFFFFF)
                mt[i] = mt[(i + 397) % 624] ^ (y >> 1) ^ (0x9908B0DF if y & 1 else 0)
            self.index = 0
        y = self.mt[self.index]
        self.index += 1
        y ^= y >> 11
        y ^= (y << 7) & 0x9D2C5680
        y ^= (y << 15) & 0xEFC60000
        y ^= y >> 18
        return y

    def canonical(self):
        """libstdc++ uniform_real_distribution<double>(0, 1): generate_canonical<double, 53>
        takes two 32-bit draws and sums them in double."""
        s = float(self.next_u32())
        s += float(self.next_u32()) * 4294967296.0
        r = s / 18446744073709551616.0
        return r if r < 1.0 else np.nextafter(1.0, 0.0)


def replay_dist_steps(llama_cpp, n_vocab, rows, picks, expf):
    """Upstream's seeded chain step by step: (replayed pick, margin below, margin above)."""
    chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
    for s in (
        # As LlamaSampler.add_penalties adds it (last_n_tokens_size 64; a no-op at 1.0).
        llama_cpp.llama_sampler_init_penalties(n_vocab, 64, 1.0, 0.0, 0.0),
        llama_cpp.llama_sampler_init_top_k(40),
        llama_cpp.llama_sampler_init_typical(1.0, 1),
        llama_cpp.llama_sampler_init_top_p(0.95, 1),
        llama_cpp.llama_sampler_init_min_p(0.05, 1),
        llama_cpp.llama_sampler_init_temp(0.8),
    ):
        llama_cpp.llama_sampler_chain_add(chain, s)
    rng = MT19937(SEED)
    out = []
    for row, pick in zip(rows, picks):
        buf = np.zeros(n_vocab, dtype=[("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])
        buf["id"] = np.arange(n_vocab)
        buf["logit"] = row
        data = (llama_cpp.llama_token_data * n_vocab).from_buffer(buf)
        arr = llama_cpp.llama_token_data_array(data, n_vocab, -1, False)
        llama_cpp.llama_sampler_apply(chain, ctypes.byref(arr))
        size = arr.size
        logits = [data[i].logit for i in range(size)]
        max_l = logits[0] if arr.sorted else max(logits)
        ps = [expf(l - max_l) for l in logits]  # float, as upstream's expf
        total = 0.0
        for p in ps:
            total += p
        rnd = rng.canonical()
        target = total * rnd

        def draw(order):
            run, before = 0.0, 0.0
            for i in order:
                before = run
                run += ps[i]
                if run >= target:
                    return i, before, run
            return order[-1], before, run

        chosen, before, run = draw(list(range(size)))
        # The order of the candidates matters as much as their mass: two whose logits are
        # nearly equal may come in the other order on another library, and the same draw
        # then lands on the other one. The smallest logit gap (before temp) between
        # neighbours whose swap changes the pick.
        flip_gap = np.inf
        for j in range(size - 1):
            order = list(range(size))
            order[j], order[j + 1] = order[j + 1], order[j]
            if draw(order)[0] != chosen:
                gap = abs(float(row[data[j].id]) - float(row[data[j + 1].id]))
                flip_gap = min(flip_gap, gap)
        out.append((data[chosen].id, (target - before) / total, (run - target) / total, flip_gap))
        llama_cpp.llama_sampler_accept(chain, int(pick))
    llama_cpp.llama_sampler_free(chain)
    return out


def worker(model, out):
    import llama_cpp
    from llama_cpp import Llama

    llm = Llama(model_path=model, n_ctx=1024, n_batch=512, logits_all=True, n_gpu_layers=0,
                seed=SEED, verbose=False)
    steps = []
    original_sample = llm.sample

    def recording_sample(*args, **kwargs):
        idx = kwargs["idx"]
        context = llm.input_ids[: idx + 1].tolist()
        row = np.array(llm.scores[idx], dtype=np.float32, copy=True)
        token = original_sample(*args, **kwargs)
        steps.append((context, row, token))
        return token

    llm.sample = recording_sample
    results = {}
    for case in CASES:
        steps.clear()
        if case == "greedy":
            r = llm.create_completion(PROMPT, max_tokens=32, temperature=0)
            text = r["choices"][0]["text"]
        elif case == "seeded":
            r = llm.create_completion(PROMPT, max_tokens=32, temperature=0.8, seed=SEED)
            text = r["choices"][0]["text"]
        else:
            fmt = {"type": "json_object"}
            if case == "json_schema":
                fmt["schema"] = SCHEMA
            r = llm.create_chat_completion(messages=MESSAGES, response_format=fmt, temperature=0,
                                           max_tokens=256, seed=SEED)
            text = r["choices"][0]["message"]["content"]
        if not steps:
            raise SystemExit(f"{case}: nothing was sampled")
        prompt = steps[0][0]
        picks = np.array([s[2] for s in steps], dtype=np.int64)
        rows = np.stack([s[1] for s in steps])
        results[f"{case}_text"] = np.array(text)
        results[f"{case}_prompt"] = np.array(prompt, dtype=np.int64)
        results[f"{case}_picks"] = picks
        results[f"{case}_rows"] = rows
        results[f"{case}_finish"] = np.array(r["choices"][0]["finish_reason"] or "")
        if case == "seeded":
            libm = ctypes.CDLL("libm.so.6")
            libm.expf.restype = ctypes.c_float
            libm.expf.argtypes = [ctypes.c_float]
            replay = replay_dist_steps(llama_cpp, llm.n_vocab(), rows, picks, libm.expf)
            results["seeded_replay"] = np.array(replay, dtype=np.float64)
    np.savez(out, **results)
    return 0


def check_case(case, up, ours):
    """Failures for one case (a list of strings); prints what it compared."""
    failures = []
    up_text, our_text = str(up[f"{case}_text"]), str(ours[f"{case}_text"])
    print(f"{case}: upstream {up_text!r} ({up[f'{case}_finish']}), ours {our_text!r} "
          f"({ours[f'{case}_finish']})")
    if not np.array_equal(up[f"{case}_prompt"], ours[f"{case}_prompt"]):
        return [f"{case}: prompt tokens differ"]
    if case.startswith("json"):
        for lib, text in (("upstream", up_text), ("ours", our_text)):
            try:
                json.loads(text)
            except ValueError as e:
                failures.append(f"{case}: {lib}'s output is no JSON ({e})")
    a, b = up[f"{case}_picks"].tolist(), ours[f"{case}_picks"].tolist()
    if case == "seeded":
        replay = up["seeded_replay"]
        replayed = [int(x) for x in replay[:, 0]]
        if replayed != a:
            return failures + [f"seeded: the replay of upstream's chain picks {replayed}, "
                               f"upstream picked {a}"]
    up_rows, our_rows = up[f"{case}_rows"], ours[f"{case}_rows"]
    n = min(len(up_rows), len(our_rows))
    same_rows = next((i for i in range(n) if up_rows[i].tobytes() != our_rows[i].tobytes()), n)
    part = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), None)
    if part is None and len(a) == len(b) and up_text == our_text and same_rows == n:
        print(f"  the same {len(a)} tokens, every logits row bit-identical")
        return failures
    if same_rows < n:
        failures.append(f"{case}: logits row {same_rows} (of {n}) differs from upstream's")
    if part is None:
        failures.append(f"{case}: {len(a)} vs {len(b)} tokens / the texts differ")
        return failures
    failures.append(f"{case}: the tokens part at generated token {part} ({a[part]} vs {b[part]})")
    # diagnostic: was it a near-tie on upstream?
    if case == "seeded":
        _, below, above, flip_gap = replay[part]
        near = min(below, above) < DRAW_MARGIN or flip_gap < LEAD
        print(f"  parts at generated token {part}: upstream's draw is {below:.3g} above / "
              f"{above:.3g} below its interval's ends; swapping two neighbours {flip_gap:.3f} "
              f"logit apart changes its pick ({'a near-tie' if near else 'no near-tie'})")
    else:
        row = up_rows[part]
        lead = float(row[a[part]] - row[b[part]])
        print(f"  parts at generated token {part}: upstream's logit for its pick leads ours by "
              f"{lead:.3f} ({'a near-tie' if lead < LEAD else 'no near-tie'})")
    return failures


def main(model, ours_dir, upstream_dir, work):
    os.makedirs(work, exist_ok=True)
    up = lib_worker.run(__file__, upstream_dir, model,
                        os.path.join(work, "completion.upstream.npz"))
    ours = lib_worker.run(__file__, ours_dir, model, os.path.join(work, "completion.ours.npz"))
    failures = []
    for case in CASES:
        failures += check_case(case, up, ours)
    for f in failures:
        print("FAIL", f)
    return 1 if failures else 0


if __name__ == "__main__":
    lib_worker.dispatch(__doc__, worker, main)
